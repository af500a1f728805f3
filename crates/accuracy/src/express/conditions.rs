//! Conditions every kind of point has: what was measured, on which GPUs, under which runtime,
//! with which model and weight format, and what shards or offloads memory.

use super::Cx;
use crate::data::number_after;
use crate::gaps::{Gap, assume, data, feature};
use crate::gpus::{self, Gpu};
use crate::models::{self, Model};
use crate::target::{Scope, Selector, Target};
use crate::units::{self, UnitRule};
use crate::views::{self, Basis, View};

/// The runtime profile a framework runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Runtime {
    PyTorch,
    Diffusers,
    Vllm,
    Sglang,
    Tgi,
    TensorrtLlm,
    /// LMDeploy's TurboMind engine.
    Lmdeploy,
    LlamaCpp,
}

impl Runtime {
    pub(crate) fn word(self) -> &'static str {
        match self {
            Runtime::PyTorch => "pytorch",
            Runtime::Diffusers => "diffusers",
            Runtime::Vllm => "vllm",
            Runtime::Sglang => "sglang",
            Runtime::Tgi => "tgi",
            Runtime::TensorrtLlm => "tensorrt-llm",
            Runtime::Lmdeploy => "lmdeploy",
            Runtime::LlamaCpp => "llama.cpp",
        }
    }

    /// Whether the server fills a share of the GPU with a KV pool, whatever its sessions need:
    /// the core's own rule for the runtime it names.
    pub(crate) fn pools(self) -> bool {
        use vram_core::hir::Runtime as Core;
        let core = match self {
            Runtime::PyTorch => Core::PyTorch,
            Runtime::Diffusers => Core::Diffusers,
            Runtime::Vllm => Core::Vllm,
            Runtime::Sglang => Core::Sglang,
            Runtime::Tgi => Core::Tgi,
            Runtime::TensorrtLlm => Core::TensorrtLlm,
            Runtime::Lmdeploy => Core::Lmdeploy,
            Runtime::LlamaCpp => Core::LlamaCpp,
        };
        core.sizes_a_pool()
    }
}

/// How the work is divided over `count` GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    Single,
    Tensor(u32),
    Pipeline(u32),
    Data(u32),
    /// Several degrees at once (Megatron's `TP=8, PP=2`): tensor, pipeline and data.
    Grid(u32, u32, u32),
}

impl Split {
    /// The check's target: `a100-sxm4-80gb` or `2 x a100-sxm4-80gb split pipeline 2`.
    pub(crate) fn target(self, device: &str) -> String {
        match self {
            Split::Single => device.to_string(),
            Split::Tensor(n) => format!("{n} x {device} split tensor {n}"),
            Split::Pipeline(n) => format!("{n} x {device} split pipeline {n}"),
            Split::Data(n) => format!("{n} x {device} split data {n}"),
            Split::Grid(tensor, pipeline, data) => {
                let gpus = tensor * pipeline * data;
                let degrees: Vec<String> =
                    [("tensor", tensor), ("pipeline", pipeline), ("data", data)]
                        .iter()
                        .filter(|(_, degree)| *degree > 1)
                        .map(|(word, degree)| format!(" {word} {degree}"))
                        .collect();
                format!("{gpus} x {device} split{}", degrees.concat())
            }
        }
    }
}

/// The degrees a parallelism wording states (`TP=8, PP=2, DP=1`, `tensor_parallel_size=4`,
/// `tp 4 pp 2`): tensor, pipeline, data, each `None` where unstated.
fn stated_degrees(lower: &str) -> [Option<u32>; 3] {
    let degree = |keys: &[&str]| {
        keys.iter().find_map(|key| {
            lower.match_indices(key).find_map(|(at, _)| {
                // The key starts a word (`dp` in `fsdp2` is not one).
                let starts_word =
                    lower[..at].chars().next_back().is_none_or(|c| !c.is_ascii_alphanumeric());
                let rest = lower[at + key.len()..].trim_start_matches([' ', '=', ':', '-', '_']);
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                let found = digits.parse::<u32>().ok().filter(|n| (1..=4096).contains(n));
                found.filter(|_| starts_word)
            })
        })
    };
    [
        // TGI shards every matrix over `--num-shard` GPUs: tensor parallelism.
        degree(&[
            "tensor_parallel_size",
            "tensor parallel",
            "tensor-parallel",
            "tp_size",
            "tp",
            "num_shard",
        ]),
        degree(&[
            "pipeline_parallel_size",
            "pipeline parallel",
            "pipeline-parallel",
            "pp_size",
            "pp",
        ]),
        degree(&["data_parallel_size", "data parallel", "data-parallel", "dp_size", "dp"]),
    ]
}

/// What a training run shards over its data ranks and keeps on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Distribution {
    /// The `sharding` word (`zero2`, `zero3`, `fsdp-full`), when the source names one.
    pub(crate) sharding: Option<&'static str>,
    /// A ZeRO stage is named: DeepSpeed's engine runs the step, with its mixed-precision states.
    pub(crate) deepspeed: bool,
    /// Megatron's distributed optimizer: ZeRO-1's split without DeepSpeed's reduce buckets.
    pub(crate) megatron_optimizer: bool,
    pub(crate) offload: Offload,
}

/// What the source offloads to the host, with its own words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Offload {
    None,
    /// Master weights and optimizer state (DeepSpeed `offload_optimizer`).
    Optimizer(String),
    /// The parameters too (DeepSpeed `offload_param`, FSDP `CPUOffload`).
    Parameters(String),
}

/// Whether a measurement scope adds the GPUs up ("total over 4 GPUs", "sum of GPUs", "combined")
/// rather than reading one ("per GPU", "each GPU", "single GPU").
fn summed_over_devices(scope: &str) -> bool {
    let scope = scope.to_lowercase();
    let per_device = ["per gpu", "each gpu", "per device", "each device", "single gpu", "max over"]
        .iter()
        .any(|w| scope.contains(w));
    let summed = [
        "total over",
        "total across",
        "sum of",
        "sum over",
        "summed",
        "all gpus",
        "combined",
        "aggregate",
        "in total",
    ]
    .iter()
    .any(|w| scope.contains(w));
    summed && !per_device
}

/// Runtimes a point may name that the language has no profile for: a missing feature, not a
/// wording to learn.
const UNMODELLED_RUNTIMES: [&str; 15] = [
    "exllama",
    "tabbyapi",
    "mlc",
    "onnxruntime",
    "onnx runtime",
    "mlx",
    "ctranslate2",
    "faster-whisper",
    "openvino",
    "comfyui",
    "automatic1111",
    "a1111",
    "stable-diffusion-webui",
    "sd webui",
    "forge",
];

