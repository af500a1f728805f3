//! Fit maps: where a check fits over a grid of contexts and concurrent sessions, per device.
//!
//! The calculator's heat map (and the planner's `vram map` after it) asks the same question
//! thousands of times: does this workload, at context `c` with `s` sessions, fit on device `D`?
//! Parsing and checking the file each time would cost most of a full evaluation, so a [`Grid`]
//! is built once from a checked program and one of its checks; every point then runs the same
//! evaluator as [`super::evaluate`] (this module has no memory arithmetic of its own) on the
//! check's workload with only `context` and `sessions` changed, in its bytes-only mode: the same
//! bytes and verdicts without formulas, reusing each device's weights, runtime and headroom from
//! the points before.
//!
//! A budget grows with both the context and the sessions, so the cells that fit in a row (one
//! context) are a prefix of the session values, and that prefix never grows from one context to
//! a longer one. A fit map therefore stores one boundary per row, and finds the boundaries by
//! divide and conquer: bisect the middle row within the bounds its neighbours allow, then
//! recurse on both halves, and fill a run of rows without evaluating when its bounds agree. A
//! grid of 60 contexts by 56 session counts takes tens of evaluations rather than 3,360.

use crate::budget::{CheckBudget, Verdict};
use crate::diagnostic::Diagnostic;
use crate::hir::{CheckSpec, Layered, Program};

/// Parses and checks `source` over the built-in catalog, for a [`Grid`]: the first two stages of
/// [`crate::evaluate`], without evaluating anything.
pub fn program(source: &str) -> (Layered<'static>, Vec<Diagnostic>) {
    let (file, mut diagnostics) = crate::syntax::parse(source);
    let (program, found) = crate::check::check(&file, crate::catalog::builtin(), false);
    diagnostics.extend(found);
    (program, diagnostics)
}

/// The longest context a grid accepts: the checker's own limit (100 million tokens).
pub const MAX_CONTEXT: u64 = 100_000_000;
/// The most sessions a grid accepts: the checker's own limit.
pub const MAX_SESSIONS: u64 = 1_000_000;
/// The most values on one axis of a grid.
pub const MAX_AXIS: usize = 4096;

/// Why a grid cannot be built or evaluated. Each is the caller's mistake, reported as data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GridError {
    /// The program has no check with this id.
    UnknownCheck(String),
    /// The check's workload has no `inference` block, so it has no context or sessions.
    NotInference(String),
    /// The check puts several workloads on each device (`check a + b on ...`): a map of one
    /// workload's context and sessions would hide the others'.
    CoResident(String),
    /// No device of this name in the file or the catalog.
    UnknownDevice(String),
    /// An axis is empty, too long, not strictly increasing, or has a value out of range.
    Axis(String),
    /// The check's budget overflows 64-bit byte counts (diagnostic `E032` in a full evaluation).
    Overflow(String),
}

impl std::fmt::Display for GridError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GridError::UnknownCheck(id) => write!(f, "no check `{id}` in the file"),
            GridError::NotInference(id) => write!(
                f,
                "check `{id}` has no inference block: a fit map varies context and sessions"
            ),
            GridError::CoResident(id) => write!(
                f,
                "check `{id}` shares each device among several workloads: map them one at a time"
            ),
            GridError::UnknownDevice(name) => {
                write!(f, "no device `{name}` in the file or catalog")
            }
            GridError::Axis(why) => f.write_str(why),
            GridError::Overflow(id) => {
                write!(f, "the budget of `{id}` overflows 64-bit byte counts")
            }
        }
    }
}

impl std::error::Error for GridError {}

/// Whether a check fits at one (context, sessions) point.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Point {
    Fits,
    Over,
    Unsupported(String),
}

/// One device's fit map over `contexts` (rows) × `sessions` (columns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FitMap {
    pub device: String,
    pub contexts: Vec<u64>,
    pub sessions: Vec<u64>,
    /// Per row: how many of the session values, from the smallest, fit at that context.
    /// Never increases from one row to the next.
    pub boundary: Vec<u32>,
    /// Why the device cannot run the workload at all (a precision it lacks); every cell is
    /// then out and `boundary` is all zeros.
    pub unsupported: Option<String>,
    /// Full evaluations the map took (at most one per cell; usually far fewer).
    pub evaluations: u32,
}

