//! Checked declarations to a [`Budget`]: one budget per device of every check.
//!
//! Devices are never pooled. Each rank gets a [`Placement`] (its tensor shard, its pipeline
//! stage and layers, its data-parallel replica) and its own components, headroom and verdict.

mod allocator;
mod band;
mod block_swap;
mod calc;
mod controlnet_training;
mod denoiser_gather;
mod device;
mod diffusion;
mod diffusion_training;
mod dit_block;
mod fit;
pub mod grid;
mod host;
mod kv_quantized;
pub(crate) mod llm;
pub(crate) mod offload;
pub(crate) mod params;
mod pool;
mod prefill;

pub use band::measured_margins;
pub use params::parameter_count;
mod runtime;
mod serving;
mod sharing;
mod training;
mod unet_activations;
mod vae_blocks;
mod vae_dc;
mod vae_decode;
mod vae_encode;
mod vae_hunyuan;
mod vae_ltx;
mod vae_mochi;
mod vae_video;
mod vae_wan;

pub(crate) use calc::Overflow;
use calc::{div_ceil, formula};
pub(crate) use device::Reuse;
use device::{Held, device_components, device_components_reusing};
pub(crate) use fit::{CheckFit, evaluate_fit};

use crate::budget::{
    BandBasis, Budget, Capacity, CheckBudget, Component, DeviceBudget, HeadroomReport, HeldBy,
    Provenance, SCHEMA_VERSION, SplitReport, Verdict, Views,
};
use crate::bytes::Bytes;
use crate::diagnostic::Diagnostic;
use crate::hir::{CheckSpec, Device, Headroom, Layered, Workload};
use crate::precision::{Feature, Precision};
use crate::ratio::Ratio;

pub use runtime::PROFILES_VERSION;

/// What one device holds under the split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub tensor: u64,
    pub stage: u64,
    pub stages: u64,
    /// The first decoder layer of this device's pipeline stage (from 0).
    pub first_layer: u64,
    /// Decoder layers on this device's pipeline stage.
    pub layers: u64,
    /// The model's first layers whose routed experts stay in host memory (llama.cpp's
    /// `--n-cpu-moe`): this device holds the rest of those layers. 0 everywhere else.
    pub host_experts: u64,
}

/// Layers of stage `stage` when `layers` are cut into `stages`; the first stages take the
/// remainder.
fn stage_layers(layers: u64, stages: u64, stage: u64) -> u64 {
    layers / stages + u64::from(stage < layers % stages)
}

pub fn evaluate(program: &Layered<'_>) -> (Budget, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let mut checks = Vec::new();
    for spec in program.checks() {
        match evaluate_check(program, spec, &mut diagnostics) {
            Ok(Some(check)) => checks.push(check),
            Ok(None) => {}
            Err(Overflow) => diagnostics.push(
                Diagnostic::error(
                    "E032",
                    spec.span,
                    format!("the budget of `{}` overflows 64-bit byte counts", spec.id),
                )
                .with_help(
                    "some quantity is far beyond any real device; check the units and counts",
                ),
            ),
        }
    }
    (Budget { schema_version: SCHEMA_VERSION, checks, queries: Vec::new() }, diagnostics)
}

