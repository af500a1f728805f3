//! `vram-probe verify FILE [--machine NAME]`: the declared machine against the real one.
//!
//! The declared GPUs come from `--machine NAME` (a machine in the file or the catalog), else
//! the file's only machine, else the target of the file's first check. Each item is one pass or
//! fail line: the GPU count; per GPU its model (the declared title's model number, such as
//! `H100`, must be a word of NVML's name), its exact bytes (an exact declared capacity must
//! equal NVML's total; a marketed one must not exceed it), its architecture, its compute
//! capability, and every precision the declared device claims (BF16 needs compute capability
//! 8.0, FP8 8.9, FP4 10.0).

use serde::{Deserialize, Serialize};
use vram_core::hir::{Device, Layered};
use vram_core::import::Imports;
use vram_core::precision::Feature;

use crate::nvml::DeviceInfo;
use crate::reading::Reading;

/// One verified item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// `machine`, or `GPU 3`.
    pub subject: String,
    /// `count`, `model`, `memory`, `architecture`, `compute_capability`, `precision bf16`.
    pub item: String,
    pub pass: bool,
    pub declared: String,
    pub found: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    pub file: String,
    /// What was verified: `machine hgx-h200` or `check target 2 x l4`.
    pub declared: String,
    pub items: Vec<Item>,
    pub pass: bool,
}

/// The declared GPUs of `source`: `(what they are, one device per GPU)`. `imports` holds the
/// model files its `from "path"`s name (`vram_files::imports`).
pub fn declared(
    source: &str,
    imports: &Imports,
    machine: Option<&str>,
) -> Result<(String, Vec<Device>), String> {
    let (file, mut diagnostics) = vram_core::syntax::parse(source);
    let (layered, found) =
        vram_core::check::check_with_imports(&file, vram_core::catalog::builtin(), false, imports);
    diagnostics.extend(found);
    if let Some(error) = diagnostics.iter().find(|d| d.is_error()) {
        return Err(format!(
            "the file has errors ({}: {}); run `vram check`",
            error.code, error.message
        ));
    }
    let name = match machine {
        Some(name) => Some(name.to_string()),
        None if layered.own.machines.len() == 1 => layered.own.machines.keys().next().cloned(),
        None => None,
    };
    if let Some(name) = name {
        let machine = layered
            .machine(&name)
            .ok_or_else(|| format!("no machine named `{name}` in the file or the catalog"))?;
        let devices = expand(&layered, &machine.gpus)?;
        return Ok((format!("machine {name}"), devices));
    }
    let outcome = vram_core::evaluate_with_imports(source, vram_core::catalog::builtin(), imports);
    let check = outcome.budget.checks.first().ok_or_else(|| {
        "the file declares no machine and no check: name one with --machine".to_string()
    })?;
    let gpus: Vec<(u32, String)> = check.devices.iter().map(|d| (1, d.device.clone())).collect();
    Ok((format!("check target {}", check.target), expand(&layered, &gpus)?))
}

fn expand(layered: &Layered<'_>, gpus: &[(u32, String)]) -> Result<Vec<Device>, String> {
    let mut out = Vec::new();
    for (count, name) in gpus {
        let device = layered.device(name).ok_or_else(|| format!("no device named `{name}`"))?;
        out.extend(std::iter::repeat_n(device.clone(), *count as usize));
    }
    Ok(out)
}

/// Checks `declared` against the devices NVML reports.
pub fn verify(file: &str, what: &str, declared: &[Device], found: &[DeviceInfo]) -> Verification {
    let mut items = vec![Item {
        subject: "machine".to_string(),
        item: "count".to_string(),
        pass: declared.len() == found.len(),
        declared: format!("{} GPU(s)", declared.len()),
        found: format!("{} GPU(s)", found.len()),
    }];
    for (i, device) in declared.iter().enumerate() {
        let subject = format!("GPU {i}");
        let Some(real) = found.get(i) else {
            items.push(Item {
                subject,
                item: "present".to_string(),
                pass: false,
                declared: device.display_name().to_string(),
                found: "no such GPU".to_string(),
            });
            continue;
        };
        items.extend(device_items(&subject, device, real));
    }
    let pass = items.iter().all(|i| i.pass);
    Verification { file: file.to_string(), declared: what.to_string(), items, pass }
}

fn text<T: std::fmt::Display>(reading: &Reading<T>) -> String {
    match reading {
        Reading::Known(value) => value.to_string(),
        Reading::Unavailable { unavailable } => format!("unavailable ({unavailable})"),
    }
}

