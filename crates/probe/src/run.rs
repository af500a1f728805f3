//! `vram-probe run`: the acceptance test. Baseline, commands, sampling, signals, report.
//!
//! The order of events:
//! 1. every GPU is read once (identity and memory: the baseline);
//! 2. SIGINT and SIGTERM are caught from here on;
//! 3. the sampler thread starts, then each command, in its own process group, with its output
//!    piped through the probe (passed on unchanged, and scanned for out-of-memory messages);
//! 4. the probe waits for every command; a caught signal is forwarded to every command's
//!    process group (a second one, or a command that outlives the grace period, gets SIGKILL);
//! 5. the sampler stops, and the report is assembled from whatever was measured.
//!
//! Every way out of step 4 leads to step 5: a command that exits or crashes, a signal, NVML
//! failing mid-run (its samples become gaps). The report is returned, never lost to an early
//! return; only a failure to set up signal handling stops the run before any command starts.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::check::{self, CheckResult};
use crate::devices::SCHEMA_VERSION;
use crate::framework;
use crate::nvml::{self, Handle};
use crate::oom::{self, OomMatch};
use crate::reading::Reading;
use crate::report::{CommandReport, Conditions, DeviceRun, Exit, RunReport, Software, Views};
use crate::sampler::{self, Shared};

/// How long commands get to exit after a forwarded signal before SIGKILL.
pub const GRACE: Duration = Duration::from_secs(10);

/// How long the output of commands that have ended may still be read.
const READER_DRAIN: Duration = Duration::from_secs(1);

/// What to run and how.
#[derive(Debug)]
pub struct Options {
    /// One or more commands, run at the same time (co-resident workloads).
    pub commands: Vec<Vec<OsString>>,
    pub interval: Duration,
    /// Record command lines and the environment in the report.
    pub record_command: bool,
    /// `(file name, check)` to hold the measurement against.
    pub check: Option<(String, vram_core::budget::CheckBudget)>,
    pub grace: Duration,
    /// Stop the commands (as Ctrl-C does, with SIGTERM) once they have run this long.
    pub timeout: Option<Duration>,
}

/// The live figures, for a progress line.
#[derive(Debug)]
pub struct Progress {
    pub elapsed: Duration,
    /// Per GPU: (current, peak) device-level used bytes.
    pub devices: Vec<(u32, Option<u64>, Option<u64>)>,
}

