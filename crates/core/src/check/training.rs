//! Checking `training` sections: method (`method.rs`), precisions, optimizer, batch,
//! checkpointing and sharding. Beside a `diffusion` section the section trains the pipeline's
//! denoiser: its weights, batch and positions are the pipeline's, so the fields that state them
//! for a language model are refused.

use super::bitsandbytes_release;
use super::fields::{Fields, Repeat};
use super::quantity::Dim;
use super::torch_release;
use crate::ast::{Block, Value};
use crate::diagnostic::Diagnostic;
use crate::hir::{
    Checkpointing, FusedLoss, Levers, Method, Objective, Offload, Optimizer, PipelineSchedule,
    Reference, Sharding, StatesMemory, TextEncoders, Training, ZeroGrad,
};
use crate::precision::Precision;

/// The longest sequence accepted: 100 million tokens.
const MAX_TOKENS: u64 = 100_000_000;

/// The fields that say what the `diffusion` section already says (or what is not modelled for a
/// denoiser), with the reason given when one is written.
const NOT_FOR_A_DENOISER: &[(&str, &str)] = &[
    ("weights", "the denoiser's weights are the diffusion section's `denoiser_weights`"),
    ("sequence", "a denoiser's tokens come from the diffusion section's `resolution`"),
    ("micro_batch", "a denoiser's batch is the diffusion section's `batch`"),
    ("source", "a denoiser has no text encoder-decoder"),
    ("sequence_parallel", "sequence parallelism is not modelled for a denoiser"),
    ("loss", "a denoiser's loss is on its latents, not on logits"),
    ("unquantized", "a denoiser's weights are counted by parameter count, without embeddings"),
    ("step_in_backward", "a step in the backward pass is not modelled for a denoiser"),
    ("loss_chunks", "a denoiser's loss is on its latents, not on logits"),
    ("compile", "a compiled loss is modelled for logits, not for a denoiser's latents"),
    ("fused_loss", "a denoiser's loss is on its latents, not on logits"),
    ("rope_tables", "a denoiser's rotary embeddings are its pipeline's, not transformers' tables"),
    ("objective", "preference objectives are modelled for language models"),
    ("reference", "preference objectives are modelled for language models"),
];

/// `objective` words: DPO and the losses of its trainer keep a reference model; ORPO, SimPO and
/// CPO score the pair alone.
const OBJECTIVES: &[&str] = &["sft", "dpo", "ipo", "orpo", "simpo", "cpo"];

/// The loss's samples (`objective`) and, for DPO, where its reference comes from (`reference`):
/// by default the base with its adapters off when adapters train (TRL with a PEFT model),
/// a frozen copy otherwise.
fn objective(block: &Block, fields: &Fields, method: Option<&Method>) -> Objective {
    let word = fields.choice("objective", OBJECTIVES).map(|(w, _)| w);
    let reference = fields.choice("reference", &["copy", "adapters_off", "precomputed"]);
    let adapters =
        matches!(method, Some(Method::Lora { .. } | Method::Prefix { .. } | Method::Prompt { .. }));
    let span = |key: &str| block.fields.iter().find(|f| f.key.name == key).map(|f| f.span);
    let with_reference = matches!(word, Some("dpo" | "ipo"));
    if let (Some((written, _)), Some(at)) = (reference, span("reference")) {
        if !with_reference {
            fields.push(
                Diagnostic::error(
                    "E013",
                    at,
                    "`reference`: only a DPO objective runs a reference model",
                )
                .with_help("`objective dpo`, or remove `reference`"),
            );
        } else if written == "adapters_off" && method.is_some() && !adapters {
            fields.push(
                Diagnostic::error(
                    "E014",
                    at,
                    "`reference adapters_off`: only adapters can be turned off, and this method trains the model's own weights",
                )
                .with_help("`reference copy` (a frozen copy of the model), or `reference precomputed`"),
            );
        }
    }
    match word {
        Some("dpo" | "ipo") => Objective::Dpo(match reference.map(|(w, _)| w) {
            Some("copy") => Reference::Copy,
            Some("precomputed") => Reference::Precomputed,
            Some(_) => Reference::AdaptersOff,
            None if adapters => Reference::AdaptersOff,
            None => Reference::Copy,
        }),
        Some("orpo" | "simpo" | "cpo") => Objective::PairsOnly,
        _ => Objective::Sft,
    }
}

