//! The bytes-only evaluation: what the planner's probes and the fit map's cells need (whether
//! a check fits, and by how much), exactly as a full evaluation gives it, without writing any
//! formula text, and reusing between calls what the changed values do not touch.

use super::calc::{self, Overflow};
use super::{Ranks, Reuse, host_report, machine_of, persistent_bytes, rank_devices};
use crate::budget::{KvPool, Verdict};
use crate::bytes::Bytes;
use crate::hir::{CheckSpec, Layered, Workload};

/// What a bytes-only evaluation gives: each device's bytes and verdict, and the check's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CheckFit {
    pub devices: Vec<DeviceFit>,
    /// The worst device's verdict, or the host's when its RAM or disk is short.
    pub verdict: Verdict,
}

/// One device of a [`CheckFit`]: the same numbers as its [`DeviceBudget`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeviceFit {
    pub used: Bytes,
    pub required: Bytes,
    /// The KV pool's bytes and tokens; its `fraction` text is left empty.
    pub kv_pool: Option<KvPool>,
    pub verdict: Verdict,
}

/// The bytes and verdicts of [`evaluate_check`], exactly, without writing any formula, name
/// or note, and reusing from earlier calls with the same `reuse` what the changed values do not
/// touch. For the planner's probes and the fit map's cells, which need only whether it fits
/// and by how much. `reuse` must only ever see one program: callers change a workload's numbers
/// and a check's devices and split between calls, never the models, devices or headroom rules.
pub(crate) fn evaluate_fit(
    program: &Layered<'_>,
    spec: &CheckSpec,
    reuse: &mut Reuse,
) -> Result<Option<CheckFit>, Overflow> {
    let _bytes_only = calc::BytesOnly::enter();
    let Some(workload) = program.workload(&spec.workload) else { return Ok(None) };
    let others: Vec<&Workload> = spec.also.iter().filter_map(|w| program.workload(w)).collect();
    let Some(Ranks { devices: ranks, held, .. }) =
        rank_devices(program, spec, workload, &others, reuse, &mut Vec::new())?
    else {
        return Ok(None);
    };
    let host = match machine_of(program, spec) {
        Some(_) => {
            let components = ranks.iter().map(|r| held[r.held].0.as_slice());
            let persistent = persistent_bytes(spec, components, true)?;
            host_report(program, spec, workload, &others, persistent)?
        }
        None => None,
    };
    let devices: Vec<DeviceFit> = ranks
        .into_iter()
        .map(|r| DeviceFit {
            used: r.used,
            required: r.required,
            kv_pool: held[r.held].1.clone(),
            verdict: r.verdict,
        })
        .collect();
    let host_verdicts = host.iter().flat_map(|h| [&h.ram.verdict, &h.disk.verdict]).flatten();
    let Some(verdict) = Verdict::worst(devices.iter().map(|d| &d.verdict).chain(host_verdicts))
    else {
        return Ok(None);
    };
    Ok(Some(CheckFit { devices, verdict }))
}
