//! Runtime profiles: the memory a framework takes beyond the model's own tensors.
//!
//! Each profile is a list of assumed constants with their source (DOMAIN.md §6). They are
//! assumptions, not measurements: the probe's reports (`observed`) replace them.

use super::calc::formula;
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::bytes::{Bytes, MIB};
use crate::hir::{Arch, Runtime};

/// The version of the profiles below; bump it when a constant changes.
pub const PROFILES_VERSION: &str = "2026.11";

/// CUDA context and the framework's kernels, loaded lazily (CUDA >= 11.7).
const PYTORCH_CONTEXT: Bytes = Bytes(500 * MIB);
const PYTORCH_CONTEXT_SOURCE: &str = "pytorch/pytorch#20532 (300-400 MB at CUDA init) and #107667 (~300 MB with lazy loading), plus kernels loaded on first use";
/// Every kernel loaded at start, as before CUDA 11.7's lazy loading: "the kernels alone take up
/// 1.3GB" (1343 MB as nvidia-smi prints MiB, measured on a V100, HF model_memory_anatomy;
/// DOMAIN.md §6.1).
const EAGER_CONTEXT: Bytes = Bytes(1343 * MIB);
/// A runtime with few kernels of its own (ggml's CUDA backend).
const LLAMA_CPP_CONTEXT: Bytes = Bytes(300 * MIB);
/// vLLM's CUDA graphs: 0.21-0.36 GiB in published logs; the larger is taken.
const VLLM_CUDA_GRAPHS: Bytes = Bytes(369 * MIB);

fn assumed(
    name: &'static str,
    held_by: HeldBy,
    bytes: Bytes,
    formula: String,
    source: &'static str,
) -> Component {
    Component {
        held_by,
        category: Category::Workspace,
        name: name.into(),
        bytes,
        provenance: Provenance::Assumed,
        formula,
        source: Some(source.into()),
    }
}

/// `500.00 MiB = 524,288,000 B (profiles 2026.11)`.
fn profile_formula(bytes: Bytes) -> String {
    formula!("{} = {bytes} (profiles {PROFILES_VERSION})", bytes.human())
}

/// cuBLAS workspace per stream as PyTorch sizes it: `:4096:2:16:8` (8 MiB + 128 KiB) by default,
/// 32 MiB on Hopper and Blackwell (`CublasHandlePool.cpp`, `parseChosenWorkspaceSize`).
fn cublas_workspace(arch: &Arch) -> Component {
    let (bytes, formula) = match arch {
        Arch::Hopper | Arch::Blackwell | Arch::BlackwellUltra => {
            (Bytes(32 * MIB), "4096 KiB × 8 = 33,554,432 B (Hopper and Blackwell)".to_string())
        }
        Arch::Cdna3 => {
            (Bytes(128 * MIB), "128 MiB = 134,217,728 B (hipBLASLt on gfx94x)".to_string())
        }
        _ => (
            Bytes(4096 * 1024 * 2 + 16 * 1024 * 8),
            "4096 KiB × 2 + 16 KiB × 8 = 8,519,680 B".to_string(),
        ),
    };
    assumed(
        "cuBLAS workspace",
        HeldBy::Tensors,
        bytes,
        formula,
        "DOMAIN.md §6.2: PyTorch CublasHandlePool.cpp",
    )
}

/// NCCL buffers per GPU for a communicating group of `peers` ranks (NVIDIA aiconfigurator's
/// observed correction for NCCL >= 2.22: 342 MB for 2 ranks, 392 MB for 4 or more).
fn nccl(peers: u64) -> Option<Component> {
    let (bytes, formula) = match peers {
        0 | 1 => return None,
        2 => (Bytes(358_612_992), "2 ranks: 358,612,992 B".to_string()),
        n => (Bytes(411_041_792), formula!("{n} ranks: 411,041,792 B")),
    };
    Some(assumed(
        "NCCL buffers",
        HeldBy::Runtime,
        bytes,
        formula,
        "DOMAIN.md §6.3: aiconfigurator nccl_mem, observed for NCCL 2.22+",
    ))
}

/// The runtime's components on one device. `peers` is the size of the group this device
/// exchanges tensors with (1 when it works alone).
pub(crate) fn components(
    runtime: &Runtime,
    arch: &Arch,
    peers: u64,
    eager_modules: bool,
) -> Vec<Component> {
    let context = if eager_modules { EAGER_CONTEXT } else { PYTORCH_CONTEXT };
    let context_source = if eager_modules {
        "DOMAIN.md §6.1: HF model_memory_anatomy (V100, kernels loaded eagerly: 1343 MB)"
    } else {
        PYTORCH_CONTEXT_SOURCE
    };
    let mut components = Vec::new();
    match runtime {
        Runtime::PyTorch
        | Runtime::Diffusers
        | Runtime::Vllm
        | Runtime::Sglang
        | Runtime::Tgi
        | Runtime::TensorrtLlm
        | Runtime::Lmdeploy => {
            // diffusers runs on PyTorch: the same context and workspaces. Its own transients
            // (denoiser activations, the VAE decode) belong to the pipeline's phases.
            components.push(assumed(
                "CUDA context and kernels",
                HeldBy::Runtime,
                context,
                profile_formula(context),
                context_source,
            ));
            components.push(cublas_workspace(arch));
            // SGLang, TGI and TensorRT-LLM capture decode graphs too (SGLang up to batch 160,
            // TGI for batches 1-32); no log of theirs gives the size, so vLLM's published figure
            // stands in.
            let graphs = match runtime {
                Runtime::Vllm => Some(
                    "DOMAIN.md §6.5: vLLM logs 0.21 GiB (PR #11349) and 0.36 GiB (gpustack PR #251)",
                ),
                Runtime::Sglang | Runtime::Tgi | Runtime::TensorrtLlm => Some(
                    "vLLM's published CUDA-graph figure (DOMAIN.md §6.5: 0.21-0.36 GiB), for lack of one of this runtime's",
                ),
                _ => None,
            };
            if let Some(source) = graphs {
                components.push(assumed(
                    "CUDA graphs",
                    HeldBy::AllocatorCache,
                    VLLM_CUDA_GRAPHS,
                    profile_formula(VLLM_CUDA_GRAPHS),
                    source,
                ));
            }
            components.extend(nccl(peers));
        }
        Runtime::LlamaCpp => {
            components.push(assumed(
                "CUDA context",
                HeldBy::Runtime,
                LLAMA_CPP_CONTEXT,
                profile_formula(LLAMA_CPP_CONTEXT),
                "DOMAIN.md §6.1: pytorch/pytorch#20532, the driver's share of a CUDA process (300-400 MB)",
            ));
            components.extend(nccl(peers));
        }
        Runtime::None => {}
        Runtime::Custom { context, workspace } => {
            let parts = [
                ("runtime context", *context, HeldBy::Runtime),
                ("runtime workspace", *workspace, HeldBy::Tensors),
            ];
            for (name, bytes, held_by) in parts {
                if bytes.0 > 0 {
                    components.push(Component {
                        held_by,
                        name: name.into(),
                        category: Category::Workspace,
                        bytes,
                        provenance: Provenance::Exact,
                        formula: formula!("{bytes} as declared"),
                        source: None,
                    });
                }
            }
        }
    }
    components
}
