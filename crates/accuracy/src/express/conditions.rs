//! Conditions every kind of point has: what was measured, on which GPUs, under which runtime,
//! with which model and weight format, and what shards or offloads memory.

use super::Cx;
use crate::gaps::{Gap, assume, data, feature};
use crate::gpus::{self, Gpu};
use crate::models::{self, Model};
use crate::target::{Scope, Selector, Target};
use crate::units::{self, UnitRule};
use crate::views;

/// The runtime profile a framework runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Runtime {
    PyTorch,
    Vllm,
    LlamaCpp,
}

impl Runtime {
    pub(crate) fn word(self) -> &'static str {
        match self {
            Runtime::PyTorch => "pytorch",
            Runtime::Vllm => "vllm",
            Runtime::LlamaCpp => "llama.cpp",
        }
    }
}

/// How the work is divided over `count` GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    Single,
    Tensor(u32),
    Pipeline(u32),
    Data(u32),
}

impl Split {
    /// The check's target: `a100-sxm4-80gb` or `2 x a100-sxm4-80gb split pipeline 2`.
    pub(crate) fn target(self, device: &str) -> String {
        match self {
            Split::Single => device.to_string(),
            Split::Tensor(n) => format!("{n} x {device} split tensor {n}"),
            Split::Pipeline(n) => format!("{n} x {device} split pipeline {n}"),
            Split::Data(n) => format!("{n} x {device} split data {n}"),
        }
    }
}

