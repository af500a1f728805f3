//! Devices shared and devices unlike: several workloads on one device (co-residency), and
//! pipeline stages on GPUs of different sizes (heterogeneous machines).
//!
//! Co-resident workloads run as separate processes: each has its own runtime context, weights,
//! caches and workspaces, and all of them count against the one device's memory. Their
//! components are listed under each workload's name.
//!
//! On a machine whose pipeline stages sit on GPUs of different capacities, layers are divided in
//! proportion to each stage's memory (largest remainders first, at least one layer a stage), so
//! that the larger GPU carries more of the model. On identical GPUs the division is the plain
//! one (`stage_layers`), so homogeneous budgets are unchanged.

use super::calc::Overflow;
use super::offload::Offload;
use super::{Held, Placement, device_components, stage_layers};
use crate::hir::{CheckSpec, Device, Layered, Shape, Split, Workload};

/// `(first layer, layers)` of each pipeline stage.
pub(super) type StagePlan = Vec<(u64, u64)>;

/// How `layers` are divided over the pipeline stages of `spec`: in proportion to memory when
/// the stages' GPUs differ, evenly otherwise. `None` when some device is missing.
pub(super) fn stage_plan(
    program: &Layered<'_>,
    spec: &CheckSpec,
    layers: u64,
) -> Option<StagePlan> {
    let (t, p) = (u64::from(spec.split.tensor), u64::from(spec.split.pipeline));
    if let Some(declared) = &spec.stage_layers {
        return Some(stages(declared.iter().copied()));
    }
    let memory: Vec<u64> = (0..p)
        .map(|stage| {
            let rank = usize::try_from(stage * t).ok()?;
            spec.devices.get(rank).and_then(|d| program.device(d)).map(|d| d.memory.0)
        })
        .collect::<Option<_>>()?;
    let even = memory.windows(2).all(|w| w[0] == w[1]);
    let counts: Vec<u64> = if even || layers < p {
        (0..p).map(|stage| stage_layers(layers, p, stage)).collect()
    } else {
        proportional(layers, &memory)
    };
    Some(stages(counts.into_iter()))
}

/// Layer counts to `(first layer, layers)` per stage.
fn stages(counts: impl Iterator<Item = u64>) -> StagePlan {
    let mut first = 0;
    counts
        .map(|n| {
            let stage = (first, n);
            first += n;
            stage
        })
        .collect()
}

/// `layers` divided in proportion to `weights`, each part at least 1, remainders to the largest
/// fractional parts (earlier stages first on ties). Exact integer arithmetic.
fn proportional(layers: u64, weights: &[u64]) -> Vec<u64> {
    let parts = weights.len() as u64;
    let total: u128 = weights.iter().map(|w| u128::from(*w)).sum::<u128>().max(1);
    // One layer per stage first; the rest is divided by weight.
    let rest = u128::from(layers.saturating_sub(parts));
    let mut counts: Vec<(u64, u128, usize)> = weights
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let exact = rest * u128::from(*w);
            (1 + u64::try_from(exact / total).unwrap_or(0), exact % total, i)
        })
        .collect();
    let given: u64 = counts.iter().map(|c| c.0).sum();
    let mut left = layers.saturating_sub(given);
    let mut order: Vec<usize> = (0..counts.len()).collect();
    // Ties are broken by index, so an unstable sort gives the same order.
    order.sort_unstable_by(|a, b| counts[*b].1.cmp(&counts[*a].1).then(a.cmp(b)));
    for i in order {
        if left == 0 {
            break;
        }
        counts[i].0 += 1;
        left -= 1;
    }
    counts.into_iter().map(|c| c.0).collect()
}

/// The placement of one rank's stage for a workload of `shape`. Under llama.cpp's partial
/// offload the stages divide the layers on the devices, the last ones, and when the host keeps
/// the output layer it is one more stage after the devices' (it holds the head and the final
/// norm), so that no device is the last; layers whose experts stay in host memory are held
/// without them.
pub(super) fn placement(
    shape: Option<&Shape>,
    split: Split,
    stage: u64,
    plan: Option<&StagePlan>,
    offload: Option<Offload>,
) -> Placement {
    let p = u64::from(split.pipeline);
    let host_layers = offload.map_or(0, |o| o.host_layers);
    let (first_layer, layers) = match (shape, plan) {
        (Some(_), Some(plan)) => {
            plan.get(usize::try_from(stage).unwrap_or(0)).copied().unwrap_or((0, 0))
        }
        (Some(s), None) => {
            let on_devices = s.layers - host_layers;
            (
                (0..stage).map(|k| stage_layers(on_devices, p, k)).sum(),
                stage_layers(on_devices, p, stage),
            )
        }
        (None, _) => (0, 0),
    };
    let stages = p + u64::from(offload.is_some_and(|o| o.output_on_host));
    Placement {
        tensor: u64::from(split.tensor),
        stage,
        stages,
        first_layer: host_layers + first_layer,
        layers,
        host_experts: offload.map_or(0, |o| o.host_experts),
    }
}

/// The offload of `workload` on a model of `shape`, when it keeps layers in host memory.
pub(super) fn offload_of(workload: &Workload, shape: Option<&Shape>) -> Option<Offload> {
    Offload::of(workload.inference.as_ref()?, shape?)
}

/// Adds the co-resident workloads' components to what the check's own workload holds on a
/// device, each listed under its workload's name. The KV pool stays the first workload's.
pub(super) fn with_co_resident(
    program: &Layered<'_>,
    first: &Workload,
    others: &[&Workload],
    held: Held,
    device: &Device,
    stage: u64,
    split: Split,
) -> Result<Held, Overflow> {
    if others.is_empty() {
        return Ok(held);
    }
    let (mut components, pool) = held;
    prefix(&mut components, &first.name);
    for other in others {
        let model = other.model.as_ref().and_then(|m| program.model(m));
        let shape = model.and_then(|m| m.shape.as_ref());
        let stored = model.and_then(|m| m.stored.as_ref());
        // A co-resident workload is split like the first; its own layers over the stages.
        let placement = placement(shape, split, stage, None, offload_of(other, shape));
        let (mut more, _) =
            device_components(program, other, shape, stored, device, &placement, split)?;
        prefix(&mut more, &other.name);
        components.extend(more);
    }
    Ok((components, pool))
}

fn prefix(components: &mut [crate::budget::Component], workload: &str) {
    for component in components {
        component.name = format!("{workload}: {}", component.name).into();
    }
}

#[cfg(test)]
mod tests {
    use super::proportional;

    #[test]
    fn proportional_layers_follow_memory_and_add_up() {
        assert_eq!(proportional(80, &[24, 80]), vec![19, 61]);
        assert_eq!(proportional(80, &[48, 48]), vec![40, 40]);
        assert_eq!(proportional(3, &[1, 1000, 1]), vec![1, 1, 1]);
        assert_eq!(proportional(32, &[10, 20, 30]).iter().sum::<u64>(), 32);
    }
}
