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
    pub const MIXED_FP8: &str =
        "mixed-precision checkpoints (FP8 in some layers only) other than Meta's fbgemm FP8";
    pub const VLLM_POOL: &str = "vLLM KV pool (gpu_memory_utilization x capacity, less the profiled peak, filled with KV blocks)";
    pub const MODEL_OFFLOAD: &str =
        "whole models moved between host and device in turn (diffusers enable_model_cpu_offload)";
    pub const PIPELINE: &str = "a diffusion pipeline the harness does not declare (its models' \
         parameter counts, its defaults and its VAE's decode: Stable Video Diffusion, OmniGen, \
         image-to-video variants)";
    pub const VISION_LANGUAGE: &str = "a vision-language model: its vision encoder, projector \
         and image tokens (and Llama 3.2 Vision's cross-attention layers) beside the language \
         model";
    pub const RUNTIME: &str = "a runtime the language has no profile for (ExLlamaV2, MLC LLM, \
         ONNX Runtime, MLX, CTranslate2, OpenVINO, ComfyUI, AUTOMATIC1111): its own weight \
         formats, cache and memory management";
    pub const ONLINE_RL: &str = "reinforcement learning with generation (PPO, GRPO, RLOO): \
         rollouts, reward and value models beside the trained policy";
    pub const KTO: &str = "KTO's unpaired batches beside a mismatched KL batch";
    pub const BESIDE_THE_MODEL: &str = "a model or adapters served beside the named one \
         (speculative decoding's draft model or heads, multi-LoRA serving)";
    pub const GENERATE_OPTIONS: &str = "a transformers generate() or loading option the \
         language does not model (no KV cache, a quantized KV cache, layers offloaded to the \
         host, every step's scores kept)";
    pub const FP8_TRAINING: &str = "FP8 training (Transformer Engine or torchao float8 \
         layers: FP8 copies and scales beside the 16-bit weights)";
    pub const PARTIAL_GROUP_OFFLOAD: &str = "group offloading applied to one of the pipeline's \
         models (`apply_group_offloading(pipe.transformer, ...)`), the others left where the \
         script put them: the language offloads every model's blocks (`offload blocks`)";
    pub const LYCORIS: &str = "LyCORIS adapters other than LoRA (LoKr's Kronecker factors, \
         LoHa's Hadamard products): their own factor shapes and what they keep for backward";
    pub const QUANTIZED_TRAINING: &str = "training whose stored weights are integers (Q-GaLore's \
         int8 linear layers, updated by stochastic rounding)";
    pub const CONTEXT_PARALLEL: &str = "context parallelism (ring attention, Ulysses, \
         torchtitan's and Megatron's context-parallel ranks): the sequence split over GPUs";
    pub const HELD_ON_HOST: &str = "part of the model kept in host memory by a serving engine \
         (llama.cpp's --no-kv-offload for its KV cache, vLLM's --cpu-offload-gb for weights)";
    pub const SIDE_NETWORK: &str = "a network run beside the denoiser (a ControlNet models.vram \
         does not declare or a transformer's trained one, T2I-Adapter, \
         IP-Adapter, AnimateDiff's motion modules, SDXL's refiner)";
    pub const TORCHAO_KV_CACHE: &str = "torchao's quantized KV cache (`--kv_cache_quantization`: \
         int8 values with scales per token and head in its own cache class)";
    pub const VIDEO_ENCODE: &str = "a video encoded by its causal VAE inside the training step \
        (the encode's transients beside the step; the language encodes images only)";
    pub const SHARDED_DENOISER: &str = "a denoiser trained with its blocks gathered one at a \
         time (ZeRO-3, FSDP's full sharding, parameter offload) whose model models.vram gives \
         no block sizes (`largest_block`, `outside_blocks`)";
    pub const TWO_BIT_WEIGHTS: &str = "2-bit weights (optimum-quanto's int2): the language has no \
         2-bit weight type";
    pub const BLOCK_SWAP: &str = "block swapping beside a full fine-tune (kohya's \
         `flux_train.py` `--double_blocks_to_swap` with `--cpu_offload_checkpointing`): the \
         language swaps a frozen denoiser's blocks for adapters, not trained blocks with their \
         gradients and states";
    pub const LLAMA_CPP_ROW_SPLIT: &str = "llama.cpp's row split (`-sm row`): each matrix's \
         rows over the GPUs, but the KV cache and the compute buffers on the main GPU alone";
    pub const RUNS_WITHOUT_CAPABILITY: &str = "a precision the source ran on a device the core \
         says cannot run it (E040): a fallback path (an emulation, a weight-only kernel) the \
         language does not model for this runtime";
}