impl Cx<'_> {
    /// What the measurement corresponds to in the budget.
    pub(crate) fn target(&mut self) -> Option<Target> {
        let point = self.point;
        let scope = match point.measurement_scope.as_deref() {
            Some(s) if s.to_lowercase().contains("total over") => Scope::SumOfDevices,
            _ => Scope::EachDevice,
        };
        let kind = point.measured_kind.as_str();
        if kind == "peak" {
            let (view, basis) = views::view_for(&point.measurement_method);
            Some(Target::Peak { view, basis, scope })
        } else if kind.starts_with("component") {
            self.selector().map(|selector| Target::Component { selector, scope })
        } else if kind == "oom" {
            Some(Target::Verdict { expect_fits: false })
        } else if kind == "max_fit_boundary" {
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
        if lower.contains("kv cache pool") {
            return Some(Selector::KvPool);
        }
        if lower.contains("cpu buffer") {
            self.gap(Gap::feature(feature::HOST_EMBEDDINGS, text.clone()));
        }
        let selector = if lower.contains("cuda context") && lower.contains("weights") {
            Selector::WeightsAndOutside
        } else if lower.starts_with("kv cache") {
            Selector::KvCache
        } else if lower.contains("weights") {
            Selector::Weights
        } else if lower.contains("activation") {
            Selector::Intermediates
        } else if lower.contains("non-pytorch") || lower.starts_with("cuda context") {
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
        let found = point.value.and_then(|value| units::measured_bytes(value, &point.unit));
        if found.is_none() {
            let value = point.value.map_or_else(|| "none".to_string(), |v| v.to_string());
            self.unreadable("value and unit", &format!("{value} {}", point.unit));
        }
        found
    }

    /// The device, and whether its capacity is known where the comparison needs it.
    pub(crate) fn gpu(&mut self, target: &Target) -> Option<Gpu> {
        let Some(gpu) = gpus::gpu(&self.point.gpu_type) else {
            self.unreadable("gpu_type", &self.point.gpu_type);
            return None;
        };
        if let Some(note) = gpu.note {
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
        let text = point.parallelism.clone().unwrap_or_default();
        let lower = text.to_lowercase();
        if lower.contains("fsdp") {
            self.gap(Gap::feature(feature::FSDP, text));
            return None;
        }
        let split = if lower.contains("tensor parallel") {
            Split::Tensor(count)
        } else if lower.contains("device_map") || lower.contains("layer split") {
            // accelerate's device_map="auto" places consecutive layers on each GPU: a pipeline.
            Split::Pipeline(count)
        } else if lower.contains("data parallel") {
            Split::Data(count)
        } else if lower.is_empty() || lower == "none" || lower.contains("single gpu") {
            if count != 1 {
                self.gap(Gap::data(data::SPLIT, format!("{count} GPUs, parallelism {text:?}")));
                return None;
            }
            Split::Single
        } else {
            self.unreadable("parallelism", &text);
            return None;
        };
        match split {
            Split::Tensor(1) | Split::Pipeline(1) | Split::Data(1) => Some(Split::Single),
            other => Some(other),
        }
    }

    /// ZeRO stages and offload, which the language cannot state yet.
    pub(crate) fn sharding_and_offload(&mut self) {
        let point = self.point;
        let text = point.all_text();
        let stage = point.zero_stage.or_else(|| {
            ["zero-3", "zero 3", "zero3"].iter().any(|w| text.contains(w)).then_some(3).or_else(
                || ["zero-2", "zero 2", "zero2"].iter().any(|w| text.contains(w)).then_some(2),
            )
        });
        if let Some(stage) = stage {
            let label = if stage >= 3 { feature::ZERO3 } else { feature::ZERO2 };
            self.gap(Gap::feature(label, where_zero(point, stage)));
        }
        if let Some(offload) = &point.offload {
            self.gap(Gap::feature(feature::CPU_OFFLOAD, offload.clone()));
        }
    }

    /// The runtime profile for the framework.
    pub(crate) fn runtime(&mut self) -> Option<Runtime> {
        let framework = self.point.framework.to_lowercase();
        if framework.contains("vllm") {
            Some(Runtime::Vllm)
        } else if framework.contains("llama.cpp") || framework.contains("ollama") {
            Some(Runtime::LlamaCpp)
        } else if ["transformers", "peft", "torchtune", "diffusers", "deepspeed", "trainer"]
            .iter()
            .any(|w| framework.contains(w))
        {
            Some(Runtime::PyTorch)
        } else {
            self.unreadable("framework", &self.point.framework);
            None
        }
    }

    /// The model, from `models.vram` or the catalog.
    pub(crate) fn model(&mut self) -> Option<Model> {
        match models::model(&self.point.model) {
            Some(Ok(model)) => Some(model),
            Some(Err(gaps)) => {
                for gap in gaps {
                    self.gap(gap);
                }
                None
            }
            None => {
                self.gap(Gap::data(
                    data::MODEL_CONFIG,
                    format!("{}: not in crates/accuracy/src/models.rs", self.point.model),
                ));
                None
            }
        }
    }

    /// The precision word for the weights, or the gaps that stop it.
    pub(crate) fn weight_format(&mut self) -> Option<&'static str> {
        let point = self.point;
        let quantization = point.quantization.clone().unwrap_or_default();
        let precision = point.weight_precision.clone().unwrap_or_default();
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
        if q.contains("gptq") || w.contains("gptq") {
            self.gap(Gap::feature(feature::GPTQ, both));
            None
        } else if q.contains("gguf") || w.contains("gguf") {
            if q.contains("not stated") || w.contains("not stated") {
                self.gap(Gap::data(data::PRECISION, format!("GGUF type not stated ({both})")));
            } else {
                self.gap(Gap::feature(feature::GGUF_PRESET, both));
            }
            None
        } else if w.contains("fp8") && (w.contains("not all layers") || q.contains("compressed")) {
            self.gap(Gap::feature(feature::MIXED_FP8, both));
            None
        } else if q.contains("torchao") || (torchtune && (q.contains("nf4") || w.contains("nf4"))) {
            self.gap(Gap::feature(feature::TORCHAO_NF4, both));
            None
        } else if q.contains("llm.int8") || q.contains("load_in_8bit") {
            Some("int8")
        } else if q.contains("load_in_4bit") {
            // transformers' BitsAndBytesConfig defaults to bnb_4bit_quant_type="fp4".
            self.assume(assume::RUNTIME_DEFAULT, "load_in_4bit: bitsandbytes' default FP4");
            Some("fp4")
        } else if q.contains("nf4") || w == "nf4" {
            Some("nf4")
        } else if q.is_empty() || q == "none" {
            match w.as_str() {
                "bf16" => Some("bf16"),
                "fp16" => Some("fp16"),
                "fp32" | "fp32 master weights" | "fp32 master" => Some("fp32"),
                "" | "not stated" => {
                    self.gap(Gap::data(data::PRECISION, both));
                    None
                }
                _ => {
                    self.unreadable("weight_precision", &precision);
                    None
                }
            }
        } else {
            self.unreadable("quantization", &quantization);
            None
        }
    }

    /// `eager` when the source says attention scores are materialised, else `fused`.
    pub(crate) fn eager_attention(&self) -> bool {
        let point = self.point;
        let settings = point.other_settings.clone().unwrap_or_default().to_lowercase();
        let kv = point.kv_cache_dtype.clone().unwrap_or_default().to_lowercase();
        settings.contains("eager")
            || settings.contains("flash_attn 0")
            || settings == "default attention"
            || kv.contains("flash attention disabled")
    }
}

/// Where the data states a ZeRO stage, for the gap's detail.
fn where_zero(point: &crate::data::Point, stage: u32) -> String {
    if point.zero_stage.is_some() {
        format!("zero_stage {stage}")
    } else {
        format!("ZeRO-{stage} named in the method or components text")
    }
}
