//! Serving runtimes that size a KV pool from what they measure at start-up (vLLM, SGLang,
//! text-generation-inference, TensorRT-LLM, LMDeploy): how each takes its share of the device, what it
//! carves out of that share before the pool, the granularity of the pool, and the step it
//! profiles.
//!
//! - vLLM: `total × gpu_memory_utilization − (weights + profile-step peak + memory outside
//!   PyTorch)`, in blocks of 16 tokens (DOMAIN.md §3.6).
//! - SGLang (`python/sglang/srt/model_executor/model_runner.py`, `profile_max_num_token`,
//!   releases 0.3-0.5): the free memory `F0` measured after the CUDA context exists and before
//!   the weights load, and `F1` after: `F1 − F0 × (1 − mem_fraction_static)`, that is
//!   `F0 × mem_fraction_static − weights`, in single tokens. Activations, CUDA graphs and the
//!   tables below live in the rest.
//! - TensorRT-LLM (DOMAIN.md §3.7): `free_gpu_memory_fraction` (0.9) of what is free once the
//!   engine's weights and activations are loaded, in blocks of 32 tokens.
//! - LMDeploy's TurboMind engine (`lmdeploy/messages.py`, `TurbomindEngineConfig`, releases
//!   after 0.2.1): `cache_max_entry_count` (0.8) of the memory free once the weights are loaded,
//!   sized before the engine allocates its own buffers, in blocks of `cache_block_seq_len` (64)
//!   tokens; its prefill step is `max_prefill_token_num` (8,192) tokens.
//! - text-generation-inference (`server/text_generation_server/models/flash_causal_lm.py`,
//!   `warmup`, v2-v3): after a warm-up prefill of `max_batch_prefill_tokens`, whose peak the
//!   caching allocator still holds, `free − (1 − cuda_memory_fraction × TGI_WIGGLE_ROOM) × total`
//!   becomes blocks: vLLM's rule with a share of 100 % × 95 %, in flashinfer's pages of one
//!   token (its default attention).

use super::Placement;
use super::calc::{Overflow, Product, formula};
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::bytes::{Bytes, GIB, MIB};
use crate::hir::{Device, Inference, Runtime};
use crate::ratio::Ratio;

/// What a serving runtime's fraction is a fraction of, and what it carves out of it before the
/// pool. Memory the runtime takes only once the pool exists (its CUDA graphs) is never carved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Share {
    /// vLLM, TGI: of the device, less everything the runtime holds.
    Device,
    /// SGLang: of the free memory its CUDA context leaves, less the weights alone.
    FreeMemoryLessWeights,
    /// TensorRT-LLM: of the free memory the weights, activations and context leave.
    Remaining,
    /// LMDeploy: of the free memory the context and the weights leave, measured before the
    /// engine's activation buffers exist.
    FreeAfterWeights,
}

/// How a serving runtime turns its share of the device into a KV pool.
pub(crate) struct PoolRule {
    /// The runtime's name in the pool's label (`KV cache pool (SGLang)`).
    pub runtime: &'static str,
    pub fraction: Ratio,
    pub share: Share,
    /// Tokens per block: the pool holds whole blocks.
    pub block: u64,
    pub source: &'static str,
}