/// Runs the commands and measures them; `progress` is called about four times a second.
pub fn run(
    handle: &Handle,
    options: &Options,
    progress: &mut dyn FnMut(&Progress),
) -> Result<RunReport, String> {
    let started_at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let system = nvml::system(handle);
    // A count NVML cannot give is recorded as unavailable (and fails the run), not taken as 0.
    let device_count: Reading<u32> =
        nvml::count(handle).map_err(|e| format!("nvmlDeviceGetCount_v2: {e}")).into();
    let count = device_count.value().unwrap_or(0);
    let infos: Vec<_> = (0..count).map(|i| nvml::device(handle, i)).collect();
    // A device whose handle cannot be had is not sampled; the report keeps it, all unavailable,
    // with the whole run as its gap.
    let mut unreachable: Vec<(u32, String)> = Vec::new();
    let devices: Vec<(u32, nvml_wrapper::Device<'_>)> = (0..count)
        .filter_map(|i| match handle.nvml.device_by_index(i) {
            Ok(device) => Some((i, device)),
            Err(error) => {
                unreachable.push((i, error.to_string()));
                None
            }
        })
        .collect();
    let baseline: Vec<Reading<u64>> =
        devices.iter().map(|(_, d)| nvml::memory(d).map(|m| m.used)).collect();

    let mut signals = Signals::new([SIGINT, SIGTERM])
        .map_err(|e| format!("cannot catch SIGINT and SIGTERM: {e}"))?;
    let shared = Shared::new(devices.len(), options.commands.len());
    let frame_files: Vec<PathBuf> = (0..options.commands.len())
        .map(|i| {
            std::env::temp_dir()
                .join(format!("vram-probe-{}-{i}-framework.json", std::process::id()))
        })
        .collect();
    let ooms: Vec<Arc<Mutex<Vec<OomMatch>>>> =
        (0..options.commands.len()).map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
    let t0 = Instant::now();
    let mut caught: Option<i32> = None;
    let mut timed_out = false;
    let (sampled, mut commands) = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            sampler::run(&devices, options.commands.len(), options.interval, &shared, t0)
        });
        let mut running: Vec<Running> = Vec::new();
        let mut readers = Vec::new();
        for (index, argv) in options.commands.iter().enumerate() {
            let _ = std::fs::remove_file(&frame_files[index]);
            let started_ms = ms(t0.elapsed());
            match spawn(argv, &frame_files[index]) {
                Ok(mut child) => {
                    shared.started(index, child.id());
                    // Not scoped: a descendant that outlives the command (a daemon it started) may
                    // keep the pipes open, and the report must not wait for it.
                    if let Some(stream) = child.stdout.take() {
                        let found = Arc::clone(&ooms[index]);
                        readers.push(std::thread::spawn(move || pass(stream, "stdout", &found)));
                    }
                    if let Some(stream) = child.stderr.take() {
                        let found = Arc::clone(&ooms[index]);
                        readers.push(std::thread::spawn(move || pass(stream, "stderr", &found)));
                    }
                    running.push(Running::started(index, child, started_ms));
                }
                Err(error) => {
                    running.push(Running::failed(index, started_ms, &error));
                }
            }
        }
        let stop = Stop { grace: options.grace, timeout: options.timeout };
        timed_out = wait(&mut running, &mut signals, &stop, t0, &mut caught, &shared, progress);
        shared.stop();
        let measured = sampler.join();
        // The output that is still in the pipes gets a moment to arrive; a pipe held open by a
        // leftover descendant is left to its reader.
        let drain = Instant::now();
        while readers.iter().any(|r| !r.is_finished()) && drain.elapsed() < READER_DRAIN {
            std::thread::sleep(Duration::from_millis(5));
        }
        for reader in readers.into_iter().filter(std::thread::JoinHandle::is_finished) {
            let _ = reader.join();
        }
        (measured, running)
    });
    let sampled = sampled.map_err(|_| "the sampling thread panicked".to_string())?;
    let duration_ms = commands
        .iter()
        .map(|c| c.ended_ms)
        .chain(sampled.outlived.iter().flatten().map(|o| o.until_ms))
        .fold(0.0, f64::max);

    let mut reports: Vec<CommandReport> = Vec::new();
    for r in &mut commands {
        let (framework, framework_error) = match framework::read(&frame_files[r.index]) {
            Ok(view) => (view, None),
            Err(error) => (None, Some(error)),
        };
        let _ = std::fs::remove_file(&frame_files[r.index]);
        let oom = ooms[r.index].lock().map(|v| v.clone()).unwrap_or_default();
        reports.push(CommandReport {
            index: r.index,
            argv: options.record_command.then(|| {
                options.commands[r.index].iter().map(|a| a.to_string_lossy().into_owned()).collect()
            }),
            pid: r.pid,
            spawn_error: r.spawn_error.clone(),
            started_ms: r.started_ms,
            duration_ms: r.ended_ms - r.started_ms,
            exit: r.exit.clone().unwrap_or(Exit { code: None, signal: None, success: false }),
            oom,
            framework,
            framework_error,
            outlived: sampled.outlived.get(r.index).cloned().flatten(),
        });
    }

    let mut device_runs: Vec<DeviceRun> = devices
        .iter()
        .zip(&sampled.devices)
        .zip(&baseline)
        .map(|(((index, _), samples), base)| {
            device_run(*index, &infos, samples, base, &reports, options.commands.len())
        })
        .collect();
    for (index, error) in &unreachable {
        let why = format!("nvmlDeviceGetHandleByIndex_v2: {error}");
        let gap = sampler::Gap {
            device: *index,
            call: "nvmlDeviceGetHandleByIndex_v2".to_string(),
            error: error.clone(),
            from_ms: 0.0,
            to_ms: duration_ms,
            failed_samples: sampled.stats.ticks,
        };
        let nothing = sampler::DeviceSamples::never_sampled(options.commands.len(), gap);
        let base = Reading::unavailable(&why);
        let run = device_run(*index, &infos, &nothing, &base, &reports, options.commands.len());
        device_runs.push(run);
    }
    device_runs.sort_by_key(|d| d.index);

    let check = options.check.as_ref().map(|(file, budget)| {
        let measured: Vec<check::Measured> = (0..count as usize)
            .map(|i| {
                let run = device_runs.iter().find(|d| d.index as usize == i);
                check::Measured {
                    total: run.and_then(|d| d.total.value()),
                    reserved: infos
                        .iter()
                        .find(|info| info.index as usize == i)
                        .and_then(|info| info.memory.known().map(|m| m.reserved)),
                    peak: run.and_then(|d| {
                        d.combined_peak.known().map(|p| (p.bytes, "process")).or_else(|| {
                            d.peak_over_baseline.value().map(|b| (b, "device over baseline"))
                        })
                    }),
                }
            })
            .collect();
        check::compare(file, budget, &measured)
    });

    let mut reasons = reasons(&reports, &device_runs, caught, check.as_ref());
    let notes = notes(&device_runs);
    if let Reading::Unavailable { unavailable } = &device_count {
        reasons
            .insert(0, format!("NVML could not count the GPUs ({unavailable}): none was sampled"));
    }
    if timed_out {
        let limit = options.timeout.unwrap_or_default().as_secs_f64();
        reasons.insert(0, format!("timed out after {limit} s: the commands were stopped"));
    }
    Ok(RunReport {
        schema_version: SCHEMA_VERSION,
        kind: "vram-probe-run".to_string(),
        software: Software {
            probe_version: crate::VERSION.to_string(),
            vram_core_version: vram_core::VERSION.to_string(),
            system,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .into(),
        },
        conditions: Conditions {
            started_at_unix_ms: started_at,
            interval_us: u64::try_from(options.interval.as_micros()).unwrap_or(u64::MAX),
            timeout_ms: options.timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            device_count,
            cuda_visible_devices: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
            devices: infos,
            command_recorded: options.record_command,
            environment: options.record_command.then(|| {
                std::env::vars_os()
                    .map(|(k, v)| {
                        (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned())
                    })
                    .collect()
            }),
        },
        ended_by: match (caught, timed_out) {
            (Some(_), _) => "interrupted",
            (None, true) => "timed_out",
            (None, false) => "exited",
        }
        .to_string(),
        signal: caught.map(signal_name),
        duration_ms,
        commands: reports,
        devices: device_runs,
        timeline: sampled.timeline,
        sampling: sampled.stats,
        check,
        verdict: if reasons.is_empty() { "pass" } else { "fail" }.to_string(),
        reasons,
        notes,
    })
}

