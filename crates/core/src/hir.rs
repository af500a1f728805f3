//! Checked declarations: names resolved, units checked, defaults applied.
//!
//! The `check` pass builds these from the syntax tree; the evaluator reads only these. A value
//! here is always valid: counts are positive where they must be, every referenced name exists.

use crate::bytes::Bytes;
use crate::precision::{Feature, Precision};
use crate::quant::WeightFormat;
use crate::ratio::Ratio;
use crate::span::Span;
use crate::table::Table;

/// Everything a file declares, merged over the built-in catalog.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub devices: Table<Device>,
    pub machines: Table<Machine>,
    pub models: Table<Model>,
    pub workloads: Table<Workload>,
    pub headrooms: Table<Headroom>,
    /// In file order.
    pub checks: Vec<CheckSpec>,
    /// `find` queries, in file order.
    pub queries: Vec<QuerySpec>,
}

/// A file's own declarations over a base program (the built-in catalog), looked up own-first,
/// so the catalog is shared rather than copied for every evaluation.
#[derive(Clone, Debug)]
pub struct Layered<'a> {
    pub own: Program,
    pub base: &'a Program,
}

impl Layered<'_> {
    pub fn device(&self, name: &str) -> Option<&Device> {
        self.own.devices.get(name).or_else(|| self.base.devices.get(name))
    }

    pub fn machine(&self, name: &str) -> Option<&Machine> {
        self.own.machines.get(name).or_else(|| self.base.machines.get(name))
    }

    pub fn model(&self, name: &str) -> Option<&Model> {
        self.own.models.get(name).or_else(|| self.base.models.get(name))
    }

    pub fn workload(&self, name: &str) -> Option<&Workload> {
        self.own.workloads.get(name).or_else(|| self.base.workloads.get(name))
    }

    pub fn headroom(&self, name: &str) -> Option<&Headroom> {
        self.own.headrooms.get(name).or_else(|| self.base.headrooms.get(name))
    }

    /// The file's checks, in file order.
    pub fn checks(&self) -> &[CheckSpec] {
        &self.own.checks
    }

    /// The file's `find` queries, in file order.
    pub fn queries(&self) -> &[QuerySpec] {
        &self.own.queries
    }

    /// One program holding both layers (the file's entries replace the base's).
    pub fn merged(self) -> Program {
        let mut program = self.base.clone();
        program.devices.extend(self.own.devices);
        program.machines.extend(self.own.machines);
        program.models.extend(self.own.models);
        program.workloads.extend(self.own.workloads);
        program.headrooms.extend(self.own.headrooms);
        program.checks = self.own.checks;
        program.queries = self.own.queries;
        program
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Arch {
    /// Pascal (P100, P40, GeForce 10 series): fp16 on sm_60, no bf16 or tensor cores.
    Pascal,
    Volta,
    Turing,
    Ampere,
    Ada,
    Hopper,
    Blackwell,
    BlackwellUltra,
    Cdna2,
    Cdna3,
    Gaudi3,
}

impl Arch {
    pub const ALL: [Arch; 11] = [
        Arch::Pascal,
        Arch::Volta,
        Arch::Turing,
        Arch::Ampere,
        Arch::Ada,
        Arch::Hopper,
        Arch::Blackwell,
        Arch::BlackwellUltra,
        Arch::Cdna2,
        Arch::Cdna3,
        Arch::Gaudi3,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Arch::Pascal => "pascal",
            Arch::Volta => "volta",
            Arch::Turing => "turing",
            Arch::Ampere => "ampere",
            Arch::Ada => "ada",
            Arch::Hopper => "hopper",
            Arch::Blackwell => "blackwell",
            Arch::BlackwellUltra => "blackwell-ultra",
            Arch::Cdna2 => "cdna2",
            Arch::Cdna3 => "cdna3",
            Arch::Gaudi3 => "gaudi3",
        }
    }

    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|arch| arch.name() == name)
    }
}

#[derive(Clone, Debug)]
pub struct Device {
    pub name: String,
    pub title: Option<String>,
    pub memory: Bytes,
    /// True when `memory` is what the driver reports; false for a marketed size.
    pub memory_reported: bool,
    /// Framebuffer the driver and firmware keep for themselves (`nvidia-smi -q`'s `Reserved`,
    /// NVML's `memoryInfo_v2.reserved`): inside `memory`, never allocatable. Zero when unknown.
    pub reserved: Bytes,
    pub arch: Arch,
    pub compute: Option<Ratio>,
    pub features: Vec<Feature>,
    pub from_catalog: bool,
    pub span: Span,
}

impl Device {
    pub fn display_name(&self) -> &str {
        self.title.as_deref().unwrap_or(&self.name)
    }

    /// What a process can allocate: `memory` less the driver's reserve. CUDA's total
    /// (`cudaMemGetInfo`, `torch.cuda.mem_get_info()[1]`) is this figure, not nvidia-smi's.
    pub fn usable(&self) -> Bytes {
        Bytes(self.memory.0.saturating_sub(self.reserved.0))
    }

    pub fn supports(&self, feature: Feature) -> bool {
        self.features.contains(&feature)
    }
}

#[derive(Clone, Debug)]
pub struct Machine {
    pub name: String,
    pub title: Option<String>,
    /// `(count, device name)` in declaration order.
    pub gpus: Vec<(u32, String)>,
    pub host_ram: Option<Bytes>,
    pub disk: Option<Bytes>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mlp {
    /// Gate, up and down projections (SwiGLU and friends).
    Gated,
    /// Gate and up as one fused projection whose `2 × ffn` output is split in two (Phi-3's
    /// `gate_up_proj`, ChatGLM's and GLM-4's `dense_h_to_4h`): the weights and stored
    /// activations of [`Mlp::Gated`], but a forward step holds the fused output beside the
    /// activation and the product, `4 × ffn` per token where separate projections hold 3.
    GatedFused,
    /// Up and down projections only (GPT-2, OPT).
    Plain,
}

impl Mlp {
    /// Whether a gate projection multiplies the up projection (three matrices of weights).
    pub fn is_gated(self) -> bool {
        !matches!(self, Mlp::Plain)
    }
}

/// The shape of a transformer: decoder-only, or an encoder-decoder ([`EncoderDecoder`]).
#[derive(Clone, Debug)]
pub struct Shape {
    /// Every layer; in an encoder-decoder model the encoder's come first, then the decoder's.
    pub layers: u64,
    pub hidden: u64,
    pub ffn: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub vocab: u64,
    pub tied_embeddings: bool,
    pub biases: Biases,
    pub norm: Norm,
    /// Learned position embeddings (rows of `hidden`), 0 with rotary positions.
    pub positions: u64,
    pub output: Output,
    /// Dropout is active in training (BERT's 0.1; most decoders have none): each dropout keeps a
    /// one-byte mask, and attention dropout keeps its output too.
    pub dropout: bool,
    pub mlp: Mlp,
    pub attention: AttentionKind,
    pub moe: Option<Moe>,
    pub window: Option<Window>,
    /// An encoder stack before the decoder (T5, BART); `None`: decoder-only.
    pub encoder: Option<EncoderDecoder>,
    /// Layer-matrix parameters that transformers keeps in fp32 when the model loads in fp16 or
    /// through a bitsandbytes quantizer (`_keep_in_fp32_modules`: T5's `wo`), spread evenly
    /// over the layers as T5's one `wo` per layer is; the model's `keep_in_fp32`, 0 without.
    pub keep_in_fp32: u64,
}

/// An encoder-decoder transformer (transformers `modeling_t5.py` `T5ForConditionalGeneration`,
/// `modeling_bart.py` `BartForConditionalGeneration`): the encoder reads the source tokens; every
/// decoder layer adds a cross-attention (q, k, v, o and a norm) over the encoder's output. One
/// embedding is shared by both stacks; each stack has its own position table (learned rows, or
/// T5's relative-position buckets in its first layer) and its own norm outside the layers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncoderDecoder {
    /// The first `encoder_layers` of [`Shape::layers`].
    pub encoder_layers: u64,
    /// T5's `relative_attention_num_buckets`: a `buckets × heads` table in the first layer of
    /// each stack (`T5Attention.relative_attention_bias`); 0 without relative positions.
    pub relative_buckets: u64,
}