/// One check's budget: every device's components, headroom and verdict. The planner calls it
/// directly with a changed workload or split.
pub(crate) fn evaluate_check(
    program: &Layered<'_>,
    spec: &CheckSpec,
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<Option<CheckBudget>, Overflow> {
    let Some(workload) = program.workload(&spec.workload) else { return Ok(None) };
    let others: Vec<&Workload> = spec.also.iter().filter_map(|w| program.workload(w)).collect();
    let mut reuse = Reuse::default();
    let Some(Ranks { devices: ranks, mut held, notes }) =
        rank_devices(program, spec, workload, &others, &mut reuse, diagnostics)?
    else {
        return Ok(None);
    };
    let split = spec.split;
    let (t, p, d) = (u64::from(split.tensor), u64::from(split.pipeline), u64::from(split.data));
    let mut devices = Vec::with_capacity(ranks.len());
    // Each device gets its own copy of what it holds; the last one to hold it takes it.
    let mut last_use = vec![0; held.len()];
    for (i, ranked) in ranks.iter().enumerate() {
        last_use[ranked.held] = i;
    }
    for (i, ranked) in ranks.into_iter().enumerate() {
        let Ranked {
            rank,
            stage,
            device,
            held: index,
            used,
            releasable,
            headroom,
            required,
            verdict,
        } = ranked;
        let (components, kv_pool) = if last_use[index] == i {
            std::mem::take(&mut held[index])
        } else {
            held[index].clone()
        };
        let role = format!(
            "tensor rank {} of {t}, pipeline stage {} of {p}, replica {} of {d}",
            rank % t,
            stage + 1,
            rank / (t * p) + 1
        );
        let views = views(&components, device.usable())?;
        let band = band::band(&components, used, band_basis(workload))?;
        devices.push(DeviceBudget {
            index: u32::try_from(rank).unwrap_or(u32::MAX),
            device: device.name.clone(),
            device_title: device.display_name().to_string(),
            role,
            capacity: Capacity {
                bytes: device.memory,
                provenance: if device.memory_reported {
                    Provenance::Exact
                } else {
                    Provenance::Assumed
                },
                reserved: device.reserved,
                usable: device.usable(),
            },
            components,
            used,
            views,
            band,
            headroom: HeadroomReport { bytes: headroom.0, rule: headroom.1 },
            releasable,
            required,
            kv_pool,
            verdict,
        });
    }
    let persistent = persistent_bytes(
        spec,
        devices.iter().map(|d| d.components.as_slice()),
        machine_of(program, spec).is_some(),
    )?;
    let host = host_report(program, spec, workload, &others, persistent)?;
    let host_verdicts = host.iter().flat_map(|h| [&h.ram.verdict, &h.disk.verdict]).flatten();
    let Some(verdict) = Verdict::worst(devices.iter().map(|d| &d.verdict).chain(host_verdicts))
    else {
        return Ok(None);
    };
    Ok(Some(CheckBudget {
        id: spec.id.clone(),
        title: spec.title.clone(),
        workload: spec.workload.clone(),
        target: spec.target.clone(),
        split: SplitReport { tensor: split.tensor, pipeline: split.pipeline, data: split.data },
        devices,
        verdict,
        notes,
        suggestions: Vec::new(),
        host,
    }))
}

/// One device of a check with its bytes and verdict, before it is written up.
struct Ranked<'p> {
    rank: u64,
    stage: u64,
    device: &'p Device,
    /// What it holds: an index into [`Ranks::held`].
    held: usize,
    used: Bytes,
    /// Of `used`, the cache a device without room gets back ([`HeldBy::ReleasableCache`]).
    releasable: Bytes,
    headroom: (Bytes, String),
    required: Bytes,
    verdict: Verdict,
}

/// Every device of a check, in rank order, and the check's notes.
struct Ranks<'p> {
    devices: Vec<Ranked<'p>>,
    /// What devices hold, once per device kind and pipeline stage.
    held: Vec<Held>,
    /// None in bytes-only mode.
    notes: Vec<String>,
}

/// Every device of a check and its notes; `None` when a device is missing.
fn rank_devices<'p>(
    program: &'p Layered<'_>,
    spec: &CheckSpec,
    workload: &Workload,
    others: &[&Workload],
    reuse: &mut Reuse,
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<Option<Ranks<'p>>, Overflow> {
    let headroom_name = spec.headroom.as_deref().unwrap_or("default");
    let split = spec.split;
    let (t, p, d) = (u64::from(split.tensor), u64::from(split.pipeline), u64::from(split.data));
    let writing = calc::writing();
    let mut notes = Vec::new();
    let mut ranks: Vec<Ranked<'p>> = Vec::with_capacity(spec.devices.len());
    let mut reported_capability: Vec<&str> = Vec::new();
    let mut held: Vec<Held> = Vec::new();
    let mut held_by: Vec<(&str, u64)> = Vec::new();
    if let (Some(inference), true, true) = (&workload.inference, d > 1, writing) {
        notes.push(format!(
            "{} sessions are spread over {d} data-parallel replicas: {} on each",
            inference.sessions,
            div_ceil(inference.sessions, d)
        ));
    }
    let model = workload.model.as_ref().and_then(|m| program.model(m));
    let shape = model.and_then(|m| m.shape.as_ref());
    let stored = model.and_then(|m| m.stored.as_ref());
    let offload = sharing::offload_of(workload, shape);
    // One stage without declared layers holds every layer on the devices: no plan needed.
    let plan = shape.filter(|_| p > 1 || spec.stage_layers.is_some()).and_then(|s| {
        let on_devices = offload.map_or(s.layers, |o| o.device_layers(s));
        sharing::stage_plan(program, spec, on_devices)
    });
    if let Some(plan) = plan.as_ref().filter(|plan| {
        writing
            && shape.is_some_and(|s| {
                let on_devices = offload.map_or(s.layers, |o| o.device_layers(s));
                plan.iter().any(|(_, n)| *n != stage_layers(on_devices, p, 0))
            })
            && spec.devices.windows(2).any(|w| w[0] != w[1])
            && spec.stage_layers.is_none()
    }) {
        let layers: Vec<String> = plan.iter().map(|(_, n)| n.to_string()).collect();
        notes.push(format!(
            "pipeline stages on GPUs of different sizes: layers divided in proportion to memory ({})",
            layers.join(" / ")
        ));
    }
    for (rank, device_name) in spec.devices.iter().enumerate() {
        let Some(device) = program.device(device_name) else { return Ok(None) };
        let rank = rank as u64;
        let stage = (rank / t) % p;
        // Ranks on the same device kind and pipeline stage hold the same things: compute once.
        let key = (device_name.as_str(), stage);
        let index = if let Some(index) = held_by.iter().position(|k| *k == key) {
            index
        } else {
            let placement = sharing::placement(shape, split, stage, plan.as_ref(), offload);
            let own = device_components_reusing(
                program, workload, shape, stored, device, &placement, split, reuse,
            )?;
            held.push(sharing::with_co_resident(
                program, workload, others, own, device, stage, split,
            )?);
            held_by.push(key);
            held.len() - 1
        };
        let (components, kv_pool) = &held[index];
        let used = calc::sum(components.iter().map(|c| c.bytes))?;
        let releasable = calc::sum(
            components.iter().filter(|c| c.held_by == HeldBy::ReleasableCache).map(|c| c.bytes),
        )?;
        let headroom = reuse.headroom(program, headroom_name, device)?;
        // The releasable cache is part of `used`, so the subtraction cannot underflow.
        let required = calc::add(Bytes(used.0 - releasable.0), headroom.0)?;
        let missing = std::iter::once(workload)
            .chain(others.iter().copied())
            .find_map(|w| first_missing_feature(w, device));
        let verdict = if let Some((precision, feature)) = missing {
            if writing && !reported_capability.contains(&device_name.as_str()) {
                reported_capability.push(device_name);
                diagnostics.push(capability_diagnostic(spec, device, precision, feature));
            }
            Verdict::Unsupported {
                reason: format!(
                    "{} has no {} support (needed by {precision})",
                    device.display_name(),
                    feature.name()
                ),
            }
        } else if let Some(pool) = kv_pool.as_ref().filter(|pool| pool.tokens < pool.needed_tokens)
        {
            Verdict::Over { over: pool.shortfall }
        } else if required <= device.usable() {
            Verdict::Fits { free: Bytes(device.usable().0 - required.0) }
        } else {
            Verdict::Over { over: Bytes(required.0 - device.usable().0) }
        };
        ranks.push(Ranked {
            rank,
            stage,
            device,
            held: index,
            used,
            releasable,
            headroom,
            required,
            verdict,
        });
    }
    Ok(Some(Ranks { devices: ranks, held, notes }))
}