impl Cx<'_> {
    /// What the measurement corresponds to in the budget.
    pub(crate) fn target(&mut self) -> Option<Target> {
        let point = self.point;
        // A scope left out may be said with the method ("nvidia-smi, sum of both GPUs").
        let scope_text = point
            .measurement_scope
            .as_deref()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or(&point.measurement_method);
        let scope =
            if summed_over_devices(scope_text) { Scope::SumOfDevices } else { Scope::EachDevice };
        let kind = point.measured_kind.trim().to_lowercase();
        let kind = kind.as_str();
        if kind.starts_with("peak") || kind.ends_with(" peak") || running_reading(kind) {
            if let Some(method) = views::script_method(&point.source_id) {
                self.assume(
                    assume::SCRIPT_METHOD,
                    format!("{}; {}", method.reads, method.citation),
                );
                return Some(Target::Peak { view: View::AtRest, basis: Basis::Stated, scope });
            }
            let (view, basis) = views::view_for(&point.measurement_method);
            // The kind may name the counter the method leaves out ("reserved peak").
            let (view, basis) = match basis {
                Basis::NotStated if kind.contains("reserved") => (View::Reserved, Basis::Stated),
                Basis::NotStated if kind.contains("allocated") => (View::Allocated, Basis::Stated),
                Basis::NotStated => {
                    let framework = point.framework.to_lowercase();
                    let read_by_driver =
                        runs_ggml(&framework) || serving_engine(&framework).is_some();
                    (views::unstated_view(&point.workload, read_by_driver), basis)
                }
                Basis::Stated => (view, basis),
            };
            Some(Target::Peak { view, basis, scope })
        } else if ["after load", "loaded", "model loaded", "after loading", "load"].contains(&kind)
        {
            // A reading taken once the model is loaded and before any work: its weights, and
            // with a tool that reads the driver, the context beside them.
            let (view, _) = views::view_for(&point.measurement_method);
            let selector =
                if view == View::Device { Selector::WeightsAndOutside } else { Selector::Weights };
            Some(Target::Component { selector, scope })
        } else if kind.starts_with("component") {
            self.selector().map(|selector| Target::Component { selector, scope })
        } else if out_of_memory_kind(kind) {
            Some(Target::Verdict { expect_fits: false })
        } else if ["max_fit", "max fit", "max-fit", "fits", "fitted", "largest"]
            .iter()
            .any(|w| kind.starts_with(w))
        {
            Some(Target::Verdict { expect_fits: true })
        } else {
            self.unreadable("measured_kind", kind);
            None
        }
    }

    /// The components a runtime log's number covers, read from `components_included`.
    fn selector(&mut self) -> Option<Selector> {
        let text = self.point.components_included.clone().unwrap_or_default();
        let lower = text.to_lowercase();
        let words: Vec<&str> =
            lower.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect();
        let kv = lower.starts_with("kv cache")
            || words
                .windows(2)
                .any(|w| w[0] == "kv" && matches!(w[1], "buffer" | "self" | "blocks"));
        let unit = self.point.unit.to_lowercase();
        if unit.contains("token") || unit.contains("block") {
            // A pool logged as the tokens (or blocks of tokens) it holds.
            return Some(Selector::KvPoolTokens);
        }
        if lower.contains("kv cache pool") {
            return Some(Selector::KvPool);
        }
        let selector = if lower.contains("cuda context") && lower.contains("weights") {
            Selector::WeightsAndOutside
        } else if kv {
            Selector::KvCache
        } else if lower.contains("cuda graph") {
            Selector::CudaGraphs
        } else if lower.contains("weights") || lower.contains("model buffer") {
            Selector::Weights
        } else if lower.contains("activation") || lower.contains("compute buffer") {
            // llama.cpp's compute buffer holds the graph's intermediate tensors.
            Selector::Intermediates
        } else if ["non-pytorch", "non-torch", "non_torch"].iter().any(|w| lower.contains(w))
            || lower.starts_with("cuda context")
        {
            // vLLM's profiler log: `non_torch_memory takes 0.16GiB`.
            Selector::OutsideAllocator
        } else {
            self.unreadable("components_included", &text);
            return None;
        };
        Some(selector)
    }

    /// The measurement in bytes, for peaks and components.
    pub(crate) fn measured(&mut self, target: &Target) -> Option<(f64, UnitRule)> {
        if matches!(target, Target::Verdict { .. }) {
            return None;
        }
        let point = self.point;
        if matches!(target, Target::Component { selector: Selector::KvPoolTokens, .. }) {
            return self.pool_tokens();
        }
        let unit = units::with_note_and_conversion(
            &point.unit,
            point.unit_note.as_deref(),
            point.value,
            point.value_gib,
        );
        let found = point.value.and_then(|value| units::measured_bytes(value, &unit));
        if found.is_none() {
            let value = point.value.map_or_else(|| "none".to_string(), |v| v.to_string());
            self.unreadable("value and unit", &format!("{value} {}", point.unit));
        }
        found
    }

    /// A pool's size in tokens: a count of tokens, or of blocks times the block size the point
    /// states (`block_size 16`, `x 16 tokens`) or the server's default (vLLM's 16, LMDeploy's
    /// 64).
    fn pool_tokens(&mut self) -> Option<(f64, UnitRule)> {
        let point = self.point;
        let value = point.value?;
        if !point.unit.to_lowercase().contains("block") {
            return Some((value, UnitRule::Stated));
        }
        let text = point.all_text();
        let stated = number_after(&text, "block_size")
            .or_else(|| number_after(&text.replace('×', "x"), " x "))
            .filter(|n| (1..=4096).contains(n));
        let framework = point.framework.to_lowercase();
        let default = if framework.contains("vllm") {
            Some((16, "vLLM's default block_size 16"))
        } else if framework.contains("lmdeploy") {
            Some((64, "LMDeploy's default block of 64 tokens"))
        } else {
            None
        };
        let block = match (stated, default) {
            (Some(block), _) => block,
            (None, Some((block, why))) => {
                self.assume(assume::RUNTIME_DEFAULT, why);
                block
            }
            (None, None) => {
                self.unreadable("value and unit", &format!("{value} {} (block size)", point.unit));
                return None;
            }
        };
        #[allow(clippy::cast_precision_loss, reason = "a block size of at most 4096")]
        Some((value * block as f64, UnitRule::Stated))
    }

    /// The device, and whether its capacity is known where the comparison needs it.
    pub(crate) fn gpu(&mut self, target: &Target) -> Option<Gpu> {
        let Some(gpu) = gpus::gpu(&self.point.gpu_type) else {
            self.unreadable("gpu_type", &self.point.gpu_type);
            return None;
        };
        if let Some(note) = &gpu.note {
            if matches!(target, Target::Verdict { .. }) && !gpu.capacity_stated {
                self.gap(Gap::data(data::GPU, format!("{}: {note}", self.point.gpu_type)));
            } else {
                self.assume(
                    assume::GPU_VARIANT,
                    format!("{} → {} ({note})", self.point.gpu_type, gpu.device),
                );
            }
        }
        Some(gpu)
    }

    /// How the work is split over the GPUs.
    pub(crate) fn split(&mut self) -> Option<Split> {
        let point = self.point;
        let count = point.num_gpus.unwrap_or(1);
        let mut text = point.parallelism.clone().unwrap_or_default();
        if text.trim().is_empty() && count > 1 {
            // A server's flags among the other settings (`--tensor-parallel-size 2`, TGI's
            // `--num-shard 4`, SGLang's `--tp 2 --dp 2`), when the parallelism is left empty.
            let flags = point.other_settings.as_deref().unwrap_or_default().replace('-', "_");
            if stated_degrees(&flags.to_lowercase()).iter().any(Option::is_some) {
                text = flags;
            }
        }
        let lower = text.to_lowercase();
        let any = |words: &[&str]| words.iter().any(|w| lower.contains(w));
        // llama.cpp's split modes: `-sm layer` (its default) gives each GPU whole layers,
        // `-sm row` splits each matrix's rows over the GPUs.
        let squashed: String = lower.chars().filter(char::is_ascii_alphanumeric).collect();
        let degrees = stated_degrees(&lower);
        let split = if degrees.iter().flatten().count() >= 2 {
            // Several degrees stated: their product is the GPUs (a missing one is 1).
            let [tensor, pipeline, data] = degrees.map(|d| d.unwrap_or(1));
            if tensor * pipeline * data != count {
                self.unreadable("parallelism", &format!("{text} on {count} GPUs"));
                return None;
            }
            Split::Grid(tensor, pipeline, data)
        } else if any(&[
            "tensor parallel",
            "tensor-parallel",
            "tensor_parallel",
            "tp=",
            "tp ",
            "num_shard",
        ]) || squashed.contains("smrow")
            || squashed.contains("splitmoderow")
            || squashed.contains("rowsplit")
        {
            let row_split =
                ["smrow", "splitmoderow", "rowsplit"].iter().any(|w| squashed.contains(w));
            if row_split && runs_ggml(&point.framework.to_lowercase()) && count > 1 {
                // The language's tensor split divides the KV cache too; llama.cpp's keeps it,
                // with the compute buffers, on the main GPU (`LLAMA_SPLIT_MODE_ROW`).
                self.gap(Gap::feature(feature::LLAMA_CPP_ROW_SPLIT, text.clone()));
                return None;
            }
            Split::Tensor(count)
        } else if names_device_map(&lower)
            || any(&["layer split", "pipeline parallel", "pipeline-parallel", "pp="])
            || squashed.contains("splitlayers")
            || squashed.contains("smlayer")
            || squashed.contains("splitmodelayer")
            || squashed.contains("layersplit")
            || squashed.contains("tensorsplit")
        {
            // accelerate's device_map="auto" places consecutive layers on each GPU: a pipeline;
            // so does llama.cpp's layer split (`--tensor-split` only sets its proportions).
            Split::Pipeline(count)
        } else if any(&["data parallel", "data-parallel", "fsdp", "ddp", "zero", "deepspeed"]) {
            // FSDP is data parallelism whose model states are sharded (see `distribution`).
            Split::Data(count)
        } else if is_none_word(&lower) || lower.contains("single gpu") {
            if count == 1 {
                Split::Single
            } else if let Some((split, why)) = self.default_split(count) {
                self.assume(
                    assume::RUNTIME_DEFAULT,
                    format!("{count} GPUs, split not stated: {why}"),
                );
                split
            } else {
                self.gap(Gap::data(data::SPLIT, format!("{count} GPUs, parallelism {text:?}")));
                return None;
            }
        } else {
            self.unreadable("parallelism", &text);
            return None;
        };
        match split {
            Split::Tensor(1) | Split::Pipeline(1) | Split::Data(1) | Split::Grid(1, 1, 1) => {
                Some(Split::Single)
            }
            other => Some(other),
        }
    }

    /// How a runtime divides work over several GPUs when the source does not say: vLLM by
    /// tensor parallelism (`tensor_parallel_size`, its one multi-GPU mode unless a pipeline is
    /// asked for), llama.cpp by layers (`--split-mode layer`, its default), transformers'
    /// inference by `device_map="auto"` (consecutive layers per GPU), and training by data
    /// parallelism (one replica per GPU, as `torchrun` and `accelerate launch` start it).
    fn default_split(&self, count: u32) -> Option<(Split, &'static str)> {
        let point = self.point;
        let framework = point.framework.to_lowercase();
        let training = point.workload.starts_with("training");
        if training {
            Some((Split::Data(count), "data parallel, one replica per GPU"))
        } else if framework.contains("vllm") {
            Some((Split::Tensor(count), "vLLM's tensor parallelism over every GPU"))
        } else if runs_ggml(&framework) {
            Some((Split::Pipeline(count), "llama.cpp's default --split-mode layer"))
        } else if framework.contains("transformers") && point.workload == "llm_inference" {
            Some((Split::Pipeline(count), "transformers' device_map=\"auto\", layers per GPU"))
        } else {
            None
        }
    }

    /// How model states are sharded over the data ranks and what lives on the host: the ZeRO
    /// stage or FSDP strategy, and the offload the source names.
    pub(crate) fn distribution(&mut self) -> Distribution {
        let point = self.point;
        let text = point.all_text();
        // "ZeRO-3", "zero3", or "ZeRO stage 3" / "DeepSpeed stage 2".
        let names_stage = |n: u32| {
            let deepspeed = text.contains("zero") || text.contains("deepspeed");
            [format!("zero-{n}"), format!("zero {n}"), format!("zero{n}")]
                .iter()
                .any(|w| text.contains(w.as_str()))
                || (deepspeed
                    && [format!("stage {n}"), format!("stage-{n}"), format!("stage_{n}")]
                        .iter()
                        .any(|w| text.contains(w.as_str())))
        };
        let stage = point
            .zero_stage
            .or_else(|| names_stage(3).then_some(3))
            .or_else(|| names_stage(2).then_some(2))
            .or_else(|| names_stage(1).then_some(1));
        let fsdp_texts = [point.parallelism.as_deref(), point.other_settings.as_deref()];
        let fsdp =
            fsdp_texts.into_iter().flatten().any(|text| text.to_lowercase().contains("fsdp"));
        let squashed_fsdp: String = fsdp_texts
            .into_iter()
            .flatten()
            .flat_map(str::chars)
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect();
        // Megatron's distributed optimizer shards the fp32 main parameters and the optimizer
        // state over the data-parallel ranks and keeps every gradient (its
        // docs/distrib_optimizer.md: 6 + 12/d bytes per parameter with bf16 parameters and fp32
        // gradients): ZeRO-1's split.
        let optimizer = point.optimizer.as_deref().unwrap_or_default().to_lowercase();
        let distributed_optimizer =
            ["distributed optimizer", "distributed_optimizer", "distributed-optimizer"]
                .iter()
                .any(|w| text.contains(w) || optimizer.contains(w));
        let megatron = stage.is_none() && distributed_optimizer;
        if megatron {
            self.assume(
                assume::EQUIVALENT_SHARDING,
                "sharding zero1, with no reduce buckets: Megatron's distributed optimizer \
                 (docs/distrib_optimizer.md: 6 + 12/d bytes per parameter with bf16 parameters \
                 and fp32 gradients)",
            );
        }
        let stage = stage.or_else(|| megatron.then_some(1));
        let sharding = match stage {
            Some(1) => Some("zero1"),
            Some(2) => Some("zero2"),
            Some(3) => Some("zero3"),
            Some(other) => {
                self.unreadable("zero_stage", &other.to_string());
                None
            }
            // FSDP's strategies by name: NO_SHARD replicates as DDP does, SHARD_GRAD_OP
            // (ZeRO-2's split) keeps the parameters whole, FULL_SHARD and HYBRID_SHARD (within
            // a node, here all the GPUs) shard all three states.
            None if fsdp && squashed_fsdp.contains("noshard") => None,
            None if fsdp && squashed_fsdp.contains("shardgradop") => Some("zero2"),
            None if fsdp
                && (squashed_fsdp.contains("fullshard")
                    || squashed_fsdp.contains("hybridshard")) =>
            {
                Some("fsdp-full")
            }
            None if fsdp => {
                self.assume(
                    assume::RUNTIME_DEFAULT,
                    "FSDP strategy not stated: FULL_SHARD, the default of PyTorch's FSDP, \
                     accelerate and torchtune (parameters, gradients and optimizer state \
                     sharded, `fsdp-full`)",
                );
                Some("fsdp-full")
            }
            None => None,
        };
        // An offload named with the parallelism (`FSDP FULL_SHARD with cpu_offload`) when the
        // offload field is empty.
        let parallelism = point.parallelism.as_deref().unwrap_or_default();
        let named_with_parallelism =
            parallelism.to_lowercase().contains("offload") && offload_named(parallelism);
        // DeepSpeed's `offload_param` / `offload_optimizer` and FSDP's `cpu_offload` named among
        // the other settings (a config file's keys).
        let stated_offload = point
            .offload
            .clone()
            .filter(|stated| !is_none_word(stated) && offload_named(stated))
            .or_else(|| named_with_parallelism.then(|| parallelism.to_owned()))
            .or_else(|| offload_in_settings(point));
        let offload = match &stated_offload {
            None => Offload::None,
            Some(stated) => {
                let lower = stated.to_lowercase();
                if runs_ggml(&point.framework.to_lowercase())
                    && (super::inference::ggml_gpu_layers(point).is_some()
                        || lower.replace(' ', "").contains("100%gpu"))
                {
                    // llama.cpp's layers on the GPU: the inference section's `gpu_layers`; all
                    // of them where Ollama's `ps` says "100% GPU".
                    // llama.cpp's layers on the GPU: the inference section's `gpu_layers`.
                    Offload::None
                } else if lower.contains("enable_model_cpu_offload") {
                    self.gap(Gap::feature(feature::MODEL_OFFLOAD, stated.clone()));
                    Offload::None
                } else if point.workload == "diffusion_training"
                    && lower.contains("text encoder")
                    && !["optimizer", "param", "block", "transformer", "unet"]
                        .iter()
                        .any(|w| lower.contains(w))
                {
                    // The prompts' embeddings made, the encoders leave the GPU before the
                    // denoiser trains (read by the diffusion training section).
                    Offload::None
                } else if lower.contains("block swap")
                    || lower.contains("blocks_to_swap")
                    || lower.contains("block swapping")
                {
                    // A count is what `blocks_to_swap` needs; "some block swapping" has none.
                    if lower.chars().any(|c| c.is_ascii_digit()) {
                        self.gap(Gap::feature(feature::BLOCK_SWAP, stated.clone()));
                    } else {
                        self.gap(Gap::data(data::SWAPPED_BLOCKS, stated.clone()));
                    }
                    Offload::None
                } else if lower.contains("param")
                    || (fsdp && (lower.contains("cpu offload") || lower.contains("cpu_offload")))
                {
                    // DeepSpeed `offload_param` and FSDP `CPUOffload(offload_params=True)` move
                    // the parameters and, with them, the optimizer state.
                    Offload::Parameters(stated.clone())
                } else if lower.contains("optimizer") {
                    Offload::Optimizer(stated.clone())
                } else {
                    self.unreadable("offload", stated);
                    Offload::None
                }
            }
        };
        Distribution {
            sharding,
            deepspeed: stage.is_some() && !megatron,
            megatron_optimizer: megatron,
            offload,
        }
    }

    /// The runtime profile for the framework.
    pub(crate) fn runtime(&mut self) -> Option<Runtime> {
        let framework = self.point.framework.to_lowercase();
        if let Some(engine) = serving_engine(&framework) {
            Some(engine)
        } else if runs_ggml(&framework) {
            Some(Runtime::LlamaCpp)
        } else if framework.contains("diffusers")
            // A model repository's own PyTorch script (Wan2.1's generate.py): the PyTorch
            // runtime the diffusers profile describes.
            || (self.point.workload.starts_with("diffusion") && framework.contains(".py"))
        {
            Some(Runtime::Diffusers)
        } else if [
            "transformers",
            "peft",
            "torchtune",
            "deepspeed",
            "trainer",
            "pytorch",
            "accelerate",
            "trl",
            "axolotl",
            "unsloth",
            "llama-factory",
            "llamafactory",
            "lightning",
            "hugging face",
            "huggingface",
            "autoawq",
            "auto-gptq",
            "autogptq",
            "gptqmodel",
            "optimum",
            "bitsandbytes",
            "torchao",
            "hqq",
            "megatron",
            "nemo",
            "colossalai",
            "colossal-ai",
            "torchtitan",
            // Training tools built on PyTorch (and its FSDP), whose memory is PyTorch's.
            "fsdp",
            "fsdp_qlora",
            "swift",
            "xtuner",
            "openrlhf",
            "verl",
            "litgpt",
            "lit-gpt",
            "nanogpt",
            "composer",
            "llm-foundry",
            "fairseq",
            "timm",
            "sentence-transformers",
            "kohya",
            "sd-scripts",
            "simpletuner",
            "ai-toolkit",
            "onetrainer",
            // Diffusion trainers on PyTorch (and DeepSpeed or FSDP).
            "finetrainers",
            "cogvideox-factory",
            "diffusion-pipe",
            "musubi",
            "x-flux",
            "fastvideo",
            "ltx-video-trainer",
        ]
        .iter()
        .any(|w| framework.contains(w))
        {
            Some(Runtime::PyTorch)
        } else if UNMODELLED_RUNTIMES.iter().any(|w| framework.contains(w)) {
            self.gap(Gap::feature(feature::RUNTIME, self.point.framework.clone()));
            None
        } else {
            self.unreadable("framework", &self.point.framework);
            None
        }
    }

    /// Whether the CUDA the point ran loads every kernel with the context: lazy module loading
    /// arrived in CUDA 11.7 (`CUDA_MODULE_LOADING=LAZY`, PyTorch's default since 1.13 where the
    /// CUDA supports it), so a CUDA version below it means `cuda_module_loading eager`.
    pub(crate) fn eager_modules(&self) -> bool {
        self.point.framework_version.as_deref().and_then(cuda_version).is_some_and(|v| v < (11, 7))
    }

    /// The model, from `models.vram` or the catalog.
    pub(crate) fn model(&mut self) -> Option<Model> {
        if models::vision_language(&self.point.model) {
            self.gap(Gap::feature(feature::VISION_LANGUAGE, self.point.model.clone()));
            return None;
        }
        if let Some(tag) = super::ollama::default_tag(self.point)
            && let Some(model) = models::recognise(tag)
        {
            self.assume(
                assume::RUNTIME_DEFAULT,
                format!(
                    "{}: Ollama's default tag, {tag} (its README's model table)",
                    self.point.model
                ),
            );
            return Some(model);
        }
        match models::model(&self.point.model) {
            Some(Ok(model)) => Some(model),
            Some(Err(gaps)) if gaps.iter().any(|g| g.label != data::MODEL_CONFIG) => {
                for gap in gaps {
                    self.gap(gap);
                }
                None
            }
            // No config.json (or not in the table at all): the point's own fields, if they
            // declare it.
            Some(Err(_)) | None => {
                let point = self.point;
                let fields = models::Fields {
                    layers: point.layers,
                    hidden: point.hidden_size,
                    heads: point.attention_heads,
                    kv_heads: point.kv_heads,
                    vocab: point.vocab_size,
                    params: point.param_count.clone(),
                    notes: point.arch_notes.clone(),
                };
                match models::from_fields(&point.model, &fields) {
                    Ok(model) => {
                        self.assume(
                            assume::SHAPE_FROM_DATA,
                            format!("{} → model {}", point.model, model.name),
                        );
                        Some(model)
                    }
                    Err(why) => {
                        self.gap(Gap::data(
                            data::MODEL_CONFIG,
                            format!(
                                "{}: not in crates/accuracy/src/models.rs, and its own fields \
                                 do not declare it ({why})",
                                point.model
                            ),
                        ));
                        None
                    }
                }
            }
        }
    }

    /// The precision word for the weights, or the gaps that stop it.
    pub(crate) fn weight_format(&mut self) -> Option<&'static str> {
        match self.read_weight_format() {
            Ok((word, assumption)) => {
                if let Some((label, detail)) = assumption {
                    self.assume(label, detail);
                }
                Some(word)
            }
            Err(gap) => {
                self.gap(gap);
                None
            }
        }
    }

    /// The precision word for the weights and the assumption it carries, or the gap that stops
    /// it; nothing is recorded, so that a caller may fall back on a stand-in.
    pub(crate) fn read_weight_format(&self) -> Result<WeightWord, Gap> {
        let point = self.point;
        let quantization = point.quantization.clone().unwrap_or_default();
        let precision = point.weight_precision.clone().unwrap_or_default();
        if quantization.trim().is_empty() && precision.trim().is_empty() {
            // A point that states no format may name it with its model, as quantized uploads
            // and Ollama's tags do (`...-Q4_K_M.gguf`, `...-GPTQ-Int4`, `:8b-instruct-q8_0`).
            if let Some(named) = models::format_in_name(&point.model) {
                let note = format!("{named} (read from the model's name {:?})", point.model);
                return self.weight_format_of("", &named).map(|(word, assumption)| {
                    let assumption = match assumption {
                        Some((label, detail)) => (label, format!("{detail}; {note}")),
                        None => (assume::NAMED_FORMAT, note),
                    };
                    (word, Some(assumption))
                });
            }
        }
        self.weight_format_of(&quantization, &precision)
    }

    /// [`Cx::read_weight_format`] for the given quantization and precision wordings.
    fn weight_format_of(&self, quantization: &str, precision: &str) -> Result<WeightWord, Gap> {
        let point = self.point;
        let (q, w) = (quantization.to_lowercase(), precision.to_lowercase());
        let torchtune = point.framework.to_lowercase().contains("torchtune");
        let both = match (quantization.is_empty(), precision.is_empty()) {
            (true, true) => "neither weight_precision nor quantization given".to_string(),
            (true, false) => format!("weight_precision {precision:?}"),
            (false, true) => format!("quantization {quantization:?}"),
            (false, false) => {
                format!("weight_precision {precision:?}, quantization {quantization:?}")
            }
        };
        let unreadable =
            |field: &str, value: &str| Gap::data(data::UNREADABLE, format!("{field} = {value:?}"));
        if q.contains("q-galore") && point.workload.starts_with("training") {
            Err(Gap::feature(feature::QUANTIZED_TRAINING, both))
        } else if q.contains("gptq") || w.contains("gptq") {
            gptq(point, &q, &w, &both)
        } else if q.contains("mxfp4") || w.contains("mxfp4") {
            // OCP MX FP4 (gpt-oss's release format, GGUF's MXFP4 type): 4-bit values with an
            // 8-bit shared scale per block of 32.
            Ok(("mxfp4", None))
        } else if q.contains("nvfp4") || w.contains("nvfp4") {
            Ok(("nvfp4", None))
        } else if q.contains("gguf")
            || w.contains("gguf")
            || gguf_preset(&q).or_else(|| gguf_preset(&w)).is_some()
        {
            if q.contains("not stated") || w.contains("not stated") {
                return Err(Gap::data(data::PRECISION, format!("GGUF type not stated ({both})")));
            }
            // The preset's name as llama-quantize spells it: `Q4_K_M` is `q4_k_m`.
            gguf_preset(&q)
                .or_else(|| gguf_preset(&w))
                .map(|preset| (preset, None))
                .or_else(|| {
                    first_float_named(&q).or_else(|| first_float_named(&w)).map(|f| (f, None))
                })
                .ok_or_else(|| unreadable("quantization", quantization))
        } else if runs_ggml(&point.framework.to_lowercase()) && (w == "q8" || q == "q8") {
            // GGUF's only 8-bit file type is Q8_0 (Q8_K is llama.cpp's internal dot-product
            // type, never a file's): Ollama's `q8` tags and "Q8" in tables are Q8_0.
            Ok(("q8_0", Some((assume::EQUIVALENT_FORMAT, format!("{both}: GGUF Q8_0")))))
        } else if is_meta_fp8(point) {
            Ok(("fp8", Some((assume::META_FP8, both))))
        } else if w.contains("fp8") && (w.contains("not all layers") || q.contains("compressed")) {
            Err(Gap::feature(feature::MIXED_FP8, both))
        } else if (q.contains("torchao") && q.contains("nf4"))
            || (torchtune && (q.contains("nf4") || w.contains("nf4")))
        {
            Ok(("nf4-dq", Some((assume::EQUIVALENT_FORMAT, TORCHAO_NF4.to_string()))))
        } else if q.contains("torchao") && q.contains("int8") {
            // int8_weight_only: int8 matrices with one scale per output channel.
            Ok(("int8", None))
        } else if q.contains("torchao")
            && q.contains("int4")
            && let Some(group) = stated_group(&format!("{q} {w}"))
        {
            Ok((grouped("int4-g128", group), None))
        } else if q.contains("torchao") && q.contains("int4") {
            Ok((
                "int4-g128",
                Some((
                    assume::RUNTIME_DEFAULT,
                    format!("{both}: torchao int4_weight_only's default group_size 128"),
                )),
            ))
        } else if (q.contains("awq") || w.contains("awq"))
            && let Some(group) = stated_group(&format!("{q} {w}"))
        {
            Ok((grouped("awq-int4", group), None))
        } else if q.contains("awq") || w.contains("awq") {
            // AutoAWQ's `quant_config` default: `q_group_size` 128, 4-bit, zero point.
            Ok((
                "awq-int4",
                Some((
                    assume::RUNTIME_DEFAULT,
                    format!(
                        "AWQ group size not stated ({both}): AutoAWQ's default q_group_size 128"
                    ),
                )),
            ))
        } else if q.contains("llm.int8")
            || q.contains("load_in_8bit")
            || bnb_bits(&q, &w) == Some(8)
        {
            Ok(("int8", None))
        } else if unsloth_4bit(point, &q, &w) {
            Ok((
                "nf4-dq",
                Some((
                    assume::RUNTIME_DEFAULT,
                    format!(
                        "{both}: Unsloth loads 4-bit weights as NF4 with double quantization \
                         (FastLanguageModel's BitsAndBytesConfig, unsloth/models/llama.py; its \
                         -bnb-4bit uploads likewise)"
                    ),
                )),
            ))
        } else if q.contains("load_in_4bit")
            || (bnb_bits(&q, &w) == Some(4) && !q.contains("nf4") && !w.contains("nf4"))
        {
            // transformers' BitsAndBytesConfig defaults to bnb_4bit_quant_type="fp4".
            Ok((
                "fp4",
                Some((assume::RUNTIME_DEFAULT, "load_in_4bit: bitsandbytes' default FP4".into())),
            ))
        } else if (q.contains("nf4") || w.contains("nf4")) && names_double_quant(&q, &w) {
            // bnb_4bit_use_double_quant: the fp32 absmax per 64 weights quantized to 8 bits.
            Ok(("nf4-dq", None))
        } else if q.contains("nf4") || w == "nf4" {
            Ok(("nf4", None))
        } else if point.framework.to_lowercase().contains("tensorrt")
            && (q.starts_with("int8") || w.starts_with("int8") || q.contains("w8a16"))
        {
            // TensorRT-LLM's int8 checkpoints (`--use_weight_only`, `int8_wo`): int8 weights
            // with a scale per output channel, as LLM.int8 is written.
            Ok((
                "int8",
                Some((
                    assume::RUNTIME_DEFAULT,
                    format!("{both}: TensorRT-LLM's weight-only int8 (W8A16), a scale per channel"),
                )),
            ))
        } else if q.contains("eetq") {
            // EETQ: weight-only int8 with a scale per output channel.
            Ok(("int8", None))
        } else if q.contains("smoothquant") || q.contains("w8a8") || w.contains("w8a8") {
            // int8 weights with a scale per output channel, as LLM.int8 is written.
            Ok(("int8", None))
        } else if q.contains("quantization_bit") || q.contains("chatglm") || q.contains("quantize(")
        {
            // ChatGLM's own `model.quantize(bits)` (its `--quantization_bit`): weight-only int8
            // or int4 for the layers' linear matrices with an fp16 scale per output channel;
            // embeddings and the output layer stay fp16.
            let four = [&q, &w]
                .iter()
                .any(|t| t.contains("bit 4") || t.contains("int4") || t.contains("quantize(4)"));
            let eight = [&q, &w]
                .iter()
                .any(|t| t.contains("bit 8") || t.contains("int8") || t.contains("quantize(8)"));
            match (four, eight) {
                (true, false) => Ok(("int4", None)),
                (false, true) => Ok(("int8", None)),
                _ => Err(unreadable("quantization", quantization)),
            }
        } else if q.contains("quanto") {
            // optimum-quanto's weight types: qint8 (a scale per output channel), qint4 and qint2
            // (groups of 128 with a scale and a shift each, in the weights' 16-bit type),
            // qfloat8.
            if q.contains("int8") {
                Ok(("int8", None))
            } else if q.contains("int4") {
                Ok(("int4-g128", None))
            } else if q.contains("float8") || q.contains("fp8") {
                Ok(("fp8", None))
            } else {
                Err(unreadable("quantization", quantization))
            }
        } else if q.contains("hqq") {
            Ok((
                "int4-g64",
                Some((
                    assume::RUNTIME_DEFAULT,
                    format!(
                        "{both}: transformers' HqqConfig defaults, 4 bits in groups of 64 with an \
                         fp16 scale and zero each"
                    ),
                )),
            ))
        } else if q.contains("fp8") || q.contains("float8") {
            // FP8 checkpoints and on-the-fly FP8 (vLLM, SGLang `--quantization fp8`): one
            // byte per weight of the linear layers, a scale per tensor or channel.
            Ok(("fp8", None))
        } else if q.is_empty() || q == "none" || q.starts_with("none ") {
            match w.as_str() {
                "bf16" => Ok(("bf16", None)),
                "fp16" => Ok(("fp16", None)),
                // A bare 8-bit beside no toolkit: bitsandbytes' LLM.int8(), transformers' own.
                "int8" | "8-bit" | "8bit" if runtime_is_transformers(point) => Ok(("int8", None)),
                "fp32" | "fp32 master weights" | "fp32 master" => Ok(("fp32", None)),
                _ if (w.is_empty() || w.starts_with("not stated"))
                    && serves_checkpoint_dtype(&point.framework) =>
                {
                    // Serving engines load the checkpoint's own type (`--dtype auto`; an fp32
                    // checkpoint as fp16): 16-bit for the models such logs serve.
                    let float = first_float_named(&w).unwrap_or("fp16");
                    Ok((
                        float,
                        Some((
                            assume::RUNTIME_DEFAULT,
                            format!(
                                "{both}: the serving engine's `--dtype auto`, the checkpoint's 16-bit type"
                            ),
                        )),
                    ))
                }
                "" => Err(Gap::data(data::PRECISION, both)),
                _ if w.starts_with("not stated") => Err(Gap::data(data::PRECISION, both)),
                // Other spellings of the same types (`bfloat16`, `float16`, `half`, `FP8`; ggml's
                // `F16` and `F32`), the first one named: "fp32 (changed from torch.bfloat16 to
                // torch.float32)" is fp32.
                _ => first_float_named(&w)
                    .map(|float| (float, None))
                    .ok_or_else(|| unreadable("weight_precision", precision)),
            }
        } else if q.starts_with("not stated") && (w.is_empty() || w.starts_with("not stated")) {
            // A format the source leaves out is missing data, not a wording to learn.
            Err(Gap::data(data::PRECISION, both))
        } else {
            Err(unreadable("quantization", quantization))
        }
    }

    /// `eager` when the source says attention scores are materialised, else `fused`.
    pub(crate) fn eager_attention(&self) -> bool {
        let point = self.point;
        let settings = point.other_settings.clone().unwrap_or_default().to_lowercase();
        let kv = point.kv_cache_dtype.clone().unwrap_or_default().to_lowercase();
        // vLLM's `enforce_eager` (`--enforce-eager`) and TensorRT-LLM's or SGLang's eager modes
        // turn CUDA graphs off; they say nothing of attention, which a serving engine always
        // runs in its own kernels.
        let framework = point.framework.to_lowercase();
        let serving = ["vllm", "sglang", "tensorrt", "trt-llm", "lmdeploy", "text-generation"]
            .iter()
            .any(|name| framework.contains(name));
        let settings = settings.replace('-', "_").replace("enforce_eager", "");
        (!serving && settings.contains("eager"))
            || settings.contains("flash_attn 0")
            || settings == "default attention"
            || kv.contains("flash attention disabled")
            || self.transformers_before_sdpa()
            || (runs_ggml(&point.framework.to_lowercase()) && !ggml_flash_attention(point))
    }

    /// Whether the point ran on PyTorch before 2.0 (March 2023), as its version note says:
    /// `PyTorch 1.x`, a date before 2023 or in its first months, or transformers before 4.27
    /// (the release that followed PyTorch 2.0).
    pub(crate) fn before_pytorch_2(&self) -> bool {
        let point = self.point;
        let text = framework_and_version(point);
        let old_year = (2015..2023).any(|year| text.contains(&year.to_string()));
        text.contains("pytorch 1.")
            || text.contains("torch 1.")
            || text.contains("early 2023")
            || old_year
            || transformers_minor(&text).is_some_and(|minor| minor < 27)
    }

    /// The PyTorch release the version note names (`PyTorch 2.0`, `torch 2.1.2`), as the
    /// language's `torch` line: it sets how many intermediates the foreach AdamW step holds.
    pub(crate) fn pytorch_release_line(&self) -> Option<String> {
        let (major, minor) = self.pytorch_release()?;
        Some(format!("    torch         \"{major}.{minor}\"  # the stated PyTorch\n"))
    }

    /// `bitsandbytes "X.Y.Z"` for a 4-bit base: the release the point names
    /// (`bitsandbytes 0.41.1`, `bitsandbytes==0.42.0`; a lower bound such as `>=0.43.3` is not
    /// a release), or, where it names none, a release before 0.43.2 when the point's version
    /// note dates it before July 2024, when that release came out: older releases keep every
    /// 4-bit layer's input through the step (bitsandbytes PR #1270).
    pub(crate) fn bitsandbytes_release_line(&mut self) -> Option<String> {
        let text = framework_and_version(self.point);
        let stated = text.match_indices("bitsandbytes").find_map(|(at, name)| {
            let rest = &text[at + name.len()..];
            let rest = rest
                .strip_prefix("==")
                .or_else(|| rest.strip_prefix(' '))
                .or_else(|| rest.strip_prefix('='))?;
            let rest = rest.trim_start_matches('v');
            let release: String =
                rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            let release = release.trim_end_matches('.');
            (release.matches('.').count() >= 1).then(|| release.to_string())
        });
        if let Some(release) = stated {
            return Some(format!("    bitsandbytes  \"{release}\"  # the stated bitsandbytes\n"));
        }
        let (year, month) = latest_month(&text)?;
        if (year, month) >= (2024, 7) {
            return None;
        }
        self.assume(
            assume::RUNTIME_DEFAULT,
            format!(
                "bitsandbytes release not stated: one of its time ({year}-{month:02}), before \
                 0.43.2 (July 2024), whose MatMul4Bit keeps each 4-bit layer's input"
            ),
        );
        Some(
            "    bitsandbytes  \"0.43.1\"  # not stated: a release before 0.43.2, by the date\n"
                .into(),
        )
    }

    /// The PyTorch release the version note names, major and minor.
    pub(crate) fn pytorch_release(&self) -> Option<(u32, u32)> {
        pytorch_release(&framework_and_version(self.point))
    }

    /// How long the gradients live: `gradient_accumulation N` when they accumulate over
    /// micro-batches (held through every forward pass); else `zero_grad zeros` for a point
    /// trained on PyTorch 1.x, whose `zero_grad()` keeps the gradient tensors
    /// (`set_to_none=False`, its default until 2.0).
    pub(crate) fn gradient_lifetime(&mut self) -> Option<String> {
        if let Some(steps) = self.point.grad_accum.filter(|n| *n > 1) {
            return Some(format!("    gradient_accumulation {steps}\n"));
        }
        if !self.before_pytorch_2() {
            return None;
        }
        self.assume(
            assume::RUNTIME_DEFAULT,
            "zero_grad zeros: before PyTorch 2.0, zero_grad() filled the gradients with zeros \
             (set_to_none=False), so they stay allocated through the next forward pass",
        );
        Some("    zero_grad     zeros  # PyTorch 1.x\n".to_string())
    }

    /// Whether the point ran a diffusers older than 0.31 (released in October 2024): a version
    /// `diffusers 0.NN` below 31, or a date no later than September 2024 in its version note.
    pub(crate) fn diffusers_before_0_31(&self) -> bool {
        let point = self.point;
        let text = framework_and_version(point);
        if let Some(at) = text.find("diffusers 0.") {
            let rest = &text[at + "diffusers 0.".len()..];
            if let Some(minor) = crate::data::leading_number(rest) {
                return minor < 31;
            }
        }
        latest_month(&text).is_some_and(|(year, month)| (year, month) < (2024, 10))
    }

    /// diffusers' attention before a fused kernel was its default: releases before 0.13 (or
    /// PyTorch before 2.0, which has no `scaled_dot_product_attention`) ran `AttnProcessor`'s
    /// materialized scores unless xformers was enabled.
    pub(crate) fn diffusers_eager_attention(&self) -> bool {
        let point = self.point;
        let text = framework_and_version(point);
        let settings = format!(
            "{} {} {}",
            text,
            point.other_settings.as_deref().unwrap_or_default(),
            point.offload.as_deref().unwrap_or_default()
        )
        .to_lowercase();
        if settings.contains("xformers") || settings.contains("sdpa") {
            return false;
        }
        let minor_after = |prefix: &str| {
            let at = text.find(prefix)?;
            crate::data::leading_number(&text[at + prefix.len()..])
        };
        let old_diffusers = minor_after("diffusers 0.").is_some_and(|minor| minor < 13);
        let old_torch = minor_after("torch 1.").is_some() || minor_after("pytorch 1.").is_some();
        old_diffusers || old_torch
    }

    /// The Trainer's default optimizer before it became PyTorch's AdamW: transformers' own
    /// `AdamW` (`optim="adamw_hf"`), in releases before 4.29.
    pub(crate) fn legacy_trainer_adamw(&self) -> bool {
        let point = self.point;
        let optimizer = point.optimizer.clone().unwrap_or_default().to_lowercase();
        let version = point.framework_version.clone().unwrap_or_default().to_lowercase();
        optimizer.contains("trainer default")
            && transformers_minor(&version).is_some_and(|m| m < 29)
    }

    /// transformers before 4.36 ran its own attention (scores materialized) unless told to use
    /// Flash Attention: `attn_implementation="sdpa"` became the default in 4.36.
    fn transformers_before_sdpa(&self) -> bool {
        let point = self.point;
        let framework = point.framework.to_lowercase();
        let version = point.framework_version.clone().unwrap_or_default().to_lowercase();
        framework.contains("transformers")
            && !framework.contains("flash")
            && !version.contains("flash")
            && transformers_minor(&version).is_some_and(|minor| minor < 36)
    }
}