/// Exact bytes of a checkpoint's weights and the format they are in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub bytes: Bytes,
    pub format: WeightFormat,
}

/// Which linear layers have biases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Biases {
    None,
    /// q, k and v only (Qwen2).
    Qkv,
    /// Every linear layer (BERT, GPT-2, GPTBigCode).
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// A weight per norm.
    Rms,
    /// A weight and a bias per norm.
    Layer,
}

/// What follows the last layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// A projection over the vocabulary, and its logits.
    Lm,
    /// A small task head (an encoder's classifier): no vocabulary logits.
    None,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    /// Multi-head or grouped-query attention with per-head keys and values.
    Standard,
    /// Multi-head latent attention (DeepSeek-V2/V3): one compressed latent per token.
    Mla(Mla),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mla {
    pub kv_lora_rank: u64,
    pub q_lora_rank: Option<u64>,
    pub rope_dim: u64,
    pub nope_dim: u64,
    pub v_head_dim: u64,
}

/// Mixture of experts: every expert is resident; `active` of them run per token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moe {
    pub experts: u64,
    pub active: u64,
    pub expert_ffn: u64,
    pub shared: u64,
    pub shared_ffn: u64,
    /// Leading layers with a dense MLP before the MoE layers start.
    pub dense_layers: u64,
}

/// Sliding-window (local) attention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub tokens: u64,
    /// Every Nth layer attends globally; `None`: every layer is local.
    pub global_every: Option<u64>,
}

impl Shape {
    /// Whether layer `layer` (from 0) is a decoder layer of an encoder-decoder model, with a
    /// cross-attention over the encoder's output.
    pub fn has_cross_attention(&self, layer: u64) -> bool {
        self.encoder.as_ref().is_some_and(|e| layer >= e.encoder_layers)
    }

    /// Whether layer `layer` (from 0) is an encoder layer (no cache, source tokens).
    pub fn is_encoder_layer(&self, layer: u64) -> bool {
        self.encoder.as_ref().is_some_and(|e| layer < e.encoder_layers)
    }

    /// The stacks of layers: 2 for an encoder-decoder model, else 1. Each has its own position
    /// table and final norm.
    pub fn stacks(&self) -> u64 {
        if self.encoder.is_some() { 2 } else { 1 }
    }

    /// Of `count` layers from `first`, how many are encoder layers.
    pub fn encoder_layers_in(&self, first: u64, count: u64) -> u64 {
        match &self.encoder {
            Some(e) => e.encoder_layers.saturating_sub(first).min(count),
            None => 0,
        }
    }

