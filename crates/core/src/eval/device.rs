//! What one device holds: the weights of its share of the model, the workload's caches,
//! intermediates and training state, the runtime's workspaces, and any components written by
//! hand; and [`Reuse`], what evaluations of one program keep from one to the next.

use std::borrow::Cow;

use super::calc::{self, Overflow, div_ceil, formula};
use super::{
    Placement, diffusion, diffusion_training, headroom_for, kv_quantized, llm, offload, params,
    pool, prefill, runtime, serving, training,
};
use crate::budget::{Component, HeldBy, KvPool, Provenance};
use crate::bytes::{Bytes, GIB};
use crate::hir::{Device, Headroom, Layered, Runtime, Workload};
use crate::precision::Precision;
use crate::ratio::Ratio;

/// What a device holds: its components, and the KV pool when the runtime sizes one.
pub(super) type Held = (Vec<Component>, Option<KvPool>);

/// Everything one device holds for `workload` at `placement`.
pub(super) fn device_components(
    program: &Layered<'_>,
    workload: &Workload,
    shape: Option<&crate::hir::Shape>,
    stored: Option<&crate::hir::Stored>,
    device: &Device,
    placement: &Placement,
    split: crate::hir::Split,
) -> Result<Held, Overflow> {
    let mut reuse = Reuse::default();
    device_components_reusing(
        program, workload, shape, stored, device, placement, split, &mut reuse,
    )
}