impl FitMap {
    /// Whether the cell at `row` (context index) and `column` (sessions index) fits.
    pub fn fits(&self, row: usize, column: usize) -> bool {
        self.boundary.get(row).is_some_and(|&b| column < b as usize)
    }

    /// Row-major cells, `1` where the workload fits and `0` where it does not.
    pub fn cells(&self) -> Vec<u8> {
        let columns = self.sessions.len();
        let mut cells = vec![0; self.contexts.len() * columns];
        for (row, &b) in self.boundary.iter().enumerate() {
            cells[row * columns..row * columns + b as usize].fill(1);
        }
        cells
    }
}

/// A checked program and one of its inference checks, ready to be evaluated at many points.
#[derive(Debug)]
pub struct Grid {
    /// The file's declarations merged over the catalog, so a point can layer one changed
    /// workload over it.
    merged: Program,
    spec: CheckSpec,
}

impl Grid {
    /// Prepares check `check` (its id, `WORKLOAD on TARGET`, or its workload's name when only
    /// one check uses it) of `program`.
    pub fn new(program: &Layered<'_>, check: &str) -> Result<Grid, GridError> {
        let checks = program.checks();
        let spec = checks
            .iter()
            .find(|c| c.id == check)
            .or_else(|| {
                let mut by_workload = checks.iter().filter(|c| c.workload == check);
                by_workload.next().filter(|_| by_workload.next().is_none())
            })
            .ok_or_else(|| GridError::UnknownCheck(check.to_string()))?
            .clone();
        if program.workload(&spec.workload).and_then(|w| w.inference.as_ref()).is_none() {
            return Err(GridError::NotInference(spec.id));
        }
        if !spec.also.is_empty() {
            return Err(GridError::CoResident(spec.id));
        }
        Ok(Grid { merged: program.clone().merged(), spec })
    }

    /// The check this grid evaluates.
    pub fn check(&self) -> &CheckSpec {
        &self.spec
    }

    /// The workload's own context and sessions, as written in the file.
    pub fn written(&self) -> (u64, u64) {
        self.merged
            .workloads
            .get(&self.spec.workload)
            .and_then(|w| w.inference.as_ref())
            .map_or((0, 0), |i| (i.context, i.sessions))
    }

    /// The check, as written, but with every device replaced by `device` (same split).
    pub fn on_device(&self, device: &str) -> Result<CheckBudget, GridError> {
        let (context, sessions) = self.written();
        let mut probe = self.probe(device)?;
        match probe.budget(context, sessions) {
            Ok(Some(budget)) => Ok(budget),
            Ok(None) => Err(GridError::UnknownDevice(device.into())),
            Err(super::Overflow) => Err(GridError::Overflow(self.spec.id.clone())),
        }
    }

    /// Where the check fits on `device` (with the check's split) for every context in
    /// `contexts` and every session count in `sessions`, both strictly increasing.
    pub fn fit_map(
        &self,
        device: &str,
        contexts: &[u64],
        sessions: &[u64],
    ) -> Result<FitMap, GridError> {
        axis("contexts", contexts, MAX_CONTEXT)?;
        axis("sessions", sessions, MAX_SESSIONS)?;
        let mut probe = self.probe(device)?;
        let mut map = FitMap {
            device: device.to_string(),
            contexts: contexts.to_vec(),
            sessions: sessions.to_vec(),
            boundary: vec![0; contexts.len()],
            unsupported: None,
            evaluations: 0,
        };
        let columns = u32::try_from(sessions.len()).unwrap_or(u32::MAX);
        let mut search = Search { probe: &mut probe, contexts, sessions, map: &mut map };
        // Capability does not depend on the point: one evaluation settles it.
        match search.point(0, 0) {
            Point::Unsupported(reason) => {
                search.map.unsupported = Some(reason);
                return Ok(map);
            }
            Point::Over => return Ok(map),
            Point::Fits => {}
        }
        // The largest point fits: then so does every other.
        let (last_row, last_column) = (contexts.len() - 1, sessions.len() - 1);
        if search.point(last_row, last_column) == Point::Fits {
            search.map.boundary.fill(columns);
            return Ok(map);
        }
        search.rows(0, contexts.len(), 0, columns);
        Ok(map)
    }