/// The persistent bytes (weights) of one replica's devices, which the host holds a copy of;
/// zero when the check names no machine.
fn persistent_bytes<'c>(
    spec: &CheckSpec,
    devices: impl Iterator<Item = &'c [Component]>,
    on_machine: bool,
) -> Result<Bytes, Overflow> {
    if !on_machine {
        return Ok(Bytes::ZERO);
    }
    let replica = usize::try_from(u64::from(spec.split.tensor) * u64::from(spec.split.pipeline))
        .unwrap_or(usize::MAX);
    calc::sum(
        devices
            .take(replica)
            .flatten()
            .filter(|c| c.category == crate::budget::Category::Persistent)
            .map(|c| c.bytes),
    )
}

/// The machine the check runs on, when it names one.
fn machine_of<'p>(program: &'p Layered<'_>, spec: &CheckSpec) -> Option<&'p crate::hir::Machine> {
    spec.machine.as_deref().and_then(|m| program.machine(m))
}

/// The host's RAM and disk lines, when the check names a machine.
fn host_report(
    program: &Layered<'_>,
    spec: &CheckSpec,
    workload: &Workload,
    others: &[&Workload],
    persistent: Bytes,
) -> Result<Option<crate::budget::HostBudget>, Overflow> {
    let Some(machine) = machine_of(program, spec) else { return Ok(None) };
    let all: Vec<&Workload> = std::iter::once(workload).chain(others.iter().copied()).collect();
    Ok(Some(host::host(program, machine, &all, persistent, spec.devices.len() as u64)?))
}

/// Which measurements say how far the truth may be from a workload's estimate.
fn band_basis(workload: &crate::hir::Workload) -> BandBasis {
    if workload.training.is_some() {
        BandBasis::Training
    } else if workload.diffusion.is_some() {
        BandBasis::Diffusion
    } else if workload.inference.is_some() {
        BandBasis::Inference
    } else {
        BandBasis::Components
    }
}