/// [`device_components`], taking the weights and the runtime's components from `reuse` when an
/// earlier evaluation of the same program computed them.
#[allow(clippy::too_many_arguments, reason = "the device's whole context, as device_components")]
pub(super) fn device_components_reusing(
    program: &Layered<'_>,
    workload: &Workload,
    shape: Option<&crate::hir::Shape>,
    stored: Option<&crate::hir::Stored>,
    device: &Device,
    placement: &Placement,
    split: crate::hir::Split,
    reuse: &mut Reuse,
) -> Result<Held, Overflow> {
    let (t, p, d) = (u64::from(split.tensor), u64::from(split.pipeline), u64::from(split.data));
    let mut components = Vec::with_capacity(16);
    let mut pool_request = None;
    // The ranks this device exchanges tensors with over NCCL. PyTorch's layer split for
    // inference is accelerate's `device_map`, one process copying activations between its
    // GPUs, as is a training step's sequential pipeline: no process group for the stages.
    let one_process = match &workload.training {
        Some(training) => training.pipeline_schedule == crate::hir::PipelineSchedule::Sequential,
        None => matches!(workload.runtime, Runtime::PyTorch | Runtime::Diffusers),
    };
    let mut peers = if one_process { t } else { t * p };
    if let (Some(inference), Some(shape)) = (&workload.inference, shape) {
        let model = workload.model.as_deref().unwrap_or_default();
        Reuse::components(
            &mut reuse.weights,
            |k| {
                k.model == model
                    && k.format == inference.weights
                    && k.placement == *placement
                    && k.runtime == workload.runtime
            },
            || WeightsKey {
                model: model.to_string(),
                format: inference.weights,
                placement: *placement,
                runtime: workload.runtime.clone(),
            },
            &mut components,
            || weight_components(shape, stored, placement, inference.weights, &workload.runtime),
        )?;
        if let Some(positions) = inference.rope_tables {
            components.push(llm::rope_tables(shape, placement, positions, inference.activations)?);
        }
        let sessions = div_ceil(inference.sessions, d);
        let rule = serving::pool_rule(&workload.runtime, inference, placement, device);
        // vLLM pages the cache in blocks of 16 tokens (`CacheConfig.DEFAULT_BLOCK_SIZE`).
        let block = rule.as_ref().map_or(1, |rule| rule.block);
        let layout = inference.cache_layout.unwrap_or(match workload.runtime {
            Runtime::PyTorch | Runtime::Diffusers => crate::hir::CacheLayout::Concatenated,
            _ => crate::hir::CacheLayout::Preallocated,
        });
        // An encoder without a vocabulary output (`output none`: BERT-style embedders and
        // classifiers) attends both ways over its whole input in one pass and caches nothing:
        // transformers' BERT returns keys and values only when configured as a decoder. A
        // pooling server still sizes its pool by its own rule.
        let encoder_only =
            shape.output == crate::hir::Output::None && shape.encoder.is_none() && rule.is_none();
        match layout {
            _ if encoder_only => {}
            crate::hir::CacheLayout::Quantized { residual } => {
                components.extend(kv_quantized::components(
                    shape,
                    placement,
                    inference.kv_cache,
                    inference.activations,
                    inference.context,
                    sessions,
                    residual,
                )?);
            }
            _ => components.push(llm::kv_cache(
                shape,
                placement,
                inference.kv_cache,
                inference.context,
                sessions,
                block,
            )?),
        }
        // An encoder-decoder model's encoder input; `context` is then the decoder's tokens.
        let source = inference.source.filter(|_| shape.encoder.is_some());
        if let Some(source) = source {
            let cross = match layout {
                // transformers keeps the cross-attention cache a plain DynamicCache.
                crate::hir::CacheLayout::Quantized { .. } => inference.activations,
                _ => inference.kv_cache,
            };
            components.extend(llm::encoder_decoder_held(
                shape,
                placement,
                cross,
                inference.activations,
                source,
                sessions,
            )?);
        }
        if let Some(kv) = components.iter().find(|c| c.category == crate::budget::Category::Cache) {
            let copy = match layout {
                // Its update's transient is one of the layout's own components.
                crate::hir::CacheLayout::Preallocated
                | crate::hir::CacheLayout::Quantized { .. } => None,
                crate::hir::CacheLayout::Concatenated => {
                    // Only decoder layers cache.
                    let encoder = shape.encoder_layers_in(placement.first_layer, placement.layers);
                    let layers = (placement.layers - encoder).max(1);
                    Some((
                        Bytes(kv.bytes.0.div_ceil(layers)),
                        formula!(
                            "{} ÷ {layers} layers: one layer's cache copied by torch.cat",
                            kv.bytes
                        ),
                    ))
                }
                crate::hir::CacheLayout::Tuple => Some((
                    kv.bytes,
                    formula!("{}: the previous step's whole tuple cache", kv.bytes),
                )),
            };
            if let Some((bytes, formula)) = copy {
                components.push(Component {
                    held_by: HeldBy::Tensors,
                    name: "KV cache: previous copy while growing".into(),
                    category: crate::budget::Category::Intermediate,
                    bytes,
                    provenance: Provenance::Formula,
                    formula: formula!("{formula} = {bytes}"),
                    source: Some("transformers DynamicCache.update concatenates per layer; legacy tuple caches keep the whole previous cache".into()),
                });
            }
        }
        // An encoder-decoder model's largest step is the encoder's pass over the source.
        let prompt = source.unwrap_or(inference.context);
        let all_prompts = prompt.checked_mul(sessions).ok_or(Overflow)?;
        // vLLM's engine defaults (`EngineArgs.get_batch_defaults`, DOMAIN.md §4.4): larger
        // batches on GPUs of 70 GiB or more other than the A100.
        let large = device.memory.0 >= 70 * GIB && device.arch != crate::hir::Arch::Ampere;
        let (tokens, rows) = match workload.runtime {
            // vLLM profiles one dummy step of max_num_batched_tokens over max_num_seqs
            // sequences and samples one row per sequence, whatever the sessions (§4.1).
            Runtime::Vllm => {
                let chunk = inference.prefill_chunk.unwrap_or(if large { 8192 } else { 2048 });
                let max_num_seqs =
                    inference.max_sequences.unwrap_or(if large { 1024 } else { 256 });
                (chunk, max_num_seqs.min(chunk))
            }
            // llama.cpp's physical batch (-ub) default; its compute buffer is reserved for the
            // logits of every token in the batch.
            Runtime::LlamaCpp => {
                let tokens = inference.prefill_chunk.unwrap_or(512).min(all_prompts);
                (tokens, tokens)
            }
            // SGLang's chunked prefill, TGI's warm-up prefill, TensorRT-LLM's `max_num_tokens`
            // and LMDeploy's `max_prefill_token_num`: a step of their default tokens (or the
            // stated chunk) over as many sequences as fit in it.
            Runtime::Sglang | Runtime::Tgi | Runtime::TensorrtLlm | Runtime::Lmdeploy => {
                let tokens = inference
                    .prefill_chunk
                    .or_else(|| serving::profile_tokens(&workload.runtime, device))
                    .unwrap_or(all_prompts);
                (tokens, sessions.min(tokens))
            }
            _ => (inference.prefill_chunk.unwrap_or(all_prompts).min(all_prompts), sessions),
        };
        let ggml = workload.runtime == Runtime::LlamaCpp;
        // llama.cpp's op offload runs host-held products on the first device.
        let host_copies = match offload::Offload::of(inference, shape) {
            Some(offload) if placement.stage == 0 => {
                offload::HostCopies::of(shape, inference.weights, offload, tokens)?
            }
            _ => offload::HostCopies::default(),
        };
        let step = llm::Step {
            tokens,
            sequences: rows,
            // llama.cpp's worst-case graph attends over every cell of its cache, which holds
            // the context of every slot (`n_kv` is the cache size when it reserves).
            key_length: if ggml { all_prompts } else { prompt },
            // An encoder-decoder's step over the source is the encoder's, without logits; its
            // decoder computes them one generated token per session at a time.
            logits: if source.is_some() { crate::hir::Logits::Last } else { inference.logits },
            attention: inference.attention,
            precision: inference.activations,
            head: match workload.runtime {
                Runtime::Vllm => llm::HeadUse::SortingSampler,
                Runtime::Tgi => llm::HeadUse::PromptLogprobs,
                _ => llm::HeadUse::Sample,
            },
            transformers: workload.runtime == Runtime::PyTorch,
            dequantized: llm::dequantized_copies(
                inference.weights,
                inference.activations,
                inference.compute,
                tokens,
            ),
            ggml,
            host_copies,
        };
        components.extend(llm::forward_step(shape, placement, &step)?);
        // A growing cache meets the prefill with the prompt's KV only (`prefill.rs`).
        let growing = matches!(
            layout,
            crate::hir::CacheLayout::Concatenated | crate::hir::CacheLayout::Tuple
        );
        let prompt_tokens = div_ceil(tokens, sessions.max(1)).min(inference.context);
        if growing && source.is_none() && prompt_tokens < inference.context {
            let held = |name: &str| components.iter().find(|c| c.name == name).map(|c| c.bytes);
            let whole = held("KV cache").unwrap_or(Bytes::ZERO);
            let copy = held("KV cache: previous copy while growing").unwrap_or(Bytes::ZERO);
            let prompt =
                llm::kv_cache(shape, placement, inference.kv_cache, prompt_tokens, sessions, 1)?;
            let generated = Bytes(whole.0.saturating_sub(prompt.bytes.0).saturating_add(copy.0));
            let what = formula!(
                "the KV of the {} generated tokens per session and the copy its growth makes",
                inference.context - prompt_tokens
            );
            prefill::yield_to_generated(&mut components, generated, &what);
        }
        if let Some(rule) = rule {
            let model = workload.model.as_deref().unwrap_or_default();
            let per_token = reuse.kv_per_token(model, placement, inference.kv_cache, || {
                Ok(llm::kv_cache(shape, placement, inference.kv_cache, 1, 1, 1)?.bytes)
            })?;
            let needed_tokens =
                div_ceil(inference.context, block).checked_mul(block * sessions).ok_or(Overflow)?;
            pool_request = Some((rule, per_token, needed_tokens, inference.context));
        }
    }
    match (&workload.diffusion, &workload.training) {
        (Some(pipeline), Some(training)) => {
            components.extend(diffusion_training::components(program, pipeline, training, d)?);
        }
        (Some(pipeline), None) => components.extend(diffusion::components(program, pipeline)?),
        (None, _) => {}
    }
    if let (Some(training), Some(shape), None) = (&workload.training, shape, &workload.diffusion) {
        peers *= d;
        components.extend(training::components(shape, placement, training, d)?);
        if workload.runtime == Runtime::PyTorch {
            components.extend(training::allocator_cache(
                shape,
                placement,
                training,
                d,
                &mut reuse.replays,
            )?);
        }
    }
    let key = RuntimeKey {
        runtime: workload.runtime.clone(),
        arch: device.arch.clone(),
        peers,
        eager_modules: workload.eager_modules,
    };
    Reuse::components(
        &mut reuse.runtime,
        |k| *k == key,
        || key.clone(),
        &mut components,
        || Ok(runtime::components(&workload.runtime, &device.arch, peers, workload.eager_modules)),
    )?;
    // A serving runtime fills what its own tensors and the runtime leave of its share with KV
    // blocks; SGLang then allocates its request table, sized by the pool, outside the share.
    let kv_pool = match pool_request {
        Some((rule, per_token, needed, context)) => {
            let pool = pool::fill(&mut components, device.usable(), &rule, per_token, needed)?;
            if workload.runtime == Runtime::Sglang {
                components.extend(serving::sglang_tables(pool.tokens, context)?);
            }
            Some(pool)
        }
        None => None,
    };
    Ok((with_custom(components, workload), kv_pool))
}

