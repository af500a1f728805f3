//! Why a point is not evaluated, and the assumptions an evaluated point carries.
//!
//! A [`Gap`] is either a language feature the core lacks (a bug to fix: the grouped list of
//! feature gaps is the core's to-do list) or a condition the published source does not state.
//! The labels are fixed strings so that the report can group points by them; the detail says
//! what this point needed.

use std::fmt;

/// What kind of gap stops a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GapKind {
    /// The `.vram` language (or the core's arithmetic) cannot state it yet.
    Feature,
    /// The source does not state a condition the estimate depends on.
    Data,
}

impl GapKind {
    pub fn name(self) -> &'static str {
        match self {
            GapKind::Feature => "missing feature",
            GapKind::Data => "missing data",
        }
    }
}

/// One reason a point cannot be expressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    pub kind: GapKind,
    /// The group: one of the constants in [`feature`] or [`data`].
    pub label: &'static str,
    /// What this point states that needs it.
    pub detail: String,
}

impl Gap {
    pub fn feature(label: &'static str, detail: impl Into<String>) -> Gap {
        Gap { kind: GapKind::Feature, label, detail: detail.into() }
    }

    pub fn data(label: &'static str, detail: impl Into<String>) -> Gap {
        Gap { kind: GapKind::Data, label, detail: detail.into() }
    }
}

impl fmt::Display for Gap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.kind.name(), self.label, self.detail)
    }
}

/// Language features the core lacks, as the report groups them.
pub mod feature {
    pub const DIFFUSION: &str =
        "diffusion pipelines (denoiser + text encoders + VAE, latents, VAE decode, offload)";
    pub const ENCODER_ONLY: &str = "encoder-only models (BERT)";
    pub const ENCODER_DECODER: &str = "encoder-decoder models (T5, mT5, T0)";
    pub const GPT_BIGCODE: &str =
        "GPTBigCode layers: learned position embeddings and biases on every linear layer";
    pub const GPTQ: &str = "GPTQ weights with their group overhead (scales, zeros, g_idx)";
    pub const GGUF_PRESET: &str = "GGUF quantization presets (Q4_K_M as its per-tensor mix)";
    pub const HOST_EMBEDDINGS: &str = "llama.cpp token embeddings kept in host memory";
    pub const MIXED_FP8: &str = "mixed-precision checkpoints (FP8 in some layers only)";
    pub const TORCHAO_NF4: &str = "torchao NF4 weights (block 64, quantized block scales)";
    pub const KV_Q8_0: &str = "llama.cpp q8_0 KV cache (8.5 bits per element with block scales)";
    pub const KV_INT8_SCALES: &str =
        "int8 KV cache with per-token scales and zero points (Qwen use_cache_quantization)";
    pub const KV_QUANTO: &str = "quanto int4 KV cache (group scales and an fp16 residual window)";
    pub const VLLM_POOL: &str = "vLLM KV pool (gpu_memory_utilization x capacity, less the profiled peak, filled with KV blocks)";
    pub const ZERO2: &str =
        "DeepSpeed ZeRO-2 (sharded gradients and optimizer state, bucket buffers)";
    pub const ZERO3: &str = "DeepSpeed ZeRO-3 (sharded parameters, prefetch buffers)";
    pub const FSDP: &str = "FSDP sharding";
    pub const CPU_OFFLOAD: &str = "CPU offload of parameters or optimizer state";
    pub const MODULES_TO_SAVE: &str =
        "LoRA with a trainable embedding and output head (PEFT modules_to_save)";
    pub const ADAM_8BIT: &str = "8-bit Adam (bitsandbytes Adam8bit / AdamW8bit)";
    pub const ADAFACTOR: &str = "Adafactor optimizer (factored second moments)";
    pub const AMP_FP32_WEIGHTS: &str =
        "automatic mixed precision with fp32 weights (16-bit activations, no 16-bit weight copy)";
}

/// Conditions the published sources leave out, as the report groups them.
pub mod data {
    pub const PROMPT_LENGTH: &str = "prompt length not stated (a long prompt)";
    pub const CONTEXT: &str = "context length not stated";
    pub const BATCH: &str = "batch size not stated";
    pub const SEQUENCE: &str = "sequence length not stated";
    pub const PRECISION: &str = "weight precision or format not stated";
    pub const KV_TYPE: &str = "KV cache type not stated";
    pub const OPTIMIZER: &str = "optimizer not stated";
    pub const CHECKPOINTING: &str = "activation checkpointing not stated";
    pub const LORA_SETUP: &str = "LoRA rank or target modules not stated";
    pub const MODEL_CONFIG: &str = "model config.json not found";
    pub const GPU: &str = "GPU or its memory not stated (needed for a fits / does-not-fit check)";
    pub const SPLIT: &str = "multi-GPU split not stated";
    pub const UNREADABLE: &str = "a condition the harness cannot read (new wording in the data)";
}

/// An assumption an evaluated point carries, shown beside its error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assumption {
    pub label: &'static str,
    pub detail: String,
}

impl Assumption {
    pub fn new(label: &'static str, detail: impl Into<String>) -> Assumption {
        Assumption { label, detail: detail.into() }
    }
}

/// The assumptions the harness makes, as the report groups them.
pub mod assume {
    pub const PROMPT_NOT_STATED: &str =
        "prompt length not stated: counted as 0 tokens (context = generated tokens)";
    pub const PROMPT_APPROXIMATE: &str = "prompt length approximate (`~N`): N tokens";
    pub const FUSED_QKV_LORA: &str =
        "LoRA on Qwen's fused c_attn counted as separate q, k and v adapters (< 2 % of the peak)";
    pub const RUNTIME_DEFAULT: &str = "a setting not stated: the runtime's documented default";
    pub const GPU_VARIANT: &str = "GPU or its variant not stated: the nearest catalog entry or a \
         placeholder device (its capacity is not used by the comparison)";
    pub const LORA_DTYPE: &str = "LoRA adapter precision not stated: the language's default fp32 \
         (PEFT before 0.6 kept adapters in fp32; 0.6 to 0.11 cast them to the base's 16-bit type)";
    pub const STAND_IN: &str =
        "a condition that does not change the compared component is given a stand-in value";
}
