//! Checking `workload` blocks and their `inference`, `training` and `components` sections.

use super::Scope;
use super::fields::{Fields, Repeat};
use super::quantity::Dim;
use crate::ast::{Block, BlockDeclaration, DeclarationKind, Field, Value};
use crate::budget::Category;
use crate::bytes::Bytes;
use crate::diagnostic::Diagnostic;
use crate::hir::{Attention, CacheLayout, CustomComponent, Inference, Logits, Runtime, Workload};
use crate::precision::Precision;
use crate::quant::{Matrices, Scope as Quantized, WeightFormat};

/// The longest context accepted: 100 million tokens.
const MAX_TOKENS: u64 = 100_000_000;

pub(super) fn workload(
    decl: &BlockDeclaration,
    scope: &Scope,
) -> (Option<Workload>, Vec<Diagnostic>) {
    const KNOWN: &[(&str, Repeat)] = &[
        ("model", Repeat::Once),
        ("runtime", Repeat::Once),
        ("inference", Repeat::Once),
        ("training", Repeat::Once),
        ("components", Repeat::Once),
        ("scene", Repeat::Once),
        ("diffusion", Repeat::Once),
        ("cuda_module_loading", Repeat::Once),
    ];
    let what = format!("workload `{}`", decl.name.name);
    let fields = Fields::new(&what, &decl.body, KNOWN);
    let mut diagnostics = Vec::new();

    let model = fields.name("model").and_then(|ident| {
        match scope.expect(ident, &[DeclarationKind::Model]) {
            Ok(_) => Some(ident.name.clone()),
            Err(diagnostic) => {
                fields.push(diagnostic);
                None
            }
        }
    });
    // A model runs under a framework; components written by hand carry their own overhead.
    let has_model_work =
        fields.has("inference") || fields.has("training") || fields.has("diffusion");
    let default_runtime = if has_model_work { Runtime::PyTorch } else { Runtime::None };
    let runtime = fields
        .get("runtime")
        .map_or(Some(default_runtime), |field| runtime(field, &fields, &mut diagnostics));

    let inference_field = fields.get("inference");
    let training_field = fields.get("training");
    if let (Some(a), Some(b)) = (inference_field, training_field) {
        fields.push(
            Diagnostic::error(
                "E014",
                b.key.span,
                "a workload is either inference or training, not both",
            )
            .with_label(a.key.span, "inference declared here")
            .with_help("declare two workloads and check each"),
        );
    }
    let inference = inference_field.and_then(|field| {
        section(field, &fields).map(|block| inference(block, runtime.as_ref(), &mut diagnostics))
    });
    // A `training` section beside a `diffusion` one trains the pipeline's denoiser.
    let diffusion_field = fields.get("diffusion");
    let diffusion = diffusion_field.and_then(|field| section(field, &fields)).and_then(|block| {
        super::diffusion::diffusion(block, scope, training_field.is_some(), &mut diagnostics)
    });
    let denoiser = diffusion_field
        .filter(|_| training_field.is_some())
        .map(|field| denoiser_precision(field, diffusion.as_ref(), &fields));
    let training = training_field.and_then(|field| {
        section(field, &fields)
            .map(|block| super::training::training(block, denoiser, &mut diagnostics))
    });
    // Text encoders trained in full must store their weights in a float type.
    let training = match (training, &diffusion, training_field) {
        (Some(Some(t)), Some(d), Some(field))
            if t.text_encoders == crate::hir::TextEncoders::Trained =>
        {
            match d.text_encoder_weights.iter().find(|f| !f.is_float_compute()) {
                Some(format) => {
                    diagnostics.push(
                        Diagnostic::error(
                            "E013",
                            field.key.span,
                            format!(
                                "`train_text_encoders` updates every text-encoder weight, which \
                                 {} cannot store",
                                format.name()
                            ),
                        )
                        .with_help("load the text encoders in bf16, or keep them frozen"),
                    );
                    Some(None)
                }
                None => Some(Some(t)),
            }
        }
        (training, ..) => training,
    };
    let swap_field = diffusion_field
        .and_then(|field| field.block.as_ref())
        .and_then(|block| block.fields.iter().find(|f| f.key.name.ends_with("blocks_to_swap")));
    let refused = match (&training, &diffusion, training_field) {
        (Some(Some(t)), Some(d), Some(field)) => {
            !super::controlnet::fits(t, d, field, swap_field, &mut diagnostics)
                || !gathers_by_blocks(t, d, field, scope, &mut diagnostics)
        }
        _ => false,
    };
    let training = if refused { Some(None) } else { training };
    // Swapped blocks are modelled for a frozen denoiser: adapters, not its own weights, train.
    let training = match (training, &diffusion, swap_field) {
        (Some(Some(t)), Some(d), Some(field)) if d.denoiser.swap.any() && t.method.is_full() => {
            diagnostics.push(
                Diagnostic::error(
                    "E014",
                    field.key.span,
                    format!(
                        "`{}` is modelled for adapters on a frozen denoiser, not `method full`",
                        field.key.name
                    ),
                )
                .with_help("train adapters (`method lora`), or remove the swap"),
            );
            Some(None)
        }
        (training, ..) => training,
    };
    let components = fields
        .get("components")
        .and_then(|field| section(field, &fields))
        .map(|block| components(block, &mut diagnostics));

    let needs_model =
        inference_field.is_some() || (training_field.is_some() && diffusion_field.is_none());
    let model_field = decl.body.fields.iter().find(|f| f.key.name == "model");
    if let (Some(model), Some(_), Some(_)) = (model_field, training_field, diffusion_field) {
        fields.push(
            Diagnostic::error(
                "E013",
                model.key.span,
                "a trained pipeline's model is the diffusion section's `denoiser`",
            )
            .with_help("remove `model`"),
        );
    }
    if needs_model && !fields.has("model") {
        fields.missing("model", "model llama3.1-8b");
    }
    let scene = fields
        .get("scene")
        .and_then(|field| section(field, &fields))
        .map(|block| super::scene::scene(block, &mut diagnostics));
    let eager_modules = fields.choice("cuda_module_loading", &["lazy", "eager"]);
    if !needs_model && !fields.has("components") && !fields.has("scene") && !fields.has("diffusion")
    {
        fields.push(
            Diagnostic::error(
                "E011",
                decl.name.span,
                format!("workload `{}` describes no memory", decl.name.name),
            )
            .with_help(
                "add an `inference { ... }`, `training { ... }`, `scene { ... }` or `components { ... }` section",
            ),
        );
    }
    if let (Some(model), true) = (&model, needs_model)
        && scope.program_models_without_shape.contains(model)
    {
        let span = decl
            .body
            .fields
            .iter()
            .find(|f| f.key.name == "model")
            .map_or(decl.name.span, |f| f.span);
        fields.push(
                Diagnostic::error("E011", span, format!("model `{model}` has only a parameter count; caches and activations need its shape"))
                    .with_help("give the model layers, hidden, ffn, heads, kv_heads and vocab"),
            );
    }
    if let Some(model) = &model {
        let sections = [inference_field, training_field.filter(|_| diffusion_field.is_none())];
        let stacks = if scope.program_encoder_decoder_models.contains(model) {
            Some(true)
        } else {
            scope.program_decoder_models.contains(model).then_some(false)
        };
        for section in sections.into_iter().flatten() {
            source_length(section, model, stacks, &fields);
        }
        if scope.program_dense_models.contains(model) {
            experts_to_move(inference_field, model, &fields);
        }
    }
    diagnostics.extend(fields.finish());
    let ok = !diagnostics.iter().any(Diagnostic::is_error);
    let (mut inference, mut training) = (inference.flatten(), training.flatten());
    // Under transformers, a T5-style model's attention is eager whatever the default elsewhere:
    // unless the section says otherwise, estimate what will run.
    if model.as_ref().is_some_and(|m| scope.program_eager_attention_models.contains(m))
        && runtime == Some(Runtime::PyTorch)
    {
        let unwritten = |field: Option<&Field>| {
            field
                .and_then(|f| f.block.as_ref())
                .is_some_and(|b| !b.fields.iter().any(|f| f.key.name == "attention"))
        };
        if let Some(inference) = inference.as_mut().filter(|_| unwritten(inference_field)) {
            inference.attention = Attention::Eager;
        }
        if let Some(training) = training.as_mut().filter(|_| unwritten(training_field)) {
            training.attention = Attention::Eager;
        }
    }
    let workload = match (ok, runtime) {
        (true, Some(runtime)) => Some(Workload {
            name: decl.name.name.clone(),
            title: decl.title.as_ref().map(|t| t.value.clone()),
            model,
            runtime,
            inference,
            training,
            diffusion,
            eager_modules: matches!(eager_modules, Some(("eager", _))),
            components: components
                .unwrap_or_default()
                .into_iter()
                .chain(scene.unwrap_or_default())
                .collect(),
            span: decl.span,
        }),
        _ => None,
    };
    (workload, diagnostics)
}