/// The weights one device holds: the checkpoint's stored bytes when the workload runs it in
/// its stored format, else computed from the shape.
fn weight_components(
    shape: &crate::hir::Shape,
    stored: Option<&crate::hir::Stored>,
    placement: &Placement,
    format: crate::quant::WeightFormat,
    runtime: &Runtime,
) -> Result<Vec<Component>, Overflow> {
    let mut components = match stored.filter(|stored| stored.format == format) {
        Some(stored) => vec![stored_weights(shape, placement, stored)?],
        None => {
            llm::weights(shape, placement, format, crate::budget::Category::Persistent, "weights")?
        }
    };
    if *runtime == Runtime::LlamaCpp {
        // llama.cpp keeps the token embedding in host memory (its load log lists
        // `token_embd` in the CPU buffer): shown, at zero bytes on the device.
        for component in components.iter_mut().filter(|c| c.name.ends_with(": embedding")) {
            component.formula = formula!(
                "{}, kept in host memory by llama.cpp: 0 B on the device",
                component.formula
            );
            component.name.to_mut().push_str(" (host memory)");
            component.bytes = Bytes::ZERO;
        }
    }
    Ok(components)
}

/// The checkpoint's own weight bytes, read from its headers, for this device's share of the
/// parameters: exact on one device, divided by parameter share under a split.
fn stored_weights(
    shape: &crate::hir::Shape,
    placement: &Placement,
    stored: &crate::hir::Stored,
) -> Result<Component, Overflow> {
    let total = params::parameter_count(shape).ok_or(Overflow)?;
    let here = params::device_parameter_count(shape, placement).ok_or(Overflow)?;
    let whole = here >= total;
    let (bytes, formula) = if whole {
        (stored.bytes, formula!("{} as stored (checkpoint headers)", stored.bytes))
    } else {
        let fraction = Ratio::new(i128::from(here), i128::from(total.max(1))).ok_or(Overflow)?;
        let exact = Ratio::int(i128::from(stored.bytes.0)).checked_mul(fraction).ok_or(Overflow)?;
        let bytes = Bytes::from_ratio_ceil(exact).ok_or(Overflow)?;
        (
            bytes,
            formula!(
                "{} as stored × {here} of {total} params on this device = {bytes}",
                stored.bytes
            ),
        )
    };
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: format!("weights ({}, as stored)", stored.format.name()).into(),
        category: crate::budget::Category::Persistent,
        bytes,
        provenance: if whole { Provenance::Exact } else { Provenance::Formula },
        formula,
        source: Some("the checkpoint's safetensors or GGUF headers".into()),
    })
}