/// A condition the source says it does not state: "not stated (...)", "not in the excerpt".
pub(crate) fn says_unstated(lower: &str) -> bool {
    lower.starts_with("not stated") || lower.starts_with("not in")
}

/// A condition stated as absent: `none`, `no`, `false`, `disabled`, `off`.
pub(crate) fn is_none_word(text: &str) -> bool {
    let text = text.trim().to_lowercase();
    let first_end = text.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(text.len());
    let (first, rest) = text.split_at(first_end);
    let rest = rest.trim_start();
    // "none (offload_optimizer_device: none, offload_param_device: none)", "no offload",
    // "disabled; ...": a none word qualified by what it means.
    let qualified = rest.is_empty()
        || rest.starts_with(['(', ',', ';', ':', '-', '—', '/'])
        || rest.starts_with("offload")
        || rest.starts_with("cpu offload");
    text.is_empty() || (matches!(first, "none" | "no" | "false" | "disabled" | "off") && qualified)
}

/// Whether `phrase` appears in `text` turned on: not after "no", "without", "not" or
/// "disable", nor followed by `=false`, `: false`, "off", "disabled" or "none"
/// ("no torch.compile", "optimizer_in_bwd=False", "activation offloading: off").
pub(crate) fn named_on(text: &str, phrase: &str) -> bool {
    text.match_indices(phrase).any(|(at, _)| {
        let before = text[..at].trim_end();
        let negated_before =
            ["no", "without", "not", "disable", "disabled", "neither", "nor"].iter().any(|word| {
                before.strip_suffix(word).is_some_and(|rest| {
                    rest.chars().next_back().is_none_or(|c| !c.is_ascii_alphanumeric())
                })
            });
        let after = text[at + phrase.len()..].trim_start_matches([' ', '=', ':', '(', '"']);
        let zero = after.starts_with('0')
            && after[1..].chars().next().is_none_or(|c| !(c.is_ascii_digit() || c == '.'));
        let negated_after =
            zero || ["false", "off", "disabled", "none"].iter().any(|word| after.starts_with(word));
        !negated_before && !negated_after
    })
}