/// The rule of a pooling runtime, with the workload's `memory_fraction` when it gives one;
/// `None` for a runtime that allocates its cache as it goes.
pub(crate) fn pool_rule(
    runtime: &Runtime,
    inference: &Inference,
    placement: &Placement,
    device: &Device,
) -> Option<PoolRule> {
    let stated = inference.memory_fraction;
    let percent = |n: i128| Ratio::new(n, 100).unwrap_or(Ratio::int(1));
    Some(match runtime {
        // `gpu_memory_utilization`'s default up to v0.19 (0.92 from v0.22): DOMAIN.md §3.6.
        Runtime::Vllm => PoolRule {
            runtime: "vLLM",
            fraction: stated.unwrap_or(percent(90)),
            share: Share::Device,
            block: 16,
            source: "DOMAIN.md §3.6: vLLM gpu_worker available KV memory and get_num_blocks",
        },
        Runtime::Sglang => PoolRule {
            runtime: "SGLang",
            fraction: stated.unwrap_or_else(|| sglang_fraction(device.memory, placement)),
            share: Share::FreeMemoryLessWeights,
            block: 1,
            source: "SGLang model_runner.py profile_max_num_token: free memory after loading − free memory before × (1 − mem_fraction_static)",
        },
        Runtime::Tgi => PoolRule {
            runtime: "TGI",
            fraction: stated.unwrap_or(percent(95)),
            share: Share::Device,
            block: 1,
            source: "text-generation-inference flash_causal_lm.py warmup: free memory after the warm-up prefill less (1 − cuda_memory_fraction × TGI_WIGGLE_ROOM) of the device",
        },
        // `KvCacheConfig.free_gpu_memory_fraction` 0.9 of the memory free once the engine's
        // weights and activations are loaded, in blocks of 32 tokens (DOMAIN.md §3.7).
        Runtime::TensorrtLlm => PoolRule {
            runtime: "TensorRT-LLM",
            fraction: stated.unwrap_or(percent(90)),
            share: Share::Remaining,
            block: 32,
            source: "DOMAIN.md §3.7: TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction of the free GPU memory, tokens_per_block 32",
        },
        Runtime::Lmdeploy => PoolRule {
            runtime: "LMDeploy",
            fraction: stated.unwrap_or(percent(80)),
            share: Share::FreeAfterWeights,
            block: 64,
            source: "LMDeploy TurbomindEngineConfig: cache_max_entry_count (0.8 after v0.2.1) of the free GPU memory, cache_block_seq_len 64",
        },
        _ => return None,
    })
}

/// SGLang's size tier for a GPU of `capacity` (nvidia-smi's `memory.total`, driver reserve and
/// all: `get_nvgpu_memory_capacity`): its default chunked prefill (`chunked_prefill_size`)
/// and the largest batch it captures a CUDA graph for on fewer than 4 and on 4 or more
/// tensor-parallel GPUs (DOMAIN.md §3.7, `server_args.py` 0.5.x).
fn sglang_tier(capacity: Bytes) -> (u64, u64, u64) {
    match capacity.0 / GIB {
        0..20 => (2048, 8, 8),
        20..35 => (2048, 24, 80),
        35..60 => (4096, 32, 160),
        60..160 => (8192, 256, 512),
        _ => (16384, 512, 512),
    }
}

/// SGLang's default `mem_fraction_static` (DOMAIN.md §3.7, `server_args.py` 0.5.x): the GPU
/// less a reserve for what lives outside the static share, `512 + 1.5 × chunked prefill +
/// 1024 × tp × pp ÷ 8 + 2 × graph batch` MiB, at least 10 GiB on GPUs over 60 GiB, as a
/// fraction of the GPU's MiB rounded to three places. Releases before 0.4.6 took a fraction by
/// tensor-parallel degree alone (88 % on one GPU): a workload on them states `memory_fraction`.
fn sglang_fraction(capacity: Bytes, placement: &Placement) -> Ratio {
    let mib = capacity.0 / MIB;
    let (chunk, graphs_small, graphs_large) = sglang_tier(capacity);
    let graphs = if placement.tensor < 4 { graphs_small } else { graphs_large };
    let gpus = placement.tensor * placement.stages;
    let reserve = 512 + chunk * 3 / 2 + 1024 * gpus / 8 + 2 * graphs;
    let reserve = if mib > 60 * 1024 { reserve.max(10 * 1024) } else { reserve };
    let thousandths = (mib.saturating_sub(reserve) * 1000 + mib / 2) / mib.max(1);
    Ratio::new(i128::from(thousandths), 1000).unwrap_or(Ratio::ONE)
}

/// The tokens of the step a serving runtime profiles or warms up with, when the workload does
/// not state `prefill_chunk`; `None` for the other runtimes.
pub(crate) fn profile_tokens(runtime: &Runtime, device: &Device) -> Option<u64> {
    match runtime {
        // SGLang's `chunked_prefill_size` default for the GPU's size tier.
        Runtime::Sglang => Some(sglang_tier(device.memory).0),
        // TGI v3's `max_batch_prefill_tokens` default (launcher, without a flops estimate).
        Runtime::Tgi => Some(4096),
        // TensorRT-LLM's `max_num_tokens` default (LLM API BuildConfig), the activations its
        // engine reserves for; TurboMind's `max_prefill_token_num` default (TurbomindEngineConfig).
        Runtime::TensorrtLlm | Runtime::Lmdeploy => Some(8192),
        _ => None,
    }
}