    /// Whether layer `layer` (from 0) attends only within the sliding window.
    pub fn is_local(&self, layer: u64) -> bool {
        match &self.window {
            None => false,
            Some(Window { global_every: None, .. }) => true,
            Some(Window { global_every: Some(n), .. }) => !(layer + 1).is_multiple_of(*n),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Model {
    pub name: String,
    pub title: Option<String>,
    pub shape: Option<Shape>,
    /// A parameter count given directly.
    pub params: Option<u64>,
    /// Parameters that loaders leave out of quantization and of fp16 (transformers
    /// `_keep_in_fp32_modules`, such as T5's feed-forward output `wo`).
    pub keep_in_fp32: Option<u64>,
    /// Parameters in modules that diffusers' `enable_layerwise_casting` skips by name (norms,
    /// with the AdaLN modulation linears inside them, position and patch embeddings,
    /// `proj_in`/`proj_out`): they stay 16-bit under `fp8-layerwise`.
    pub layerwise_skip: Option<u64>,
    /// Parameters outside linear layers (embeddings, norms), which weight-only quantizers leave
    /// at the load dtype.
    pub outside_linear: Option<u64>,
    /// Parameters of the largest module that holds tensors of its own (a linear layer, an
    /// embedding, a convolution): what sequential offload has on the device at once. A model with
    /// a shape derives it when not given (`eval/diffusion.rs`).
    pub largest_module: Option<u64>,
    /// Values in buffers the model registers (a position table), counted in `params`: sequential
    /// offload leaves buffers on the device (accelerate's `offload_buffers` is off by default).
    pub buffers: Option<u64>,
    /// How block-level group offloading divides the model: its largest top-level block and the
    /// parameters outside its top-level block lists. `None`: one group, the whole model (diffusers
    /// groups only a model's top-level `ModuleList`s, and T5, CLIP and the VAEs have none).
    pub blocks: Option<Blocks>,
    /// Parameters of its attention layers' q, k and v projections (weights and biases), which
    /// diffusers' `fuse_qkv_projections` copies into one fused projection per layer.
    pub attention_qkv: Option<u64>,
    /// The stored weights, as an importer read them from the checkpoint's headers.
    pub stored: Option<Stored>,
    pub span: Span,
}

/// A model's top-level blocks, as diffusers' block-level group offloading moves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocks {
    /// Parameters (and buffers) of the largest entry of the model's top-level block lists.
    pub largest: u64,
    /// Parameters and buffers outside every top-level block list: one group, on the device for
    /// the whole of the model's forward.
    pub outside: u64,
}

impl Model {
    /// Whether sequential offload can size the module it moves: `largest_module` is given, or
    /// the shape gives its largest matrix.
    pub fn sizes_its_largest_module(&self) -> bool {
        self.largest_module.is_some() || self.shape.is_some()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Runtime {
    PyTorch,
    /// Hugging Face diffusers pipelines: PyTorch's context and workspaces, named for the reader.
    Diffusers,
    Vllm,
    /// SGLang: a KV pool sized from `mem_fraction_static` of the free memory ([`crate::eval`]'s
    /// serving rules).
    Sglang,
    /// Hugging Face text-generation-inference: a KV pool sized after a warm-up prefill.
    Tgi,
    /// NVIDIA TensorRT-LLM: a KV pool of a fraction of what the loaded engine leaves.
    TensorrtLlm,
    /// LMDeploy's TurboMind engine: a KV pool of a fraction of the memory its weights leave.
    Lmdeploy,
    LlamaCpp,
    None,
    Custom {
        context: Bytes,
        workspace: Bytes,
    },
}

impl Runtime {
    /// Whether the runtime sizes a KV pool at start-up from a share of the device (its rule is
    /// in the evaluator's serving rules), so `memory_fraction` means something to it.
    pub fn sizes_a_pool(&self) -> bool {
        matches!(
            self,
            Runtime::Vllm
                | Runtime::Sglang
                | Runtime::Tgi
                | Runtime::TensorrtLlm
                | Runtime::Lmdeploy
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    Last,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    Fused,
    Eager,
}

#[derive(Clone, Debug)]
pub struct Inference {
    pub weights: WeightFormat,
    pub kv_cache: Precision,
    pub activations: Precision,
    /// What quantized layers compute in (bitsandbytes' `bnb_4bit_compute_dtype`): they cast
    /// their input to it and their output back, so only the matmul runs in it.
    pub compute: Precision,
    pub context: u64,
    /// The encoder's input tokens per session (an encoder-decoder model's `source`); `context`
    /// is then the decoder's tokens. `None` for a decoder-only model.
    pub source: Option<u64>,
    pub sessions: u64,
    /// Tokens in one forward step, over all sequences; `None` leaves it to the runtime.
    pub prefill_chunk: Option<u64>,
    /// The most sequences one step schedules (vLLM `max_num_seqs`), which sizes the logits a
    /// pooling runtime samples in its profile run; `None` leaves it to the runtime.
    pub max_sequences: Option<u64>,
    pub logits: Logits,
    pub attention: Attention,
    /// The share of the device a pooling runtime (vLLM) takes; `None`: the runtime's default.
    pub memory_fraction: Option<Ratio>,
    /// How the KV cache grows; `None`: the runtime's way.
    pub cache_layout: Option<CacheLayout>,
    /// llama.cpp's `-ngl` (Ollama's `num_gpu`): the last this many layers on the devices, and
    /// the output layer with them when it exceeds the model's layers; `None`: every layer and
    /// the output.
    pub gpu_layers: Option<u64>,
    /// llama.cpp's `--n-cpu-moe`: the model's first this many layers keep their routed experts
    /// in host memory; 0 keeps every expert with its layer.
    pub cpu_moe_layers: u64,
    /// Positions of the cos and sin tables the model's code builds in every attention layer at
    /// load (transformers' Llama, Mistral and Qwen2 modelling before rotary embeddings were
    /// computed per step: `max_position_embeddings`); `None`: no such tables.
    pub rope_tables: Option<u64>,
}

/// How a runtime grows its KV cache from one generated token to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheLayout {
    /// Allocated up front (vLLM blocks, llama.cpp, static caches): no copies.
    Preallocated,
    /// Each layer's cache is concatenated with the new token (transformers `DynamicCache`):
    /// one layer's previous copy is alive during the copy.
    Concatenated,
    /// Legacy tuple caches (remote-code models): the whole previous cache stays referenced
    /// while the next one is built, so the cache is held twice at the end of a step.
    Tuple,
    /// transformers' `QuantizedCache`: keys and values stored in the `kv_cache` precision, the
    /// newest tokens in a window of the activations' type that is quantized into the rest each
    /// time it reaches `residual` tokens (`residual_length`); each layer's update dequantizes
    /// its whole cache for attention ([`crate::eval`]'s `kv_quantized`).
    Quantized { residual: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Optimizer {
    AdamW,
    /// bitsandbytes 8-bit AdamW: two uint8 states plus an fp32 absmax per 256 values each.
    AdamW8bit,
    /// Adafactor (HF defaults: no first moment): a factored second moment, one row and one
    /// column statistic per matrix, full statistics for vectors.
    Adafactor,
    Sgd,
    SgdMomentum,
    /// Lion (Chen et al. 2023): one momentum, `exp_avg`.
    Lion,
    /// LAMB (You et al. 2019; Apex `FusedLAMB`, timm `Lamb`): `exp_avg` and `exp_avg_sq`.
    Lamb,
    /// `torch.optim.RMSprop` with its defaults (no momentum, not centered): `square_avg`.
    Rmsprop,
    /// `torch.optim.Adagrad`: `sum`.
    Adagrad,
    /// Sophia (Liu et al. 2023, `SophiaG`): `exp_avg` and `hessian`.
    Sophia,
    /// Adan (Xie et al. 2022, sail-sg/Adan): `exp_avg`, `exp_avg_sq`, `exp_avg_diff` and the
    /// previous gradient (`pre_grad`).
    Adan,
    /// Prodigy (Mishchenko and Defazio 2023, konstmish/prodigy): `exp_avg`, `exp_avg_sq`, `s`
    /// and the initial parameters `p0`.
    Prodigy,
    /// Schedule-free AdamW (Defazio et al. 2024, `AdamWScheduleFree`): `z` and `exp_avg_sq`.
    AdamWScheduleFree,
    /// bitsandbytes' one-state 8-bit optimizers (`Lion8bit`, `RMSprop8bit`, `Adagrad8bit`,
    /// `SGD8bit` with momentum): one uint8 state plus an fp32 absmax per 256 values.
    Lion8bit,
    Rmsprop8bit,
    Adagrad8bit,
    SgdMomentum8bit,
}

impl Optimizer {
    /// Every optimizer, in the order the language lists them.
    pub const ALL: [Optimizer; 17] = [
        Optimizer::AdamW,
        Optimizer::AdamW8bit,
        Optimizer::Adafactor,
        Optimizer::Sgd,
        Optimizer::SgdMomentum,
        Optimizer::Lion,
        Optimizer::Lamb,
        Optimizer::Rmsprop,
        Optimizer::Adagrad,
        Optimizer::Sophia,
        Optimizer::Adan,
        Optimizer::Prodigy,
        Optimizer::AdamWScheduleFree,
        Optimizer::Lion8bit,
        Optimizer::Rmsprop8bit,
        Optimizer::Adagrad8bit,
        Optimizer::SgdMomentum8bit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Optimizer::AdamW => "adamw",
            Optimizer::AdamW8bit => "adamw-8bit",
            Optimizer::Adafactor => "adafactor",
            Optimizer::Sgd => "sgd",
            Optimizer::SgdMomentum => "sgd-momentum",
            Optimizer::Lion => "lion",
            Optimizer::Lamb => "lamb",
            Optimizer::Rmsprop => "rmsprop",
            Optimizer::Adagrad => "adagrad",
            Optimizer::Sophia => "sophia",
            Optimizer::Adan => "adan",
            Optimizer::Prodigy => "prodigy",
            Optimizer::AdamWScheduleFree => "adamw-schedule-free",
            Optimizer::Lion8bit => "lion-8bit",
            Optimizer::Rmsprop8bit => "rmsprop-8bit",
            Optimizer::Adagrad8bit => "adagrad-8bit",
            Optimizer::SgdMomentum8bit => "sgd-momentum-8bit",
        }
    }

    /// State values kept per trained parameter.
    pub fn states(self) -> u64 {
        match self {
            Optimizer::Adan | Optimizer::Prodigy => 4,
            Optimizer::AdamW
            | Optimizer::AdamW8bit
            | Optimizer::Lamb
            | Optimizer::Sophia
            | Optimizer::AdamWScheduleFree => 2,
            Optimizer::SgdMomentum
            | Optimizer::Adafactor
            | Optimizer::Lion
            | Optimizer::Rmsprop
            | Optimizer::Adagrad
            | Optimizer::Lion8bit
            | Optimizer::Rmsprop8bit
            | Optimizer::Adagrad8bit
            | Optimizer::SgdMomentum8bit => 1,
            Optimizer::Sgd => 0,
        }
    }

    /// Bytes per state value: fp32, or 8-bit with an fp32 absmax per 256-value block
    /// (bitsandbytes `optimizer.py`, blocksize 256): 1 + 4/256.
    pub fn bytes_per_state(self) -> Ratio {
        if self.is_eight_bit() {
            Ratio::new(256 + 4, 256).unwrap_or(Ratio::ONE)
        } else {
            Ratio::int(4)
        }
    }

    /// A bitsandbytes 8-bit optimizer: its states keep their own format, whatever the trained
    /// parameters' type, and its step is one fused kernel per tensor.
    pub fn is_eight_bit(self) -> bool {
        matches!(
            self,
            Optimizer::AdamW8bit
                | Optimizer::Lion8bit
                | Optimizer::Rmsprop8bit
                | Optimizer::Adagrad8bit
                | Optimizer::SgdMomentum8bit
        )
    }
}

/// A linear layer LoRA can adapt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LoraTarget {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl LoraTarget {
    pub const ALL: [LoraTarget; 7] = [
        LoraTarget::Q,
        LoraTarget::K,
        LoraTarget::V,
        LoraTarget::O,
        LoraTarget::Gate,
        LoraTarget::Up,
        LoraTarget::Down,
    ];

    /// An attention projection, which a decoder layer of an encoder-decoder model has twice
    /// (self- and cross-attention).
    pub fn is_attention(self) -> bool {
        matches!(self, LoraTarget::Q | LoraTarget::K | LoraTarget::V | LoraTarget::O)
    }

    /// T5's names for the feed-forward projections (`T5DenseActDense` `wi`, `wo`;
    /// `T5DenseGatedActDense` `wi_0`, `wi_1`, `wo`), as PEFT's `target_modules` spells them.
    pub const T5_NAMES: [(&'static str, LoraTarget); 4] = [
        ("wi", LoraTarget::Up),
        ("wi_0", LoraTarget::Gate),
        ("wi_1", LoraTarget::Up),
        ("wo", LoraTarget::Down),
    ];

    pub fn name(self) -> &'static str {
        match self {
            LoraTarget::Q => "q",
            LoraTarget::K => "k",
            LoraTarget::V => "v",
            LoraTarget::O => "o",
            LoraTarget::Gate => "gate",
            LoraTarget::Up => "up",
            LoraTarget::Down => "down",
        }
    }
}

#[derive(Clone, Debug)]
pub enum Method {
    Full,
    /// LoRA adapters; `save` lists whole modules trained alongside (PEFT `modules_to_save`).
    Lora {
        rank: u64,
        targets: Vec<LoraTarget>,
        dtype: Precision,
        save: Vec<Saved>,
        /// PEFT's `lora_dropout`, a probability in `[0, 1)`: above 0 each adapter keeps a
        /// dropout mask and the dropped-out input for the backward pass.
        dropout: Ratio,
        /// DoRA (PEFT `use_dora`): each adapted matrix also trains a magnitude vector of its
        /// output features and rebuilds the adapted weight's column norms in every forward.
        dora: bool,
        /// q, k and v are one fused projection (litgpt's `attn`, Qwen v1's `c_attn`,
        /// `query_key_value`): its adapters read the shared input through one dropout, so one
        /// mask and one dropped-out input are kept for all of them.
        fused_qkv: bool,
    },
    /// Freeze tuning (LLaMA-Factory `finetuning_type: freeze`): the last `layers` decoder layers,
    /// and the `extra` end modules, train in full; the rest of the model stays frozen.
    Freeze {
        layers: u64,
        extra: Vec<Saved>,
    },
    /// Prefix tuning (PEFT `PrefixTuningConfig`, P-tuning v2): `tokens` trained key and value
    /// vectors for every layer's attention, made directly or by a two-layer MLP of width
    /// `projection` (PEFT `prefix_projection`, `encoder_hidden_size`) from a `tokens × hidden`
    /// embedding; the whole model stays frozen.
    Prefix {
        tokens: u64,
        projection: Option<u64>,
    },
    /// Prompt tuning (PEFT `PromptTuningConfig`) and P-tuning (`PromptEncoderConfig`): `tokens`
    /// trained embeddings before every sample's input, made directly or, for P-tuning, by an
    /// MLP of width `encoder` (`encoder_hidden_size`); the whole model stays frozen and runs over
    /// the longer input.
    Prompt {
        tokens: u64,
        encoder: Option<u64>,
    },
}

impl Method {
    /// Whether every weight of the model trains.
    pub fn is_full(&self) -> bool {
        matches!(self, Method::Full)
    }
}

/// A module trained in full next to LoRA adapters (a trainable copy of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Saved {
    Embeddings,
    Head,
}

/// What DeepSpeed moves to host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Offload {
    None,
    /// Optimizer state and master weights (`offload_optimizer`).
    Optimizer,
    /// ... and the parameters themselves between uses (`offload_param`, with ZeRO-3).
    Parameters,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checkpointing {
    None,
    /// Recompute attention only (Korthikanti et al.): drops the materialized scores.
    Selective,
    /// torchtitan's op-level selective checkpointing: each layer keeps its input, the attention
    /// kernel's output and every other matrix product's output, and recomputes the rest.
    SelectiveOp,
    Full,
}

/// ZeRO / FSDP: which model states are divided over the data-parallel ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Sharding {
    None,
    /// Optimizer state and master weights (ZeRO-1).
    Zero1,
    /// ... and gradients (ZeRO-2, FSDP `SHARD_GRAD_OP`).
    Zero2,
    /// ... and the weights themselves, gathered a layer at a time (ZeRO-3, FSDP `FULL_SHARD`).
    Zero3,
}

#[derive(Clone, Debug)]
pub struct Training {
    pub method: Method,
    pub weights: Precision,
    pub master: Option<Precision>,
    pub gradients: Precision,
    pub optimizer: Optimizer,
    /// Samples per step; a trained denoiser's is its diffusion section's `batch` (this stays 1).
    pub micro_batch: u64,
    /// Tokens per sample; 0 for a trained denoiser, whose positions its diffusion section's
    /// resolution gives.
    pub sequence: u64,
    /// The encoder's tokens per sample (an encoder-decoder model's `source`); `sequence` is
    /// then the decoder's (target) tokens. `None` for a decoder-only model.
    pub source: Option<u64>,
    pub checkpointing: Checkpointing,
    pub attention: Attention,
    pub sharding: Sharding,
    pub sequence_parallel: bool,
    /// Precision of activations (autocast): the weights' own, or 16-bit under mixed precision.
    pub activations: Precision,
    pub offload: Offload,
    /// DeepSpeed ZeRO-1/2 gradient bucket size in elements (`reduce_bucket_size`); `None` for
    /// FSDP and unsharded training.
    pub bucket_elements: Option<u64>,
    /// DeepSpeed runs the sharding (`zero1`, `zero2`, `zero3`; FSDP's names say FSDP): it keeps
    /// 16-bit gradients and casts them to fp32 a flat partition at a time at the optimizer step.
    pub deepspeed: bool,
    /// State-sized intermediates PyTorch's multi-tensor (`foreach`) AdamW step, its default
    /// since 2.0, holds over every parameter at once: 1 from PyTorch 2.1, 2 in 2.0 (the square
    /// root of the second moment and the denominator). 0: a per-tensor loop (PyTorch 1.x,
    /// transformers' legacy AdamW) or a fused kernel, whose one-tensor temporaries are left out.
    pub foreach_intermediates: u64,
    /// A 4-bit bitsandbytes base whose release (before 0.43.2) keeps every 4-bit layer's input
    /// on the autograd context through the step (`check/bitsandbytes_release.rs`).
    pub bnb_keeps_inputs: bool,
    /// Precision the cross-entropy's log-softmax runs in: fp32 when the model code upcasts the
    /// logits (transformers' own models) or autocast runs it (its fp32 list); 16-bit when
    /// remote code computes the loss on 16-bit logits and nothing autocasts (DeepSpeed's
    /// engine casts the module instead).
    pub loss: Precision,
    /// Precision of the parameters a quantizer leaves unquantized (embeddings, output head,
    /// norms, biases) in a quantized base: PEFT's `prepare_model_for_kbit_training` casts them
    /// to fp32 for bitsandbytes models; their 16-bit type otherwise.
    pub unquantized: Precision,
    /// The cross-entropy runs over the logits in this many chunks of the sequence (torchtune
    /// `CEWithChunkedOutputLoss`, 8): the output head returns 16-bit chunks and each is upcast
    /// on its own. 1: the whole sequence at once.
    pub loss_chunks: u64,
    /// Memory levers that shorten how long the step holds its gradients, logits and activations.
    pub levers: Levers,
    /// How the training loop clears the gradients after each optimizer step.
    pub zero_grad: ZeroGrad,
    /// Micro-batches whose gradients add up before each optimizer step.
    pub accumulation: u64,
    /// Whether a trained pipeline's text encoders train too.
    pub text_encoders: TextEncoders,
    /// Where the optimizer keeps its states.
    pub states_memory: StatesMemory,
    /// GaLore (Zhao et al. 2024, `galore_torch`): the optimizer keeps its states for every layer
    /// matrix in a rank-`r` projection of its gradient; `None` without it.
    pub galore_rank: Option<u64>,
    /// What one sample of the loss runs: one sequence, or a preference pair.
    pub objective: Objective,
    /// Positions of the rotary tables older transformers modelling built in every attention
    /// layer ([`Inference::rope_tables`]); `None`: no such tables.
    pub rope_tables: Option<u64>,
    /// How the stages of a `split pipeline` step take their micro-batches.
    pub pipeline_schedule: PipelineSchedule,
}

/// How a pipeline-split training step runs its micro-batches through the stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipelineSchedule {
    /// One forward, one backward (Megatron, DeepSpeed's pipeline engine, torchtitan): stage `s`
    /// of `n` keeps `n - s` micro-batches' activations in flight, and the stages exchange
    /// activations over NCCL.
    OneForwardOneBackward,
    /// One micro-batch at a time through every stage, in one process (accelerate's `device_map`
    /// over several GPUs, "naive model parallelism"): each stage keeps one micro-batch's
    /// activations, and tensors move between GPUs by copies, with no process group.
    Sequential,
}

/// What one sample of a training step's loss runs through the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    /// One sequence per sample: supervised fine-tuning, pretraining.
    Sft,
    /// A preference pair per sample, chosen and rejected run as one concatenated forward of
    /// twice the batch (TRL `concatenated_forward`), with a reference model's log-probabilities
    /// beside the policy's (DPO and the losses of its trainer: IPO, RPO, ...).
    Dpo(Reference),
    /// A preference pair per sample without a reference model (ORPO, SimPO, CPO).
    PairsOnly,
}

impl Objective {
    /// Sequences the model runs per sample.
    pub fn sequences_per_sample(self) -> u64 {
        match self {
            Objective::Sft => 1,
            Objective::Dpo(_) | Objective::PairsOnly => 2,
        }
    }
}

/// Where a DPO step's reference log-probabilities come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// A frozen copy of the model, resident beside the trained one (TRL
    /// `create_reference_model`, or a `ref_model` loaded apart).
    Copy,
    /// The trained model with its adapters turned off (TRL with a PEFT model and no
    /// `ref_model`: `null_ref_context` runs the base alone): no second copy of the weights.
    AdaptersOff,
    /// Computed once before training (`precompute_ref_log_probs`): no reference pass in the step.
    Precomputed,
}