/// Adds the components written by hand in the workload.
fn with_custom(mut components: Vec<Component>, workload: &Workload) -> Vec<Component> {
    components.extend(workload.components.iter().map(|c| Component {
        held_by: HeldBy::Tensors,
        name: c.name.clone().into(),
        category: c.category,
        bytes: c.bytes,
        provenance: c.provenance,
        formula: if c.provenance == Provenance::Exact {
            formula!("{} = {}", c.formula, c.bytes)
        } else {
            c.formula.clone()
        },
        source: None,
    }));
    components
}

/// What evaluations of one program keep from one to the next: the parts of a device's budget
/// that do not depend on the values a planner or a fit map changes (the weights, the runtime's
/// constants, the headroom), each under a key of everything it does depend on besides the
/// program's declarations. Components are kept in bytes-only mode only, without their text; a
/// full evaluation uses a fresh one and keeps only the headroom (devices of one kind).
#[derive(Clone, Debug, Default)]
pub(crate) struct Reuse {
    weights: Vec<(WeightsKey, Vec<Component>)>,
    runtime: Vec<(RuntimeKey, Vec<Component>)>,
    /// By headroom rule name and device name.
    headrooms: Vec<((String, String), (Bytes, String))>,
    /// KV bytes of one token, by model, placement and cache precision.
    kv_per_token: Vec<((String, Placement, Precision), Bytes)>,
    /// The training step's allocator replays, by the sizes of its tensors.
    replays: training::Replays,
}