fn device_items(subject: &str, device: &Device, real: &DeviceInfo) -> Vec<Item> {
    let item = |name: &str, pass: bool, declared: String, found: String| Item {
        subject: subject.to_string(),
        item: name.to_string(),
        pass,
        declared,
        found,
    };
    let mut items = Vec::new();

    let title = device.display_name();
    let model_pass = real.name.known().is_some_and(|name| same_model(title, name));
    items.push(item("model", model_pass, title.to_string(), text(&real.name)));

    let total = real.memory.known().map(|m| m.total);
    let declared_bytes = device.memory.0;
    let (memory_pass, rule) = match total {
        Some(t) if device.memory_reported => (t == declared_bytes, "exact"),
        Some(t) => (t >= declared_bytes, "marketed, at most"),
        None => (false, "exact"),
    };
    items.push(item(
        "memory",
        memory_pass,
        format!("{declared_bytes} B ({rule})"),
        total.map_or_else(
            || text(&real.memory.clone().map(|m| m.total)),
            |t| {
                let diff = i128::from(t) - i128::from(declared_bytes);
                if diff == 0 { format!("{t} B") } else { format!("{t} B ({diff:+} B)") }
            },
        ),
    ));

    let arch = device.arch.name();
    let real_arch = real.architecture.known();
    // NVML names Blackwell Ultra parts `blackwell`.
    let arch_pass =
        real_arch.is_some_and(|r| r == arch || (arch == "blackwell-ultra" && r == "blackwell"));
    items.push(item("architecture", arch_pass, arch.to_string(), text(&real.architecture)));

    let real_cc = real.compute_capability.known().and_then(|c| tenths(c));
    if let Some(declared_cc) = device.compute {
        let declared_tenths = declared_cc
            .checked_mul(vram_core::ratio::Ratio::int(10))
            .map(vram_core::ratio::Ratio::floor);
        items.push(item(
            "compute_capability",
            real_cc.is_some() && declared_tenths == real_cc.map(i128::from),
            declared_cc.to_string(),
            text(&real.compute_capability),
        ));
    }

    for feature in &device.features {
        let needs = match feature {
            Feature::Fp16 => 53,
            Feature::Bf16 => 80,
            Feature::Fp8 => 89,
            Feature::Fp4 => 100,
        };
        items.push(item(
            &format!("precision {}", feature.name()),
            real_cc.is_some_and(|cc| cc >= needs),
            format!("supported (needs compute capability {}.{})", needs / 10, needs % 10),
            match real_cc {
                Some(cc) if cc >= needs => {
                    format!("supported (compute capability {})", text(&real.compute_capability))
                }
                Some(_) => {
                    format!("not supported (compute capability {})", text(&real.compute_capability))
                }
                None => text(&real.compute_capability),
            },
        ));
    }
    items
}

/// Whether NVML's `name` is the declared `title`'s model: the title's first word with a digit
/// (`H100`, `L40S`, `4090`) is a word of the name. Words split at anything but letters and
/// digits, so `NVIDIA A100 SXM4 80GB` matches `NVIDIA A100-SXM4-80GB`, and `L4` does not
/// match `L40S`.
fn same_model(title: &str, name: &str) -> bool {
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect()
    };
    let Some(model) = words(title).into_iter().find(|w| w.chars().any(|c| c.is_ascii_digit()))
    else {
        return false;
    };
    words(name).contains(&model)
}

/// `9.0` → 90.
fn tenths(cc: &str) -> Option<u32> {
    let (major, minor) = cc.split_once('.')?;
    Some(major.parse::<u32>().ok()? * 10 + minor.parse::<u32>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_match_by_their_number() {
        assert!(same_model("NVIDIA A100 SXM4 80GB", "NVIDIA A100-SXM4-80GB"));
        assert!(same_model("NVIDIA H200 (SXM, 141GB)", "NVIDIA H200"));
        assert!(same_model("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"));
        assert!(!same_model("NVIDIA L4", "NVIDIA L40S"));
        assert!(!same_model("NVIDIA H100 SXM5 80GB", "NVIDIA A100-SXM4-80GB"));
        assert!(!same_model("a device", "NVIDIA H100"));
    }

    #[test]
    fn compute_capability_in_tenths() {
        assert_eq!(tenths("8.9"), Some(89));
        assert_eq!(tenths("10.0"), Some(100));
        assert_eq!(tenths("nine"), None);
    }
}