/// Where an optimizer keeps its states on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatesMemory {
    /// Tensors of PyTorch's caching allocator.
    Allocator,
    /// CUDA unified memory (`cudaMallocManaged`, bitsandbytes' paged optimizers): on the device
    /// while there is room, outside the allocator's counters.
    Paged,
}

/// A trained pipeline's text encoders: frozen, or fine-tuned in full beside its denoiser
/// (diffusers' DreamBooth scripts, `--train_text_encoder`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextEncoders {
    Frozen,
    Trained,
}

/// How a training loop clears the gradients after the optimizer step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroGrad {
    /// `zero_grad(set_to_none=True)`, PyTorch's default since 2.0 (and what transformers'
    /// Trainer, Accelerate, Lightning and torchtune call): the gradients are freed, so none
    /// exists in the next forward pass.
    SetToNone,
    /// `zero_grad(set_to_none=False)` (PyTorch 1.x's default, diffusers' example scripts
    /// without `--set_grads_to_none`): the gradient tensors stay allocated, filled with zeros.
    Zeros,
}

/// Memory levers of a training step (torchtune's single-device recipes expose each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Levers {
    /// The optimizer steps each parameter as soon as its gradient is complete, in the backward
    /// pass, and frees that gradient (torchtune `optimizer_in_bwd`, a per-parameter optimizer
    /// run by `register_post_accumulate_grad_hook`): the gradients are never all held at once.
    pub step_in_backward: bool,
    /// `torch.compile` runs the loss and the layers: the log-softmax and its backward are
    /// fused, so the compiled loss keeps only its input (the 16-bit chunks, each upcast inside,
    /// or the model's upcast logits when whole), and the compiled layers fuse their RMSNorms.
    /// Their other stored activations are counted as in eager mode, an upper bound.
    pub compile: bool,
    /// Saved activations go to host memory in the forward pass and come back for the backward
    /// pass (torchtune `enable_activation_offloading`, `OffloadActivations`): one layer's are on
    /// the device at a time, beside the one being transferred.
    pub offload_activations: bool,
    /// How far the cross-entropy is fused ([`FusedLoss`]).
    pub fused_loss: FusedLoss,
}

