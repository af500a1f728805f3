//! Classifier-free guidance as a point runs it: the unconditional batch diffusers adds only when
//! `guidance_scale > 1` (`do_classifier_free_guidance` in the Stable Diffusion, SDXL, SD3,
//! PixArt, CogVideoX and Wan pipelines), and which a guidance-distilled checkpoint ("turbo")
//! turns off by its documented `guidance_scale=0.0`.

use super::Cx;
use crate::data::{Point, decimal_after};
use crate::gaps::assume;

/// Wordings that turn guidance off without a number.
const OFF: [&str; 6] = [
    "no cfg",
    "without cfg",
    "cfg off",
    "no classifier-free guidance",
    "without classifier-free guidance",
    "guidance off",
];

/// Wordings a guidance scale follows, the most specific first.
const KEYS: [&str; 5] = ["guidance_scale", "guidance scale", "cfg_scale", "cfg scale", "cfg"];

/// A point's settings and image conditions, lower-cased, where guidance is stated.
fn settings(point: &Point) -> String {
    [point.other_settings.as_deref(), point.image_or_video.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" | ")
        .to_lowercase()
}

/// The number after the first of `keys` that `text` holds with one.
fn number_after(text: &str, keys: &[&str]) -> Option<f64> {
    keys.iter().find_map(|key| decimal_after(text, key))
}

/// The guidance scale a point states in its settings or its image conditions
/// (`guidance_scale=0.0`, `guidance scale 7.5`, `CFG 4`), or 0 where it says guidance is off.
pub(super) fn stated_scale(point: &Point) -> Option<f64> {
    let text = settings(point);
    if OFF.iter().any(|phrase| text.contains(phrase)) {
        return Some(0.0);
    }
    // FLUX's `true_cfg_scale` is another setting (`cfg` below), not this one.
    number_after(&text.replace("true_cfg_scale", "").replace("true cfg scale", ""), &KEYS)
}

/// The `cfg` line's value for a pipeline whose guidance `mechanism` is `true` (a doubled
/// batch), `separate` (a second pass) or `false` (none: guidance is an embedding, as in FLUX.1),
/// given the checkpoint's documented guidance-off default (`distilled`) and the point's own
/// scale.
pub(super) fn cfg(
    cx: &mut Cx<'_>,
    mechanism: &'static str,
    distilled: Option<&'static str>,
) -> &'static str {
    if mechanism == "false" {
        // FluxPipeline runs a second, negative-prompt pass when `true_cfg_scale > 1` and a
        // negative prompt is given (`do_true_cfg`, diffusers 0.33 and later); a stated scale
        // above 1 is taken to come with one.
        let text = settings(cx.point);
        if number_after(&text, &["true_cfg_scale", "true cfg scale"]).is_some_and(|s| s > 1.0) {
            cx.assume(
                assume::SOURCE_LABEL,
                "true_cfg_scale above 1 stated: FluxPipeline's second (negative-prompt) pass \
                 (do_true_cfg)",
            );
            return "separate";
        }
        return mechanism;
    }
    match stated_scale(cx.point) {
        Some(scale) if scale > 1.0 => mechanism,
        Some(scale) => {
            cx.assume(
                assume::SOURCE_LABEL,
                format!(
                    "guidance_scale {scale} stated: no unconditional batch (diffusers runs \
                     classifier-free guidance only when guidance_scale > 1)"
                ),
            );
            "false"
        }
        None => match distilled {
            Some(note) => {
                cx.assume(assume::PIPELINE_DEFAULT, note);
                "false"
            }
            None => mechanism,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::stated_scale;

    fn point(settings: &str) -> crate::data::Point {
        let value = serde_json::json!({
            "id": "G-1", "source_id": "G", "workload": "diffusion_inference", "model": "m",
            "framework": "diffusers", "measured_kind": "peak", "value": 1, "unit": "GB",
            "measurement_method": "not stated", "other_settings": settings
        });
        serde_json::from_value(value).expect("a point")
    }

    #[test]
    fn scales_in_their_wordings() {
        assert_eq!(stated_scale(&point("num_inference_steps=1, guidance_scale=0.0")), Some(0.0));
        assert_eq!(stated_scale(&point("Guidance scale 7.5, 30 steps")), Some(7.5));
        assert_eq!(stated_scale(&point("CFG: 4")), Some(4.0));
        assert_eq!(stated_scale(&point("cfg_scale 1")), Some(1.0));
        assert_eq!(stated_scale(&point("1 step, no CFG")), Some(0.0));
        assert_eq!(stated_scale(&point("50 steps")), None);
        // FLUX's true CFG is its own setting.
        assert_eq!(stated_scale(&point("true_cfg_scale 4.0")), None);
        assert_eq!(stated_scale(&point("true_cfg_scale 4.0, guidance_scale 3.5")), Some(3.5));
    }
}
