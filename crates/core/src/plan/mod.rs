//! The planner: what would fit. It re-evaluates one checked `check` with one parameter
//! changed (sessions, context, batch, the number of devices and their split, the weights'
//! precision) and searches for the boundary.
//!
//! A [`Planner`] is built once from the checked program, so a search parses and checks nothing:
//! each probe is one call of the evaluator on a private copy of the workload. The searches
//! ([`search`]) are bisections over a monotone "fits" (guided by the evaluator's margin), never
//! scans, and every answer is proven by its own probes: it fits, and one step beyond does not.

mod block_swap;
#[cfg(test)]
mod exact;
mod experts;
pub mod machines;
mod pipeline;
mod pool;
pub mod query;
pub mod search;
pub mod suggest;
#[cfg(test)]
mod tests;
mod training;

use crate::budget::{SplitReport, Verdict};
use crate::eval::{self, Overflow};
use crate::hir::{CheckSpec, Layered, Runtime, Shape, Split, Workload};
use crate::precision::Precision;
use crate::quant::{Preset, WeightFormat};
use search::{Boundary, Probe};

/// A parameter the planner can search over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Knob {
    /// Concurrent sessions of an inference workload.
    Sessions,
    /// The longest request (inference) or the training sequence.
    Context,
    /// Training micro-batch, or a diffusion pipeline's batch.
    Batch,
    /// llama.cpp's layers on the devices (`gpu_layers`, `-ngl`), the rest in host memory.
    GpuLayers,
}

impl Knob {
    pub fn name(self) -> &'static str {
        match self {
            Knob::Sessions => "sessions",
            Knob::Context => "context",
            Knob::Batch => "batch",
            Knob::GpuLayers => "gpu_layers",
        }
    }

    pub fn from_name(name: &str) -> Option<Knob> {
        match name {
            "sessions" => Some(Knob::Sessions),
            "context" => Some(Knob::Context),
            "batch" => Some(Knob::Batch),
            "gpu_layers" => Some(Knob::GpuLayers),
            _ => None,
        }
    }

    /// The unit a value of this knob is written with.
    pub fn unit(self) -> &'static str {
        match self {
            Knob::Sessions => "sessions",
            Knob::Context => "tokens",
            Knob::Batch => "per batch",
            Knob::GpuLayers => "layers",
        }
    }

    /// The checker's range for the field, so that an answer is always a value the user may
    /// write back into the file; for `gpu_layers`, every layer and the output (more changes
    /// nothing).
    fn limit(self, workload: &Workload, shape: Option<&Shape>) -> u64 {
        match self {
            Knob::Sessions | Knob::Batch if workload.diffusion.is_some() => 4096,
            Knob::Sessions | Knob::Batch => 1_000_000,
            Knob::Context => 100_000_000,
            Knob::GpuLayers => shape.map_or(1, |s| s.layers + 1),
        }
    }
}

/// Why a search stopped without an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// A byte count overflowed (reported as `E032` by the evaluator).
    Overflow,
    /// The device cannot run the workload whatever the value (capability, not capacity).
    Unsupported,
}

impl From<Overflow> for Stop {
    fn from(_: Overflow) -> Stop {
        Stop::Overflow
    }
}

/// The answer to "the largest value that fits", with the verdicts that prove it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaxAnswer {
    pub knob: Knob,
    /// The value as declared in the workload.
    pub declared: u64,
    pub boundary: Boundary,
    /// The verdict at the answer (when something fits).
    pub at: Option<Verdict>,
    /// The verdict one step beyond it (when the answer is not the limit).
    pub beyond: Option<Verdict>,
}

/// The fewest devices of one kind, and how the work is split over them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevicesAnswer {
    pub device: String,
    pub count: u64,
    pub split: SplitReport,
    pub at: Verdict,
    /// The next smaller candidate split and its verdict, when there is one.
    pub fewer: Option<(u64, SplitReport, Verdict)>,
}

/// A weight format (and KV cache precision) that fits, the best-quality one of the candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrecisionAnswer {
    pub declared: String,
    pub weights: String,
    /// A KV cache precision to change too, when the weights alone are not enough.
    pub kv_cache: Option<String>,
    pub at: Verdict,
}