/// A command being run.
#[derive(Debug)]
struct Running {
    index: usize,
    child: Option<Child>,
    pid: Option<u32>,
    started_ms: f64,
    ended_ms: f64,
    exit: Option<Exit>,
    spawn_error: Option<String>,
    /// How many signals were forwarded to it.
    forwarded: usize,
    /// Its own process has exited, but processes of its group or tree still hold GPU memory.
    lingering: bool,
}

impl Running {
    fn started(index: usize, child: Child, started_ms: f64) -> Running {
        Running {
            index,
            pid: Some(child.id()),
            child: Some(child),
            started_ms,
            ended_ms: started_ms,
            exit: None,
            spawn_error: None,
            forwarded: 0,
            lingering: false,
        }
    }

    fn failed(index: usize, started_ms: f64, error: &std::io::Error) -> Running {
        Running {
            index,
            child: None,
            pid: None,
            started_ms,
            ended_ms: started_ms,
            exit: None,
            spawn_error: Some(format!("cannot start: {error}")),
            forwarded: 0,
            lingering: false,
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Starts one command in its own process group, so that a terminal's Ctrl-C reaches the probe
/// only and the probe forwards it once, to the command and its descendants.
fn spawn(argv: &[OsString], framework_file: &std::path::Path) -> std::io::Result<Child> {
    let (program, rest) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "an empty command"))?;
    Command::new(program)
        .args(rest)
        .env(framework::FILE_ENV, framework_file)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
}

/// Copies a command's output stream to the probe's own, line by line, noting OOM messages.
fn pass(stream: impl Read, name: &str, found: &Mutex<Vec<OomMatch>>) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let _ = if name == "stdout" {
            std::io::stdout().lock().write_all(&line)
        } else {
            std::io::stderr().lock().write_all(&line)
        };
        if let Some(m) = oom::matched(name, &String::from_utf8_lossy(&line))
            && let Ok(mut all) = found.lock()
            && all.len() < oom::MAX_MATCHES
        {
            all.push(m);
        }
    }
}

