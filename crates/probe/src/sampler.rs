//! The sampling loop: device-level and per-process used memory on every GPU, at a fixed rate.
//!
//! One dedicated thread wakes on absolute deadlines ([`crate::ticker`]: no drift, a late tick
//! made up). Each tick reads `nvmlDeviceGetMemoryInfo_v2` and
//! `nvmlDeviceGetComputeRunningProcesses_v3` per device, and nothing else: the static facts
//! (name, total, architecture) were read once before the run. Nothing is kept per sample and
//! the probe's own code allocates nothing per tick: peaks are updated in place and the timeline
//! keeps the maximum per bucket in columns allocated once ([`crate::timeline`]). (nvml-wrapper's
//! process list returns a fresh `Vec` per call; that allocation is the binding's.) A failed NVML
//! call opens a [`Gap`] that the next success closes.
//!
//! The processes' owners come from [`Attribution`]: a new pid is traced at once, and the
//! commands' process trees are walked from the top every [`attribution::REFRESH`], a hundred
//! times less often than the samples, since new processes are rare.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use serde::{Deserialize, Serialize};

use crate::attribution::{self, Attribution, Owner};
use crate::ticker::{self, Ticker};
pub use crate::timeline::{DeviceTimeline, TIMELINE_POINTS, Timeline};

/// The most pids recorded per command in [`Outlived`].
const MAX_OUTLIVED_PIDS: usize = 16;

/// [`Shared::holding`] when a process list failed in the last tick.
const HOLDING_UNKNOWN: u32 = u32::MAX;

/// "No value" in the live atomics.
const NONE: u64 = u64::MAX;

/// What the sampler shares with the thread that runs the commands.
#[derive(Debug)]
pub struct Shared {
    stop: AtomicBool,
    /// Per device: the latest device-level used bytes, and the peak so far.
    pub live: Vec<(AtomicU64, AtomicU64)>,
    /// The pid of each command, once started (0 before).
    roots: Mutex<Vec<u32>>,
    roots_changed: AtomicBool,
    /// Per command: its own process has exited (its forks may still hold GPU memory).
    ended: Vec<AtomicBool>,
    /// Per command: how many of its processes the last tick found on the GPUs.
    holding: Vec<AtomicU32>,
}

impl Shared {
    pub fn new(devices: usize, commands: usize) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            live: (0..devices).map(|_| (AtomicU64::new(NONE), AtomicU64::new(NONE))).collect(),
            roots: Mutex::new(vec![0; commands]),
            roots_changed: AtomicBool::new(false),
            ended: (0..commands).map(|_| AtomicBool::new(false)).collect(),
            holding: (0..commands).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Records that command `index`'s own process has exited.
    pub fn ended(&self, index: usize) {
        if let Some(flag) = self.ended.get(index) {
            flag.store(true, Ordering::Release);
        }
    }

    /// How many processes of command `index` (itself or its descendants) the last tick found on
    /// the GPUs; `None` when a process list was unavailable.
    pub fn holding(&self, index: usize) -> Option<u32> {
        let count = self.holding.get(index)?.load(Ordering::Acquire);
        (count != HOLDING_UNKNOWN).then_some(count)
    }

    /// Records the pid of command `index`, for attributing its processes.
    pub fn started(&self, index: usize, pid: u32) {
        let mut roots = self.roots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = roots.get_mut(index) {
            *slot = pid;
        }
        self.roots_changed.store(true, Ordering::Release);
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// The latest and peak device-level used bytes of device `index`.
    pub fn live(&self, index: usize) -> (Option<u64>, Option<u64>) {
        let Some((current, peak)) = self.live.get(index) else { return (None, None) };
        let read = |a: &AtomicU64| Some(a.load(Ordering::Relaxed)).filter(|v| *v != NONE);
        (read(current), read(peak))
    }
}

/// A maximum and when it happened, in ms from the start of the run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Peak {
    pub bytes: u64,
    pub at_ms: f64,
}

fn raise(peak: &mut Option<Peak>, bytes: u64, at_ms: f64) {
    if peak.is_none_or(|p| bytes > p.bytes) {
        *peak = Some(Peak { bytes, at_ms });
    }
}

/// A stretch of time in which an NVML call kept failing; its samples are missing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gap {
    pub device: u32,
    /// The NVML function that failed.
    pub call: String,
    pub error: String,
    pub from_ms: f64,
    /// The last failed sample.
    pub to_ms: f64,
    pub failed_samples: u64,
}