/// `cpu_moe_layers` moves routed experts, which a dense model does not have: said, not ignored.
fn experts_to_move(section: Option<&Field>, model: &str, fields: &Fields<'_>) {
    let written = section
        .and_then(|s| s.block.as_ref())
        .and_then(|b| b.fields.iter().find(|f| f.key.name == "cpu_moe_layers"));
    if let Some(field) = written {
        fields.push(
            Diagnostic::warning(
                "W005",
                field.key.span,
                format!("`cpu_moe_layers` has no effect: model `{model}` has no experts"),
            )
            .with_help("remove it, or use `gpu_layers` to keep whole layers in host memory"),
        );
    }
}

/// An encoder-decoder model's section states the encoder's input length (`source`); a
/// decoder-only model's has none to state. `encoder_decoder` is `None` for a model without a
/// checked shape (its own errors, or a parameter count only, are reported elsewhere).
fn source_length(section: &Field, model: &str, encoder_decoder: Option<bool>, fields: &Fields<'_>) {
    let Some(block) = &section.block else { return };
    let source = block.fields.iter().find(|f| f.key.name == "source");
    let length = if section.key.name == "training" { "sequence" } else { "context" };
    match (encoder_decoder, source) {
        (Some(true), None) => fields.push(
            Diagnostic::error(
                "E011",
                section.key.span,
                format!(
                    "model `{model}` is an encoder-decoder: `{}` needs the encoder's input length",
                    section.key.name
                ),
            )
            .with_help(format!(
                "add `source 512 tokens` (the encoder's input; `{length}` is the decoder's tokens)"
            )),
        ),
        (Some(false), Some(field)) => fields.push(
            Diagnostic::error(
                "E014",
                field.key.span,
                format!("`source` is an encoder's input, but model `{model}` has no encoder"),
            )
            .with_help("remove `source`, or give the model `encoder_layers` and `decoder_layers`"),
        ),
        _ => {}
    }
}