/// When the commands are stopped.
struct Stop {
    /// How long they get after SIGTERM or SIGINT before SIGKILL.
    grace: Duration,
    /// How long they may run before the probe stops them.
    timeout: Option<Duration>,
}

/// Waits for every command, forwarding caught signals, enforcing the timeout and reporting
/// progress. A command whose own process has exited is waited for while processes of its own
/// (a fork, a daemon) still hold GPU memory. Returns whether the timeout stopped the commands.
fn wait(
    running: &mut [Running],
    signals: &mut Signals,
    stop: &Stop,
    t0: Instant,
    caught: &mut Option<i32>,
    shared: &Shared,
    progress: &mut dyn FnMut(&Progress),
) -> bool {
    let mut signalled_at: Option<Instant> = None;
    // Requests to stop: each caught signal, and the timeout.
    let mut received = 0usize;
    let mut timed_out = false;
    let mut last_progress = Instant::now();
    loop {
        for signal in signals.pending() {
            caught.get_or_insert(signal);
            received += 1;
            signalled_at.get_or_insert_with(Instant::now);
        }
        if !timed_out && stop.timeout.is_some_and(|limit| t0.elapsed() >= limit) {
            timed_out = true;
            received += 1;
            signalled_at.get_or_insert_with(Instant::now);
        }
        let overdue = signalled_at.is_some_and(|at| at.elapsed() > stop.grace);
        // The signal to forward first: the one caught, else SIGTERM for the timeout.
        let first = caught.and_then(|s| Signal::try_from(s).ok()).unwrap_or(Signal::SIGTERM);
        let mut alive = false;
        for r in running.iter_mut() {
            if let Some(child) = r.child.as_mut() {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        r.ended_ms = ms(t0.elapsed());
                        r.exit = Some(exit_of(status));
                        r.child = None;
                        r.lingering = true;
                        shared.ended(r.index);
                    }
                    Ok(None) => {}
                    Err(_) => {
                        r.ended_ms = ms(t0.elapsed());
                        r.child = None;
                    }
                }
            }
            if r.child.is_none() && r.lingering {
                // Unknown (no process list) is not waited for: nothing would end the wait.
                r.lingering = shared.holding(r.index).is_some_and(|n| n > 0);
            }
            if r.child.is_none() && !r.lingering {
                continue;
            }
            alive = true;
            let Some(pid) = r.pid else { continue };
            let group = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
            if received > 1 || overdue {
                if r.forwarded <= received {
                    let _ = killpg(group, Signal::SIGKILL);
                    r.forwarded = received + 1;
                }
            } else if received > 0 && r.forwarded < received {
                let _ = killpg(group, first);
                r.forwarded = received;
            }
        }
        if !alive {
            return timed_out;
        }
        if last_progress.elapsed() >= Duration::from_millis(250) {
            last_progress = Instant::now();
            let devices = (0..shared.live.len())
                .map(|i| {
                    let (current, peak) = shared.live(i);
                    (u32::try_from(i).unwrap_or(u32::MAX), current, peak)
                })
                .collect();
            progress(&Progress { elapsed: t0.elapsed(), devices });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    Exit {
        code: status.code(),
        signal: status.signal().map(signal_name),
        success: status.success(),
    }
}