/// Per-device results of a sampling run.
#[derive(Clone, Debug, Default)]
pub struct DeviceSamples {
    pub peak_used: Option<Peak>,
    /// Per command: the peak of its processes' used memory (its own and its descendants').
    pub command_peaks: Vec<Option<Peak>>,
    /// Per command: why its per-process figure is unavailable, if it ever was.
    pub command_unavailable: Vec<Option<String>>,
    /// The peak of all commands' processes together, at the same instant.
    pub combined_peak: Option<Peak>,
    /// The peak of processes that belong to no command.
    pub others_peak: Option<Peak>,
    /// Why the process list was unavailable, if it never succeeded.
    pub process_list_error: Option<String>,
    pub process_list_successes: u64,
    pub memory_successes: u64,
    pub gaps: Vec<Gap>,
    open: [Option<(Gap, std::mem::Discriminant<NvmlError>)>; 2],
}

/// Processes of a command that held GPU memory after the command's own process exited (a fork
/// or a daemon it left behind), and the last time one was seen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outlived {
    /// Their pids (at most 16).
    pub pids: Vec<u32>,
    /// The last sample that found one of them on a GPU, ms from the start of the run.
    pub until_ms: f64,
}

/// How well the loop kept its rate, and what it cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingStats {
    pub interval_us: u64,
    pub target_hz: f64,
    pub achieved_hz: f64,
    pub ticks: u64,
    /// Slots given up because the loop stalled for more than 10 intervals (a shorter delay is
    /// made up: see `late_ticks`).
    pub skipped_ticks: u64,
    /// Ticks that started after their deadline had passed and ran at once to make it up.
    #[serde(default)]
    pub late_ticks: u64,
    /// The longest delay between a tick's deadline and its start.
    #[serde(default)]
    pub max_late_us: u64,
    /// The longest time one tick took, all devices included.
    pub max_tick_us: u64,
    pub wall_seconds: f64,
    /// CPU time of the sampling thread (user + system), from getrusage(RUSAGE_THREAD).
    pub cpu_seconds: Option<f64>,
    /// `cpu_seconds / wall_seconds`, in percent of one core.
    pub cpu_percent_of_one_core: Option<f64>,
}

/// Everything a sampling run measured.
#[derive(Clone, Debug)]
pub struct Sampled {
    pub devices: Vec<DeviceSamples>,
    /// Per command: its processes that outlived it on a GPU.
    pub outlived: Vec<Option<Outlived>>,
    pub timeline: Timeline,
    pub stats: SamplingStats,
}

const CALL_MEMORY: &str = "nvmlDeviceGetMemoryInfo_v2";
pub(crate) const CALL_PROCESSES: &str = "nvmlDeviceGetComputeRunningProcesses_v3";

impl DeviceSamples {
    /// A device that could not be sampled at all: `gap` covers the whole run.
    pub fn never_sampled(commands: usize, gap: Gap) -> DeviceSamples {
        DeviceSamples {
            command_peaks: vec![None; commands],
            command_unavailable: vec![None; commands],
            process_list_error: Some(format!("{}: {}", gap.call, gap.error)),
            gaps: vec![gap],
            ..DeviceSamples::default()
        }
    }

    /// A failed call: extends the open gap of the same error, or opens one. The error's text is
    /// made only when a gap opens, not on every failed sample.
    fn fail(&mut self, device: u32, which: usize, call: &str, error: &NvmlError, t_ms: f64) {
        let kind = std::mem::discriminant(error);
        match &mut self.open[which] {
            Some((gap, open_kind)) if *open_kind == kind => {
                gap.to_ms = t_ms;
                gap.failed_samples += 1;
            }
            slot => {
                if let Some((done, _)) = slot.take() {
                    self.gaps.push(done);
                }
                let gap = Gap {
                    device,
                    call: call.to_string(),
                    error: error.to_string(),
                    from_ms: t_ms,
                    to_ms: t_ms,
                    failed_samples: 1,
                };
                *slot = Some((gap, kind));
            }
        }
    }

    fn succeed(&mut self, which: usize) {
        if let Some((done, _)) = self.open[which].take() {
            self.gaps.push(done);
        }
    }

    fn finish(&mut self) {
        for which in 0..2 {
            self.succeed(which);
        }
        self.gaps.sort_by(|a, b| a.from_ms.total_cmp(&b.from_ms));
    }
}

