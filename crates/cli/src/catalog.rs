//! `vram catalog`: the built-in devices, machines and models.

use std::fmt::Write;

use serde::Serialize;

use crate::args::CatalogFormat;

#[derive(Serialize)]
struct DeviceEntry<'a> {
    name: &'a str,
    title: Option<&'a str>,
    memory: u64,
    memory_reported: bool,
    /// What the driver keeps of `memory`; 0 when the catalog does not know it.
    reserved: u64,
    arch: &'a str,
    precisions: Vec<&'a str>,
}

#[derive(Serialize)]
struct ModelEntry<'a> {
    name: &'a str,
    title: Option<&'a str>,
    parameters: Option<u64>,
}

#[derive(Serialize)]
struct MachineEntry<'a> {
    name: &'a str,
    title: Option<&'a str>,
    /// `(count, device)` per line of GPUs.
    gpus: Vec<(u32, &'a str)>,
    host_ram: Option<u64>,
    disk: Option<u64>,
}

#[derive(Serialize)]
struct Catalog<'a> {
    devices: Vec<DeviceEntry<'a>>,
    machines: Vec<MachineEntry<'a>>,
    models: Vec<ModelEntry<'a>>,
}

pub(crate) fn run(format: CatalogFormat) -> u8 {
    let program = vram_core::catalog::builtin();
    let devices: Vec<DeviceEntry<'_>> = program
        .devices
        .values()
        .map(|d| DeviceEntry {
            name: &d.name,
            title: d.title.as_deref(),
            memory: d.memory.0,
            memory_reported: d.memory_reported,
            reserved: d.reserved.0,
            arch: d.arch.name(),
            precisions: d.features.iter().map(|f| f.name()).collect(),
        })
        .collect();
    let machines: Vec<MachineEntry<'_>> = program
        .machines
        .values()
        .map(|m| MachineEntry {
            name: &m.name,
            title: m.title.as_deref(),
            gpus: m.gpus.iter().map(|(n, d)| (*n, d.as_str())).collect(),
            host_ram: m.host_ram.map(|b| b.0),
            disk: m.disk.map(|b| b.0),
        })
        .collect();
    let models: Vec<ModelEntry<'_>> = program
        .models
        .values()
        .map(|m| ModelEntry {
            name: &m.name,
            title: m.title.as_deref(),
            parameters: m
                .params
                .or_else(|| m.shape.as_ref().and_then(vram_core::eval::parameter_count)),
        })
        .collect();
    match format {
        CatalogFormat::Json => {
            outln!(
                "{}",
                serde_json::to_string_pretty(&Catalog { devices, machines, models })
                    .unwrap_or_default()
            );
        }
        CatalogFormat::Vram => {
            for (_, source) in vram_core::catalog::SOURCES {
                out!("{source}");
            }
        }
        CatalogFormat::Table => {
            let mut out = String::from("devices\n");
            for d in &devices {
                let memory = vram_core::bytes::Bytes(d.memory);
                let how = if d.memory_reported { "" } else { " (marketed)" };
                let _ = writeln!(
                    out,
                    "  {:<24} {:<38} {:>11}{how:<11} {:<16} {}",
                    d.name,
                    d.title.unwrap_or(""),
                    memory.human(),
                    d.arch,
                    d.precisions.join(" ")
                );
            }
            out.push_str("\nmachines\n");
            for m in &machines {
                let gpus: Vec<String> = m.gpus.iter().map(|(n, d)| format!("{n} x {d}")).collect();
                let size = |b: Option<u64>| {
                    b.map(|b| vram_core::bytes::Bytes(b).human()).unwrap_or_default()
                };
                let _ = writeln!(
                    out,
                    "  {:<28} {:<24} RAM {:>11}  disk {:>11}",
                    m.name,
                    gpus.join(" + "),
                    size(m.host_ram),
                    size(m.disk)
                );
            }
            out.push_str("\nmodels\n");
            for m in &models {
                let params =
                    m.parameters.map(vram_core::bytes::group_thousands).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  {:<24} {:<38} {:>18} params",
                    m.name,
                    m.title.unwrap_or(""),
                    params
                );
            }
            out!("{out}");
        }
    }
    0
}