/// A cross-entropy fused into fewer kernels than the eager log-softmax and its backward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FusedLoss {
    #[default]
    None,
    /// One kernel over the materialized logits that keeps them and writes their gradient over
    /// them (Unsloth's `Fast_CrossEntropyLoss` before 2024.11, flash-attn's cross-entropy with
    /// `inplace_backward`): no log-softmax, no upcast, no second gradient.
    Logits,
    /// The output head's matmul fused with the loss, a chunk of tokens at a time (Liger's
    /// `LigerFusedLinearCrossEntropy`, Apple's Cut Cross-Entropy, Unsloth from 2024.11): the
    /// whole logits never exist; a chunk of about as many values as the hidden states does.
    Linear,
}

impl Training {
    /// Whether the gradients live on the host: sharded training that offloads its optimizer
    /// moves each reduced gradient to the host optimizer (DeepSpeed ZeRO-Offload copies the
    /// reduce buckets into the CPU optimizer's fp32 partition; FSDP's `CPUOffload` moves the
    /// reduced shard).
    pub fn gradients_on_host(&self) -> bool {
        self.offload != Offload::None && self.sharding != Sharding::None
    }

    /// Whether the gradients exist only from the backward pass to the optimizer step: freed
    /// after each step (`set_to_none`) and not accumulated over micro-batches. Not for
    /// DeepSpeed ZeRO-3, which reduces into a flat gradient buffer it allocates once
    /// (`stage3.py`, `grad_partitions_flat_buffer`), nor for gradients that live on the host
    /// or are stepped one tensor at a time in the backward pass.
    pub fn gradients_freed_each_step(&self) -> bool {
        self.zero_grad == ZeroGrad::SetToNone
            && self.accumulation == 1
            && !self.levers.step_in_backward
            && !(self.deepspeed && self.sharding == Sharding::Zero3)
            && !self.gradients_on_host()
    }
}

