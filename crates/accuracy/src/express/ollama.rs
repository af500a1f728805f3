//! Ollama's defaults for what a point leaves unsaid: the context window each request gets
//! (`num_ctx`) and how many requests a loaded model serves at once (`OLLAMA_NUM_PARALLEL`).
//! Ollama sizes llama.cpp's KV cache for `num_ctx × parallel` cells when it loads the model,
//! whatever the prompts then hold, so a point's prompt and output do not size it.
//!
//! Both defaults changed between releases (read in the ollama/ollama history; the first release
//! that carries each commit):
//! - `num_ctx` was 2,048 until v0.6.7, which raised it to 4,096 (44b466e, "config: update
//!   default context length to 4096"); v0.15.5 made it depend on the VRAM: 4,096 below
//!   23 GiB, 32,768 below 47 GiB, 262,144 above (0334ffa, "server: use tiered VRAM-based default
//!   context length"), capped at the model's trained context (`llm/server.go`);
//! - parallel requests were 1 until v0.2.0, whose scheduler tries 4 and falls back to 1 when
//!   four contexts do not fit (`pickBestFitGPUs`, PR #4218, "Enable concurrency by default");
//!   v0.10.0 made it 1 again (PR #11330, "Reduce default parallelism to 1"). The harness
//!   replays that choice with the core's estimate in place of Ollama's ([`default_parallel`]).

use super::Cx;
use crate::gaps::{Gap, assume, data};

/// An Ollama release, `0.minor.patch`.
type Release = (u64, u64);

const FOUR_K_CONTEXT: Release = (6, 7);
const VRAM_TIERS: Release = (15, 5);
const CONCURRENCY: Release = (2, 0);
const SERIAL_AGAIN: Release = (10, 0);
const GIB: u64 = 1 << 30;

/// Whether the point runs on Ollama.
pub(super) fn is_ollama(point: &crate::data::Point) -> bool {
    point.framework.to_lowercase().contains("ollama")
}

/// Ollama's library names without a size and the size their default (`latest`) tag pulls, from
/// the model table of Ollama's README (ollama/ollama v0.5.0, "Model library": `ollama run
/// llama3.2` is Llama 3.2 3B, `llama3.1` Llama 3.1 8B, `phi3` Phi 3 Mini 3.8B, `gemma2` Gemma 2
/// 9B, `mistral` Mistral 7B, `codellama` Code Llama 7B).
const DEFAULT_TAGS: [(&str, &str); 6] = [
    ("llama3.2", "llama3.2:3b"),
    ("llama3.1", "llama3.1:8b"),
    ("phi3", "phi3:mini"),
    ("gemma2", "gemma2:9b"),
    ("mistral", "mistral:7b"),
    ("codellama", "codellama:7b"),
];

/// The model an Ollama tag without a size pulls (`llama3.1`, `llama3.1:latest`), as the tag with
/// its default size; `None` for any other wording.
pub(crate) fn default_tag(point: &crate::data::Point) -> Option<&'static str> {
    if !is_ollama(point) {
        return None;
    }
    let name = point.model.trim().to_lowercase();
    let name = name.strip_suffix(":latest").unwrap_or(&name);
    DEFAULT_TAGS.iter().find(|(bare, _)| *bare == name).map(|(_, tag)| *tag)
}

/// The `0.minor.patch` release the framework or its version names (`Ollama 0.3.6`,
/// `v0.6.7`), if any.
fn release(point: &crate::data::Point) -> Option<Release> {
    let text = format!("{} {}", point.framework, point.framework_version.as_deref().unwrap_or(""));
    text.split(|c: char| !(c.is_ascii_digit() || c == '.')).find_map(|word| {
        let mut parts = word.split('.');
        (parts.next()? == "0").then_some(())?;
        let minor = parts.next()?.parse().ok()?;
        let patch = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        Some((minor, patch))
    })
}

