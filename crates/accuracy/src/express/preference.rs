//! Preference objectives as a point names them: DPO and the losses of its trainer (IPO) compare
//! with a reference model; ORPO, SimPO and CPO score the pair alone. Reinforcement learning with
//! generation (PPO, GRPO, RLOO) and KTO's unpaired batches are features the language lacks.

use super::Cx;
use crate::gaps::{Gap, assume, feature};

/// The `objective` (and `reference`) lines of the point's training section: empty for
/// supervised fine-tuning, `None` (a gap recorded) for an objective the language cannot state.
pub(super) fn objective(cx: &mut Cx<'_>) -> Option<String> {
    let point = cx.point;
    let text = format!(
        "{} {} {}",
        point.finetune_method.as_deref().unwrap_or_default(),
        point.framework,
        point.other_settings.as_deref().unwrap_or_default()
    )
    .to_lowercase();
    let words: Vec<&str> =
        text.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect();
    // A trainer's class names its objective too: `DPOTrainer`, `ORPOTrainer`.
    let names = |prefixes: &[&str]| {
        words.iter().any(|w| {
            prefixes
                .iter()
                .any(|p| w.strip_prefix(p).is_some_and(|rest| rest.is_empty() || rest == "trainer"))
        })
    };
    // "RLHF" alone names online RL only as the method itself: ms-swift runs DPO as
    // `swift rlhf --rlhf_type dpo`, and a framework's description may list its `rlhf` command.
    let method = point.finetune_method.as_deref().unwrap_or_default().to_lowercase();
    let offline = names(&["dpo", "ipo", "orpo", "simpo", "cpo", "kto"]);
    let rlhf_method = method.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| w == "rlhf");
    if names(&["ppo", "grpo", "rloo", "reinforce"]) || (rlhf_method && !offline) {
        cx.gap(Gap::feature(feature::ONLINE_RL, text.trim().to_owned()));
        return None;
    }
    if names(&["kto"]) {
        cx.gap(Gap::feature(feature::KTO, text.trim().to_owned()));
        return None;
    }
    if names(&["orpo", "simpo", "cpo"]) {
        let name = words.iter().find(|w| ["orpo", "simpo", "cpo"].iter().any(|p| w.starts_with(p)));
        let name = name.map_or("orpo", |w| w.trim_end_matches("trainer"));
        return Some(format!("    objective     {name}\n"));
    }
    if !(names(&["dpo", "ipo"]) || text.contains("direct preference")) {
        return Some(String::new());
    }
    let reference = if text.contains("precompute_ref") || text.contains("precomputed ref") {
        Some("precomputed")
    } else if text.contains("ref_model=") || text.contains("separate reference") {
        Some("copy")
    } else {
        cx.assume(assume::REFERENCE_DEFAULT, text.trim().to_owned());
        None
    };
    let reference = reference.map_or(String::new(), |r| format!("    reference     {r}\n"));
    Some(format!("    objective     dpo\n{reference}"))
}
