//! Which machines fit: a workload evaluated on every machine of the program (the file's own and
//! the catalog's), smallest first.
//!
//! A machine runs the workload on all of its GPUs: tensor parallel inside the largest group of
//! up to 8 that the attention heads divide into, the rest as pipeline stages (or as data
//! replicas when there are more groups than layers, or no shape to divide); GPUs of different
//! sizes as pipeline stages. This is one probe
//! per machine, not a search: the machines are the candidates.

use super::{Planner, Stop};
use crate::budget::Verdict;
use crate::bytes::Bytes;
use crate::hir::{Layered, Machine, Shape, Split};

/// One machine that fits, with the split it was evaluated under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineFit {
    pub name: String,
    pub title: String,
    pub gpus: u64,
    /// Total GPU memory, to order machines from the smallest.
    pub gpu_memory: Bytes,
    pub split: Split,
    pub verdict: Verdict,
}

/// The split a machine with `gpus` GPUs runs a workload of `shape` under. GPUs of different
/// sizes (`mixed`) get pipeline stages, whose layers follow each GPU's memory, rather than equal
/// tensor shards that the smallest GPU would limit.
pub fn machine_split(gpus: u64, shape: Option<&Shape>, mixed: bool) -> Split {
    let count = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let Some(shape) = shape else { return Split { tensor: 1, pipeline: 1, data: count(gpus) } };
    if mixed && gpus <= shape.layers {
        return Split { tensor: 1, pipeline: count(gpus), data: 1 };
    }
    let tensor = [8u64, 4, 2, 1]
        .into_iter()
        .find(|t| gpus.is_multiple_of(*t) && shape.heads.is_multiple_of(*t))
        .unwrap_or(1);
    let rest = gpus / tensor;
    if rest <= shape.layers {
        Split { tensor: count(tensor), pipeline: count(rest), data: 1 }
    } else {
        Split { tensor: count(tensor), pipeline: 1, data: count(rest) }
    }
}

/// Every machine of the program, smallest total GPU memory first (then by name).
pub fn all(program: &Layered<'_>) -> Vec<(Bytes, Machine)> {
    let mut names: Vec<&String> = program.own.machines.keys().collect();
    names.extend(program.base.machines.keys().filter(|n| !program.own.machines.contains_key(n)));
    let mut machines: Vec<(Bytes, Machine)> = names
        .into_iter()
        .filter_map(|name| program.machine(name))
        .map(|machine| {
            let memory = machine.gpus.iter().fold(0u64, |sum, (count, device)| {
                let each = program.device(device).map_or(0, |d| d.memory.0);
                sum.saturating_add(each.saturating_mul(u64::from(*count)))
            });
            (Bytes(memory), machine.clone())
        })
        .collect();
    // Machine names are unique, so an unstable sort gives the same order.
    machines.sort_unstable_by(|a, b| (a.0, &a.1.name).cmp(&(b.0, &b.1.name)));
    machines
}

/// The machines on which the planner's workload fits, smallest first; at most `limit`.
pub fn fitting(
    planner: &mut Planner<'_>,
    program: &Layered<'_>,
    limit: usize,
) -> Result<Vec<MachineFit>, Stop> {
    let mut found = Vec::new();
    for (memory, machine) in all(program) {
        if found.len() >= limit {
            break;
        }
        let devices: Vec<String> = machine
            .gpus
            .iter()
            .flat_map(|(count, device)| std::iter::repeat_n(device.clone(), *count as usize))
            .collect();
        let gpus = devices.len() as u64;
        if gpus == 0 {
            continue;
        }
        let mixed = devices.windows(2).any(|w| w[0] != w[1]);
        let split = machine_split(gpus, planner.shape(), mixed);
        let verdict = match planner.verdict_on(Some(&machine.name), devices, split) {
            Ok(verdict) => verdict,
            Err(Stop::Unsupported) => continue,
            Err(stop) => return Err(stop),
        };
        if verdict.fits() {
            found.push(MachineFit {
                title: machine.title.clone().unwrap_or_else(|| machine.name.clone()),
                name: machine.name,
                gpus,
                gpu_memory: memory,
                split,
                verdict,
            });
        }
    }
    Ok(found)
}