/// What a workload's weight components depend on, besides its model's declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
struct WeightsKey {
    model: String,
    format: crate::quant::WeightFormat,
    placement: Placement,
    runtime: Runtime,
}

/// What the runtime's components depend on.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RuntimeKey {
    runtime: Runtime,
    arch: crate::hir::Arch,
    peers: u64,
    eager_modules: bool,
}

impl Reuse {
    /// The KV bytes of one token of `model` at `placement` in `precision`.
    fn kv_per_token(
        &mut self,
        model: &str,
        placement: &Placement,
        precision: Precision,
        compute: impl FnOnce() -> Result<Bytes, Overflow>,
    ) -> Result<Bytes, Overflow> {
        let found = self
            .kv_per_token
            .iter()
            .find(|((m, at, p), _)| m == model && at == placement && *p == precision);
        if let Some((_, bytes)) = found {
            return Ok(*bytes);
        }
        let bytes = compute()?;
        self.kv_per_token.push(((model.to_string(), *placement, precision), bytes));
        Ok(bytes)
    }

    /// The headroom rule `name` keeps on `device`, and how.
    pub(super) fn headroom(
        &mut self,
        program: &Layered<'_>,
        name: &str,
        device: &Device,
    ) -> Result<(Bytes, String), Overflow> {
        let found =
            self.headrooms.iter().find(|((rule, on), _)| rule == name && *on == device.name);
        if let Some((_, found)) = found {
            return Ok(found.clone());
        }
        let computed = match program.headroom(name) {
            Some(rule) => headroom_for(rule, device)?,
            None => headroom_for(&Headroom::builtin(), device)?,
        };
        self.headrooms.push(((name.to_string(), device.name.clone()), computed.clone()));
        Ok(computed)
    }

    /// Appends the components cached under the key `is` accepts, computing them first (and
    /// caching them under `key()`) when there are none.
    fn components<K>(
        cache: &mut Vec<(K, Vec<Component>)>,
        is: impl Fn(&K) -> bool,
        key: impl FnOnce() -> K,
        into: &mut Vec<Component>,
        compute: impl FnOnce() -> Result<Vec<Component>, Overflow>,
    ) -> Result<(), Overflow> {
        if calc::writing() {
            // A full evaluation is made once: copying formulas into a cache would cost more
            // than it saves.
            into.extend(compute()?);
            return Ok(());
        }
        if let Some((_, found)) = cache.iter().find(|(k, _)| is(k)) {
            into.extend(found.iter().cloned());
            return Ok(());
        }
        let mut computed = compute()?;
        // Nothing reads a component's name or source in bytes-only mode (the llama.cpp
        // embedding has been found by name inside `compute`): copies stay allocation-free.
        for component in &mut computed {
            component.name = Cow::Borrowed("");
            component.source = None;
        }
        into.extend(computed.iter().cloned());
        cache.push((key(), computed));
        Ok(())
    }
}
