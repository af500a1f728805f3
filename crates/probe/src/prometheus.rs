//! The Prometheus textfile format (for node_exporter's textfile collector), so a fleet of
//! delivered machines is collected by existing monitoring. A value that could not be read is
//! left out with a comment, never written as 0.

use std::fmt::Write;

use crate::devices::Devices;

/// `(metric name, help, how to read it)`: one metric family.
type Family<T, V> = (&'static str, &'static str, fn(&T) -> V);

/// Escapes a label value.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Writes one metric family header.
pub(crate) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// `{gpu="0",uuid="GPU-…",name="NVIDIA H100 80GB HBM3"}` for a device.
pub(crate) fn device_labels(index: u32, uuid: Option<&str>, name: Option<&str>) -> String {
    let mut labels = format!("gpu=\"{index}\"");
    if let Some(uuid) = uuid {
        let _ = write!(labels, ",uuid=\"{}\"", label(uuid));
    }
    if let Some(name) = name {
        let _ = write!(labels, ",name=\"{}\"", label(name));
    }
    labels
}

pub fn devices(devices: &Devices) -> String {
    let mut out = String::new();
    family(&mut out, "vram_probe_info", "gauge", "Driver and CUDA versions (always 1).");
    let driver = devices.system.driver_version.known().map_or("unavailable", String::as_str);
    let cuda = devices.system.cuda_driver_version.known().map_or("unavailable", String::as_str);
    let _ = writeln!(
        out,
        "vram_probe_info{{driver_version=\"{}\",cuda_driver_version=\"{}\",probe_version=\"{}\"}} 1",
        label(driver),
        label(cuda),
        label(&devices.probe_version)
    );
    let memory_metrics: [Family<crate::nvml::Memory, u64>; 4] = [
        ("vram_probe_memory_total_bytes", "Total device memory (NVML memory info v2).", |m| {
            m.total
        }),
        ("vram_probe_memory_used_bytes", "Used device memory.", |m| m.used),
        ("vram_probe_memory_free_bytes", "Free device memory.", |m| m.free),
        ("vram_probe_memory_reserved_bytes", "Memory the driver reserves.", |m| m.reserved),
    ];
    for (name, help, get) in memory_metrics {
        family(&mut out, name, "gauge", help);
        for d in &devices.devices {
            let labels = device_labels(
                d.index,
                d.uuid.known().map(String::as_str),
                d.name.known().map(String::as_str),
            );
            match d.memory.known() {
                Some(memory) => {
                    let _ = writeln!(out, "{name}{{{labels}}} {}", get(memory));
                }
                None => {
                    let _ = writeln!(out, "# {name}{{{labels}}} unavailable");
                }
            }
        }
    }
    let flags: [Family<crate::nvml::DeviceInfo, Option<bool>>; 2] = [
        ("vram_probe_mig_enabled", "1 when MIG mode is on.", |d| d.mig_enabled.value()),
        ("vram_probe_ecc_enabled", "1 when ECC is on.", |d| d.ecc_enabled.value()),
    ];
    for (name, help, get) in flags {
        family(&mut out, name, "gauge", help);
        for d in &devices.devices {
            let labels = device_labels(d.index, d.uuid.known().map(String::as_str), None);
            match get(d) {
                Some(on) => {
                    let _ = writeln!(out, "{name}{{{labels}}} {}", u8::from(on));
                }
                None => {
                    let _ = writeln!(out, "# {name}{{{labels}}} unavailable");
                }
            }
        }
    }
    out
}

/// A run report's figures.
pub fn run(report: &crate::report::RunReport) -> String {
    let mut out = String::new();
    family(&mut out, "vram_probe_run_duration_seconds", "gauge", "Wall time of the run.");
    let _ = writeln!(out, "vram_probe_run_duration_seconds {}", report.duration_ms / 1000.0);
    family(&mut out, "vram_probe_run_pass", "gauge", "1 when the run passed, 0 when it failed.");
    let _ = writeln!(out, "vram_probe_run_pass {}", u8::from(report.verdict == "pass"));
    family(&mut out, "vram_probe_run_sampling_hz", "gauge", "Achieved sampling rate.");
    let _ = writeln!(out, "vram_probe_run_sampling_hz {}", report.sampling.achieved_hz);
    family(&mut out, "vram_probe_run_exit_code", "gauge", "Exit code of each command.");
    for c in &report.commands {
        match c.exit.code {
            Some(code) => {
                let _ = writeln!(out, "vram_probe_run_exit_code{{command=\"{}\"}} {code}", c.index);
            }
            None => {
                let _ = writeln!(
                    out,
                    "# vram_probe_run_exit_code{{command=\"{}\"}} unavailable",
                    c.index
                );
            }
        }
    }
    family(
        &mut out,
        "vram_probe_run_oom_lines",
        "gauge",
        "Out-of-memory messages in each command's output.",
    );
    for c in &report.commands {
        let _ =
            writeln!(out, "vram_probe_run_oom_lines{{command=\"{}\"}} {}", c.index, c.oom.len());
    }
    let per_device: [Family<crate::report::DeviceRun, Option<u64>>; 4] = [
        ("vram_probe_run_baseline_used_bytes", "Device used memory before the run.", |d| {
            d.baseline_used.value()
        }),
        ("vram_probe_run_peak_used_bytes", "Device-level peak used memory.", |d| {
            d.peak_used.known().map(|p| p.bytes)
        }),
        ("vram_probe_run_peak_over_baseline_bytes", "Device-level peak over the baseline.", |d| {
            d.peak_over_baseline.value()
        }),
        ("vram_probe_run_process_peak_bytes", "Peak of the commands' processes together.", |d| {
            d.combined_peak.known().map(|p| p.bytes)
        }),
    ];
    for (name, help, get) in per_device {
        family(&mut out, name, "gauge", help);
        for d in &report.devices {
            let labels = device_labels(d.index, d.uuid.known().map(String::as_str), None);
            match get(d) {
                Some(v) => {
                    let _ = writeln!(out, "{name}{{{labels}}} {v}");
                }
                None => {
                    let _ = writeln!(out, "# {name}{{{labels}}} unavailable");
                }
            }
        }
    }
    family(&mut out, "vram_probe_run_gap_samples", "gauge", "Samples lost to NVML errors.");
    for d in &report.devices {
        let labels = device_labels(d.index, d.uuid.known().map(String::as_str), None);
        let lost: u64 = d.gaps.iter().map(|g| g.failed_samples).sum();
        let _ = writeln!(out, "vram_probe_run_gap_samples{{{labels}}} {lost}");
    }
    if let Some(check) = &report.check {
        family(
            &mut out,
            "vram_probe_run_estimate_bytes",
            "gauge",
            "The estimate (device view) per GPU.",
        );
        for d in &check.devices {
            let _ = writeln!(
                out,
                "vram_probe_run_estimate_bytes{{gpu=\"{}\",check=\"{}\"}} {}",
                d.index,
                label(&check.check),
                d.estimate
            );
        }
    }
    out
}
