//! The sampling loop: device-level and per-process used memory on every GPU, at a fixed rate.
//!
//! One dedicated thread sleeps until each next tick (no drift: ticks are `start + n·interval`;
//! a late tick is counted, not made up). Each tick reads `nvmlDeviceGetMemoryInfo_v2` and
//! `nvmlDeviceGetComputeRunningProcesses_v3` per device. Nothing is kept per sample: peaks are
//! updated in place and the timeline keeps the maximum per bucket (so a transient spike is
//! never averaged away), halving its resolution whenever it would pass [`TIMELINE_POINTS`]. A
//! failed NVML call opens a [`Gap`] that the next success closes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use serde::{Deserialize, Serialize};

use crate::attribution::{Attribution, Owner};

/// The most timeline buckets kept per device.
pub const TIMELINE_POINTS: usize = 1000;

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
}

impl Shared {
    pub fn new(devices: usize, commands: usize) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            live: (0..devices).map(|_| (AtomicU64::new(NONE), AtomicU64::new(NONE))).collect(),
            roots: Mutex::new(vec![0; commands]),
            roots_changed: AtomicBool::new(false),
        }
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
    open: [Option<Gap>; 2],
}

/// The downsampled timeline: per device, the maximum in each bucket of `bucket_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub bucket_ms: f64,
    pub devices: Vec<DeviceTimeline>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceTimeline {
    pub index: u32,
    /// Device-level used bytes, maximum per bucket; `null` where no sample succeeded.
    pub used_max: Vec<Option<u64>>,
    /// All commands' processes together, maximum per bucket; `null` where unknown.
    pub commands_max: Vec<Option<u64>>,
}

impl Timeline {
    fn new(devices: &[u32]) -> Timeline {
        Timeline {
            bucket_ms: 1.0,
            devices: devices
                .iter()
                .map(|&index| DeviceTimeline {
                    index,
                    used_max: Vec::new(),
                    commands_max: Vec::new(),
                })
                .collect(),
        }
    }

    fn record(&mut self, device: usize, t_ms: f64, used: Option<u64>, commands: Option<u64>) {
        #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "t ≥ 0")]
        let mut bucket = (t_ms / self.bucket_ms) as usize;
        while bucket >= TIMELINE_POINTS {
            self.halve();
            bucket /= 2;
        }
        let Some(series) = self.devices.get_mut(device) else { return };
        for (column, value) in [(&mut series.used_max, used), (&mut series.commands_max, commands)]
        {
            if column.len() <= bucket {
                column.resize(bucket + 1, None);
            }
            column[bucket] = max_opt(column[bucket], value);
        }
    }

    fn halve(&mut self) {
        self.bucket_ms *= 2.0;
        for series in &mut self.devices {
            for column in [&mut series.used_max, &mut series.commands_max] {
                *column =
                    column.chunks(2).map(|pair| pair.iter().copied().fold(None, max_opt)).collect();
            }
        }
    }
}

fn max_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// How well the loop kept its rate, and what it cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingStats {
    pub interval_us: u64,
    pub target_hz: f64,
    pub achieved_hz: f64,
    pub ticks: u64,
    /// Ticks that started more than one interval late (their slot was skipped).
    pub skipped_ticks: u64,
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
    pub timeline: Timeline,
    pub stats: SamplingStats,
}

const CALL_MEMORY: &str = "nvmlDeviceGetMemoryInfo_v2";
const CALL_PROCESSES: &str = "nvmlDeviceGetComputeRunningProcesses_v3";

impl DeviceSamples {
    fn fail(&mut self, device: u32, which: usize, call: &str, error: String, t_ms: f64) {
        match &mut self.open[which] {
            Some(gap) if gap.error == error => {
                gap.to_ms = t_ms;
                gap.failed_samples += 1;
            }
            slot => {
                if let Some(done) = slot.take() {
                    self.gaps.push(done);
                }
                *slot = Some(Gap {
                    device,
                    call: call.to_string(),
                    error,
                    from_ms: t_ms,
                    to_ms: t_ms,
                    failed_samples: 1,
                });
            }
        }
    }