/// Whether a wording that names an offload has it on: not "no offload", "without CPU offload",
/// "cpu_offload=False" or "offload_params: none".
fn offload_named(text: &str) -> bool {
    let lower = text.to_lowercase().replace(['=', ':', '_'], " ");
    let negated = ["no offload", "no cpu offload", "without offload", "without cpu offload"]
        .iter()
        .any(|phrase| lower.contains(phrase))
        || ["offload", "offload params", "cpu offload"].iter().any(|key| {
            ["false", "none", "off", "disabled", "0"]
                .iter()
                .any(|value| lower.contains(&format!("{key} {value}")))
        });
    !negated
}

/// An offload among a config's keys (DeepSpeed's `offload_param` / `offload_optimizer` and their
/// `_device`, FSDP's `cpu_offload`, accelerate's `fsdp_offload_params`), when a key's value is
/// not a none word (`offload_param_device: none` offloads nothing): the key and its value.
fn offload_in_settings(point: &crate::data::Point) -> Option<String> {
    let keys: [&[&str]; 2] = [
        &["offload_param", "offload_param_device", "cpu_offload", "fsdp_offload_params"],
        &["offload_optimizer", "offload_optimizer_device"],
    ];
    keys.iter().find_map(|keys| {
        keys.iter().find_map(|key| {
            let value = point.setting(&[key])?;
            (!is_none_word(&value)).then(|| format!("{key} {value}"))
        })
    })
}