/// Checks a `training` section. `denoiser`: the workload trains a diffusion pipeline's
/// denoiser, stored in this precision.
pub(super) fn training(
    block: &Block,
    denoiser: Option<Precision>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Training> {
    const KNOWN: &[(&str, Repeat)] = &[
        ("method", Repeat::Once),
        ("weights", Repeat::Once),
        ("master", Repeat::Once),
        ("gradients", Repeat::Once),
        ("optimizer", Repeat::Once),
        ("micro_batch", Repeat::Once),
        ("sequence", Repeat::Once),
        ("source", Repeat::Once),
        ("checkpointing", Repeat::Once),
        ("attention", Repeat::Once),
        ("sharding", Repeat::Once),
        ("sequence_parallel", Repeat::Once),
        ("gradient_accumulation", Repeat::Once),
        ("activations", Repeat::Once),
        ("offload", Repeat::Once),
        ("bucket_elements", Repeat::Once),
        ("foreach", Repeat::Once),
        ("torch", Repeat::Once),
        ("bitsandbytes", Repeat::Once),
        ("loss", Repeat::Once),
        ("unquantized", Repeat::Once),
        ("step_in_backward", Repeat::Once),
        ("loss_chunks", Repeat::Once),
        ("compile", Repeat::Once),
        ("offload_activations", Repeat::Once),
        ("fused_loss", Repeat::Once),
        ("zero_grad", Repeat::Once),
        ("train_text_encoders", Repeat::Once),
        ("paged_optimizer", Repeat::Once),
        ("galore_rank", Repeat::Once),
        ("objective", Repeat::Once),
        ("reference", Repeat::Once),
        ("rope_tables", Repeat::Once),
        ("pipeline_schedule", Repeat::Once),
    ];
    let fields = Fields::new("a training section", block, KNOWN);
    if denoiser.is_some() {
        for (key, why) in NOT_FOR_A_DENOISER {
            if let Some(field) = fields.get(key) {
                fields.push(Diagnostic::error("E013", field.key.span, format!("`{key}`: {why}")));
            }
        }
    }
    let method = fields.get("method").map_or(Some(Method::Full), |field| {
        super::method::method(field, &fields, denoiser.is_some(), diagnostics)
    });
    let weights = denoiser.or_else(|| fields.precision("weights"));
    if weights.is_none() {
        fields.missing("weights", "weights bf16");
    }
    // Full and freeze tuning update stored weights, which an integer or 4-bit format cannot
    // hold (an FP8 store is left to the recipes that train through it).
    let fp8 =
        |p: Precision| matches!(p, Precision::Fp8 | Precision::Fp8Block | Precision::Fp8Layerwise);
    let stored = weights.filter(|p| !p.is_float_compute() && (denoiser.is_some() || !fp8(*p)));
    let updates = match &method {
        Some(Method::Full) => Some("full fine-tuning updates every weight"),
        Some(Method::Freeze { .. }) => Some("freeze tuning updates whole layers"),
        _ => None,
    };
    if let (Some(updates), Some(p)) = (updates, stored) {
        let span =
            block.fields.iter().find(|f| f.key.name == "method").map_or(block.span, |f| f.span);
        let base = if denoiser.is_some() { "denoiser" } else { "base" };
        fields.push(
            Diagnostic::error("E013", span, format!("{updates}, which {} cannot store", p.name()))
                .with_help(format!(
                    "train LoRA adapters on a quantized {base}: `method lora {{ rank 16 }}`"
                )),
        );
    }
    let names: Vec<&str> = Precision::NAMES.iter().copied().chain(["none"]).collect();
    let master = fields.choice("master", &names).map(|(w, _)| Precision::from_name(w));
    let gradients = fields.precision("gradients");
    let names: Vec<&str> = Optimizer::ALL.iter().map(|o| o.name()).collect();
    let optimizer = fields
        .choice("optimizer", &names)
        .and_then(|(word, _)| Optimizer::ALL.iter().copied().find(|o| o.name() == word));
    let sharding = fields
        .choice("sharding", &["none", "zero1", "zero2", "zero3", "fsdp-grad-op", "fsdp-full"])
        .map(|(w, _)| match w {
            "zero1" => Sharding::Zero1,
            "zero2" | "fsdp-grad-op" => Sharding::Zero2,
            "zero3" | "fsdp-full" => Sharding::Zero3,
            _ => Sharding::None,
        });
    let sequence_parallel = fields.boolean("sequence_parallel");
    // DeepSpeed's ZeRO-1/2 reduce gradients through buckets of `reduce_bucket_size` elements,
    // 5e8 by default (DeepSpeed configuration, `zero_optimization`); FSDP has none.
    let zero_word = |stages: &[&str]| {
        block.fields.iter().filter(|f| f.key.name == "sharding").any(|f| {
            matches!(f.values.as_slice(), [Value::Word(w)] if stages.contains(&w.name.as_str()))
        })
    };
    let buckets = zero_word(&["zero1", "zero2"]);
    let deepspeed = zero_word(&["zero1", "zero2", "zero3"]);
    let bucket_elements = fields.whole("bucket_elements", Dim::Count, 1, 1 << 40, "200_000_000");
    let activations = fields.precision("activations");
    let foreach = fields.boolean("foreach");
    let torch = torch_release::release(&fields);
    let bnb_keeps_inputs = bitsandbytes_release::keeps_inputs(&fields);
    let unquantized = fields
        .choice("unquantized", &["fp32", "bf16", "fp16"])
        .and_then(|(w, _)| Precision::from_name(w));
    let loss =
        fields.choice("loss", &["fp32", "bf16", "fp16"]).map(|(w, _)| Precision::from_name(w));
    let offload =
        fields.choice("offload", &["none", "optimizer", "parameters"]).map(|(w, _)| match w {
            "optimizer" => Offload::Optimizer,
            "parameters" => Offload::Parameters,
            _ => Offload::None,
        });
    // Accumulated gradients are held through every micro-batch's forward pass; one micro-batch
    // per step lets gradients freed after the step (`zero_grad`) leave the forward pass free.
    let accumulation = fields.whole("gradient_accumulation", Dim::Count, 1, 1_000_000, "8");
    let zero_grad = fields.choice("zero_grad", &["set_to_none", "zeros"]).map(|(w, _)| match w {
        "zeros" => ZeroGrad::Zeros,
        _ => ZeroGrad::SetToNone,
    });
    let step_in_backward = fields.boolean("step_in_backward");
    let loss_chunks = fields.whole("loss_chunks", Dim::Count, 1, 1_024, "8");
    let compile = fields.boolean("compile");
    let offload_activations = fields.boolean("offload_activations");
    let fused_loss =
        fields.choice("fused_loss", &["none", "logits", "linear"]).map(|(w, _)| match w {
            "logits" => FusedLoss::Logits,
            "linear" => FusedLoss::Linear,
            _ => FusedLoss::None,
        });
    if fused_loss.is_some_and(|f| f != FusedLoss::None) && loss_chunks.is_some_and(|n| n > 1) {
        let span = |key: &str| {
            block.fields.iter().find(|f| f.key.name == key).map_or(block.span, |f| f.span)
        };
        fields.push(
            Diagnostic::error(
                "E014",
                span("fused_loss"),
                "`fused_loss` runs its own kernels over the sequence; `loss_chunks` chunks the \
                 unfused loss",
            )
            .with_label(span("loss_chunks"), "chunks here")
            .with_help("keep one of `fused_loss` and `loss_chunks`"),
        );
    }
    if step_in_backward == Some(true) {
        step_in_backward_fits(block, accumulation, sharding, offload, &fields);
    }
    if zero_grad == Some(ZeroGrad::SetToNone) {
        set_to_none_matters(block, accumulation, step_in_backward, diagnostics);
    }
    let text_encoders = fields.boolean("train_text_encoders");
    let written = block.fields.iter().find(|f| f.key.name == "train_text_encoders");
    if let (Some(true), Some(field)) = (text_encoders, written) {
        if denoiser.is_none() {
            fields.push(Diagnostic::error(
                "E013",
                field.key.span,
                "`train_text_encoders`: a language model has no text encoders to train",
            ));
        } else if matches!(method, Some(Method::Lora { .. })) {
            diagnostics.push(
                Diagnostic::warning(
                    "W005",
                    field.key.span,
                    "`train_text_encoders` has no effect without `method full`",
                )
                .with_help(
                    "text-encoder LoRA adapters are a few MB and not modelled; remove the field",
                ),
            );
        }
    }
    let paged = fields.boolean("paged_optimizer");
    let paged_field = block.fields.iter().find(|f| f.key.name == "paged_optimizer");
    if let (Some(true), Some(field)) = (paged, paged_field)
        && offload.is_some_and(|o| o != Offload::None)
    {
        diagnostics.push(
            Diagnostic::warning(
                "W005",
                field.key.span,
                "`paged_optimizer` has no effect when `offload` keeps the states on the host",
            )
            .with_help("remove `paged_optimizer`, or `offload`"),
        );
    }
    let galore_rank = fields.whole("galore_rank", Dim::Count, 1, 65_536, "128");
    let rope_tables = fields.whole("rope_tables", Dim::Tokens, 1, MAX_TOKENS, "32768 tokens");
    let galore_field = block.fields.iter().find(|f| f.key.name == "galore_rank");
    if let (Some(field), Some(_)) = (galore_field, galore_rank) {
        // galore_torch projects a full model's gradients, keeps AdamW (or 8-bit Adam) moments,
        // and has no ZeRO, FSDP or offload path (transformers refuses GaLore with DeepSpeed).
        let refusal = if !matches!(method, Some(Method::Full)) {
            Some("`galore_rank` projects the gradients of full training; LoRA has its own low rank")
        } else if denoiser.is_some() {
            Some(
                "`galore_rank` is modelled for a language model's layer matrices, not a denoiser's",
            )
        } else if !matches!(optimizer, None | Some(Optimizer::AdamW | Optimizer::AdamW8bit)) {
            Some("`galore_rank` is modelled with `optimizer adamw` or `adamw8bit`")
        } else if sharding.is_some_and(|s| s != Sharding::None)
            || offload.is_some_and(|o| o != Offload::None)
        {
            Some("`galore_rank` runs without sharding or offload (galore_torch has neither)")
        } else {
            None
        };
        if let Some(message) = refusal {
            fields.push(
                Diagnostic::error("E014", field.key.span, message)
                    .with_help("remove `galore_rank`, or the setting it cannot run with"),
            );
        }
    }
    let objective = objective(block, &fields, method.as_ref());
    let micro_batch = fields.whole("micro_batch", Dim::Count, 1, 1_000_000, "4");
    // A denoiser's positions are the diffusion section's; 0 marks the field unused.
    let sequence = if denoiser.is_some() {
        Some(0)
    } else {
        fields.whole("sequence", Dim::Tokens, 1, MAX_TOKENS, "2048 tokens")
    };
    if sequence.is_none() {
        fields.missing("sequence", "sequence 2048 tokens");
    }
    // An encoder-decoder model's encoder input; `sequence` is then the decoder's target.
    let source = fields.whole("source", Dim::Tokens, 1, MAX_TOKENS, "512 tokens");
    let checkpointing = fields
        .choice("checkpointing", &["none", "selective", "selective-op", "full"])
        .map(|(w, _)| match w {
            "full" => Checkpointing::Full,
            "selective" => Checkpointing::Selective,
            "selective-op" => Checkpointing::SelectiveOp,
            _ => Checkpointing::None,
        });
    // A denoiser offloads the block inputs full checkpointing keeps (kohya's
    // `--cpu_offload_checkpointing`); its other activations are not offloaded.
    let offload_field = block.fields.iter().find(|f| f.key.name == "offload_activations");
    let full_checkpointing = checkpointing == Some(Checkpointing::Full);
    if let (Some(_), Some(true), Some(field), false) =
        (denoiser, offload_activations, offload_field, full_checkpointing)
    {
        fields.push(
            Diagnostic::error(
                "E014",
                field.span,
                "`offload_activations` offloads a denoiser's checkpointed block inputs, which \
                 `checkpointing full` keeps",
            )
            .with_help("add `checkpointing full`, or remove `offload_activations`"),
        );
    }
    let attention = super::workload::attention(&fields);
    let pipeline_schedule =
        fields.choice("pipeline_schedule", &["1f1b", "sequential"]).map(|(w, _)| {
            if w == "sequential" {
                PipelineSchedule::Sequential
            } else {
                PipelineSchedule::OneForwardOneBackward
            }
        });
    let found = fields.finish();
    let ok = found.is_empty();
    diagnostics.extend(found);
    let (weights, sequence, method) = (weights?, sequence?, method?);
    let default_master = match (&method, weights) {
        // Freeze tuning's trained layers follow full training's mixed precision (LLaMA-Factory
        // casts them to fp32 while the frozen ones keep the load type).
        (Method::Full | Method::Freeze { .. }, Precision::Fp16 | Precision::Bf16) => {
            Some(Precision::Fp32)
        }
        _ => None,
    };
    let full = matches!(method, Method::Full);
    ok.then(|| Training {
        method,
        weights,
        master: master.unwrap_or(default_master),
        // DeepSpeed keeps the gradients in the compute precision and casts one flat partition to
        // fp32 at the optimizer step (counted by the evaluator); PyTorch's AMP keeps them fp32.
        gradients: gradients.unwrap_or(if deepspeed {
            activations.unwrap_or_else(|| weights.companion())
        } else {
            Precision::Fp32
        }),
        optimizer: optimizer.unwrap_or(Optimizer::AdamW),
        micro_batch: micro_batch.unwrap_or(1),
        sequence,
        source,
        checkpointing: checkpointing.unwrap_or(Checkpointing::None),
        attention: attention.unwrap_or_else(|| torch_release::attention_default(torch)),
        sharding: sharding.unwrap_or(Sharding::None),
        sequence_parallel: sequence_parallel.unwrap_or(false),
        activations: activations.unwrap_or_else(|| weights.companion()),
        offload: offload.unwrap_or(Offload::None),
        bucket_elements: buckets.then(|| bucket_elements.unwrap_or(500_000_000)),
        deepspeed,
        foreach_intermediates: torch_release::foreach_intermediates(foreach, torch),
        bnb_keeps_inputs: bnb_keeps_inputs && weights.is_bitsandbytes_4bit(),
        loss: loss.flatten().unwrap_or(Precision::Fp32),
        loss_chunks: loss_chunks.unwrap_or(1),
        levers: Levers {
            step_in_backward: step_in_backward.unwrap_or(false),
            compile: compile.unwrap_or(false),
            offload_activations: offload_activations.unwrap_or(false),
            fused_loss: fused_loss.unwrap_or(FusedLoss::None),
        },
        zero_grad: zero_grad.unwrap_or_else(|| torch_release::zero_grad_default(torch)),
        accumulation: accumulation.unwrap_or(1),
        states_memory: if paged.unwrap_or(false) {
            StatesMemory::Paged
        } else {
            StatesMemory::Allocator
        },
        text_encoders: if text_encoders.unwrap_or(false) && full && denoiser.is_some() {
            TextEncoders::Trained
        } else {
            TextEncoders::Frozen
        },
        galore_rank,
        objective,
        rope_tables,
        pipeline_schedule: pipeline_schedule.unwrap_or(PipelineSchedule::OneForwardOneBackward),
        // A denoiser is counted by its parameters alone: nothing of it is left unquantized.
        unquantized: unquantized.unwrap_or_else(|| {
            if denoiser.is_some() { weights.companion() } else { default_unquantized(weights) }
        }),
    })
}

/// A step in the backward pass frees each gradient as soon as it is applied, so it cannot
/// accumulate gradients over micro-batches (torchtune refuses `optimizer_in_bwd` with
/// `gradient_accumulation_steps` above 1), and it is modelled for one device's whole optimizer:
/// not with sharded or offloaded optimizer states.
fn step_in_backward_fits(
    block: &Block,
    accumulation: Option<u64>,
    sharding: Option<Sharding>,
    offload: Option<Offload>,
    fields: &Fields<'_>,
) {
    let span =
        |key: &str| block.fields.iter().find(|f| f.key.name == key).map_or(block.span, |f| f.span);
    if accumulation.is_some_and(|n| n > 1) {
        fields.push(
            Diagnostic::error(
                "E014",
                span("step_in_backward"),
                "`step_in_backward` frees each gradient once it is applied, so gradients cannot \
                 accumulate over micro-batches",
            )
            .with_label(span("gradient_accumulation"), "accumulates gradients here")
            .with_help("set `gradient_accumulation 1`, or step after the backward pass"),
        );
    }
    let sharded = sharding.is_some_and(|s| s != Sharding::None);
    let offloaded = offload.is_some_and(|o| o != Offload::None);
    if sharded || offloaded {
        fields.push(
            Diagnostic::error(
                "E014",
                span("step_in_backward"),
                "`step_in_backward` is modelled for an optimizer that holds its states on this \
                 device unsharded",
            )
            .with_help("drop `sharding` and `offload`, or step after the backward pass"),
        );
    }
}

/// `zero_grad set_to_none` frees the gradients after the step; it changes nothing while they
/// accumulate over micro-batches (held through each forward pass) or when the step already
/// frees each one in the backward pass.
fn set_to_none_matters(
    block: &Block,
    accumulation: Option<u64>,
    step_in_backward: Option<bool>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let field = |key: &str| block.fields.iter().find(|f| f.key.name == key);
    let Some(written) = field("zero_grad") else { return };
    let (why, other, help) = if accumulation.is_some_and(|n| n > 1) {
        (
            "gradients accumulate over micro-batches",
            "gradient_accumulation",
            "remove `zero_grad`, or set `gradient_accumulation 1`",
        )
    } else if step_in_backward == Some(true) {
        (
            "the step in the backward pass already frees each gradient",
            "step_in_backward",
            "remove `zero_grad`",
        )
    } else {
        return;
    };
    let mut warning = Diagnostic::warning(
        "W005",
        written.key.span,
        format!("`zero_grad set_to_none` has no effect: {why}"),
    )
    .with_help(help);
    if let Some(other) = field(other) {
        warning = warning.with_label(other.span, "here");
    }
    diagnostics.push(warning);
}

/// What a quantized base keeps beside its quantized matrices when the field is not given:
/// bitsandbytes bases are trained through PEFT's `prepare_model_for_kbit_training` (which the
/// QLoRA recipe and TRL's `SFTTrainer` call for k-bit models), and it casts every parameter that
/// is not 8-bit or 4-bit to fp32 ("cast all non INT8 parameters to fp32"; it skips GPTQ models).
/// Other formats keep their 16-bit companion.
fn default_unquantized(weights: Precision) -> Precision {
    if weights.is_bitsandbytes() { Precision::Fp32 } else { weights.companion() }
}