/// The precision the trained model is stored in: a trained ControlNet's fp32, else the
/// denoiser's format, when the pipeline checked and the format is one precision for every
/// tensor; else bf16 as a stand-in (the workload is dropped for its diffusion errors, or for the
/// one reported here).
fn denoiser_precision(
    field: &Field,
    diffusion: Option<&crate::hir::Diffusion>,
    fields: &Fields<'_>,
) -> crate::precision::Precision {
    if diffusion.is_some_and(|d| d.controlnet.is_some()) {
        return super::controlnet::TRAINED;
    }
    match diffusion.map(|d| d.denoiser.weights) {
        Some(WeightFormat::Uniform(precision) | WeightFormat::Partial(precision, _)) => precision,
        Some(WeightFormat::Preset(preset)) => {
            fields.push(Diagnostic::error(
                "E013",
                field.key.span,
                format!(
                    "a trained denoiser needs one precision for every weight; `{}` mixes several",
                    preset.name()
                ),
            ));
            crate::precision::Precision::Bf16
        }
        None => crate::precision::Precision::Bf16,
    }
}

/// The block of a section field such as `inference { ... }`.
fn section<'a>(field: &'a Field, fields: &Fields<'_>) -> Option<&'a Block> {
    if !field.values.is_empty() {
        fields.push(Diagnostic::error(
            "E013",
            field.values_span(),
            format!("`{}` takes a block, not values", field.key.name),
        ));
    }
    if field.block.is_none() {
        fields.push(
            Diagnostic::error("E013", field.span, format!("`{}` needs a block", field.key.name))
                .with_help(format!("write `{} {{ ... }}` with one field per line", field.key.name)),
        );
    }
    field.block.as_ref()
}