/// A weight precision word and the assumption it carries.
/// Meta's own FP8 checkpoints of Llama 3.1 (transformers' `fbgemm_fp8`), which quantize only
/// some matrices.
pub(crate) fn is_meta_fp8(point: &crate::data::Point) -> bool {
    let text = format!(
        "{} {}",
        point.weight_precision.as_deref().unwrap_or_default(),
        point.quantization.as_deref().unwrap_or_default()
    )
    .to_lowercase();
    text.contains("fp8") && (text.contains("meta fp8") || text.contains("fbgemm"))
}

pub(crate) type WeightWord = (&'static str, Option<(&'static str, String)>);

/// Whether a llama.cpp run used FlashAttention: stated (`-fa`, `flash_attn 1`, Ollama's
/// `OLLAMA_FLASH_ATTENTION=1`), implied by a quantized KV cache (llama.cpp quantizes the V
/// cache only under FlashAttention), or a build from after PR #15434 (late August 2025, about
/// b6300) made `-fa auto` the default. Before it, the graph materializes every head's F32 scores
/// (`n_kv × n_ubatch`).
fn ggml_flash_attention(point: &crate::data::Point) -> bool {
    let text = point.all_text();
    // On when the flag is set (`1`, `on`, `auto`, which picks it wherever CUDA supports it) or
    // stands alone before the next flag; any other value ("flash_attn not printed") leaves
    // the question to the rules below.
    let on = ["1", "on", "true", "enabled", "yes", "auto", ""];
    let stated = point
        .setting(&["fa", "flash_attn", "ollama_flash_attention"])
        .is_some_and(|value| on.contains(&value.as_str()) || value.starts_with('-'))
        || [
            "flash attention on",
            "flash attention enabled",
            "with flash attention",
            // Ollama's log when its `auto` setting turns it on.
            "flash attention was auto, set to enabled",
        ]
        .iter()
        .any(|phrase| text.contains(phrase));
    let kv = point
        .kv_cache_dtype
        .clone()
        .or_else(|| super::inference::settings_kv_type(point))
        .unwrap_or_default()
        .to_lowercase();
    let quantized_cache = super::inference::GGML_KV_TYPES.iter().any(|t| kv.contains(t));
    let version = framework_and_version(point);
    let build = version
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(|w| w.strip_prefix('b')?.parse::<u32>().ok())
        .any(|number| (6300..100_000).contains(&number))
        || latest_month(&version).is_some_and(|month| month >= (2025, 9));
    stated || quantized_cache || build
}

/// Whether lower-case `text` names one model's layers spread over GPUs by accelerate's device
/// map in one process ("naive model parallelism").
pub(super) fn names_device_map(text: &str) -> bool {
    ["device_map", "device map", "naive model parallel", "model parallel (layers"]
        .iter()
        .any(|w| text.contains(w))
}

/// The serving engine a framework names (vLLM, SGLang, TensorRT-LLM, LMDeploy, TGI), if any.
fn serving_engine(framework: &str) -> Option<Runtime> {
    let words: Vec<&str> =
        framework.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).collect();
    if framework.contains("vllm") {
        Some(Runtime::Vllm)
    } else if framework.contains("sglang") {
        Some(Runtime::Sglang)
    } else if ["tensorrt-llm", "tensorrt llm", "trt-llm", "trtllm"]
        .iter()
        .any(|w| framework.contains(w))
    {
        Some(Runtime::TensorrtLlm)
    } else if framework.contains("lmdeploy") || framework.contains("turbomind") {
        // LMDeploy's PyTorch engine sizes its cache by the same `cache_max_entry_count` of the
        // free memory, in blocks of 64 tokens too: both are written as TurboMind.
        Some(Runtime::Lmdeploy)
    } else if framework.contains("text-generation-inference")
        || framework.contains("text generation inference")
        || words.contains(&"tgi")
    {
        Some(Runtime::Tgi)
    } else {
        None
    }
}

/// Whether a framework runs GGUF models on llama.cpp: llama.cpp itself (or one of its tools by
/// name), its Python binding, and the applications built on it (Ollama, LM Studio, koboldcpp,
/// llamafile, GPT4All).
fn runs_ggml(framework: &str) -> bool {
    ["llama.cpp", "llama-cpp", "llama_cpp", "llamacpp", "ollama", "lm studio", "lmstudio"]
        .iter()
        .chain(&["koboldcpp", "llamafile", "gpt4all", "llama-server", "llama-cli", "llama-bench"])
        .any(|name| framework.contains(name))
}

/// The llama.cpp preset a wording names, as the language spells it (`llama-quantize`'s ftype
/// names, lower case). `Q3_K`, `Q4_K` and `Q5_K` alone are `llama-quantize`'s aliases for the
/// `_M` mixes (`tools/quantize/quantize.cpp`, `QUANT_OPTIONS`).
/// The first one named wins: "Q4_K_M (193 q4_K + 33 q6_K tensors)" is Q4_K_M.
fn gguf_preset(text: &str) -> Option<&'static str> {
    let presets = vram_core::quant::Preset::ALL.map(|preset| (preset.name(), preset.name()));
    let aliases = [("q3_k", "q3_k_m"), ("q4_k", "q4_k_m"), ("q5_k", "q5_k_m")];
    presets
        .into_iter()
        .chain(aliases)
        .filter_map(|(word, preset)| first_word_at(text, word).map(|at| (at, preset)))
        .min_by_key(|(at, _)| *at)
        .map(|(_, preset)| preset)
}

/// The floating-point type a wording names first, in any of its spellings.
fn first_float_named(text: &str) -> Option<&'static str> {
    let spellings: [(&str, &'static str); 11] = [
        ("bf16", "bf16"),
        ("bfloat16", "bf16"),
        ("fp16", "fp16"),
        ("float16", "fp16"),
        ("half", "fp16"),
        ("f16", "fp16"),
        ("fp32", "fp32"),
        ("float32", "fp32"),
        ("f32", "fp32"),
        ("fp8", "fp8"),
        ("float8", "fp8"),
    ];
    spellings
        .iter()
        .filter_map(|(word, float)| {
            // `f16` and `f32` only as words (not inside `bf16` or `tf32`).
            let at = if word.len() == 3 { first_word_at(text, word) } else { text.find(word) };
            at.map(|at| (at, *float))
        })
        .min_by_key(|(at, _)| *at)
        .map(|(_, float)| float)
}