/// Where a component's memory goes.
pub use crate::budget::Category;

#[derive(Clone, Debug)]
pub struct CustomComponent {
    pub name: String,
    pub bytes: Bytes,
    pub category: Category,
    /// `exact` for sizes written directly, `formula` for ones computed from a scene's assets.
    pub provenance: crate::budget::Provenance,
    /// The expression as written, shown as the component's formula.
    pub formula: String,
}

#[derive(Clone, Debug)]
pub struct Workload {
    pub name: String,
    pub title: Option<String>,
    pub model: Option<String>,
    pub runtime: Runtime,
    pub inference: Option<Inference>,
    pub training: Option<Training>,
    pub diffusion: Option<Diffusion>,
    /// CUDA loads every kernel module at start (`CUDA_MODULE_LOADING=EAGER`, and every CUDA
    /// before 11.7) rather than on first use.
    pub eager_modules: bool,
    pub components: Vec<CustomComponent>,
    pub span: Span,
}

/// The tile of a tiled decode when the file names none: diffusers' `AutoencoderKL` tiles at its
/// config's `sample_size`, 1024 for the SDXL, SD3 and FLUX autoencoders (512 for SD 1.x's).
pub const DEFAULT_VAE_TILE: (u64, u64) = (1024, 1024);

/// The tile (width, height) of a tiled decode when the file names none, for a pipeline whose
/// VAE is `video`'s decoder (or an image VAE): `AutoencoderKLCogVideoX` tiles at half its sample
/// size (360 × 240), `AutoencoderKLHunyuanVideo`, `AutoencoderKLWan` and `AutoencoderKLMochi` at 256 × 256,
/// `AutoencoderKLLTXVideo` at 512 × 512; an image pipeline's `AutoencoderDC` at 512 × 512 too.
pub fn default_vae_tile(video: Option<&Video>, image_vae: ImageVae) -> (u64, u64) {
    match video.map(|v| v.decoder) {
        None if image_vae == ImageVae::DcAe => (512, 512),
        None => DEFAULT_VAE_TILE,
        Some(VideoDecoder::CogVideoX) => (360, 240),
        Some(VideoDecoder::Hunyuan | VideoDecoder::Wan | VideoDecoder::Mochi) => (256, 256),
        Some(VideoDecoder::Ltx(_)) => (512, 512),
    }
}

/// A diffusion pipeline: a denoiser run over latents, text encoders before it, a VAE after it.
#[derive(Clone, Debug)]
pub struct Diffusion {
    pub denoiser: Denoiser,
    pub text_encoders: Vec<String>,
    /// One format per text encoder, in the order of `text_encoders`.
    pub text_encoder_weights: Vec<WeightFormat>,
    pub vae: Option<String>,
    pub vae_weights: WeightFormat,
    /// A model that checks the decoded images (Stable Diffusion 1.x's
    /// `StableDiffusionSafetyChecker`), at `vae_weights`' precision; diffusers keeps it on the
    /// device whatever the offload (`_exclude_from_cpu_offload`).
    pub safety_checker: Option<String>,
    /// A ControlNet run beside the denoiser at every step (`controlnet`); sampling only.
    pub controlnet: Option<ControlNet>,
    /// An image pipeline's autoencoder (`image_vae`).
    pub image_vae: ImageVae,
    pub width: u64,
    pub height: u64,
    /// Latent frames for video models; 1 for images. With `video`, derived from its frames.
    pub frames: u64,
    /// A video pipeline whose VAE is a causal 3D autoencoder (`video_frames`), else none.
    pub video: Option<Video>,
    pub batch: u64,
    /// Classifier-free guidance: how the denoiser runs its unconditional prediction.
    pub cfg: Guidance,
    pub text_tokens: u64,
    /// The side in pixels of the square one transformer token covers: the VAE's spatial factor
    /// times the patch size (16 for FLUX, SD3 and CogVideoX: 8 × 2; 32 for LTX-Video: 32 × 1).
    /// A multiple of 8.
    pub patch_pixels: u64,
    /// Latent frames one transformer token spans (1; CogVideoX 1.5's `patch_size_t` 2). The
    /// pipeline pads the latent frames up to a multiple of it (the padding is dropped before
    /// the decode).
    pub patch_frames: u64,
    /// The VAE decoder's base channel count (128 for the SD, SDXL, SD3 and FLUX autoencoders).
    pub vae_channels: u64,
    /// The tile's width and height in pixels when the decode is tiled (`enable_tiling`), else
    /// none.
    pub vae_tile: Option<(u64, u64)>,
    /// The fp16 VAE is cast to fp32 for the decode and back after (diffusers' SDXL pipelines
    /// when the VAE config says `force_upcast`); set only where it takes effect.
    pub vae_upcast: bool,
    /// The decode runs one image (or video) of the batch at a time (diffusers
    /// `enable_slicing`), holding the ones decoded before it.
    pub vae_slicing: bool,
    pub offload: DiffusionOffload,
    /// How the denoiser's attention computes its scores while sampling.
    pub attention: DiffusionAttention,
    /// How the pipeline's models were loaded and prepared before sampling.
    pub preparation: Preparation,
}

/// How a pipeline's models were loaded and prepared before sampling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Preparation {
    /// The quantized formats were applied while loading (diffusers `PipelineQuantizationConfig`,
    /// `from_pretrained(quantization_config=...)`) rather than to loaded models.
    pub quantize_on_load: bool,
    /// The dtype `from_pretrained` loaded the pipeline in when it was cast to its `weights`
    /// afterwards (`pipe.to(torch.float16)` after a bf16 load): the loaders' keep-in-fp32 rule
    /// follows the load, and `.to()` then casts every parameter. `None`: loaded in its weights.
    pub loaded_as: Option<Precision>,
    /// `pipe.fuse_qkv_projections()`: each attention layer of the denoiser gains a fused `to_qkv`
    /// beside its `to_q`, `to_k` and `to_v`, which stay loaded.
    pub fuse_qkv: bool,
    /// The whole pipeline was moved to the device as loaded (`.to("cuda")`) before offloading
    /// was enabled or its weights were cast or quantized: every model was resident at once in
    /// its load type.
    pub loaded_on_device: bool,
}

/// The video a pipeline with a causal 3D VAE generates (CogVideoX's `AutoencoderKLCogVideoX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Video {
    /// Frames of the generated video: the first, then `temporal` per latent frame after it.
    pub frames: u64,
    /// The VAE's temporal compression (`temporal_compression_ratio`): 1, 2, 4 or 8.
    pub temporal: u64,
    /// How the decoder carries its causal convolutions' caches from one frame batch to the next.
    pub caches: VaeCaches,
    /// Which causal 3D decoder the pipeline's VAE is.
    pub decoder: VideoDecoder,
}

/// An image pipeline's autoencoder (`image_vae`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageVae {
    /// diffusers `AutoencoderKL`: 8 × 8 pixels to a latent (SD, SDXL, SD3, FLUX, PixArt).
    Kl,
    /// diffusers `AutoencoderDC` in Sana's configuration (dc-ae-f32c32-sana-1.0): 32 × 32
    /// pixels to a latent of 32 channels.
    DcAe,
}

/// A ControlNet (`controlnet`): a copy of the denoiser's first half, run on the conditioning
/// image at every step, whose outputs the denoiser adds to its own (diffusers
/// `ControlNetModel`, `FluxControlNetModel`, `SD3ControlNetModel`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlNet {
    pub model: String,
    pub outputs: ControlOutputs,
}