/// FlashInfer's workspace buffer, which SGLang allocates beside the pool (`global_config.py`
/// `flashinfer_workspace_size`, 384 MiB).
const SGLANG_FLASHINFER_WORKSPACE: Bytes = Bytes(384 * MIB);

/// What SGLang allocates after sizing its pool, outside `mem_fraction_static`: its FlashInfer
/// workspace, and the request-to-token table (`memory_pool.py` `ReqToTokenPool`), int32 entries
/// for `max_num_reqs + 1` requests of `context + 4` tokens, where `max_num_reqs` is
/// `pool tokens ÷ context × 512` held between 2048 and 4096 (`model_runner.py`,
/// `init_memory_pool`).
pub(crate) fn sglang_tables(pool_tokens: u64, context: u64) -> Result<Vec<Component>, Overflow> {
    let context = context.max(1);
    let requests = (pool_tokens.checked_mul(512).ok_or(Overflow)? / context).clamp(2048, 4096);
    let table = Product::new()
        .times(requests + 1, "requests (max_num_reqs + 1)")?
        .times(context + 4, "tokens (context + 4)")?
        .bytes_each(Ratio::int(4), "int32")?;
    let (bytes, formula) = table.finish()?;
    let workspace = SGLANG_FLASHINFER_WORKSPACE;
    Ok(vec![
        Component {
            held_by: HeldBy::Tensors,
            name: "request-to-token table (SGLang)".into(),
            category: Category::Workspace,
            bytes,
            provenance: Provenance::Formula,
            formula,
            source: Some("SGLang memory_pool.py ReqToTokenPool; model_runner.py init_memory_pool: max_num_reqs = clamp(max_total_tokens / context_len × 512, 2048, 4096)".into()),
        },
        Component {
            held_by: HeldBy::Tensors,
            name: "FlashInfer workspace (SGLang)".into(),
            category: Category::Workspace,
            bytes: workspace,
            provenance: Provenance::Assumed,
            formula: formula!("{} = {workspace}", workspace.human()),
            source: Some("SGLang global_config.py flashinfer_workspace_size (384 MiB)".into()),
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An H100's 81,559 MiB on one GPU: 512 + 1.5 × 8192 + 1024 ÷ 8 + 2 × 256 = 13,440 MiB
    /// reserved, (81,559 − 13,440) ÷ 81,559 = 0.83521 → 83.5 %; on eight, 1024 for the GPUs and
    /// graphs of 512: 14,848 MiB → 0.818. An L4's 23,034 MiB: 512 + 3072 + 128 + 48 = 3,760 →
    /// 0.837.
    #[test]
    fn sglang_reserves_what_lives_outside_its_share_by_gpu_size() {
        let placement = |tensor| Placement {
            tensor,
            stage: 0,
            stages: 1,
            first_layer: 0,
            layers: 1,
            host_experts: 0,
        };
        let h100 = Bytes(81_559 * MIB);
        assert_eq!(sglang_fraction(h100, &placement(1)), Ratio::new(835, 1000).unwrap());
        assert_eq!(sglang_fraction(h100, &placement(8)), Ratio::new(818, 1000).unwrap());
        let l4 = Bytes(23_034 * MIB);
        assert_eq!(sglang_fraction(l4, &placement(1)), Ratio::new(837, 1000).unwrap());
        // Over 60 GiB the reserve is at least 10 GiB, whatever the terms give.
        assert_eq!(sglang_tier(Bytes(141 * GIB)), (8192, 256, 512));
    }

    /// Llama 3.1 8B on one 80 GB GPU at a 131,072-token context, 455,000 tokens of pool:
    /// 455,000 × 512 ÷ 131,072 = 1777 requests, held at 2048; (2048 + 1) × (131,072 + 4) × 4 B.
    #[test]
    fn the_request_table_is_sized_by_the_pool_and_the_context() {
        let tables = sglang_tables(455_000, 131_072).expect("no overflow");
        assert_eq!(tables[0].bytes, Bytes(2049 * 131_076 * 4));
        assert_eq!(tables[1].bytes, Bytes(384 * MIB));
        // A short context and a large pool: at most 4096 requests.
        let short = sglang_tables(2_000_000, 4096).expect("no overflow");
        assert_eq!(short[0].bytes, Bytes(4097 * 4100 * 4));
    }
}
