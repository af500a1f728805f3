//! Printing: tables for people, JSON and Prometheus text for machines.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use vram_probe::devices::{self, Devices};
use vram_probe::reading::{Reading, human_bytes};

use crate::args::{CompareFormat, Format};
use crate::exit;

/// `vram-probe devices`.
pub(crate) fn devices(library: Option<PathBuf>, format: Format) -> u8 {
    let handle = match crate::open(library) {
        Ok(handle) => handle,
        Err(code) => return code,
    };
    let found = devices::read(&handle);
    match format {
        Format::Json => outln!("{}", json(&found)),
        Format::Prometheus => out!("{}", vram_probe::prometheus::devices(&found)),
        Format::Table => out!("{}", devices_table(&found)),
    }
    match found.device_count {
        Reading::Known(_) => exit::OK,
        Reading::Unavailable { .. } => exit::NVML_ERROR,
    }
}

pub(crate) fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// A reading for a table cell.
pub(crate) fn cell<T: std::fmt::Display>(reading: &Reading<T>) -> String {
    match reading {
        Reading::Known(value) => value.to_string(),
        Reading::Unavailable { unavailable } => format!("unavailable ({unavailable})"),
    }
}

fn on_off(reading: &Reading<bool>) -> String {
    match reading {
        Reading::Known(true) => "on".to_string(),
        Reading::Known(false) => "off".to_string(),
        Reading::Unavailable { unavailable } => format!("unavailable ({unavailable})"),
    }
}

fn devices_table(found: &Devices) -> String {
    let mut out = String::new();
    let s = &found.system;
    let _ = writeln!(
        out,
        "driver {}  CUDA driver {}  NVML {}  ({})",
        cell(&s.driver_version),
        cell(&s.cuda_driver_version),
        cell(&s.nvml_version),
        s.nvml_library
    );
    match &found.device_count {
        Reading::Known(n) => {
            let _ = writeln!(out, "{n} GPU{}", if *n == 1 { "" } else { "s" });
        }
        Reading::Unavailable { unavailable } => {
            let _ = writeln!(out, "GPU count unavailable: {unavailable}");
        }
    }
    for d in &found.devices {
        let _ = writeln!(out);
        let _ = writeln!(out, "GPU {}  {}", d.index, cell(&d.name));
        let _ = writeln!(out, "  uuid          {}", cell(&d.uuid));
        let _ = writeln!(out, "  pci bus id    {}", cell(&d.pci_bus_id));
        match &d.memory {
            Reading::Known(m) => {
                for (label, bytes) in [
                    ("total", m.total),
                    ("used", m.used),
                    ("free", m.free),
                    ("reserved", m.reserved),
                ] {
                    let _ = writeln!(out, "  {label:<13} {bytes} B ({})", human_bytes(bytes));
                }
            }
            Reading::Unavailable { unavailable } => {
                let _ = writeln!(out, "  memory        unavailable ({unavailable})");
            }
        }
        let _ = writeln!(out, "  architecture  {}", cell(&d.architecture));
        let _ = writeln!(out, "  compute cap.  {}", cell(&d.compute_capability));
        let _ = writeln!(out, "  MIG           {}", on_off(&d.mig_enabled));
        let _ = writeln!(out, "  ECC           {}", on_off(&d.ecc_enabled));
    }
    out
}

/// What `vram-probe run` was given.
#[derive(Debug)]
pub(crate) struct RunArgs {
    pub(crate) library: Option<PathBuf>,
    pub(crate) check: Option<Vec<String>>,
    pub(crate) interval: Duration,
    pub(crate) out: PathBuf,
    pub(crate) record_command: bool,
    pub(crate) grace: Duration,
    pub(crate) timeout: Option<Duration>,
    pub(crate) format: Format,
    pub(crate) commands: Vec<Vec<std::ffi::OsString>>,
}