fn runtime(
    field: &Field,
    fields: &Fields<'_>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Runtime> {
    const NAMES: [&str; 10] = [
        "pytorch",
        "diffusers",
        "vllm",
        "sglang",
        "tgi",
        "tensorrt-llm",
        "lmdeploy",
        "llama.cpp",
        "none",
        "custom",
    ];
    let [Value::Word(word)] = field.values.as_slice() else {
        fields.push(Diagnostic::error(
            "E013",
            field.span,
            format!("`runtime` takes one of: {}", NAMES.join(", ")),
        ));
        return None;
    };
    let name = fields.word_in(field, word, &NAMES)?;
    match (name, &field.block) {
        ("custom", Some(block)) => {
            const KNOWN: &[(&str, Repeat)] =
                &[("context", Repeat::Once), ("workspace", Repeat::Once)];
            let inner = Fields::new("a custom runtime", block, KNOWN);
            let context = inner.bytes("context", 0, 1 << 50, "500 MiB").unwrap_or(Bytes(0));
            let workspace = inner.bytes("workspace", 0, 1 << 50, "1 GiB").unwrap_or(Bytes(0));
            let found = inner.finish();
            let ok = found.is_empty();
            diagnostics.extend(found);
            ok.then_some(Runtime::Custom { context, workspace })
        }
        ("custom", None) => {
            fields.push(
                Diagnostic::error("E013", field.span, "a custom runtime needs a block")
                    .with_help("write `runtime custom { context 500 MiB; workspace 1 GiB }`"),
            );
            None
        }
        (_, Some(block)) => {
            fields.push(Diagnostic::error(
                "E013",
                block.span,
                format!("runtime `{name}` takes no block"),
            ));
            None
        }
        ("pytorch", None) => Some(Runtime::PyTorch),
        ("diffusers", None) => Some(Runtime::Diffusers),
        ("vllm", None) => Some(Runtime::Vllm),
        ("sglang", None) => Some(Runtime::Sglang),
        ("tgi", None) => Some(Runtime::Tgi),
        ("tensorrt-llm", None) => Some(Runtime::TensorrtLlm),
        ("lmdeploy", None) => Some(Runtime::Lmdeploy),
        ("llama.cpp", None) => Some(Runtime::LlamaCpp),
        _ => Some(Runtime::None),
    }
}

