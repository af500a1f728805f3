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
//!   v0.10.0 made it 1 again (PR #11330, "Reduce default parallelism to 1"). The harness takes
//!   one throughout ([`default_parallel`]).

use super::Cx;
use crate::gaps::{Gap, assume, data};

/// An Ollama release, `0.minor.patch`.
type Release = (u64, u64);

const FOUR_K_CONTEXT: Release = (6, 7);
const VRAM_TIERS: Release = (15, 5);
const CONCURRENCY: Release = (2, 0);
const SERIAL_AGAIN: Release = (10, 0);

/// Whether the point runs on Ollama.
pub(super) fn is_ollama(point: &crate::data::Point) -> bool {
    point.framework.to_lowercase().contains("ollama")
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
    let gib = crate::gpus::stated_gib(&cx.point.gpu_type);
    let gpus = u64::from(cx.point.num_gpus.unwrap_or(1).max(1));
    match gib.map(|g| g * gpus) {
        Some(total) if total < 23 => {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                format!(
                    "num_ctx 4096: Ollama {}.{} with {total} GiB of VRAM",
                    release.0, release.1
                ),
            );
            Some(4096)
        }
        Some(total) if total < 47 => {
            cx.assume(
                assume::RUNTIME_DEFAULT,
                format!(
                    "num_ctx 32768: Ollama {}.{} with {total} GiB of VRAM",
                    release.0, release.1
                ),
            );
            Some(32_768)
        }
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

/// The requests Ollama served at once when the point states no `OLLAMA_NUM_PARALLEL`: one.
/// Ollama 0.2 to 0.9 loaded four contexts instead when its own estimate of four fitted the GPU
/// (a 22B model at 49,152 tokens on a 24 GB card got one, S13-002's log); that estimate is not
/// replayed here, so those releases are taken at one too and the assumption says so.
pub(super) fn default_parallel(cx: &mut Cx<'_>) -> u64 {
    match release(cx.point) {
        Some(r) if (CONCURRENCY..SERIAL_AGAIN).contains(&r) => cx.assume(
            assume::RUNTIME_DEFAULT,
            "1 request at a time: Ollama 0.2 to 0.9 loaded 4 parallel contexts when its own \
             estimate of four fitted the GPU (pickBestFitGPUs), which is not replayed here",
        ),
        _ => cx.assume(assume::RUNTIME_DEFAULT, "1 request at a time (OLLAMA_NUM_PARALLEL 1)"),
    }
    1
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

    fn parallel(version: &str) -> (u64, String) {
        let point = point(version, "RTX 3060 12GB");
        let mut cx = Cx::new(&point);
        let slots = default_parallel(&mut cx);
        (slots, format!("{:?}", cx.assumptions))
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
        assert_eq!(context("0.16.0", "RTX 4090"), None);
    }

    #[test]
    fn parallel_contexts_by_release() {
        for version in ["0.1.48", "0.2.0", "0.5.7", "0.10.0", ""] {
            let (slots, assumed) = parallel(version);
            assert_eq!(slots, 1, "{version}");
            // The releases that chose four themselves say so.
            let auto = matches!(version, "0.2.0" | "0.5.7");
            assert_eq!(assumed.contains("pickBestFitGPUs"), auto, "{version}: {assumed}");
        }
    }
}