fn signal_name(signal: i32) -> String {
    Signal::try_from(signal).map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_string())
}

fn device_run(
    index: u32,
    infos: &[crate::nvml::DeviceInfo],
    samples: &sampler::DeviceSamples,
    baseline: &Reading<u64>,
    commands: &[CommandReport],
    command_count: usize,
) -> DeviceRun {
    let info = infos.iter().find(|i| i.index == index);
    let unknown = || Reading::unavailable("not read");
    let per_process = |peak: Option<sampler::Peak>, why: Option<&String>| match (peak, why) {
        (_, Some(why)) => Reading::unavailable(why),
        (Some(peak), None) => Reading::Known(peak),
        (None, None) => match &samples.process_list_error {
            Some(error) => Reading::unavailable(format!("process list: {error}")),
            None => Reading::unavailable("no successful sample"),
        },
    };
    let command_peaks: Vec<Reading<sampler::Peak>> = (0..command_count)
        .map(|c| {
            per_process(
                samples.command_peaks.get(c).copied().flatten(),
                samples.command_unavailable.get(c).and_then(Option::as_ref),
            )
        })
        .collect();
    let any_unavailable = samples.command_unavailable.iter().flatten().next();
    let combined_peak = per_process(samples.combined_peak, any_unavailable);
    let sum_of_command_peaks = if command_peaks.iter().all(|p| p.known().is_some()) {
        match &combined_peak {
            Reading::Known(_) => Reading::Known(
                command_peaks.iter().filter_map(|p| p.known()).map(|p| p.bytes).sum(),
            ),
            Reading::Unavailable { unavailable } => Reading::unavailable(unavailable),
        }
    } else {
        Reading::unavailable("a command's process figure is unavailable")
    };
    let peak_used = match samples.peak_used {
        Some(peak) => Reading::Known(peak),
        None => Reading::unavailable("no successful memory sample"),
    };
    let peak_over_baseline = match (&peak_used, baseline) {
        (Reading::Known(peak), Reading::Known(base)) => {
            Reading::Known(peak.bytes.saturating_sub(*base))
        }
        _ => Reading::unavailable("the peak or the baseline is unavailable"),
    };
    let views = commands
        .iter()
        .filter_map(|c| {
            let view = c.framework.as_ref()?;
            let uuid = info.and_then(|i| i.uuid.known());
            let fd =
                view.devices.iter().find(|d| d.uuid.is_some() && d.uuid.as_ref() == uuid).or_else(
                    || view.devices.iter().find(|d| d.uuid.is_none() && d.index == index),
                )?;
            let process = command_peaks.get(c.index).and_then(|p| p.known()).map(|p| p.bytes);
            let device = peak_over_baseline.value();
            let diff = |a: Option<u64>, b: u64, why: &str| match a {
                Some(a) => Reading::Known(signed(a) - signed(b)),
                None => Reading::unavailable(why),
            };
            Some(Views {
                command: c.index,
                framework_allocated: fd.allocated_peak,
                framework_reserved: fd.reserved_peak,
                process: match process {
                    Some(p) => Reading::Known(p),
                    None => Reading::unavailable("no per-process figure"),
                },
                device: peak_over_baseline.clone(),
                allocator_cache: fd.reserved_peak.saturating_sub(fd.allocated_peak),
                outside_allocator: diff(process, fd.reserved_peak, "no per-process figure"),
                outside_process: match (device, process) {
                    (Some(d), Some(p)) => Reading::Known(signed(d) - signed(p)),
                    _ => Reading::unavailable("the device or process figure is unavailable"),
                },
            })
        })
        .collect();
    DeviceRun {
        index,
        uuid: info.map_or_else(unknown, |i| i.uuid.clone()),
        name: info.map_or_else(unknown, |i| i.name.clone()),
        architecture: info.map_or_else(unknown, |i| i.architecture.clone()),
        total: info.map_or_else(
            || Reading::unavailable("not read"),
            |i| i.memory.clone().map(|m| m.total),
        ),
        baseline_used: baseline.clone(),
        peak_used,
        peak_over_baseline,
        command_peaks,
        combined_peak,
        sum_of_command_peaks,
        others_peak: match samples.others_peak {
            Some(p) => Reading::Known(p),
            None => Reading::unavailable("process list unavailable"),
        },
        views,
        gaps: samples.gaps.clone(),
        process_list_unavailable: samples.process_list_error.clone(),
    }
}