/// `vram-probe run`.
pub(crate) fn run(args: &RunArgs) -> u8 {
    if args.commands.is_empty() {
        eprintln!("error: no command to run (give it after `--`)");
        return exit::USAGE;
    }
    let check = match &args.check {
        Some(pair) => {
            let [name, file] = pair.as_slice() else {
                eprintln!("error: --check takes a check name and a file");
                return exit::USAGE;
            };
            let plan = match vram_probe::check::load(std::path::Path::new(file)) {
                Ok(plan) => plan,
                Err(error) => {
                    eprint!("error: {error}");
                    if !error.ends_with('\n') {
                        eprintln!();
                    }
                    return exit::USAGE;
                }
            };
            match plan.outcome.budget.check(name) {
                Ok(found) => Some((plan.name.clone(), found.clone())),
                Err(error) => {
                    eprintln!("error: {file}: {error}");
                    return exit::USAGE;
                }
            }
        }
        None => None,
    };
    let handle = match crate::open(args.library.clone()) {
        Ok(handle) => handle,
        Err(code) => return code,
    };
    let options = vram_probe::run::Options {
        commands: args.commands.clone(),
        interval: args.interval,
        record_command: args.record_command,
        check,
        grace: args.grace,
        timeout: args.timeout,
    };
    let live = std::io::stderr().is_terminal();
    let mut progress = |p: &vram_probe::run::Progress| {
        if live {
            eprint!("\r\x1b[2K{}", progress_line(p));
        }
    };
    let report = match vram_probe::run::run(&handle, &options, &mut progress) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("error: {error}");
            return exit::NVML_ERROR;
        }
    };
    if live {
        eprintln!();
    }
    if let Err(error) = std::fs::write(&args.out, report.to_json() + "\n") {
        eprintln!("error: cannot write the report to {}: {error}", args.out.display());
        outln!("{}", report.to_json());
    }
    match args.format {
        Format::Json => outln!("{}", report.to_json()),
        Format::Prometheus => out!("{}", vram_probe::prometheus::run(&report)),
        Format::Table => eprint!("{}", run_table(&report, &args.out)),
    }
    match report.signal.as_deref() {
        Some("SIGINT") => 130,
        Some("SIGTERM") => 143,
        _ if report.verdict == "pass" => exit::OK,
        _ => exit::FAILED,
    }
}

fn progress_line(p: &vram_probe::run::Progress) -> String {
    let mut line = format!("{:>7.1} s", p.elapsed.as_secs_f64());
    for (index, current, peak) in &p.devices {
        let show = |v: &Option<u64>| v.map_or_else(|| "?".to_string(), human_bytes);
        let _ = write!(line, "  GPU {index} {} (peak {})", show(current), show(peak));
    }
    line
}

fn reading_bytes(reading: &Reading<u64>) -> String {
    match reading {
        Reading::Known(b) => human_bytes(*b),
        Reading::Unavailable { unavailable } => format!("unavailable ({unavailable})"),
    }
}

fn reading_peak(reading: &Reading<vram_probe::sampler::Peak>) -> String {
    match reading {
        Reading::Known(p) => format!("{} at {:.1} ms", human_bytes(p.bytes), p.at_ms),
        Reading::Unavailable { unavailable } => format!("unavailable ({unavailable})"),
    }
}