    fn succeed(&mut self, which: usize) {
        if let Some(done) = self.open[which].take() {
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
    let mut attribution = Attribution::new(Vec::new());
    let mut per_command: Vec<Option<u64>> = vec![None; commands];
    let started = Instant::now();
    let mut next = started;
    let mut ticks: u64 = 0;
    let mut skipped: u64 = 0;
    let mut max_tick = Duration::ZERO;
    while !shared.stop.load(Ordering::Acquire) {
        let tick_start = Instant::now();
        if shared.roots_changed.swap(false, Ordering::AcqRel) {
            let roots = shared.roots.lock().unwrap_or_else(PoisonError::into_inner).clone();
            attribution = Attribution::new(roots);
        }
        let t_ms = tick_start.saturating_duration_since(t0).as_secs_f64() * 1000.0;
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
                    samples.fail(*index, 0, CALL_MEMORY, error.to_string(), t_ms);
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
                        match (attribution.owner(process.pid), process.used_gpu_memory) {
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
                    let text = error.to_string();
                    if samples.process_list_error.is_none() {
                        samples.process_list_error = Some(text.clone());
                    }
                    samples.fail(*index, 1, CALL_PROCESSES, text, t_ms);
                    None
                }
            };
            timeline.record(slot, t_ms, used, combined);
        }
        ticks += 1;
        let now = Instant::now();
        max_tick = max_tick.max(now - tick_start);
        next += interval;
        if next < now {
            let behind = now - next;
            let missed = behind.as_nanos() / interval.as_nanos().max(1);
            skipped += u64::try_from(missed).unwrap_or(u64::MAX);
            next += interval * u32::try_from(missed).unwrap_or(u32::MAX);
        }
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = thread_cpu_seconds();
    for samples in &mut out {
        samples.finish();
        if samples.process_list_successes > 0 {
            samples.process_list_error = None;
        }
    }
    #[expect(clippy::cast_precision_loss, reason = "a rate for people")]
    let achieved = if wall > 0.0 { ticks as f64 / wall } else { 0.0 };
    Sampled {
        devices: out,
        timeline,
        stats: SamplingStats {
            interval_us: u64::try_from(interval.as_micros()).unwrap_or(u64::MAX),
            target_hz: 1.0 / interval.as_secs_f64(),
            achieved_hz: achieved,
            ticks,
            skipped_ticks: skipped,
            max_tick_us: u64::try_from(max_tick.as_micros()).unwrap_or(u64::MAX),
            wall_seconds: wall,
            cpu_seconds: cpu,
            cpu_percent_of_one_core: cpu.filter(|_| wall > 0.0).map(|c| c / wall * 100.0),
        },
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
    fn timeline_keeps_the_maximum_when_it_halves() {
        let mut t = Timeline::new(&[0]);
        t.record(0, 0.5, Some(10), None);
        t.record(0, 1.5, Some(99), None);
        for i in 2..TIMELINE_POINTS {
            #[expect(clippy::cast_precision_loss, reason = "test")]
            t.record(0, i as f64, Some(5), Some(1));
        }
        assert!((t.bucket_ms - 1.0).abs() < f64::EPSILON);
        t.record(0, 1000.0, Some(7), None);
        assert!((t.bucket_ms - 2.0).abs() < f64::EPSILON);
        assert_eq!(t.devices[0].used_max[0], Some(99));
        assert_eq!(t.devices[0].commands_max[0], None);
        assert_eq!(t.devices[0].used_max[500], Some(7));
    }

    #[test]
    fn a_repeated_error_is_one_gap() {
        let mut d = DeviceSamples::default();
        d.fail(0, 0, CALL_MEMORY, "Unknown".into(), 10.0);
        d.fail(0, 0, CALL_MEMORY, "Unknown".into(), 11.0);
        d.succeed(0);
        d.fail(0, 0, CALL_MEMORY, "GPU lost".into(), 20.0);
        d.finish();
        assert_eq!(d.gaps.len(), 2);
        assert_eq!(d.gaps[0].failed_samples, 2);
        assert!((d.gaps[0].to_ms - 11.0).abs() < f64::EPSILON);
        assert_eq!(d.gaps[1].error, "GPU lost");
    }
}