/// torchao's NF4Tensor against bitsandbytes' double-quantized NF4, for the assumption's detail.
const TORCHAO_NF4: &str = "torchao NF4Tensor (torchtune QLoRA): 4-bit codes, an int8 scaler per \
     64 and a bf16 factor per 256 scalers = 4.1260 bits, written as nf4-dq (fp32 factor: 4.1270 \
     bits); torchtune quantizes only the LoRA-adapted linear layers";

/// Where `word` first appears in `text` between non-word characters (`q4_k_m`, not `q4_k_m_l`).
fn first_word_at(text: &str, word: &str) -> Option<usize> {
    text.match_indices(word).map(|(at, _)| at).find(|&at| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        boundary(before) && boundary(after)
    })
}

/// GPTQ weights: the bits from the wording, the group from the release's quantization_config.
fn gptq(point: &crate::data::Point, q: &str, w: &str, both: &str) -> Result<WeightWord, Gap> {
    // `int4`, `4-bit`, `4bit`, or the weight bits of `W4A16`.
    let says = |bits: &str| {
        [q, w].iter().any(|t| {
            [format!("int{bits}"), format!("{bits}-bit"), format!("{bits}bit"), format!("w{bits}a")]
                .iter()
                .any(|word| t.contains(word.as_str()))
        })
    };
    let bits = if says("4") {
        "gptq-int4"
    } else if says("8") {
        "gptq-int8"
    } else {
        return Err(Gap::data(data::UNREADABLE, format!("GPTQ bits: {both}")));
    };
    if let Some(group) = stated_group(&format!("{q} {w}")) {
        return Ok((grouped(bits, group), None));
    }
    if !point.model.starts_with("Qwen/Qwen-") {
        let detail = format!(
            "GPTQ group size not stated ({both}): group_size 128, AutoGPTQ's \
             BaseQuantizeConfig default and that of most published GPTQ checkpoints"
        );
        return Ok((bits, Some((assume::RUNTIME_DEFAULT, detail))));
    }
    // Qwen's Int4 and Int8 releases: quantization_config {bits, group_size 128, desc_act false},
    // read in the configs of Qwen-1_8B-Chat-Int8, Qwen-7B-Chat-Int8, Qwen-14B-Chat-Int4,
    // Qwen-72B-Chat-Int4 and -Int8 (Girafboy/pytorchKQI, llms/Qwen/<name>/config.json).
    let detail = format!(
        "{bits} (group 128): Qwen's GPTQ releases use group_size 128, desc_act false (read for \
         the 1.8B and 7B Int8, 14B Int4 and 72B Int4/Int8 configs; the 1.8B and 7B Int4 assumed \
         alike); g_idx (4 B per input row) is not counted, < 0.2 % of the weights"
    );
    Ok((bits, Some((assume::SCRIPT_SETTING, detail))))
}

/// Whether a bitsandbytes wording says double quantization is on: named ("double quant",
/// `bnb_4bit_use_double_quant=True`, "nested quantization"), and not negated ("without double
/// quantization", `use_double_quant=False`, "no nested quantization").
fn names_double_quant(q: &str, w: &str) -> bool {
    let text = format!("{q} {w}").replace(['=', ':'], " ");
    let named = text.contains("double") || text.contains("nested");
    let negated = ["without double", "no double", "not double", "without nested", "no nested"]
        .iter()
        .any(|phrase| text.contains(phrase))
        || ["double_quant false", "double_quant  false", "double quant false", "double quant off"]
            .iter()
            .any(|phrase| text.contains(phrase));
    named && !negated
}

/// A quantizer's group size stated in its wording: `group_size=64`, `q_group_size 64`, "group
/// size 32", `-g64`, torchao's `int4wo-64`.
fn stated_group(text: &str) -> Option<u16> {
    let lower = text.to_lowercase();
    let after_key = ["q_group_size", "group_size", "group size", "groupsize"]
        .iter()
        .find_map(|key| number_after(&lower, key));
    let suffixed = lower.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).find_map(|w| {
        let digits = w.rsplit_once("-g").map(|(_, g)| g).or_else(|| w.strip_prefix("int4wo-"))?;
        digits.parse::<u64>().ok()
    });
    after_key
        .or(suffixed)
        .filter(|group| [32, 64, 128, 256].contains(group))
        .and_then(|group| u16::try_from(group).ok())
}