/// What does not fail the run but changes what its figures mean.
fn notes(devices: &[DeviceRun]) -> Vec<String> {
    devices
        .iter()
        .filter(|d| d.peak_used.known().is_some())
        .filter_map(|d| {
            let why = d.process_list_unavailable.as_ref()?;
            Some(format!(
                "GPU {}: NVML's process list failed on every sample ({why}): no per-process \
                 figures; the device's peak over the baseline is the measurement, and it includes \
                 any other process's growth",
                d.index
            ))
        })
        .collect()
}

fn signed(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

fn reasons(
    commands: &[CommandReport],
    devices: &[DeviceRun],
    caught: Option<i32>,
    check: Option<&CheckResult>,
) -> Vec<String> {
    let mut reasons = Vec::new();
    if devices.is_empty() {
        reasons.push("no GPU could be sampled".to_string());
    }
    if let Some(signal) = caught {
        reasons.push(format!("interrupted by {}", signal_name(signal)));
    }
    for c in commands {
        if let Some(error) = &c.spawn_error {
            reasons.push(format!("command {}: {error}", c.index));
        } else if !c.exit.success {
            let how = match (&c.exit.code, &c.exit.signal) {
                (Some(code), _) => format!("exited with code {code}"),
                (None, Some(signal)) => format!("was ended by {signal}"),
                (None, None) => "ended without an exit status".to_string(),
            };
            reasons.push(format!("command {} {how}", c.index));
        }
        if let Some(first) = c.oom.first() {
            reasons.push(format!(
                "command {} printed an out-of-memory error ({}): {}",
                c.index, first.signature, first.line
            ));
        }
    }
    for d in devices {
        let (list_gaps, memory_gaps): (Vec<&sampler::Gap>, Vec<&sampler::Gap>) =
            d.gaps.iter().partition(|g| g.call == sampler::CALL_PROCESSES);
        let failed: u64 = memory_gaps.iter().map(|g| g.failed_samples).sum();
        if failed > 0 {
            reasons.push(format!(
                "GPU {}: {failed} samples missing in {} gap(s) (NVML errors); the peak may be missed",
                d.index,
                memory_gaps.len()
            ));
        }
        // A process list the platform never gives is a note (see `notes`); one that failed only
        // at times may have missed a command's peak.
        let failed: u64 = list_gaps.iter().map(|g| g.failed_samples).sum();
        if failed > 0 && d.process_list_unavailable.is_none() {
            reasons.push(format!(
                "GPU {}: {failed} process-list samples missing in {} gap(s) (NVML errors); the \
                 commands' peaks may be missed",
                d.index,
                list_gaps.len()
            ));
        }
    }
    if let Some(check) = check {
        reasons.extend(check.reasons.iter().map(|r| format!("check: {r}")));
    }
    reasons
}