/// Re-evaluates one check under changes, without parsing or checking again.
#[derive(Clone, Debug)]
pub struct Planner<'p> {
    work: Layered<'p>,
    spec: CheckSpec,
    original: Workload,
    /// What the probes keep from one evaluation to the next (weights, runtime, headroom).
    reuse: eval::Reuse,
}

impl<'p> Planner<'p> {
    /// A planner for `spec`, or `None` when its workload is not in the program.
    pub fn new(program: &Layered<'p>, spec: &CheckSpec) -> Option<Planner<'p>> {
        let original = program.workload(&spec.workload)?.clone();
        let mut own = program.own.clone();
        own.checks.clear();
        own.workloads.insert(original.name.clone(), original.clone());
        Some(Planner {
            work: Layered { own, base: program.base },
            spec: spec.clone(),
            original,
            reuse: eval::Reuse::default(),
        })
    }

    /// The workload as declared.
    pub fn workload(&self) -> &Workload {
        &self.original
    }

    /// The check as declared.
    pub fn spec(&self) -> &CheckSpec {
        &self.spec
    }

    /// The model's shape, when the workload has one.
    pub fn shape(&self) -> Option<&Shape> {
        self.original.model.as_ref().and_then(|m| self.work.model(m)).and_then(|m| m.shape.as_ref())
    }

    /// The declared value of `knob`, or `None` when the workload has no such parameter.
    pub fn declared(&self, knob: Knob) -> Option<u64> {
        let w = &self.original;
        match knob {
            Knob::Sessions => w.inference.as_ref().map(|i| i.sessions),
            // A trained pipeline's batch and positions are its diffusion section's.
            Knob::Context => w.inference.as_ref().map(|i| i.context).or_else(|| {
                w.training.as_ref().filter(|_| w.diffusion.is_none()).map(|t| t.sequence)
            }),
            Knob::Batch => w
                .diffusion
                .as_ref()
                .map(|d| d.batch)
                .or_else(|| w.training.as_ref().map(|t| t.micro_batch)),
            // Unwritten, every layer and the output are on the devices.
            Knob::GpuLayers => {
                let all = self.shape()?.layers + 1;
                let inference = w.inference.as_ref().filter(|_| w.runtime == Runtime::LlamaCpp)?;
                Some(inference.gpu_layers.map_or(all, |g| g.min(all)))
            }
        }
    }

    fn workload_mut(&mut self) -> &mut Workload {
        self.work
            .own
            .workloads
            .get_mut(&self.original.name)
            .expect("the planner inserted its workload")
    }

    /// Restores the declared workload and check.
    fn reset(&mut self, spec: &CheckSpec) {
        let original = self.original.clone();
        *self.workload_mut() = original;
        self.spec = spec.clone();
    }

    fn set(&mut self, knob: Knob, value: u64) {
        let w = self.workload_mut();
        match knob {
            Knob::Sessions => {
                if let Some(i) = w.inference.as_mut() {
                    i.sessions = value;
                }
            }
            Knob::Context => {
                if let Some(i) = w.inference.as_mut() {
                    i.context = value;
                } else if let (Some(t), None) = (w.training.as_mut(), &w.diffusion) {
                    t.sequence = value;
                }
            }
            Knob::Batch => {
                if let Some(d) = w.diffusion.as_mut() {
                    d.batch = value;
                } else if let Some(t) = w.training.as_mut() {
                    t.micro_batch = value;
                }
            }
            Knob::GpuLayers => {
                if let Some(i) = w.inference.as_mut() {
                    i.gpu_layers = Some(value);
                }
            }
        }
    }

    /// The bytes and verdicts of the check as it stands now: exactly those of a full
    /// evaluation, without its formulas.
    fn evaluate(&mut self) -> Result<Option<eval::CheckFit>, Overflow> {
        eval::evaluate_fit(&self.work, &self.spec, &mut self.reuse)
    }

    fn verdict(&mut self) -> Result<Verdict, Stop> {
        match self.evaluate() {
            Ok(Some(budget)) => Ok(budget.verdict),
            Ok(None) => Err(Stop::Unsupported),
            // Memory past 64-bit byte counts fits no device: a probe far beyond the boundary
            // says "over", so the search narrows instead of failing.
            Err(Overflow) => Ok(Verdict::Over { over: crate::bytes::Bytes(u64::MAX) }),
        }
    }

    /// The check's verdict with the workload as `change` leaves it; the declared one is
    /// restored after.
    fn verdict_changed(&mut self, change: impl FnOnce(&mut Workload)) -> Result<Verdict, Stop> {
        let spec = self.spec.clone();
        change(self.workload_mut());
        let verdict = self.verdict();
        self.reset(&spec);
        verdict
    }

    /// The verdict of the check as declared.
    pub fn declared_verdict(&mut self) -> Result<Verdict, Stop> {
        self.verdict()
    }

    fn probe(&mut self) -> Result<(Probe, Verdict), Stop> {
        let budget = match self.evaluate() {
            Ok(Some(budget)) => budget,
            Ok(None) => return Err(Stop::Unsupported),
            Err(Overflow) => {
                let over = Verdict::Over { over: crate::bytes::Bytes(u64::MAX) };
                return Ok((Probe { fits: false, margin: i128::from(i64::MIN) }, over));
            }
        };
        let fits = match &budget.verdict {
            Verdict::Fits { .. } => true,
            Verdict::Over { .. } => false,
            Verdict::Unsupported { .. } => return Err(Stop::Unsupported),
        };
        // The tightest device's margin. A runtime that fills a KV pool (vLLM) leaves the same
        // free memory whatever the sessions: its margin is the pool's spare or missing bytes,
        // which, unlike the free memory, moves with the searched value.
        let margin = budget
            .devices
            .iter()
            .map(|device| match (&device.kv_pool, &device.verdict) {
                (Some(pool), _) => i128::from(pool.bytes.0) - i128::from(pool.needed.0),
                (None, Verdict::Fits { free }) => i128::from(free.0),
                (None, Verdict::Over { over }) => -i128::from(over.0.max(1)),
                (None, Verdict::Unsupported { .. }) => 0,
            })
            .min()
            .unwrap_or(0);
        // Keep the margin's sign consistent with the verdict, which is what the search trusts.
        let margin = if fits { margin.max(0) } else { margin.min(-1) };
        Ok((Probe { fits, margin }, budget.verdict))
    }

    /// The largest value of `knob` that fits, everything else as declared. `Ok(None)` when
    /// the workload has no such parameter.
    pub fn find_max(&mut self, knob: Knob) -> Result<Option<MaxAnswer>, Stop> {
        let Some(declared) = self.declared(knob) else { return Ok(None) };
        let spec = self.spec.clone();
        let limit = knob.limit(&self.original, self.shape());
        let mut seen: Vec<(u64, Verdict)> = Vec::new();
        let result = search::largest(declared, limit, |value| {
            self.set(knob, value);
            let (probe, verdict) = self.probe()?;
            seen.push((value, verdict));
            Ok::<_, Stop>(probe)
        });
        self.reset(&spec);
        let boundary = result?;
        let verdict_at = |x: u64| seen.iter().find(|(v, _)| *v == x).map(|(_, v)| v.clone());
        let (at, beyond) = match boundary {
            Boundary::Largest(x) => (verdict_at(x), verdict_at(x + 1)),
            Boundary::Limit(x) => (verdict_at(x), None),
            Boundary::NoneFits => (None, verdict_at(1)),
        };
        Ok(Some(MaxAnswer { knob, declared, boundary, at, beyond }))
    }

    /// The splits tried for `n` devices of one kind, fewest devices first: tensor parallel
    /// within a node (1, 2, 4, 8, where the heads divide), then pipeline stages of that node
    /// size. A workload without a shape cannot be divided: only one device.
    pub fn device_splits(&self) -> Vec<Split> {
        let Some(shape) = self.shape() else { return vec![Split::NONE] };
        let tensors: Vec<u32> =
            [1, 2, 4, 8].into_iter().filter(|t| shape.heads % u64::from(*t) == 0).collect();
        let widest = tensors.last().copied().unwrap_or(1);
        let mut splits: Vec<Split> =
            tensors.iter().map(|&tensor| Split { tensor, pipeline: 1, data: 1 }).collect();
        let stages = shape.layers.min(4096 / u64::from(widest));
        splits.extend((2..=stages).map(|p| Split {
            tensor: widest,
            pipeline: u32::try_from(p).unwrap_or(1),
            data: 1,
        }));
        splits
    }

    /// The fewest devices of `device` that fit, and the split that achieves it.
    pub fn min_devices(&mut self, device: &str) -> Result<Option<DevicesAnswer>, Stop> {
        let spec = self.spec.clone();
        let splits = self.device_splits();
        let mut seen: Vec<(usize, Verdict)> = Vec::new();
        let result = search::first_fitting(splits.len(), |i| {
            let split = splits[i];
            self.spec.split = split;
            self.spec.stage_layers = None;
            self.spec.devices =
                vec![device.to_string(); usize::try_from(split.devices()).unwrap_or(1)];
            let verdict = self.verdict()?;
            let fits = verdict.fits();
            seen.push((i, verdict));
            Ok::<_, Stop>(fits)
        });
        self.spec = spec.clone();
        self.reset(&spec);
        let Some(index) = result? else { return Ok(None) };
        let verdict_of = |i: usize| seen.iter().find(|(j, _)| *j == i).map(|(_, v)| v.clone());
        let report =
            |s: Split| SplitReport { tensor: s.tensor, pipeline: s.pipeline, data: s.data };
        let fewer = index
            .checked_sub(1)
            .and_then(|i| verdict_of(i).map(|v| (splits[i].devices(), report(splits[i]), v)));
        Ok(Some(DevicesAnswer {
            device: device.to_string(),
            count: splits[index].devices(),
            split: report(splits[index]),
            at: verdict_of(index).unwrap_or(Verdict::Fits { free: crate::bytes::Bytes::ZERO }),
            fewer,
        }))
    }

    /// Weight formats smaller than the declared one (or as large, when the declared one cannot
    /// run here), best quality first, that every device of the check can run. llama.cpp gets
    /// its presets; other runtimes 8-bit and 4-bit formats.
    pub fn precision_candidates(&self) -> Vec<WeightFormat> {
        let Some(inference) = &self.original.inference else { return Vec::new() };
        let declared = inference.weights;
        let devices: Vec<_> =
            self.spec.devices.iter().filter_map(|d| self.work.device(d)).collect();
        let runs = |format: &WeightFormat| {
            format.required_feature().is_none_or(|f| devices.iter().all(|d| d.supports(f)))
        };
        if self.original.runtime == Runtime::LlamaCpp {
            const LADDER: [Preset; 6] =
                [Preset::Q8_0, Preset::Q6K, Preset::Q5KM, Preset::Q4KM, Preset::Q3KM, Preset::Q2K];
            let after = match declared {
                WeightFormat::Preset(p) => LADDER.iter().position(|q| *q == p).map_or(0, |i| i + 1),
                WeightFormat::Uniform(_) | WeightFormat::Partial(..) => 0,
            };
            return LADDER[after..].iter().map(|p| WeightFormat::Preset(*p)).collect();
        }
        let Some(current) = declared.quantized() else { return Vec::new() };
        let size = current.bytes_per_element();
        [
            Precision::Bf16,
            Precision::Fp16,
            Precision::Fp8,
            Precision::Int8,
            Precision::Awq { group: 128 },
            Precision::Nf4,
        ]
        .into_iter()
        .map(WeightFormat::Uniform)
        // Smaller formats; when the devices cannot run the declared one (FP8 on an A100), formats
        // of the same size too, which trade no memory but can run.
        .filter(|f| match f {
            WeightFormat::Uniform(p) if runs(&declared) => p.bytes_per_element() < size,
            WeightFormat::Uniform(p) => p.bytes_per_element() <= size && *p != current,
            WeightFormat::Preset(_) | WeightFormat::Partial(..) => false,
        })
        .filter(runs)
        // bf16 and fp16 are the same size: keep the first the devices run.
        .fold(Vec::new(), |mut kept: Vec<WeightFormat>, f| {
            let same_size = kept.iter().any(|k| match (k, f) {
                (WeightFormat::Uniform(a), WeightFormat::Uniform(b)) => {
                    a.bytes_per_element() == b.bytes_per_element()
                }
                _ => false,
            });
            if !same_size {
                kept.push(f);
            }
            kept
        })
    }

    /// The best-quality smaller weight format that fits; when none does with the declared KV
    /// cache, the best one that fits with an FP8 KV cache (the declared weights first).
    pub fn find_precision(&mut self) -> Result<Option<PrecisionAnswer>, Stop> {
        let Some(inference) = &self.original.inference else { return Ok(None) };
        let (declared, kv) = (inference.weights, inference.kv_cache);
        let candidates = self.precision_candidates();
        if let Some((index, at)) = self.first_precision(&candidates, None)? {
            return Ok(Some(PrecisionAnswer {
                declared: declared.name().into_owned(),
                weights: candidates[index].name().into_owned(),
                kv_cache: None,
                at,
            }));
        }
        // A 16-bit KV cache halves in FP8 (vLLM `kv_cache_dtype fp8`).
        if kv.bytes_per_element() <= Precision::Fp8.bytes_per_element() {
            return Ok(None);
        }
        let with_declared: Vec<WeightFormat> =
            std::iter::once(declared).chain(candidates.iter().copied()).collect();
        Ok(self.first_precision(&with_declared, Some(Precision::Fp8))?.map(|(index, at)| {
            PrecisionAnswer {
                declared: declared.name().into_owned(),
                weights: with_declared[index].name().into_owned(),
                kv_cache: Some(Precision::Fp8.name().into_owned()),
                at,
            }
        }))
    }

    /// The first of `candidates` (weights, with `kv` as the KV cache when given) that fits.
    fn first_precision(
        &mut self,
        candidates: &[WeightFormat],
        kv: Option<Precision>,
    ) -> Result<Option<(usize, Verdict)>, Stop> {
        let spec = self.spec.clone();
        let mut seen: Vec<(usize, Verdict)> = Vec::new();
        let result = search::first_fitting(candidates.len(), |i| {
            if let Some(inference) = self.workload_mut().inference.as_mut() {
                inference.weights = candidates[i];
                if let Some(kv) = kv {
                    inference.kv_cache = kv;
                }
            }
            let verdict = self.verdict()?;
            let fits = verdict.fits();
            seen.push((i, verdict));
            Ok::<_, Stop>(fits)
        });
        self.reset(&spec);
        let Some(index) = result? else { return Ok(None) };
        Ok(seen.into_iter().find(|(j, _)| *j == index))
    }

    /// Evaluates the workload on other devices with a given split: a machine's GPUs, whose
    /// host RAM and disk lines then count too.
    pub fn verdict_on(
        &mut self,
        machine: Option<&str>,
        devices: Vec<String>,
        split: Split,
    ) -> Result<Verdict, Stop> {
        let spec = self.spec.clone();
        self.spec.machine = machine.map(str::to_string);
        self.spec.stage_layers = None;
        self.spec.devices = devices;
        self.spec.split = split;
        let verdict = self.verdict();
        self.reset(&spec);
        verdict
    }
}

/// Adds suggestions to every check of `budget` that does not fit (checks of `program`, by
/// id): over budget, or on a device that cannot run it.
pub fn annotate(program: &Layered<'_>, budget: &mut crate::budget::Budget) {
    for check in &mut budget.checks {
        let Some(spec) = program.checks().iter().find(|s| s.id == check.id) else { continue };
        let found = match check.verdict {
            Verdict::Over { .. } => suggest::suggestions(program, spec),
            Verdict::Unsupported { .. } => suggest::runnable(program, spec),
            Verdict::Fits { .. } => continue,
        };
        if let Ok(found) = found {
            check.suggestions = found;
        }
    }
}

/// Precision changes trade memory for output quality; every suggestion or answer that changes
/// precision carries this warning.
pub const PRECISION_WARNING: &str = "a precision change alters the model's outputs: validate quality on your own evaluation before relying on it";