/// `base` (a grouped format at its default group, `gptq-int4`, `awq-int4`, `int4-g128`) at
/// `group`, as the language spells it.
fn grouped(base: &'static str, group: u16) -> &'static str {
    match (base, group) {
        ("gptq-int4", 32) => "gptq-int4-g32",
        ("gptq-int4", 64) => "gptq-int4-g64",
        ("gptq-int4", 256) => "gptq-int4-g256",
        ("gptq-int8", 32) => "gptq-int8-g32",
        ("gptq-int8", 64) => "gptq-int8-g64",
        ("gptq-int8", 256) => "gptq-int8-g256",
        ("awq-int4", 32) => "awq-int4-g32",
        ("awq-int4", 64) => "awq-int4-g64",
        ("awq-int4", 256) => "awq-int4-g256",
        ("int4-g128", 32) => "int4-g32",
        ("int4-g128", 64) => "int4-g64",
        ("int4-g128", 256) => "int4-g256",
        // The default group (128), and any other the language spells only with a suffix.
        _ => base,
    }
}

/// Whether the point ran under transformers' own loading (not a serving engine or llama.cpp).
/// Serving engines whose default `--dtype auto` loads a checkpoint in its own 16-bit type
/// (vLLM and SGLang: "FP16 for FP32 and FP16 models, BF16 for BF16 models"; TGI, LMDeploy and
/// TensorRT-LLM's checkpoint conversion likewise keep the checkpoint's `torch_dtype`).
fn serves_checkpoint_dtype(framework: &str) -> bool {
    let framework = framework.to_lowercase();
    ["vllm", "sglang", "text-generation-inference", "tgi", "lmdeploy", "tensorrt"]
        .iter()
        .any(|w| framework.contains(w))
}

fn runtime_is_transformers(point: &crate::data::Point) -> bool {
    let framework = point.framework.to_lowercase();
    framework.contains("transformers")
        && !["vllm", "sglang", "llama.cpp", "ollama", "tgi", "text-generation-inference"]
            .iter()
            .any(|w| framework.contains(w))
}

/// The bits of a bitsandbytes quantization written in words (`bitsandbytes 8-bit`), in the
/// quantization's wording or, when that names bitsandbytes alone, the weights' (`4-bit`).
/// bitsandbytes 4-bit weights loaded by Unsloth, or one of its pre-quantized `-bnb-4bit`
/// uploads: NF4 with double quantization, whatever transformers' own default, unless the
/// point says FP4.
fn unsloth_4bit(point: &crate::data::Point, q: &str, w: &str) -> bool {
    let model = point.model.to_lowercase();
    let unsloth = point.framework.to_lowercase().contains("unsloth")
        || (model.contains("unsloth/") && model.contains("bnb-4bit"));
    let text = format!("{q} {w}");
    let four_bit = ["4-bit", "4bit", "load_in_4bit", "nf4"].iter().any(|word| text.contains(word));
    unsloth && four_bit && !text.contains("fp4")
}

fn bnb_bits(q: &str, w: &str) -> Option<u32> {
    // bitsandbytes named in either field: `quantization: bitsandbytes 8-bit`, or the weight
    // precision alone, `int8 (bitsandbytes)`.
    let text = format!("{q} {w}");
    if !(text.contains("bitsandbytes") || text.contains("bnb")) {
        return None;
    }
    if ["8-bit", "8bit", "int8"].iter().any(|word| text.contains(word)) {
        Some(8)
    } else if ["4-bit", "4bit", "int4", "nf4", "fp4"].iter().any(|word| text.contains(word)) {
        Some(4)
    } else {
        None
    }
}

/// Whether a `measured_kind` reports a failure to fit: `oom`, `OOM error`, `CUDA out of memory`,
/// `out_of_memory`, `does not fit`.
/// A reading taken while the workload runs, in words other than "peak" ("maximum", "steady
/// state", "usage", "in use during training"): compared as the run's peak, since what a tool
/// reads during a run is what the caching allocator keeps from its peak (PyTorch returns no
/// segment to the driver while the device has room). An average is not a peak and stays
/// unreadable; a reading after loading or at idle is the loaded model's; a largest run that
/// fitted is a verdict.
fn running_reading(kind: &str) -> bool {
    let words = kind.replace(['_', '-'], " ");
    let not_a_run = ["fit", "average", "mean", "load", "idle", "at rest"];
    if not_a_run.iter().any(|w| words.contains(w)) {
        return false;
    }
    let first: &[&str] = &["max", "maximum", "highest", "usage", "used", "in use", "steady state"];
    let inside: &[&str] =
        &["while running", "during training", "during inference", "during generation"];
    first.iter().any(|w| words == *w || words.starts_with(&format!("{w} ")))
        || inside.iter().any(|w| words.contains(w))
}

fn out_of_memory_kind(kind: &str) -> bool {
    let words = kind.replace(['_', '-'], " ");
    kind.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| w == "oom")
        || ["out of memory", "does not fit", "did not fit", "doesn't fit", "not fitting"]
            .iter()
            .any(|w| words.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_words() {
        assert!(first_word_at("gguf q4_k_m", "q4_k_m").is_some());
        assert!(first_word_at("q4_k_m (4.89 bpw; 193 q4_k + 33 q6_k)", "q4_k_m").is_some());
        assert!(first_word_at("q4_k_m_l", "q4_k_m").is_none());
        assert!(first_word_at("iq4_0", "q4_0").is_none());
    }

    #[test]
    fn parallel_degrees() {
        assert_eq!(stated_degrees("tp=8, pp=2, dp=1"), [Some(8), Some(2), Some(1)]);
        assert_eq!(stated_degrees("tensor_parallel_size=4"), [Some(4), None, None]);
        assert_eq!(stated_degrees("megatron tp 4 pp 2"), [Some(4), Some(2), None]);
        // `dp` inside `fsdp2` is no degree.
        assert_eq!(stated_degrees("fsdp2, tp=2"), [Some(2), None, None]);
        assert_eq!(Split::Grid(8, 2, 1).target("h100"), "16 x h100 split tensor 8 pipeline 2");
    }

    #[test]
    fn llama_cpp_flash_attention() {
        let point = |settings: &str, version: &str| crate::data::Point {
            framework: "llama.cpp".to_owned(),
            framework_version: Some(version.to_owned()),
            other_settings: Some(settings.to_owned()),
            ..crate::data::Point::default()
        };
        assert!(!ggml_flash_attention(&point("n_ctx 8192, -ngl 99", "b3000")));
        assert!(ggml_flash_attention(&point("n_ctx 8192, -fa", "b3000")));
        assert!(ggml_flash_attention(&point("flash_attn=1", "mid-2024")));
        assert!(!ggml_flash_attention(&point("flash_attn 0", "mid-2024")));
        assert!(ggml_flash_attention(&point("-fa -ngl 99", "mid-2024")));
        assert!(ggml_flash_attention(&point("-fa auto", "mid-2024")));
        assert!(!ggml_flash_attention(&point("flash_attn not printed, n_ctx 4096", "mid-2024")));
        assert!(ggml_flash_attention(&point(
            "FlashAttention:Auto, 'Flash Attention was auto, set to enabled'",
            "mid-2024"
        )));
        assert!(ggml_flash_attention(&point("", "b6500")));
        assert!(ggml_flash_attention(&point("", "October 2025")));
    }
}

/// The minor version of a `v4.NN` transformers version note.
fn transformers_minor(text: &str) -> Option<u32> {
    let at = text.find("v4.")? + "v4.".len();
    let rest = &text[at..];
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The transformers release a point names: the version written after the word
/// (`transformers 4.46.1`, `HF transformers==4.45`, `transformers v5.0`), or a version note of
/// its own (`v4.41 (May 2024)`) when the framework is transformers.
pub(crate) fn transformers_version(point: &crate::data::Point) -> Option<(u32, u32)> {
    let text = framework_and_version(point);
    let after_name = text.match_indices("transformers").find_map(|(at, name)| {
        let rest = text[at + name.len()..].trim_start_matches([' ', '=', ':', '(', 'v', '@']);
        major_minor(rest).filter(|(major, _)| (4..10).contains(major))
    });
    after_name.or_else(|| {
        let note = point.framework_version.as_deref()?.to_lowercase();
        let named = point.framework.to_lowercase().contains("transformers");
        let first = note.trim_start_matches(['~', ' ', 'v']);
        named.then(|| major_minor(first)).flatten().filter(|(major, _)| (4..10).contains(major))
    })
}

/// `A.B` at the start of `text`.
fn major_minor(text: &str) -> Option<(u32, u32)> {
    let (major, rest) = text.split_once('.')?;
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    Some((major.parse().ok()?, rest[..end].parse().ok()?))
}

/// Whether the point ran on a release from `(year, month)` on, by the latest month its version
/// note names; `None` when it names none.
pub(crate) fn dated_from(point: &crate::data::Point, year: u32, month: u32) -> Option<bool> {
    latest_month(&framework_and_version(point)).map(|found| found >= (year, month))
}

/// A point's framework and version note, lowercased: where versions and dates are read.
fn framework_and_version(point: &crate::data::Point) -> String {
    format!("{} {}", point.framework, point.framework_version.as_deref().unwrap_or_default())
        .to_lowercase()
}

/// The latest year and month (1-12) a version note names: `Aug-Sep 2024` is (2024, 9),
/// `2024-06-01` (2024, 6), a year alone its December.
fn latest_month(text: &str) -> Option<(u32, u32)> {
    const MONTHS: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    let (at, year) = text.match_indices("20").find_map(|(at, _)| {
        let year: u32 = text.get(at..at + 4)?.parse().ok()?;
        let bounded = !text[at + 4..].starts_with(|c: char| c.is_ascii_digit());
        (bounded && (2015..2100).contains(&year)).then_some((at, year))
    })?;
    let before = &text[..at];
    // A month written whole or by its first three letters, as a word of its own (not the
    // start of `decode`, `marlin` or `maybe`); the one nearest the year.
    let month_at = |name: &str| {
        let short = &name[..3];
        before
            .match_indices(short)
            .filter_map(|(found, _)| {
                let starts = before[..found].chars().last().is_none_or(|c| !c.is_alphabetic());
                let rest = &before[found..];
                let word_end = rest.find(|c: char| !c.is_alphabetic()).unwrap_or(rest.len());
                let word = &rest[..word_end];
                (starts && name.starts_with(word)).then_some(found)
            })
            .last()
    };
    // An ISO date's month (`2024-06-01`) first.
    let iso = text.get(at + 4..at + 7).and_then(|m| m.strip_prefix('-')).and_then(|m| {
        let month: u32 = m.parse().ok()?;
        (1..=12).contains(&month).then_some(month)
    });
    let named = (1u32..)
        .zip(MONTHS)
        .filter_map(|(number, name)| month_at(name).map(|found| (found, number)))
        .max_by_key(|(found, _)| *found)
        .map(|(_, number)| number);
    Some((year, iso.or(named).unwrap_or(12)))
}

/// The first `CUDA major.minor` a version note names.
/// `pytorch 2.0` or `torch 2.1.2` in a lower-cased version note: the major and minor numbers.
fn pytorch_release(text: &str) -> Option<(u32, u32)> {
    let at = text.match_indices("torch ").find(|(at, _)| {
        let before = &text[..*at];
        before.ends_with("py") || before.chars().next_back().is_none_or(|c| !c.is_alphanumeric())
    })?;
    let rest = &text[at.0 + "torch ".len()..];
    let rest = rest.strip_prefix('v').unwrap_or(rest);
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let mut parts = rest[..end].split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn cuda_version(text: &str) -> Option<(u32, u32)> {
    let at = text.find("CUDA ")? + "CUDA ".len();
    let rest = &text[at..];
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let mut parts = rest[..end].split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

#[cfg(test)]
mod version_tests {
    use super::{cuda_version, dated_from, latest_month, transformers_version};

    #[test]
    fn cuda_versions_are_read_from_version_notes() {
        assert_eq!(cuda_version("~v4.16 (driver 460.91.03, CUDA 11.2)"), Some((11, 2)));
        assert_eq!(cuda_version("PyTorch 2.0, CUDA 11.8, Flash attention 2"), Some((11, 8)));
        assert_eq!(cuda_version("CUDA 12"), Some((12, 0)));
        assert_eq!(cuda_version("PyTorch nightly"), None);
    }

    #[test]
    fn pytorch_releases_are_read_from_version_notes() {
        let read = super::pytorch_release;
        assert_eq!(read("pytorch 2.0, cuda 11.8, flash attention 2"), Some((2, 0)));
        assert_eq!(read("transformers 4.44, torch 2.4.1"), Some((2, 4)));
        assert_eq!(read("torch v2.10"), Some((2, 10)));
        // A release needs its minor number; another word ending in "torch" is not PyTorch.
        assert_eq!(read("pytorch 2"), None);
        assert_eq!(read("pytorch nightly"), None);
        assert_eq!(read("litorch 2.0"), None);
    }

    #[test]
    fn transformers_versions_are_read_from_version_notes() {
        assert_eq!(super::transformers_minor("~v4.16-4.2x (nvidia-smi capture)"), Some(16));
        assert_eq!(super::transformers_minor("transformers v4.2.0 (jan 2021)"), Some(2));
        assert_eq!(super::transformers_minor("pytorch 2.0, cuda 11.8"), None);
    }

    #[test]
    fn readings_during_a_run_are_its_peak() {
        for kind in [
            "maximum",
            "max",
            "steady state",
            "steady-state (nvidia-smi)",
            "usage",
            "in use during training",
        ] {
            assert!(super::running_reading(kind), "{kind}");
        }
        for kind in [
            "average",
            "mean usage",
            "max_fit_boundary",
            "used after load",
            "idle usage",
            "component",
        ] {
            assert!(!super::running_reading(kind), "{kind}");
        }
    }

    #[test]
    fn out_of_memory_kinds_in_several_wordings() {
        for kind in ["oom", "oom (batch 8)", "cuda out of memory", "out_of_memory", "does not fit"]
        {
            assert!(super::out_of_memory_kind(kind), "{kind}");
        }
        for kind in ["peak", "max_fit_boundary", "room left", "fits"] {
            assert!(!super::out_of_memory_kind(kind), "{kind}");
        }
    }

    #[test]
    fn scopes_that_add_the_gpus_up() {
        for scope in
            ["likely total over 4 GPUs", "sum of GPUs", "2 GPUs combined", "summed over ranks"]
        {
            assert!(super::summed_over_devices(scope), "{scope}");
        }
        for scope in ["single GPU", "per GPU (max over ranks)", "each GPU", "GPU 0"] {
            assert!(!super::summed_over_devices(scope), "{scope}");
        }
    }

    /// A reading after loading is the weights (with the context, read from the driver), and a
    /// kind may name the counter its method leaves out.
    #[test]
    fn measured_kinds_in_other_words() {
        use crate::target::{Scope, Selector, Target};
        use crate::views::{Basis, View};
        let target = |kind: &str, method: &str| {
            let point = crate::data::Point {
                measured_kind: kind.to_owned(),
                measurement_method: method.to_owned(),
                ..crate::data::Point::default()
            };
            super::super::Cx::new(&point).target()
        };
        let component = |selector| Some(Target::Component { selector, scope: Scope::EachDevice });
        assert_eq!(
            target("after load", "torch.cuda.memory_allocated()"),
            component(Selector::Weights)
        );
        assert_eq!(target("model loaded", "nvidia-smi"), component(Selector::WeightsAndOutside));
        assert_eq!(
            target("reserved peak", "not stated"),
            Some(Target::Peak {
                view: View::Reserved,
                basis: Basis::Stated,
                scope: Scope::EachDevice
            })
        );
        // A stated method wins over the kind's word.
        assert_eq!(
            target("reserved peak", "nvidia-smi"),
            Some(Target::Peak {
                view: View::Device,
                basis: Basis::Stated,
                scope: Scope::EachDevice
            })
        );
        assert_eq!(target("average", "nvidia-smi"), None);
        // An unstated method: the view the workload kind's unstated peaks fit.
        let unstated = |workload: &str| {
            let point = crate::data::Point {
                measured_kind: "peak".to_owned(),
                measurement_method: "not stated".to_owned(),
                workload: workload.to_owned(),
                ..crate::data::Point::default()
            };
            super::super::Cx::new(&point).target()
        };
        let peak =
            |view| Some(Target::Peak { view, basis: Basis::NotStated, scope: Scope::EachDevice });
        assert_eq!(unstated("training_lora"), peak(View::Device));
        assert_eq!(unstated("diffusion_training"), peak(View::Device));
        assert_eq!(unstated("llm_inference"), peak(View::Allocated));
        assert_eq!(unstated("diffusion_inference"), peak(View::Allocated));
        let on_llama_cpp = crate::data::Point {
            measured_kind: "peak".to_owned(),
            measurement_method: "not stated ('VRAM usage')".to_owned(),
            workload: "llm_inference".to_owned(),
            framework: "koboldcpp 1.70 (CUDA)".to_owned(),
            ..crate::data::Point::default()
        };
        assert_eq!(super::super::Cx::new(&on_llama_cpp).target(), peak(View::Device));
        let served =
            crate::data::Point { framework: "vLLM 0.6.3 (vllm serve)".to_owned(), ..on_llama_cpp };
        assert_eq!(super::super::Cx::new(&served).target(), peak(View::Device));
        // A runtime log's component, in the log's own words.
        let logged = |included: &str| {
            let point = crate::data::Point {
                measured_kind: "component".to_owned(),
                measurement_method: "vLLM startup memory profiler log".to_owned(),
                components_included: Some(included.to_owned()),
                ..crate::data::Point::default()
            };
            super::super::Cx::new(&point).target()
        };
        assert_eq!(logged("non-torch memory"), component(Selector::OutsideAllocator));
        assert_eq!(logged("non_torch_memory"), component(Selector::OutsideAllocator));
        assert_eq!(
            logged("non-PyTorch memory (CUDA context)"),
            component(Selector::OutsideAllocator)
        );
    }

    /// A point that leaves the scope out may state it with its method.
    #[test]
    fn a_scope_left_out_is_read_from_the_method() {
        use crate::target::Scope;
        let scope_of = |scope: Option<&str>, method: &str| {
            let point = crate::data::Point {
                measurement_scope: scope.map(str::to_owned),
                measurement_method: method.to_owned(),
                measured_kind: "peak".to_owned(),
                num_gpus: Some(2),
                ..crate::data::Point::default()
            };
            match super::super::Cx::new(&point).target() {
                Some(crate::target::Target::Peak { scope, .. }) => scope,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(scope_of(None, "nvidia-smi (sum of both GPUs)"), Scope::SumOfDevices);
        assert_eq!(scope_of(Some(""), "nvidia-smi, summed"), Scope::SumOfDevices);
        assert_eq!(scope_of(None, "nvidia-smi"), Scope::EachDevice);
        assert_eq!(scope_of(Some("per GPU"), "nvidia-smi (sum of both GPUs)"), Scope::EachDevice);
    }

    /// Multi-GPU splits in other data sets' words.
    #[test]
    fn splits_in_their_wordings() {
        use super::Split;
        let split = |framework: &str, parallelism: &str| {
            let point = crate::data::Point {
                framework: framework.to_owned(),
                parallelism: Some(parallelism.to_owned()),
                num_gpus: Some(2),
                workload: "llm_inference".to_owned(),
                ..crate::data::Point::default()
            };
            super::super::Cx::new(&point).split()
        };
        assert_eq!(split("llama.cpp", "split layers (-sm layer)"), Some(Split::Pipeline(2)));
        assert_eq!(split("llama.cpp", "--tensor-split 1,1"), Some(Split::Pipeline(2)));
        // "None" qualified by what it means is no parallelism stated: the runtime's default.
        assert!(split("transformers", "none (strategy 'auto', devices=1)").is_some());
        // llama.cpp's row split keeps the KV cache on the main GPU: a missing feature.
        assert_eq!(split("llama.cpp", "-sm row"), None);
        assert_eq!(split("exllama", "row split"), Some(Split::Tensor(2)));
        assert_eq!(split("vLLM", "tensor parallel 2"), Some(Split::Tensor(2)));
        assert_eq!(split("transformers", "device_map=\"auto\""), Some(Split::Pipeline(2)));
        assert_eq!(split("transformers", "expert sharding by vibes"), None);
        // A server's flags among the other settings when the parallelism is empty.
        let flags = |framework: &str, settings: &str| {
            let point = crate::data::Point {
                framework: framework.to_owned(),
                other_settings: Some(settings.to_owned()),
                num_gpus: Some(4),
                workload: "llm_inference".to_owned(),
                ..crate::data::Point::default()
            };
            super::super::Cx::new(&point).split()
        };
        assert_eq!(flags("TGI 2.0", "--num-shard 4"), Some(Split::Tensor(4)));
        assert_eq!(flags("SGLang 0.4", "--tp 2 --dp 2"), Some(Split::Grid(2, 1, 2)));
        assert_eq!(
            flags("vLLM", "--tensor-parallel-size 2 --pipeline-parallel-size 2"),
            Some(Split::Grid(2, 2, 1))
        );
    }

    /// Weight formats in other data sets' words.
    #[test]
    fn weight_formats_in_their_wordings() {
        let word = |framework: &str, precision: &str, quantization: Option<&str>| {
            let point = crate::data::Point {
                framework: framework.to_owned(),
                weight_precision: Some(precision.to_owned()),
                quantization: quantization.map(str::to_owned),
                ..crate::data::Point::default()
            };
            super::super::Cx::new(&point).read_weight_format().map(|(word, _)| word).ok()
        };
        assert_eq!(word("vLLM", "W4A16", Some("GPTQ")), Some("gptq-int4"));
        assert_eq!(word("transformers", "NF4 + double quant", None), Some("nf4-dq"));
        assert_eq!(
            word("litgpt", "4-bit", Some("bitsandbytes NF4 without double quantization")),
            Some("nf4")
        );
        assert_eq!(
            word("transformers", "nf4", Some("bnb_4bit_use_double_quant=False")),
            Some("nf4")
        );
        assert_eq!(word("transformers", "4-bit", Some("bitsandbytes")), Some("fp4"));
        assert_eq!(word("transformers", "8-bit", Some("bitsandbytes")), Some("int8"));
        assert_eq!(word("transformers", "bf16", Some("none (bf16)")), Some("bf16"));
        assert_eq!(word("transformers", "8-bit", None), Some("int8"));
        // A serving engine loads the checkpoint's own 16-bit type when no dtype is given;
        // transformers, whose default has been fp32, does not stand one in.
        assert_eq!(word("TGI 0.9", "not stated (no --dtype)", Some("none")), Some("fp16"));
        assert_eq!(word("vLLM 0.6", "not stated (bf16 checkpoint)", Some("none")), Some("bf16"));
        assert_eq!(word("transformers 4.40", "not stated", Some("none")), None);
        // Unsloth's 4-bit loading is NF4 with double quantization.
        assert_eq!(word("Unsloth 2024.9", "4-bit", Some("load_in_4bit=True")), Some("nf4-dq"));
        assert_eq!(word("Unsloth", "nf4", None), Some("nf4-dq"));
        assert_eq!(word("Unsloth", "fp4", Some("bnb fp4")), Some("fp4"));
        // bitsandbytes named in the precision alone.
        assert_eq!(word("transformers", "int8 (bitsandbytes)", None), Some("int8"));
        assert_eq!(word("transformers", "bnb 8-bit", None), Some("int8"));
        assert_eq!(word("ChatGLM", "INT4", Some("quantization_bit 4")), Some("int4"));
        assert_eq!(word("ChatGLM", "int8", Some("ChatGLM quantize(8)")), Some("int8"));
        assert_eq!(word("transformers", "INT4", Some("model.quantize(4)")), Some("int4"));
        assert_eq!(word("transformers", "int8", Some("quanto qint8 weights")), Some("int8"));
        assert_eq!(word("transformers", "int4", Some("optimum-quanto qint4")), Some("int4-g128"));
        assert_eq!(word("llama.cpp", "8-bit", None), None);
        assert_eq!(word("transformers", "4-bit", Some("HQQ")), Some("int4-g64"));
        assert_eq!(word("TensorRT-LLM", "W8A8", Some("SmoothQuant")), Some("int8"));
        assert_eq!(word("vLLM", "fp8", Some("FP8 (dynamic)")), Some("fp8"));
        assert_eq!(word("transformers", "int8", Some("torchao int8 weight-only")), Some("int8"));
        assert_eq!(
            word("transformers", "int4", Some("torchao int4_weight_only")),
            Some("int4-g128")
        );
        // A GGUF preset named without the word "GGUF", and Ollama's "Q8".
        assert_eq!(word("Ollama 0.5", "Q4_K_M", None), Some("q4_k_m"));
        assert_eq!(word("LM Studio", "Q5_K_M", None), Some("q5_k_m"));
        assert_eq!(word("Ollama", "Q8", None), Some("q8_0"));
        assert_eq!(word("transformers", "Q8", None), None);
        // The i-quant and other mixes the language knows, llama-quantize's `_M` aliases, the
        // first preset named where a log's tensor count follows, and unquantized GGUF files.
        assert_eq!(word("llama.cpp", "IQ4_XS", Some("GGUF IQ4_XS")), Some("iq4_xs"));
        assert_eq!(word("llama.cpp", "GGUF IQ2_M", None), Some("iq2_m"));
        assert_eq!(word("llama.cpp", "Q3_K_L", None), Some("q3_k_l"));
        assert_eq!(word("llama.cpp", "GGUF Q4_K", None), Some("q4_k_m"));
        assert_eq!(
            word("llama.cpp", "Q6_K (141 q6_K, 65 f32, 1 q8_0 tensors)", Some("GGUF")),
            Some("q6_k")
        );
        assert_eq!(word("llama.cpp", "F16", Some("GGUF (unquantized)")), Some("fp16"));
        assert_eq!(word("llama.cpp", "BF16 GGUF", None), Some("bf16"));
        assert_eq!(word("llama.cpp b3000", "F16", None), Some("fp16"));
        assert_eq!(
            word(
                "lit-gpt",
                "fp32 (the generate script changed from torch.bfloat16 to torch.float32)",
                None
            ),
            Some("fp32")
        );
        assert_eq!(word("transformers", "torch_dtype=torch.bfloat16", None), Some("bf16"));
        // A format left out is missing data.
        assert_eq!(word("Ollama 0.3", "", Some("not stated (Ollama default tag)")), None);
        assert_eq!(
            word("TensorRT-LLM 0.12", "int8 (scheme not stated)", Some("int8 (checkpoint)")),
            Some("int8")
        );
        // Stated group sizes.
        assert_eq!(
            word("transformers", "int4", Some("GPTQ 4-bit, group_size 64")),
            Some("gptq-int4-g64")
        );
        assert_eq!(word("transformers", "int4", Some("AWQ (q_group_size 128)")), Some("awq-int4"));
        assert_eq!(
            word("transformers", "int4", Some("AWQ, q_group_size=32")),
            Some("awq-int4-g32")
        );
        assert_eq!(word("torchao", "int4", Some("torchao int4wo-64")), Some("int4-g64"));
        assert_eq!(
            word("torchao", "int4", Some("torchao int4_weight_only(group_size=32)")),
            Some("int4-g32")
        );
    }

    #[test]
    fn llama_cpp_in_its_applications_and_bindings() {
        for framework in
            ["llama-cpp-python 0.2.90", "Ollama", "koboldcpp 1.70", "llamafile", "llama-server"]
        {
            let point = crate::data::Point {
                framework: framework.to_owned(),
                workload: "llm_inference".to_owned(),
                ..crate::data::Point::default()
            };
            let runtime = super::super::Cx::new(&point).runtime();
            assert_eq!(runtime, Some(super::Runtime::LlamaCpp), "{framework}");
        }
    }

    /// A runtime the language has no profile for is a missing feature; a framework no rule
    /// knows is a wording to learn.
    #[test]
    fn runtimes_without_a_profile_are_feature_gaps() {
        let labels = |framework: &str| {
            let point = crate::data::Point {
                framework: framework.to_owned(),
                workload: "llm_inference".to_owned(),
                ..crate::data::Point::default()
            };
            let mut cx = super::super::Cx::new(&point);
            assert_eq!(cx.runtime(), None, "{framework}");
            cx.gaps.iter().map(|g| g.label).collect::<Vec<_>>()
        };
        for framework in ["ExLlamaV2 0.1.8 (TabbyAPI)", "MLC LLM", "mlx-lm 0.19", "ComfyUI"] {
            assert_eq!(labels(framework), [crate::gaps::feature::RUNTIME], "{framework}");
        }
        assert_eq!(labels("Foobar Serve 2"), [crate::gaps::data::UNREADABLE]);
    }

    #[test]
    fn the_transformers_release_a_point_names() {
        let point = |framework: &str, version: Option<&str>| crate::data::Point {
            framework: framework.to_owned(),
            framework_version: version.map(str::to_owned),
            ..crate::data::Point::default()
        };
        assert_eq!(transformers_version(&point("HF transformers 4.45", None)), Some((4, 45)));
        assert_eq!(
            transformers_version(&point("Trainer", Some("PyTorch 2.5, transformers==4.46.1"))),
            Some((4, 46))
        );
        assert_eq!(
            transformers_version(&point("transformers", Some("v4.41 (May 2024)"))),
            Some((4, 41))
        );
        assert_eq!(transformers_version(&point("transformers v5.0", None)), Some((5, 0)));
        assert_eq!(
            transformers_version(&point("transformers", Some("PyTorch 2.0.1, CUDA 11.8"))),
            None
        );
        assert_eq!(transformers_version(&point("vLLM 0.6.3", None)), None);
        assert_eq!(dated_from(&point("transformers", Some("November 2024")), 2024, 10), Some(true));
        assert_eq!(dated_from(&point("transformers", None), 2024, 10), None);
    }

    #[test]
    fn the_latest_month_a_version_note_names() {
        assert_eq!(latest_month("pytorch nightly (aug-sep 2024), cuda 12.2"), Some((2024, 9)));
        assert_eq!(latest_month("diffusers of september 2024"), Some((2024, 9)));
        assert_eq!(latest_month("mid-2025"), Some((2025, 12)));
        assert_eq!(latest_month("llama.cpp of 2024-06-01"), Some((2024, 6)));
        // Words that begin like a month are not months.
        assert_eq!(latest_month("decode benchmark, maybe 2023"), Some((2023, 12)));
        assert_eq!(latest_month("marlin kernels, oct 2024"), Some((2024, 10)));
        assert_eq!(latest_month("pytorch 2.0, cuda 11.8"), None);
        assert_eq!(latest_month("transformers 4.20"), None);
    }
}