    fn probe(&self, device: &str) -> Result<Probe<'_>, GridError> {
        if !self.merged.devices.contains_key(device) {
            return Err(GridError::UnknownDevice(device.to_string()));
        }
        let mut spec = self.spec.clone();
        let count = spec.devices.len();
        spec.devices = vec![device.to_string(); count];
        spec.machine = None;
        spec.target = if count == 1 { device.to_string() } else { format!("{count} x {device}") };
        let mut own = Program::default();
        if let Some(workload) = self.merged.workloads.get(&spec.workload) {
            own.workloads.insert(spec.workload.clone(), workload.clone());
        }
        Ok(Probe {
            layered: Layered { own, base: &self.merged },
            spec,
            reuse: super::Reuse::default(),
        })
    }
}

/// The program a point is evaluated in: the merged program with the check's workload layered
/// over it, so only that workload's context and sessions change from point to point.
struct Probe<'a> {
    layered: Layered<'a>,
    spec: CheckSpec,
    /// What the points keep from one evaluation to the next (weights, runtime, headroom).
    reuse: super::Reuse,
}

impl Probe<'_> {
    /// Sets the workload's context and sessions; false when it has no inference block.
    fn set(&mut self, context: u64, sessions: u64) -> bool {
        let Some(inference) = self
            .layered
            .own
            .workloads
            .get_mut(&self.spec.workload)
            .and_then(|w| w.inference.as_mut())
        else {
            return false;
        };
        inference.context = context;
        inference.sessions = sessions;
        true
    }

    /// The full budget at one point.
    fn budget(
        &mut self,
        context: u64,
        sessions: u64,
    ) -> Result<Option<CheckBudget>, super::Overflow> {
        if !self.set(context, sessions) {
            return Ok(None);
        }
        super::evaluate_check(&self.layered, &self.spec, &mut Vec::new())
    }

    /// The verdict at one point: the full budget's, computed without its formulas.
    fn verdict(&mut self, context: u64, sessions: u64) -> Result<Option<Verdict>, super::Overflow> {
        if !self.set(context, sessions) {
            return Ok(None);
        }
        let fit = super::evaluate_fit(&self.layered, &self.spec, &mut self.reuse)?;
        Ok(fit.map(|fit| fit.verdict))
    }
}

/// The divide-and-conquer search for each row's boundary.
struct Search<'s, 'a> {
    probe: &'s mut Probe<'a>,
    contexts: &'s [u64],
    sessions: &'s [u64],
    map: &'s mut FitMap,
}

impl Search<'_, '_> {
    fn point(&mut self, row: usize, column: usize) -> Point {
        self.map.evaluations += 1;
        match self.probe.verdict(self.contexts[row], self.sessions[column]) {
            Ok(Some(Verdict::Fits { .. })) => Point::Fits,
            Ok(Some(Verdict::Unsupported { reason })) => Point::Unsupported(reason),
            // A budget beyond 64-bit byte counts fits no device.
            Ok(Some(_) | None) | Err(super::Overflow) => Point::Over,
        }
    }

    /// Sets the boundary of rows `first..end`, each known to lie in `low..=high`.
    fn rows(&mut self, first: usize, end: usize, low: u32, high: u32) {
        if first >= end {
            return;
        }
        if low == high {
            self.map.boundary[first..end].fill(low);
            return;
        }
        let middle = first + (end - first) / 2;
        // The largest count b in low..=high whose last cell (column b - 1) fits; `low` is known.
        let (mut fits, mut over) = (low, high + 1);
        while over - fits > 1 {
            let b = fits + (over - fits) / 2;
            if self.point(middle, b as usize - 1) == Point::Fits {
                fits = b;
            } else {
                over = b;
            }
        }
        self.map.boundary[middle] = fits;
        self.rows(first, middle, fits, high);
        self.rows(middle + 1, end, low, fits);
    }
}

/// Checks that an axis is non-empty, bounded, strictly increasing and within `1..=max`.
fn axis(name: &str, values: &[u64], max: u64) -> Result<(), GridError> {
    if values.is_empty() || values.len() > MAX_AXIS {
        return Err(GridError::Axis(format!("{name}: give between 1 and {MAX_AXIS} values")));
    }
    if values.iter().any(|&v| v == 0 || v > max) {
        return Err(GridError::Axis(format!("{name}: every value must lie in 1..={max}")));
    }
    if values.windows(2).any(|w| w[0] >= w[1]) {
        return Err(GridError::Axis(format!("{name}: values must be strictly increasing")));
    }
    Ok(())
}