fn inference(
    block: &Block,
    runtime: Option<&Runtime>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Inference> {
    const KNOWN: &[(&str, Repeat)] = &[
        ("weights", Repeat::Once),
        ("kv_cache", Repeat::Once),
        ("activations", Repeat::Once),
        ("context", Repeat::Once),
        ("source", Repeat::Once),
        ("sessions", Repeat::Once),
        ("prefill_chunk", Repeat::Once),
        ("max_sequences", Repeat::Once),
        ("logits", Repeat::Once),
        ("attention", Repeat::Once),
        ("memory_fraction", Repeat::Once),
        ("cache_layout", Repeat::Once),
        ("residual_window", Repeat::Once),
        ("compute", Repeat::Once),
        ("quantized_matrices", Repeat::Once),
        ("unquantized_layers", Repeat::Once),
        ("gpu_layers", Repeat::Once),
        ("cpu_moe_layers", Repeat::Once),
        ("rope_tables", Repeat::Once),
    ];
    let fields = Fields::new("an inference section", block, KNOWN);
    let weights = fields.weight_format("weights");
    if weights.is_none() {
        fields.missing("weights", "weights bf16");
    }
    let weights = weights.and_then(|format| quantized_scope(&fields, format));
    // LMDeploy quantizes its cache one way: `int8` and `int4` under it are its `quant_policy` 8
    // and 4, with a 16-bit scale and zero per token and KV head.
    let kv_cache = match (runtime, fields.precision("kv_cache")) {
        (Some(Runtime::Lmdeploy), Some(Precision::Int8)) => Some(Precision::Lmdeploy { bits: 8 }),
        (Some(Runtime::Lmdeploy), Some(Precision::Int4)) => Some(Precision::Lmdeploy { bits: 4 }),
        (_, written) => written,
    };
    let activations = fields.precision("activations");
    let compute = fields
        .choice("compute", &["fp32", "bf16", "fp16"])
        .and_then(|(w, _)| crate::precision::Precision::from_name(w));
    let context = fields.whole("context", Dim::Tokens, 1, MAX_TOKENS, "8192 tokens");
    if context.is_none() {
        fields.missing("context", "context 8192 tokens");
    }
    // An encoder-decoder model's encoder input; `context` is then the decoder's tokens.
    let source = fields.whole("source", Dim::Tokens, 1, MAX_TOKENS, "512 tokens");
    let sessions = fields.whole("sessions", Dim::Count, 1, 1_000_000, "16");
    let prefill_chunk = fields.whole("prefill_chunk", Dim::Tokens, 1, MAX_TOKENS, "2048 tokens");
    let max_sequences = fields.whole("max_sequences", Dim::Count, 1, 1_000_000, "256");
    let logits = fields
        .choice("logits", &["last", "all"])
        .map(|(w, _)| if w == "all" { Logits::All } else { Logits::Last });
    let attention = attention(&fields);
    let memory_fraction = fields.get("memory_fraction").and_then(|field| {
        let (value, span) = fields.quantity(field, Dim::Percent, "90 %")?;
        if value <= crate::ratio::Ratio::ZERO || value > crate::ratio::Ratio::ONE {
            fields.push(Diagnostic::error(
                "E007",
                span,
                "`memory_fraction` is above 0 % and at most 100 %",
            ));
            return None;
        }
        Some(value)
    });
    let cache_layout = cache_layout(&fields, block, kv_cache, runtime, diagnostics);
    let gpu_layers = llama_cpp_only(&fields, block, runtime, "gpu_layers", "33", "-ngl");
    let cpu_moe_layers =
        llama_cpp_only(&fields, block, runtime, "cpu_moe_layers", "24", "--n-cpu-moe");
    let rope_tables = fields.whole("rope_tables", Dim::Tokens, 1, MAX_TOKENS, "32768 tokens");
    // Settings only a pooling server reads: said to do nothing elsewhere, not ignored silently.
    let pooling = runtime.is_some_and(Runtime::sizes_a_pool);
    // The tables are transformers' modelling code's; other runtimes build their own, once.
    let transformers = runtime.is_none_or(|r| matches!(r, Runtime::PyTorch | Runtime::Diffusers));
    for key in ["memory_fraction", "max_sequences", "rope_tables"] {
        let reads = match key {
            "max_sequences" => runtime == Some(&Runtime::Vllm),
            "rope_tables" => transformers,
            _ => pooling,
        };
        if let (false, Some(field)) = (reads, block.fields.iter().find(|f| f.key.name == key)) {
            let needs = match key {
                "max_sequences" => "`runtime vllm`",
                "rope_tables" => "`runtime pytorch` (transformers' modelling code)",
                _ => "a pooling runtime (`vllm`, `sglang`, `tgi`, `tensorrt-llm`, `lmdeploy`)",
            };
            diagnostics.push(
                Diagnostic::warning(
                    "W005",
                    field.key.span,
                    format!("`{key}` has no effect without {needs}"),
                )
                .with_help(format!("remove `{key}`, or run the workload under {needs}")),
            );
        }
    }
    let found = fields.finish();
    let ok = found.is_empty();
    diagnostics.extend(found);
    let (weights, context) = (weights?, context?);
    let activations = activations.unwrap_or_else(|| weights.companion());
    ok.then(|| Inference {
        weights,
        kv_cache: kv_cache.unwrap_or_else(|| weights.companion()),
        activations,
        compute: compute.unwrap_or(activations),
        context,
        source,
        sessions: sessions.unwrap_or(1),
        prefill_chunk,
        max_sequences,
        logits: logits.unwrap_or(Logits::Last),
        attention: attention.unwrap_or(Attention::Fused),
        memory_fraction,
        cache_layout,
        gpu_layers,
        cpu_moe_layers: cpu_moe_layers.unwrap_or(0),
        rope_tables: rope_tables.filter(|_| transformers),
    })
}

/// `gpu_layers` and `cpu_moe_layers`, llama.cpp's partial offload: any count, as `-ngl 99` is
/// written for "all", but only under `runtime llama.cpp`, the one runtime whose layers stay in
/// host memory and run there (a PyTorch model offloaded by accelerate moves its weights to the
/// device to run them).
fn llama_cpp_only(
    fields: &Fields<'_>,
    block: &Block,
    runtime: Option<&Runtime>,
    key: &str,
    example: &str,
    flag: &str,
) -> Option<u64> {
    let count = fields.whole(key, Dim::Count, 0, 1_000_000, example)?;
    if runtime == Some(&Runtime::LlamaCpp) {
        return Some(count);
    }
    let span = block.fields.iter().find(|f| f.key.name == key).map_or(block.span, |f| f.span);
    fields.push(
        Diagnostic::error(
            "E013",
            span,
            format!(
                "`{key}` is llama.cpp's partial offload (`{flag}`); this runtime keeps every \
                 weight on the device"
            ),
        )
        .with_help(format!("write `runtime llama.cpp`, or remove `{key}`")),
    );
    None
}

/// transformers' `QuantizedCache` keeps this many of the newest tokens unquantized by default
/// (`QuantizedCacheConfig.residual_length`).
const RESIDUAL_LENGTH: u64 = 128;

/// The cache layout: as written, or `quantized` for a quanto KV cache, which only transformers'
/// `QuantizedCache` stores; `None` leaves it to the runtime. A quantized layout needs a quantized
/// `kv_cache` and a runtime that lets transformers own the cache; `residual_window` means
/// something only beside it.
fn cache_layout(
    fields: &Fields<'_>,
    block: &Block,
    kv_cache: Option<Precision>,
    runtime: Option<&Runtime>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<CacheLayout> {
    let written = |key: &str| block.fields.iter().find(|f| f.key.name == key);
    let residual = fields.whole("residual_window", Dim::Tokens, 0, MAX_TOKENS, "128 tokens");
    let quanto = kv_cache.filter(|p| matches!(p, Precision::Quanto { .. }));
    let choice =
        fields.choice("cache_layout", &["preallocated", "concatenated", "tuple", "quantized"]);
    let layout = match (choice, quanto) {
        (Some(("quantized", _)), _) | (None, Some(_)) => {
            Some(CacheLayout::Quantized { residual: residual.unwrap_or(RESIDUAL_LENGTH) })
        }
        (Some(("concatenated", _)), _) => Some(CacheLayout::Concatenated),
        (Some(("tuple", _)), _) => Some(CacheLayout::Tuple),
        (Some(_), _) => Some(CacheLayout::Preallocated),
        (None, None) => None,
    };
    let quantized = matches!(layout, Some(CacheLayout::Quantized { .. }));
    match (choice, quanto) {
        (Some((word, span)), Some(precision)) if word != "quantized" => fields.push(
            Diagnostic::error(
                "E014",
                span,
                format!(
                    "a `{precision}` KV cache is transformers' QuantizedCache, not a `{word}` one"
                ),
            )
            .with_help("write `cache_layout quantized`, or leave `cache_layout` out"),
        ),
        (Some(("quantized", span)), None) => {
            let stored = kv_cache.map_or_else(
                || "not set (16-bit, as the weights)".to_string(),
                |p| format!("`{p}`"),
            );
            if kv_cache.is_none_or(Precision::is_float_compute) {
                let mut diagnostic = Diagnostic::error(
                    "E014",
                    span,
                    format!("a quantized cache stores keys and values quantized, but `kv_cache` is {stored}"),
                )
                .with_help("write `kv_cache quanto-int4` (transformers' quanto backend), or `cache_layout concatenated` for a 16-bit DynamicCache");
                if let Some(field) = written("kv_cache") {
                    diagnostic = diagnostic.with_label(field.span, "the cache's precision");
                }
                fields.push(diagnostic);
            }
        }
        _ => {}
    }
    if let (
        true,
        Some(
            runtime @ (Runtime::Vllm
            | Runtime::Sglang
            | Runtime::Tgi
            | Runtime::TensorrtLlm
            | Runtime::Lmdeploy
            | Runtime::LlamaCpp),
        ),
    ) = (quantized, runtime)
    {
        let name = match runtime {
            Runtime::Vllm => "vLLM",
            Runtime::Sglang => "SGLang",
            Runtime::Tgi => "text-generation-inference",
            Runtime::TensorrtLlm => "TensorRT-LLM",
            Runtime::Lmdeploy => "LMDeploy",
            _ => "llama.cpp",
        };
        let span =
            written("cache_layout").or_else(|| written("kv_cache")).map_or(block.span, |f| f.span);
        fields.push(
            Diagnostic::error(
                "E014",
                span,
                format!("{name} manages its own KV cache; the quantized layout is transformers' QuantizedCache"),
            )
            .with_help("use `runtime pytorch`, or a KV cache type the runtime has (`kv_cache fp8`, `q8_0`)"),
        );
    }
    if let (false, Some(field)) = (quantized, written("residual_window")) {
        diagnostics.push(
            Diagnostic::warning(
                "W005",
                field.key.span,
                "`residual_window` has no effect without `cache_layout quantized`",
            )
            .with_help("add `cache_layout quantized` (or a `quanto-` KV cache), or remove `residual_window`"),
        );
    }
    layout
}

pub(super) fn attention(fields: &Fields<'_>) -> Option<Attention> {
    fields
        .choice("attention", &["fused", "eager"])
        .map(|(w, _)| if w == "eager" { Attention::Eager } else { Attention::Fused })
}

fn components(block: &Block, diagnostics: &mut Vec<Diagnostic>) -> Vec<CustomComponent> {
    let names: Vec<&str> = Category::ALL.iter().map(|c| c.name()).chain(["training"]).collect();
    let mut out = Vec::new();
    for (i, field) in block.fields.iter().enumerate() {
        if let Some(first) = block.fields[..i].iter().find(|f| f.key.name == field.key.name) {
            diagnostics.push(
                Diagnostic::error(
                    "E012",
                    field.key.span,
                    format!("component `{}` is given twice", field.key.name),
                )
                .with_label(first.key.span, "first given here"),
            );
            continue;
        }
        let (Some(Value::Expr(expr)), Some(Value::Word(category)), 2) =
            (field.values.first(), field.values.get(1), field.values.len())
        else {
            diagnostics.push(
                Diagnostic::error(
                    "E013",
                    field.span,
                    format!("component `{}` needs a size and a category", field.key.name),
                )
                .with_help(format!(
                    "write `{} 2 GiB persistent`; categories: {}",
                    field.key.name,
                    names.join(", ")
                )),
            );
            continue;
        };
        let Some(category_value) = Category::from_word(&category.name) else {
            let mut diagnostic = Diagnostic::error(
                "E015",
                category.span,
                format!("`{}` is not a component category", category.name),
            );
            diagnostic = match super::fields::suggest(&category.name, &names) {
                Some(near) => diagnostic.with_help(format!("did you mean `{near}`?")),
                None => diagnostic.with_help(format!("choose one of: {}", names.join(", "))),
            };
            diagnostics.push(diagnostic);
            continue;
        };
        match super::quantity::evaluate(expr) {
            Ok(q) if q.dim == Dim::Bytes => match Bytes::from_ratio_ceil(q.value) {
                Some(bytes) if bytes.0 <= 1 << 50 => out.push(CustomComponent {
                    name: field.key.name.clone(),
                    bytes,
                    category: category_value,
                    provenance: crate::budget::Provenance::Exact,
                    formula: super::format_expr(expr),
                }),
                _ => diagnostics.push(Diagnostic::error(
                    "E007",
                    expr.span(),
                    format!(
                        "component `{}` is {} bytes; it must be between 0 B and 1 PiB",
                        field.key.name, q.value
                    ),
                )),
            },
            Ok(q) => diagnostics.push(
                Diagnostic::error(
                    "E005",
                    expr.span(),
                    format!("component `{}` needs bytes, but this is {}", field.key.name, q.dim),
                )
                .with_help("give the size with a unit, e.g. `512 MiB` or `3840 * 2160 * 4 B`"),
            ),
            Err(diagnostic) => diagnostics.push(diagnostic),
        }
    }
    out
}

/// `quantized_matrices` and `unquantized_layers`: a checkpoint whose quantizer converted only
/// some layer matrices (Meta's FP8 Llama 3.1: `quantized_matrices mlp`, `unquantized_layers 1`).
/// They narrow a uniform quantized format; `None` (with a diagnostic) when they cannot.
fn quantized_scope(fields: &Fields<'_>, format: WeightFormat) -> Option<WeightFormat> {
    // `get` hands out each field once: read both before anything else asks for them.
    let matrices_field = fields.get("quantized_matrices");
    let ends_field = fields.get("unquantized_layers");
    let Some(first) = matrices_field.or(ends_field) else { return Some(format) };
    let matrices = matrices_field.and_then(|f| fields.choice_of(f, &["all", "mlp", "attention"]));
    let kept_ends = ends_field.and_then(|f| {
        let (value, span) = fields.quantity(f, Dim::Count, "1")?;
        fields.check_whole("unquantized_layers", value, span, 0, 100_000)
    });
    let quantized = match format {
        WeightFormat::Uniform(p) if !p.is_float_compute() => p,
        _ => {
            let span = first.key.span;
            fields.push(
                Diagnostic::error(
                    "E013",
                    span,
                    format!(
                        "`quantized_matrices` and `unquantized_layers` narrow a quantized \
                         precision; `{}` is not one",
                        format.name()
                    ),
                )
                .with_help("for example `weights fp8` with `quantized_matrices mlp`"),
            );
            return None;
        }
    };
    let matrices = match matrices.map(|(word, _)| word) {
        Some("mlp") => Matrices::Mlp,
        Some("attention") => Matrices::Attention,
        _ => Matrices::All,
    };
    let scope = Quantized { matrices, kept_ends: kept_ends.unwrap_or(0) };
    Some(WeightFormat::Partial(quantized, scope))
}

/// A trained denoiser gathered a block at a time (`sharding zero3`, `offload parameters`) is
/// sized by its model's blocks, and its blocks are not also swapped to the host: `false`, with a
/// diagnostic, when that does not hold.
fn gathers_by_blocks(
    t: &crate::hir::Training,
    d: &crate::hir::Diffusion,
    field: &Field,
    scope: &Scope,
    diagnostics: &mut Vec<Diagnostic>,
) -> bool {
    let gathers =
        t.sharding == crate::hir::Sharding::Zero3 || t.offload == crate::hir::Offload::Parameters;
    let Some(block) = field.block.as_ref().filter(|_| gathers) else { return true };
    let at = |key: &str| {
        block.fields.iter().find(|f| f.key.name == key).map_or(field.key.span, |f| f.span)
    };
    let (key, what) = if t.offload == crate::hir::Offload::Parameters {
        ("offload", "`offload parameters`")
    } else {
        ("sharding", "`sharding zero3`")
    };
    let model = &d.denoiser.model;
    if scope.program_models_without_blocks.contains(model) {
        diagnostics.push(
            Diagnostic::error(
                "E011",
                at(key),
                format!(
                    "{what} gathers the denoiser a block at a time; model `{model}` declares no blocks"
                ),
            )
            .with_help(format!(
                "give `{model}` its `largest_block` and `outside_blocks` (its top-level block \
                 lists' largest entry and what lies outside them)"
            )),
        );
        return false;
    }
    if d.denoiser.swap.any() {
        diagnostics.push(
            Diagnostic::error(
                "E014",
                at(key),
                format!(
                    "{what} gathers the denoiser's blocks; swapping them as well is not modelled"
                ),
            )
            .with_help("keep one of them"),
        );
        return false;
    }
    true
}