/// The views of a device's components: live tensors, plus the allocator's cache, plus memory
/// outside the allocator. The allocator gives its releasable segments back only when a
/// `cudaMalloc` fails, so on a device whose `usable` memory (less what is held outside the
/// allocator) cannot hold them all the reserved peak stops where the device is full, and never
/// below what the cache a device without room still needs takes.
fn views(components: &[Component], usable: Bytes) -> Result<Views, Overflow> {
    let held =
        |who: HeldBy| calc::sum(components.iter().filter(|c| c.held_by == who).map(|c| c.bytes));
    let allocated = held(HeldBy::Tensors)?;
    let needed = calc::add(allocated, held(HeldBy::AllocatorCache)?)?;
    let cached = calc::add(needed, held(HeldBy::ReleasableCache)?)?;
    let outside = held(HeldBy::Runtime)?;
    let room = Bytes(usable.0.saturating_sub(outside.0));
    let reserved = cached.min(room.max(needed));
    let device = calc::add(reserved, outside)?;
    Ok(Views { allocated, reserved, device })
}

/// The headroom a rule keeps on `device`: the larger of its fraction of capacity and its floor.
fn headroom_for(headroom: &Headroom, device: &Device) -> Result<(Bytes, String), Overflow> {
    let (rule, scope) = match headroom.per_arch.get(device.arch.name()) {
        Some(rule) => {
            (rule, formula!(" (headroom `{}`, {} rule)", headroom.name, device.arch.name()))
        }
        None => (&headroom.general, formula!(" (headroom `{}`)", headroom.name)),
    };
    let fraction =
        Ratio::int(i128::from(device.memory.0)).checked_mul(rule.keep).ok_or(Overflow)?;
    let fraction = Bytes::from_ratio_ceil(fraction).ok_or(Overflow)?;
    let percent = rule.keep.checked_mul(Ratio::int(100)).ok_or(Overflow)?;
    let bytes = fraction.max(rule.at_least);
    if !calc::writing() {
        return Ok((bytes, String::new()));
    }
    let which = if fraction >= rule.at_least {
        format!(
            "keep {percent} % of {} = {}, at least {}",
            device.memory.human(),
            fraction.human(),
            rule.at_least.human()
        )
    } else {
        format!("at least {}, above keep {percent} % = {}", rule.at_least.human(), fraction.human())
    };
    Ok((bytes, format!("{which}{scope}")))
}

/// The first precision the workload computes or stores in that needs a feature the device
/// lacks, and that feature.
fn first_missing_feature(workload: &Workload, device: &Device) -> Option<(Precision, Feature)> {
    let mut first = None;
    // Called with each precision in order; keeps the first the device cannot run.
    let mut used = |precision: Precision| {
        if first.is_none() {
            first = precision
                .required_feature()
                .filter(|f| !device.supports(*f))
                .map(|f| (precision, f));
        }
    };
    if let Some(inference) = &workload.inference {
        // vLLM and SGLang run FP8 checkpoints on GPUs without FP8 as weight-only FP8 (the FP8
        // Marlin kernel dequantizes to 16-bit), so there the weights ask nothing of the device.
        let weight_only_fp8 = inference.weights.quantized() == Some(Precision::Fp8)
            && matches!(workload.runtime, crate::hir::Runtime::Vllm | crate::hir::Runtime::Sglang);
        if let Some(weights) = inference.weights.quantized().filter(|_| !weight_only_fp8) {
            used(weights);
        }
        used(inference.activations);
        if inference.kv_cache == Precision::Bf16 {
            used(Precision::Bf16);
        }
    }
    if let Some(pipeline) = &workload.diffusion {
        let encoders = pipeline.text_encoder_weights.iter().copied();
        for format in [pipeline.denoiser.weights, pipeline.vae_weights].into_iter().chain(encoders)
        {
            if let Some(p) = format.quantized() {
                used(p);
            }
            used(format.companion());
        }
    }
    if let Some(training) = &workload.training {
        for precision in [training.weights, training.weights.companion(), training.gradients] {
            used(precision);
        }
        if let crate::hir::Method::Lora { dtype, .. } = &training.method {
            used(*dtype);
        }
    }
    first
}

fn capability_diagnostic(
    spec: &CheckSpec,
    device: &Device,
    precision: Precision,
    feature: Feature,
) -> Diagnostic {
    let arch = device.arch.name();
    let compute = device.compute.map(|c| format!(", compute capability {c}")).unwrap_or_default();
    let mut diagnostic = Diagnostic::error(
        "E040",
        spec.span,
        format!(
            "{} ({arch}{compute}) cannot run {precision}: it has no {} support",
            device.display_name(),
            feature.name()
        ),
    )
    .with_help("capability comes before capacity: this pairing fails whatever the memory");
    diagnostic = match feature {
        Feature::Bf16 => diagnostic.with_help("use fp16 on this device, or choose an Ampere or newer GPU"),
        Feature::Fp8 => diagnostic.with_help("FP8 needs Ada, Hopper or Blackwell; on this device use bf16 or fp16, or a weight-only int8/int4 format"),
        Feature::Fp4 => diagnostic.with_help("NVFP4 needs Blackwell; use mxfp4, nf4 or int4 weights here"),
        Feature::Fp16 => diagnostic,
    };
    diagnostic
}