/// What a ControlNet hands the denoiser at each step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlOutputs {
    /// A UNet ControlNet's down-block residuals: `conv_in`'s output, every ResNet block's and
    /// every downsampler's output of the levels `channel_mult` and `layers_per_block` describe,
    /// and the mid block's output.
    Unet { channel_mult: Vec<u64>, layers_per_block: u64 },
    /// A transformer ControlNet's samples: one of the hidden width over the image tokens per
    /// control block (`controlnet_blocks`).
    Transformer { blocks: u64 },
}

/// A video pipeline's causal 3D VAE decoder (`video_vae`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VideoDecoder {
    /// diffusers `AutoencoderKLCogVideoX`: frame batches of two latent frames, spatial norms.
    CogVideoX,
    /// diffusers `AutoencoderKLWan` (Wan 2.1): one latent frame at a time, RMS norms.
    Wan,
    /// diffusers `AutoencoderKLHunyuanVideo`: chunks of five latent frames every three, each
    /// decoded whole (in tiles under `vae_tiling`), a causal attention mask in the mid block.
    Hunyuan,
    /// diffusers `AutoencoderKLLTXVideo`: every latent frame in one call, not causal, 32 × 32
    /// pixels and 8 frames to a latent; the release names the decoder's layout.
    Ltx(LtxVae),
    /// diffusers `AutoencoderKLMochi` (Mochi 1): every latent frame in one call, 8 × 8 pixels
    /// and 6 frames to a latent, replicate-padded convolutions, chunked group norms.
    Mochi,
}

/// The LTX-Video release whose VAE decoder a pipeline runs (`video_vae ltx`, `ltx-0.9.1`,
/// `ltx-0.9.5`): diffusers `scripts/convert_ltx_to_diffusers.py` `get_vae_config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LtxVae {
    /// 0.9.0: up blocks of 512, 512, 256 and 128 channels, no timestep conditioning.
    V090,
    /// 0.9.1: 1024 channels at the latents, residual upsamplers, timestep conditioning and
    /// noise injection.
    V091,
    /// 0.9.5 to 0.9.8: 0.9.1's layout without the noise, five ResNet blocks a stage.
    V095,
}

/// How a causal 3D VAE decoder carries its convolutions' caches between frame batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VaeCaches {
    /// Passed to and returned from each call (diffusers 0.31 and later, huggingface/diffusers
    /// #9524): the caller holds the previous batch's set until the batch returns its new one.
    Passed,
    /// Module attributes, each replaced as its convolution runs (diffusers before 0.31): one
    /// set at a time.
    Replaced,
}

impl Diffusion {
    /// The images (or videos) one decode call takes: the batch, or one under `vae_slicing`.
    pub fn decode_batch(&self) -> u64 {
        if self.vae_slicing { 1 } else { self.batch }
    }
}

impl Video {
    /// The latent frames a causal VAE gives `frames`: the first frame alone, then one latent
    /// frame per `temporal` frames (diffusers `CogVideoXPipeline.prepare_latents`:
    /// `(num_frames - 1) // vae_scale_factor_temporal + 1`).
    pub fn latent_frames(self) -> u64 {
        (self.frames - 1) / self.temporal + 1
    }
}

#[derive(Clone, Debug)]
pub struct Denoiser {
    pub model: String,
    /// A UNet (convolutions at the latent resolution) rather than a transformer over patches.
    pub unet: bool,
    /// Hidden size (transformer) or base channel count (UNet).
    pub hidden: u64,
    pub weights: WeightFormat,
    /// How a transformer denoiser applies rotary position embeddings to its queries and keys.
    pub rope: Rope,
    /// A transformer denoiser's MLP inner width (`ffn_dim`); `None` for 4 × hidden (DiT's
    /// `mlp_ratio` 4.0) and for a UNet.
    pub ffn: Option<u64>,
    /// The blocks a training step stores activations for and LoRA adapts; written only for
    /// training (inference sizes one block from `hidden`).
    pub blocks: Option<DenoiserBlocks>,
    /// Models of this architecture that take turns over the steps (Wan 2.2's high-noise and
    /// low-noise experts, diffusers' `transformer` and `transformer_2`): each a copy of `model`'s
    /// weights, one running at a time. 1 for an ordinary pipeline.
    pub experts: u64,
    /// A transformer denoiser's blocks whose weights wait on the host for their turn on the
    /// device (`blocks_to_swap`, `single_blocks_to_swap`); none swapped by default.
    pub swap: BlockSwap,
}

/// Block swapping, trained or sampled (kohya's sd-scripts and musubi-tuner, `--blocks_to_swap`):
/// the weights of this many blocks of each kind stay in host memory, and each block's are
/// copied into the device buffer of a block that has just run, so the device holds the others'.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockSwap {
    /// Of the blocks that are not single-stream (all of them when there are none).
    pub blocks: u64,
    /// Of the single-stream blocks (`single_layers`).
    pub single_blocks: u64,
}

impl BlockSwap {
    /// Whether any block is swapped.
    pub fn any(self) -> bool {
        self.blocks > 0 || self.single_blocks > 0
    }
}

impl Denoiser {
    /// A transformer denoiser's MLP inner width: `ffn`, else 4 × hidden.
    pub fn mlp_width(&self) -> u64 {
        self.ffn.unwrap_or_else(|| self.hidden.saturating_mul(4))
    }
}

/// Classifier-free guidance (`cfg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guidance {
    /// None (a guidance-distilled model, or a training step).
    None,
    /// The conditional and unconditional inputs in one batch of twice the size (diffusers'
    /// `torch.cat([latents] * 2)`: SD, SDXL, SD3, PixArt, CogVideoX).
    Batched,
    /// Two passes of the batch, the conditional prediction kept while the unconditional one
    /// runs (WanPipeline, QwenImagePipeline's `true_cfg_scale`).
    Separate,
}

impl Guidance {
    /// How many copies of the batch one denoiser pass holds.
    pub fn batch_factor(self) -> u64 {
        if self == Guidance::Batched { 2 } else { 1 }
    }
}

/// How a UNet denoiser's attention runs while sampling (`attention`, `attention_slice`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffusionAttention {
    /// A fused kernel (PyTorch's SDPA, xformers): no score matrix is materialized.
    Fused,
    /// diffusers' `AttnProcessor` (PyTorch before 2.0 without xformers): `baddbmm` scores and
    /// their softmax over every head of the batch at once.
    Eager,
    /// `enable_attention_slicing` (`SlicedAttnProcessor`): the eager scores over `slice` of the
    /// batch's heads at a time.
    Sliced(AttentionSlice),
}

/// `enable_attention_slicing(slice_size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionSlice {
    /// `"auto"`: half of each attention layer's heads.
    Auto,
    /// `"max"`: one head at a time.
    Max,
    /// That many heads at a time.
    Heads(u64),
}

/// Rotary position embeddings in a transformer denoiser's attention (`rope`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rope {
    /// None, or none whose temporaries are modelled: the block's generic tensors only.
    None,
    /// Applied in fp32 to 16-bit queries and keys, as diffusers' `apply_rotary_emb` does for
    /// FLUX (`x.float() * cos + x_rotated.float() * sin`): a rotated copy and three fp32 tensors
    /// of the key's size beside the block's tensors (`eval/diffusion.rs`).
    Fp32,
}

/// The block structure of a denoiser, as its configuration states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DenoiserBlocks {
    pub heads: Heads,
    pub layout: BlockLayout,
}