/// The context window Ollama gave each request when the point states none; `None` with a gap
/// when the release's default cannot be known from the point.
pub(super) fn default_context(cx: &mut Cx<'_>) -> Option<u64> {
    let stated = release(cx.point);
    let Some(release) = stated.filter(|r| *r >= VRAM_TIERS) else {
        let (tokens, why) = match stated {
            Some(r) if r >= FOUR_K_CONTEXT => (4096, "num_ctx 4096 (Ollama 0.6.7 to 0.15.4)"),
            Some(_) => (2048, "num_ctx 2048 (Ollama before 0.6.7)"),
            None => (
                2048,
                "num_ctx 2048: Ollama's release not stated; its default before 0.6.7 (April 2025), \
                 and 4096 after",
            ),
        };
        cx.assume(assume::RUNTIME_DEFAULT, why);
        return Some(tokens);
    };
    let memory = crate::gpus::memory_bytes(&cx.point.gpu_type);
    let gpus = u64::from(cx.point.num_gpus.unwrap_or(1).max(1));
    let tier = |tokens: u64, total: u64, cx: &mut Cx<'_>| {
        cx.assume(
            assume::RUNTIME_DEFAULT,
            format!(
                "num_ctx {tokens}: Ollama {}.{} with {} of VRAM",
                release.0,
                release.1,
                vram_core::bytes::Bytes(total).human()
            ),
        );
        Some(tokens)
    };
    // Ollama's thresholds sit at 23 and 47 GiB so that 24 and 48 GB cards, which report a
    // little less, land in their tiers (0334ffa's comment).
    match memory.and_then(|m| m.checked_mul(gpus)) {
        Some(total) if total < 23 * GIB => tier(4096, total, cx),
        Some(total) if total < 47 * GIB => tier(32_768, total, cx),
        _ => {
            cx.gap(Gap::data(
                data::CONTEXT,
                "Ollama 0.15.5 or later sizes its default context by the VRAM (262,144 tokens \
                 from 47 GiB, capped at the model's trained context): the VRAM or the context is \
                 not stated",
            ));
            None
        }
    }
}

/// Where Ollama's automatic parallelism stands for the point being expressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parallel {
    /// Not read yet.
    Untried,
    /// Four contexts written, to be kept if they fit.
    TriedFour,
    /// Four did not fit in the estimate: the one Ollama then loads.
    FourDidNotFit,
}

/// The requests Ollama served at once when the point states no `OLLAMA_NUM_PARALLEL`. Ollama
/// 0.2 to 0.9 tried four contexts and kept them when its own estimate of four fitted the GPU:
/// on a GPU whose memory the point states, four are written and [`fits`] later decides; on one
/// it does not state (a placeholder device), one. Other releases serve one.
pub(super) fn default_parallel(cx: &mut Cx<'_>) -> u64 {
    let automatic = release(cx.point).is_some_and(|r| (CONCURRENCY..SERIAL_AGAIN).contains(&r));
    if !automatic {
        cx.assume(assume::RUNTIME_DEFAULT, "1 request at a time (OLLAMA_NUM_PARALLEL 1)");
        return 1;
    }
    if cx.point.all_text().contains("kv_size") {
        // The runner's log states its cache's cells, every slot's together (llama.cpp's
        // `kv_size`, Ollama's `num_ctx × parallel`): the stated context is already all of them.
        cx.assume(
            assume::RUNTIME_DEFAULT,
            "1 context of the logged kv_size: llama.cpp's cache cells hold every parallel slot",
        );
        return 1;
    }
    if cx.ollama == Parallel::FourDidNotFit {
        cx.assume(
            assume::RUNTIME_DEFAULT,
            "1 parallel context: Ollama 0.2 to 0.9 tries four and loads one when four do not \
             fit the GPU (pickBestFitGPUs), and four do not fit in this estimate",
        );
        return 1;
    }
    let capacity_stated = crate::gpus::gpu(&cx.point.gpu_type).is_some_and(|g| g.capacity_stated);
    if !capacity_stated {
        cx.assume(
            assume::RUNTIME_DEFAULT,
            "1 parallel context: Ollama 0.2 to 0.9 loads four when four fit the GPU \
             (pickBestFitGPUs), and the point does not state the GPU's memory",
        );
        return 1;
    }
    cx.ollama = Parallel::TriedFour;
    cx.assume(
        assume::RUNTIME_DEFAULT,
        "4 parallel contexts: Ollama 0.2 to 0.9 loads four when four fit the GPU \
         (pickBestFitGPUs), and four fit in this estimate",
    );
    4
}