/// Conditions the published sources leave out, as the report groups them.
pub mod data {
    pub const PROMPT_LENGTH: &str = "prompt length not stated (a long prompt)";
    pub const CONTEXT: &str = "context length not stated";
    pub const BATCH: &str = "batch size not stated";
    pub const IMAGE_SIZE: &str = "image size or video frames not stated";
    pub const SEQUENCE: &str = "sequence length not stated";
    pub const PRECISION: &str = "weight precision or format not stated";
    pub const SWAPPED_BLOCKS: &str = "how many blocks are swapped to the host not stated";
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
    pub const PROMPT_ONLY: &str =
        "generated tokens not stated: the context is the prompt alone (its forward pass)";
    pub const PROMPT_APPROXIMATE: &str = "prompt length approximate (`~N`): N tokens";
    pub const FUSED_QKV_LORA: &str = "LoRA on a fused projection (Qwen's c_attn, \
         query_key_value, qkv_proj, gate_up_proj) counted as separate adapters (< 2 % of the peak)";
    pub const RUNTIME_DEFAULT: &str = "a setting not stated: the runtime's documented default";
    pub const DECIMAL_BY_CAPACITY: &str = "`GB` of unstated base read as 10^9 B, not GiB: a \
         figure the source printed the same way is, as GiB, more than its GPUs hold";
    pub const GPU_VARIANT: &str = "GPU or its variant not stated: the nearest catalog entry or a \
         placeholder device (its capacity is not used by the comparison)";
    pub const LORA_DTYPE: &str = "LoRA adapter precision not stated: the language's default fp32 \
         (PEFT before 0.6 kept adapters in fp32; 0.6 to 0.11 cast them to the base's 16-bit type)";
    pub const STAND_IN: &str =
        "a condition that does not change the compared component is given a stand-in value";
    pub const DEEPSPEED_STATES: &str = "DeepSpeed mixed precision: an fp32 master copy and fp32 \
         AdamW moments of every trained parameter (the core keeps DeepSpeed's gradients in 16-bit \
         and counts the fp32 cast of each partition at the optimizer step)";
    pub const DEEPSPEED_ADAPTERS: &str = "DeepSpeed casts LoRA adapters to 16-bit and keeps an \
         fp32 master copy (2 + 2 + 4 + 8 B per adapter parameter): written as the language's fp32 \
         adapters (4 + 4 + 8 B), the same bytes";
    pub const EQUIVALENT_OPTIMIZER: &str = "an optimizer written as the language's optimizer of \
         the same state bytes (Lion keeps one momentum per parameter, as SGD with momentum does)";
    pub const EQUIVALENT_SHARDING: &str = "a framework's sharding written as the language's of \
         the same split (Megatron's distributed optimizer shards the fp32 main parameters and the \
         optimizer state over the data-parallel ranks and keeps every gradient, as ZeRO-1 does)";
    pub const NAMED_FORMAT: &str = "weight format not in the fields but in the model's name \
         (a quantized upload's suffix, an Ollama tag)";
    pub const KOHYA_TARGETS: &str = "kohya's LoRA networks (`network_dim`) adapt every linear \
         layer of the denoiser's transformer blocks: written as the attention projections and \
         the feed-forward (`targets q k v o up down`); a UNet block's 1 × 1 projections in and \
         out, FLUX's modulations, its text stream's own projections and its single blocks' \
         fused layers are counted as those (rank-wide adapters: well under 1 % of the peak)";
    pub const SCRIPT_SETTING: &str =
        "a setting not in the data but read from the source's own script or configuration";
    pub const EQUIVALENT_FORMAT: &str =
        "a storage format written as the language's format of the same bytes (within 0.1 %)";
    pub const TUPLE_CACHE: &str = "legacy tuple KV caches (remote code such as Qwen v1's and \
         ChatGLM's, or transformers before 4.36; `cache_layout tuple`): the whole previous cache \
         is alive at the end of a decode step";
    pub const GGUF_UNIFORM: &str = "a GGUF transformer written as one ggml type for every weight \
         (the files keep norms, biases and some projections at higher precision)";
    pub const COMPILED_LAYERS: &str = "torch.compile: the compiled loss is modelled, the compiled \
         layers' stored activations are counted as in eager mode (an upper bound)";
    pub const REFERENCE_DEFAULT: &str = "DPO's reference not stated: TRL's default, the base \
         with its adapters off under PEFT (no ref_model), a frozen copy of the model otherwise \
         (create_reference_model)";
    pub const NOT_MODELLED: &str =
        "a setting the language does not model and the measurement shows to be neutral";
    pub const LOADED_BEFORE_OFFLOAD: &str = "model offload after the whole pipeline was moved to \
         the GPU, as the source's own code does (`.to(\"cuda\")`, then \
         `enable_model_cpu_offload()`); the reading is taken to span that load (the benchmark \
         script is not reproduced)";
    pub const PIPELINE_DEFAULT: &str =
        "a pipeline setting not in the data: the diffusers pipeline's default";
    pub const SCRIPT_METHOD: &str = "the measurement method, not in the data, read from the \
         source's published benchmark script: a reading at rest, compared with what stays allocated";
    pub const TEXT_ENCODER_FROZEN: &str = "the source's example command also trains the text \
         encoder with LoRA (--train_text_encoder); its adapters, their states and its activations \
         over 77 tokens (a few MB) are not modelled, so the text encoder is counted frozen";
    pub const UNIFORM_BLOCKS: &str = "a transformer denoiser's adapted blocks beside its \
         `layers` left out of the count (HunyuanVideo's token refiner)";
    pub const LOSS_16_BIT: &str = "the cross-entropy on 16-bit logits (`loss`): Qwen v1's \
         remote code (modeling_qwen.py, QWenLMHeadModel.forward) passes the lm_head's 16-bit \
         logits to CrossEntropyLoss with no `.float()`, and under DeepSpeed nothing autocasts \
         (its engine casts the module to fp16/bf16), so the log-softmax runs in 16-bit";
    pub const LOSS_16_BIT_LOOP: &str = "the cross-entropy on 16-bit logits (`loss`): the \
         training loop computes its own CrossEntropyLoss on the logits of a transformers model \
         from 4.46 on, whose forward returns them in the model's type (it upcasts only inside \
         its own loss, given labels), and nothing autocasts in pure 16-bit training";
    pub const META_FP8: &str = "Meta's FP8 checkpoint (fbgemm): FP8 on the feed-forward \
         matrices of every layer but the first and last, the attention, embedding and head in \
         bf16 (Llama 3 paper, arXiv 2407.21783, §6.2), written as `quantized_matrices mlp` and \
         `unquantized_layers 1`";
    pub const SHAPE_FROM_DATA: &str = "a model with no config.json in the harness, declared \
         from the point's own architecture fields (which the data set asks to verify): \
         Llama-style, its feed-forward width solved from the stated parameter count";
    pub const SOURCE_LABEL: &str =
        "a condition the data leaves open, read from the source's own table labels";
    pub const LOWER_BOUND: &str = "an out-of-memory report without a length or batch size: the \
         smallest (1) gives a lower bound, which decides the report only if even it does not fit \
         (memory never shrinks as a length or batch grows)";
}