/// How many heads an attention layer of `c` channels has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heads {
    /// The same count in every attention layer (`heads 8`: SD 1.x's UNet, diffusers
    /// `num_attention_heads`).
    Count(u64),
    /// Heads of a fixed width (`head_dim 64`): a layer of `c` channels has `c / width`, so the
    /// count grows with the level's channels (SD 2.x and SDXL, whose diffusers configurations
    /// name the per-level head counts `attention_head_dim`). The checker makes sure the width
    /// divides every attention level's channels.
    Width(u64),
}

impl Heads {
    /// The heads of an attention layer of `channels` channels.
    pub fn at(self, channels: u64) -> u64 {
        match self {
            Heads::Count(count) => count,
            Heads::Width(width) => channels / width,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockLayout {
    /// `layers` transformer blocks. Without `cross_attention` each attends jointly over every
    /// token (latent patches and text: DiT, MMDiT, FLUX, CogVideoX, HunyuanVideo). With it, the
    /// self-attention runs over the latent patches alone and a cross-attention follows, its
    /// queries from the patches and its keys and values projected from text embeddings of that
    /// width (PixArt, LTX-Video, Wan: diffusers' `attn2`).
    /// `qk_norm`: the attention normalizes its queries and keys (`qk_norm` in diffusers'
    /// configurations: CogVideoX, FLUX, SD 3.5, Wan, HunyuanVideo, LTX-Video; the default),
    /// which under autocast keeps fp32 copies of them.
    /// `single_layers`: of the `layers`, how many run their MLP beside the attention from one
    /// norm into one output projection (FLUX.1's and HunyuanVideo's single-stream blocks, after
    /// the double-stream ones).
    Transformer { layers: u64, cross_attention: Option<u64>, qk_norm: bool, single_layers: u64 },
    /// A UNet (diffusers `UNet2DConditionModel`): level `i` has `hidden × channel_mult[i]`
    /// channels at the latent resolution halved `i` times, `layers_per_block` ResNet blocks
    /// going down and one more coming up, each followed by an attention block of
    /// `transformer_layers[i]` transformer layers when that is not 0 (a `CrossAttnDownBlock2D`
    /// level; 0 is a plain `DownBlock2D` level), and a mid block at the deepest level: two
    /// ResNets around an attention block of `mid_transformer_layers` layers.
    Unet {
        channel_mult: Vec<u64>,
        layers_per_block: u64,
        cross_attention_dim: u64,
        /// One count per level, as many as `channel_mult`.
        transformer_layers: Vec<u64>,
        mid_transformer_layers: u64,
        /// The attention blocks' `proj_in` and `proj_out` are linear layers
        /// (`use_linear_projection`: SD 2.x, SDXL), not 1 × 1 convolutions (SD 1.x): frozen,
        /// they keep nothing, where a convolution keeps its input.
        linear_projection: bool,
    },
}

/// diffusers' offloading: `Model` moves whole components to the GPU one at a time
/// (`enable_model_cpu_offload`); `Sequential` moves one module's own tensors at a time, just
/// before its forward, and drops them after (`enable_sequential_cpu_offload`: accelerate's
/// `cpu_offload` hooks every module that holds parameters directly). `loaded_on_device`: the
/// whole pipeline was moved to the device before offloading was enabled (`.to("cuda")`, then
/// the offload call), so every model's weights were resident at once before the first run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffusionOffload {
    None,
    Model {
        loaded_on_device: bool,
    },
    Sequential {
        loaded_on_device: bool,
    },
    /// diffusers group offloading (`enable_group_offload`): block-level groups of `per_group`
    /// top-level blocks (`per_group` is 0 for leaf-level, every leaf module its own group);
    /// `stream` prefetches the next group while the current one runs.
    Group {
        per_group: u64,
        stream: bool,
        loaded_on_device: bool,
    },
}

impl Diffusion {
    /// A transformer denoiser's image (or video) tokens per sample: the latent positions
    /// (`width / 8 × height / 8 × frames`) over the patch, `patch_pixels / 8` on each side and
    /// `patch_frames` latent frames deep (the frames padded up to a whole patch, as CogVideoX
    /// 1.5's pipeline pads them). `None` if the count overflows `u64`.
    pub fn image_tokens(&self) -> Option<u64> {
        let frames = self.frames.div_ceil(self.patch_frames.max(1));
        let latent = (self.width / 8).checked_mul(self.height / 8)?.checked_mul(frames)?;
        let side = (self.patch_pixels / 8).max(1);
        Some(latent / side.checked_mul(side)?)
    }

    /// [`Diffusion::image_tokens`] and the text tokens the transformer attends to beside them.
    pub fn tokens(&self) -> Option<u64> {
        self.image_tokens()?.checked_add(self.text_tokens)
    }
}

impl DiffusionOffload {
    /// Whether the offload moves parts of a model rather than whole models: the weights arrive
    /// module by module (an upcast VAE in fp32, no fp32 copy of the whole VAE), and the allocator
    /// keeps every freed block (no `empty_cache` between phases).
    pub fn moves_parts(self) -> bool {
        matches!(self, DiffusionOffload::Sequential { .. } | DiffusionOffload::Group { .. })
    }
}

/// `keep` percent of capacity, at least `at_least` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadroomRule {
    pub keep: Ratio,
    pub at_least: Bytes,
}

#[derive(Clone, Debug)]
pub struct Headroom {
    pub name: String,
    pub general: HeadroomRule,
    /// Rules by architecture name (`Arch::name`).
    pub per_arch: Table<HeadroomRule>,
}

impl Headroom {
    /// The built-in rule when a file declares none: keep 5 %, at least 1 GiB.
    pub fn builtin() -> Headroom {
        Headroom {
            name: "built-in".to_string(),
            general: HeadroomRule {
                keep: Ratio::new(5, 100).unwrap_or(Ratio::ZERO),
                at_least: Bytes(crate::bytes::GIB),
            },
            per_arch: Table::new(),
        }
    }
}

/// How work is divided over devices. Each degree is at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    pub tensor: u32,
    pub pipeline: u32,
    pub data: u32,
}

impl Split {
    pub const NONE: Split = Split { tensor: 1, pipeline: 1, data: 1 };

    pub fn devices(self) -> u64 {
        u64::from(self.tensor) * u64::from(self.pipeline) * u64::from(self.data)
    }
}

#[derive(Clone, Debug)]
pub struct CheckSpec {
    pub id: String,
    pub title: Option<String>,
    pub workload: String,
    /// Workloads sharing the devices with `workload`, each in its own process.
    pub also: Vec<String>,
    /// A human form of the target: `2 x h100-sxm-80gb`, `dgx-h100`.
    pub target: String,
    pub machine: Option<String>,
    /// One device name per GPU, in rank order.
    pub devices: Vec<String>,
    pub split: Split,
    /// Layers of each pipeline stage as declared (`split pipeline 2 layers 24 56`); `None`:
    /// even, or in proportion to memory on GPUs of different sizes.
    pub stage_layers: Option<Vec<u64>>,
    pub headroom: Option<String>,
    pub span: Span,
}

/// A checked `find` query.
#[derive(Clone, Debug)]
pub struct QuerySpec {
    /// The query in canonical form: `find max sessions for chat on l4`.
    pub text: String,
    pub goal: Goal,
    /// The check the planner starts from: the query's target, or one device of the kind
    /// (`min gpus of`), or no devices (`machines in catalog`).
    pub check: CheckSpec,
    pub span: Span,
}

/// What a query looks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Goal {
    Max(crate::plan::Knob),
    MinDevices(String),
    Machines,
    Precision,
}