pub(crate) fn run_table(report: &vram_probe::report::RunReport, out: &std::path::Path) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "run {} after {:.1} ms ({}), sampled at {:.0} Hz of {:.0} Hz, sampler CPU {}",
        report.ended_by.replace('_', " "),
        report.duration_ms,
        report.signal.as_deref().unwrap_or("no signal"),
        report.sampling.achieved_hz,
        report.sampling.target_hz,
        report
            .sampling
            .cpu_percent_of_one_core
            .map_or_else(|| "unavailable".to_string(), |c| format!("{c:.2} % of a core")),
    );
    if report.sampling.skipped_ticks > 0 {
        #[expect(clippy::cast_precision_loss, reason = "ms for people")]
        let worst = report.sampling.max_late_us as f64 / 1000.0;
        let _ = writeln!(
            s,
            "  {} samples lost: the sampler was kept from the CPU for up to {worst:.1} ms",
            report.sampling.skipped_ticks
        );
    }
    for c in &report.commands {
        let how = match (&c.spawn_error, c.exit.code, &c.exit.signal) {
            (Some(e), _, _) => e.clone(),
            (None, Some(code), _) => format!("exit code {code}"),
            (None, None, Some(sig)) => format!("ended by {sig}"),
            (None, None, None) => "no exit status".to_string(),
        };
        let _ = writeln!(s, "  command {}: {how}, {:.1} ms", c.index, c.duration_ms);
        if let Some(o) = &c.outlived {
            let pids: Vec<String> = o.pids.iter().map(u32::to_string).collect();
            let _ = writeln!(
                s,
                "    its process(es) {} held GPU memory after it exited, until {:.1} ms",
                pids.join(", "),
                o.until_ms
            );
        }
        for m in &c.oom {
            let _ = writeln!(s, "    out of memory ({}): {}", m.signature, m.line);
        }
    }
    for d in &report.devices {
        let _ = writeln!(s, "  GPU {} {}", d.index, cell(&d.name));
        let _ = writeln!(s, "    baseline        {}", reading_bytes(&d.baseline_used));
        let _ = writeln!(s, "    device peak     {}", reading_peak(&d.peak_used));
        let _ = writeln!(s, "    over baseline   {}", reading_bytes(&d.peak_over_baseline));
        for (i, p) in d.command_peaks.iter().enumerate() {
            let _ = writeln!(s, "    command {i} peak  {}", reading_peak(p));
        }
        if d.command_peaks.len() > 1 {
            let _ = writeln!(s, "    together peak   {}", reading_peak(&d.combined_peak));
            let _ = writeln!(s, "    sum of peaks    {}", reading_bytes(&d.sum_of_command_peaks));
        }
        for v in &d.views {
            let _ = writeln!(
                s,
                "    command {} views: allocated {}, reserved {}, process {}, device {}",
                v.command,
                human_bytes(v.framework_allocated),
                human_bytes(v.framework_reserved),
                reading_bytes(&v.process),
                reading_bytes(&v.device)
            );
            if let Reading::Known(outside) = v.outside_allocator {
                let _ = writeln!(
                    s,
                    "      outside the allocator (context, kernels, libraries): {}",
                    signed_bytes(outside)
                );
            }
        }
        for g in &d.gaps {
            let _ = writeln!(
                s,
                "    gap {:.1}–{:.1} ms: {} failed ({}), {} samples missing",
                g.from_ms, g.to_ms, g.call, g.error, g.failed_samples
            );
        }
    }
    if let Some(check) = &report.check {
        let _ = writeln!(s, "  check `{}` ({}): {}", check.check, check.file, check.verdict);
        for d in &check.devices {
            let _ = writeln!(
                s,
                "    GPU {}: measured {} ({}) vs estimate {} [{}–{}], headroom {} ({}): {}",
                d.index,
                reading_bytes(&d.measured),
                d.measured_view.as_deref().unwrap_or("-"),
                human_bytes(d.estimate),
                human_bytes(d.estimate_low),
                human_bytes(d.estimate_high),
                human_bytes(d.headroom),
                d.headroom_rule,
                d.status
            );
        }
        for note in &check.notes {
            let _ = writeln!(s, "    note: {note}");
        }
    }
    let _ = writeln!(s, "verdict: {}", report.verdict);
    for r in &report.reasons {
        let _ = writeln!(s, "  - {r}");
    }
    for note in &report.notes {
        let _ = writeln!(s, "  note: {note}");
    }
    let _ = writeln!(s, "report: {}", out.display());
    s
}

fn signed_bytes(bytes: i64) -> String {
    if bytes < 0 {
        format!("-{}", human_bytes(bytes.unsigned_abs()))
    } else {
        human_bytes(bytes.unsigned_abs())
    }
}

fn load_report(path: &std::path::Path) -> Result<vram_probe::report::RunReport, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    vram_probe::report::RunReport::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `vram-probe compare A B`.
pub(crate) fn compare(a: &std::path::Path, b: &std::path::Path, format: CompareFormat) -> u8 {
    let (ra, rb) = match (load_report(a), load_report(b)) {
        (Ok(ra), Ok(rb)) => (ra, rb),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("error: {error}");
            return exit::USAGE;
        }
    };
    let c =
        vram_probe::compare::compare(&a.display().to_string(), &ra, &b.display().to_string(), &rb);
    match format {
        CompareFormat::Json => outln!("{}", json(&c)),
        CompareFormat::Table => out!("{}", compare_table(&c)),
    }
    exit::OK
}