/// Whether the evaluated `source` fits its device, as Ollama's scheduler asks of four contexts
/// before loading them.
pub(super) fn fits(source: &str) -> bool {
    let outcome = vram_core::evaluate(source);
    outcome.budget.checks.first().is_some_and(|check| check.verdict.fits())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(version: &str, gpu: &str) -> crate::data::Point {
        let fields = serde_json::json!({
            "framework": "Ollama", "framework_version": version, "gpu_type": gpu
        })
        .to_string();
        crate::express::test_point(
            serde_json::json!({
                "id": "O-1", "source_id": "O", "workload": "llm_inference", "model": "llama3.1:8b",
                "measurement_method": "nvidia-smi", "measured_kind": "peak", "value": 6,
                "unit": "GB", "quality": "C"
            }),
            &fields,
        )
    }

    fn context(version: &str, gpu: &str) -> Option<u64> {
        let point = point(version, gpu);
        default_context(&mut Cx::new(&point))
    }

    fn parallel(version: &str, gpu: &str) -> (u64, String) {
        let point = point(version, gpu);
        let mut cx = Cx::new(&point);
        let slots = default_parallel(&mut cx);
        (slots, format!("{:?}", cx.assumptions))
    }

    #[test]
    fn bare_tags_pull_their_default_sizes() {
        let tag = |model: &str, framework: &str| {
            let point = crate::data::Point {
                model: model.to_owned(),
                framework: framework.to_owned(),
                ..crate::data::Point::default()
            };
            default_tag(&point)
        };
        assert_eq!(tag("llama3.1", "Ollama 0.4"), Some("llama3.1:8b"));
        assert_eq!(tag("llama3.2:latest", "Ollama"), Some("llama3.2:3b"));
        assert_eq!(tag("llama3.1:70b", "Ollama"), None);
        // Not under Ollama, a bare name says no size.
        assert_eq!(tag("llama3.1", "transformers"), None);
    }

    #[test]
    fn releases_in_their_spellings() {
        assert_eq!(release(&point("0.3.6", "")), Some((3, 6)));
        assert_eq!(release(&point("v0.6.7", "")), Some((6, 7)));
        assert_eq!(release(&point("0.15", "")), Some((15, 0)));
        assert_eq!(release(&point("not stated", "")), None);
    }

    #[test]
    fn the_context_each_release_gives_a_request() {
        assert_eq!(context("0.3.6", "RTX 3060 12GB"), Some(2048));
        assert_eq!(context("0.6.6", "RTX 3060 12GB"), Some(2048));
        assert_eq!(context("0.6.7", "RTX 3060 12GB"), Some(4096));
        assert_eq!(context("", "RTX 3060 12GB"), Some(2048));
        assert_eq!(context("0.15.5", "RTX 3060 12GB"), Some(4096));
        assert_eq!(context("0.16.0", "RTX 4090 24GB"), Some(32_768));
        // From 47 GiB the default is the model's trained context, which the point does not give.
        assert_eq!(context("0.16.0", "A100 80GB"), None);
        assert_eq!(context("0.16.0", "RTX 4090"), Some(32_768));
        assert_eq!(context("0.16.0", "A100"), None);
    }

    #[test]
    fn parallel_contexts_by_release() {
        for version in ["0.1.48", "0.10.0", ""] {
            assert_eq!(parallel(version, "RTX 3060 12GB").0, 1, "{version}");
        }
        // The automatic releases try four on a GPU whose memory is stated.
        for version in ["0.2.0", "0.5.7"] {
            let (slots, assumed) = parallel(version, "RTX 3060 12GB");
            assert_eq!(slots, 4, "{version}");
            assert!(assumed.contains("pickBestFitGPUs"), "{assumed}");
        }
        assert_eq!(parallel("0.3.6", "not stated (24 GB class)").0, 1);
        // A log's kv_size is every slot's cells together: the stated context is all of them.
        let mut logged = point("0.5.7", "RTX 3060 12GB");
        logged.other_settings = Some("log: kv_size = 8192, n_layer = 32".to_owned());
        assert_eq!(default_parallel(&mut Cx::new(&logged)), 1);
    }

    /// The four contexts stay when they fit the GPU, and give way to one when they do not: a
    /// 22B model at 49,152 tokens on a 24 GB card (S13-002's setup, whose log shows one).
    #[test]
    fn four_contexts_only_where_they_fit() {
        let expressed = |fields: &str| {
            let point = crate::express::test_point(
                serde_json::json!({
                    "id": "O-2", "source_id": "O", "workload": "llm_inference",
                    "model": "meta-llama/Llama-3.1-8B-Instruct", "framework": "Ollama",
                    "framework_version": "0.3.6", "weight_precision": "Q4_K_M",
                    "batch_size": 1, "input_tokens": 100, "output_tokens": 100,
                    "num_gpus": 1, "measurement_method": "nvidia-smi", "measured_kind": "peak",
                    "value": 6, "unit": "GB", "quality": "C"
                }),
                fields,
            );
            let expressed = crate::express::express(&point).expect("expressible");
            (expressed.source, format!("{:?}", expressed.assumptions))
        };
        let (small, _) = expressed(r#"{"gpu_type": "RTX 4090 24GB"}"#);
        assert!(small.contains("sessions 4"), "{small}");
        let (long, assumed) =
            expressed(r#"{"gpu_type": "RTX 4090 24GB", "other_settings": "num_ctx 49152"}"#);
        assert!(long.contains("sessions 1"), "{long}");
        assert!(assumed.contains("four do not fit"), "{assumed}");
    }
}