/// Samples `devices` every `interval` until [`Shared::stop`], with times measured from `t0`.
pub fn run(
    devices: &[(u32, Device<'_>)],
    commands: usize,
    interval: Duration,
    shared: &Shared,
    t0: Instant,
) -> Sampled {
    let indices: Vec<u32> = devices.iter().map(|(i, _)| *i).collect();
    let mut out: Vec<DeviceSamples> = devices
        .iter()
        .map(|_| DeviceSamples {
            command_peaks: vec![None; commands],
            command_unavailable: vec![None; commands],
            ..DeviceSamples::default()
        })
        .collect();
    let mut timeline = Timeline::new(&indices);
    let mut attribution = Attribution::new(vec![0; commands]);
    let mut roots: Vec<u32> = Vec::with_capacity(commands);
    let mut per_command: Vec<Option<u64>> = vec![None; commands];
    let mut found: Vec<u32> = vec![0; commands];
    let mut outlived: Vec<Option<Outlived>> = vec![None; commands];
    let mut ticker = Ticker::start(interval);
    // The run's time 0 on the monotonic clock, which `Instant` also reads.
    let t0_ns = ticker::monotonic_ns()
        .saturating_sub(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
    let started_ns = ticker::monotonic_ns();
    let mut refreshed_ns = started_ns;
    let refresh_ns = u64::try_from(attribution::REFRESH.as_nanos()).unwrap_or(u64::MAX);
    let mut max_tick_ns: u64 = 0;
    // At least one tick, even for a command that ends before this thread gets going.
    loop {
        let tick_ns = ticker.wait();
        // A plain load first: the swap's locked write would take the cache line from the thread
        // that reads the other fields, on every tick.
        if shared.roots_changed.load(Ordering::Acquire)
            && shared.roots_changed.swap(false, Ordering::AcqRel)
        {
            roots.clone_from(&shared.roots.lock().unwrap_or_else(PoisonError::into_inner));
            attribution.set_roots(&roots);
            attribution.refresh();
            refreshed_ns = tick_ns;
        } else if tick_ns - refreshed_ns >= refresh_ns {
            attribution.refresh();
            refreshed_ns = tick_ns;
        }
        #[expect(clippy::cast_precision_loss, reason = "ms for people")]
        let t_ms = tick_ns.saturating_sub(t0_ns) as f64 / 1e6;
        found.fill(0);
        let mut lists_known = true;
        for (slot, ((index, device), samples)) in devices.iter().zip(&mut out).enumerate() {
            let used = match device.memory_info() {
                Ok(memory) => {
                    samples.succeed(0);
                    samples.memory_successes += 1;
                    raise(&mut samples.peak_used, memory.used, t_ms);
                    if let Some((current, peak)) = shared.live.get(slot) {
                        current.store(memory.used, Ordering::Relaxed);
                        let old = peak.load(Ordering::Relaxed);
                        if old == NONE || memory.used > old {
                            peak.store(memory.used, Ordering::Relaxed);
                        }
                    }
                    Some(memory.used)
                }
                Err(error) => {
                    samples.fail(*index, 0, CALL_MEMORY, &error, t_ms);
                    None
                }
            };
            let combined = match device.running_compute_processes() {
                Ok(list) => {
                    samples.succeed(1);
                    samples.process_list_successes += 1;
                    per_command.fill(Some(0));
                    let mut others: u64 = 0;
                    for process in list {
                        let owner = attribution.owner(process.pid);
                        if let Owner::Command(c) = owner {
                            if !shared.ended[c].load(Ordering::Relaxed) {
                                found[c] += 1;
                            } else if attribution::alive(process.pid) {
                                // The command has exited; this process of its own still runs
                                // (NVML may list an exited process until its context is gone).
                                found[c] += 1;
                                note_outlived(&mut outlived[c], process.pid, t_ms);
                            }
                        }
                        match (owner, process.used_gpu_memory) {
                            (Owner::Command(c), UsedGpuMemory::Used(bytes)) => {
                                if let Some(Some(sum)) = per_command.get_mut(c) {
                                    *sum += bytes;
                                }
                            }
                            (Owner::Command(c), UsedGpuMemory::Unavailable) => {
                                per_command[c] = None;
                                samples.command_unavailable[c].get_or_insert_with(|| {
                                    "NVML reports this process's memory as not available"
                                        .to_string()
                                });
                            }
                            (Owner::Other, UsedGpuMemory::Used(bytes)) => others += bytes,
                            // A starting command's process counts once it is registered.
                            (Owner::Starting, _) | (Owner::Other, UsedGpuMemory::Unavailable) => {}
                        }
                    }
                    raise(&mut samples.others_peak, others, t_ms);
                    let mut all = Some(0u64);
                    for (c, value) in per_command.iter().enumerate() {
                        match value {
                            Some(bytes) => {
                                raise(&mut samples.command_peaks[c], *bytes, t_ms);
                                all = all.map(|a| a + bytes);
                            }
                            None => all = None,
                        }
                    }
                    if let Some(all) = all {
                        raise(&mut samples.combined_peak, all, t_ms);
                    }
                    all
                }
                Err(error) => {
                    lists_known = false;
                    if samples.process_list_error.is_none() {
                        samples.process_list_error = Some(error.to_string());
                    }
                    samples.fail(*index, 1, CALL_PROCESSES, &error, t_ms);
                    None
                }
            };
            timeline.record(slot, t_ms, used, combined);
        }
        for (holding, count) in shared.holding.iter().zip(&found) {
            holding.store(if lists_known { *count } else { HOLDING_UNKNOWN }, Ordering::Release);
        }
        max_tick_ns = max_tick_ns.max(ticker::monotonic_ns().saturating_sub(tick_ns));
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
    }
    #[expect(clippy::cast_precision_loss, reason = "seconds for people")]
    let wall = ticker::monotonic_ns().saturating_sub(started_ns) as f64 / 1e9;
    let cpu = thread_cpu_seconds();
    for samples in &mut out {
        samples.finish();
        if samples.process_list_successes > 0 {
            samples.process_list_error = None;
        }
    }
    let ticks = ticker.ticks();
    #[expect(clippy::cast_precision_loss, reason = "a rate for people")]
    let achieved = if wall > 0.0 { ticks as f64 / wall } else { 0.0 };
    let micros = |ns: u64| ns / 1000;
    Sampled {
        devices: out,
        outlived,
        timeline,
        stats: SamplingStats {
            interval_us: u64::try_from(interval.as_micros()).unwrap_or(u64::MAX),
            target_hz: 1.0 / interval.as_secs_f64(),
            achieved_hz: achieved,
            ticks,
            skipped_ticks: ticker.skipped,
            late_ticks: ticker.late,
            max_late_us: u64::try_from(ticker.max_late.as_micros()).unwrap_or(u64::MAX),
            max_tick_us: micros(max_tick_ns),
            wall_seconds: wall,
            cpu_seconds: cpu,
            cpu_percent_of_one_core: cpu.filter(|_| wall > 0.0).map(|c| c / wall * 100.0),
        },
    }
}

/// Adds `pid` to a command's processes that outlived it.
fn note_outlived(entry: &mut Option<Outlived>, pid: u32, t_ms: f64) {
    let entry = entry.get_or_insert_with(|| Outlived { pids: Vec::new(), until_ms: t_ms });
    entry.until_ms = t_ms;
    if !entry.pids.contains(&pid) && entry.pids.len() < MAX_OUTLIVED_PIDS {
        entry.pids.push(pid);
    }
}

/// CPU time (user + system) of the calling thread.
fn thread_cpu_seconds() -> Option<f64> {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_THREAD).ok()?;
    let secs = |t: nix::sys::time::TimeVal| {
        #[expect(clippy::cast_precision_loss, reason = "seconds for people")]
        let s = t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        s
    };
    Some(secs(usage.user_time()) + secs(usage.system_time()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_error_is_one_gap() {
        let mut d = DeviceSamples::default();
        d.fail(0, 0, CALL_MEMORY, &NvmlError::Unknown, 10.0);
        d.fail(0, 0, CALL_MEMORY, &NvmlError::Unknown, 11.0);
        d.succeed(0);
        d.fail(0, 0, CALL_MEMORY, &NvmlError::GpuLost, 20.0);
        d.finish();
        assert_eq!(d.gaps.len(), 2);
        assert_eq!(d.gaps[0].failed_samples, 2);
        assert!((d.gaps[0].to_ms - 11.0).abs() < f64::EPSILON);
        assert_eq!(d.gaps[1].error, NvmlError::GpuLost.to_string());
    }
}