fn compare_table(c: &vram_probe::compare::Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:<22} {:>20} {:>20} {:>22}", "", "A", "B", "B against A");
    let opt = |v: Option<u64>| v.map_or_else(|| "unavailable".to_string(), human_bytes);
    for d in &c.devices {
        let change = match (d.saved, d.saved_percent) {
            (Some(saved), Some(p)) if saved >= 0 => {
                format!("saves {} ({p:.1} %)", human_bytes(saved.unsigned_abs()))
            }
            (Some(saved), Some(p)) => {
                format!("needs {} more ({:.1} %)", human_bytes(saved.unsigned_abs()), -p)
            }
            _ => "-".to_string(),
        };
        let _ = writeln!(
            s,
            "{:<22} {:>20} {:>20} {:>22}",
            format!("GPU {} peak", d.index),
            opt(d.a),
            opt(d.b),
            change
        );
    }
    let _ = writeln!(
        s,
        "{:<22} {:>20} {:>20} {:>22}",
        "duration",
        format!("{:.1} s", c.a.duration_ms / 1000.0),
        format!("{:.1} s", c.b.duration_ms / 1000.0),
        format!("{} s", signed(c.duration_delta_ms / 1000.0, 1))
    );
    let errors = |r: &vram_probe::compare::RunSummary| {
        format!("{} failed, {} OOM", r.failed_commands, r.oom_lines)
    };
    let _ = writeln!(s, "{:<22} {:>20} {:>20}", "errors", errors(&c.a), errors(&c.b));
    let _ = writeln!(s, "{:<22} {:>20} {:>20}", "verdict", c.a.verdict, c.b.verdict);
    match &c.quality {
        Some(q) => {
            let _ = writeln!(
                s,
                "{:<22} {:>20} {:>20} {:>22}",
                q.metric,
                format!("{:.4}", q.a),
                format!("{:.4}", q.b),
                format!("{} ({})", signed(q.delta, 4), q.change)
            );
        }
        None => {
            let _ = writeln!(s, "quality: not reported by both runs (see docs/probe.md)");
        }
    }
    s
}

/// `vram-probe verify`.
pub(crate) fn verify(
    library: Option<PathBuf>,
    file: &std::path::Path,
    machine: Option<&str>,
    format: CompareFormat,
) -> u8 {
    let source = match std::fs::read_to_string(file) {
        Ok(source) => source,
        Err(error) => {
            eprintln!("error: cannot read {}: {error}", file.display());
            return exit::USAGE;
        }
    };
    let dir = file.parent().unwrap_or_else(|| std::path::Path::new(""));
    let imports = vram_files::imports(&source, dir);
    let (what, declared) = match vram_probe::verify::declared(&source, &imports, machine) {
        Ok(found) => found,
        Err(error) => {
            eprintln!("error: {}: {error}", file.display());
            return exit::USAGE;
        }
    };
    let handle = match crate::open(library) {
        Ok(handle) => handle,
        Err(code) => return code,
    };
    let found = devices::read(&handle);
    let v =
        vram_probe::verify::verify(&file.display().to_string(), &what, &declared, &found.devices);
    match format {
        CompareFormat::Json => outln!("{}", json(&v)),
        CompareFormat::Table => {
            outln!("verify {} ({}) against this machine", v.file, v.declared);
            for i in &v.items {
                outln!(
                    "{}  {:<7} {:<20} declared {}; found {}",
                    if i.pass { "PASS" } else { "FAIL" },
                    i.subject,
                    i.item,
                    i.declared,
                    i.found
                );
            }
            outln!("{}", if v.pass { "verified" } else { "NOT verified" });
        }
    }
    if v.pass { exit::OK } else { exit::FAILED }
}

/// `value` with an explicit sign at `decimals` places, except that what rounds to zero is
/// written `0.0`: a difference of -0.02 s is no change, not "-0.0 s".
fn signed(value: f64, decimals: usize) -> String {
    let text = format!("{value:+.decimals$}");
    if text[1..].bytes().all(|b| b == b'0' || b == b'.') { text[1..].to_string() } else { text }
}

#[cfg(test)]
mod signed_tests {
    use super::signed;

    #[test]
    fn differences_that_round_to_zero_carry_no_sign() {
        assert_eq!(signed(-0.02, 1), "0.0");
        assert_eq!(signed(0.04, 1), "0.0");
        assert_eq!(signed(-0.0, 4), "0.0000");
        assert_eq!(signed(-0.06, 1), "-0.1");
        assert_eq!(signed(2.25, 1), "+2.2");
        assert_eq!(signed(0.00005, 4), "+0.0001");
    }
}
