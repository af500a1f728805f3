//! The GPU each source names, as a device of the catalog or a declared one.
//!
//! One row per `gpu_type` wording in the data set, so that every mapping is a visible decision.
//! A GPU the catalog lacks is declared with its marketed size. When the source does not state
//! the GPU or its memory, the point can still be compared on a peak or a component (neither
//! depends on capacity), but not on a fits / does-not-fit verdict.

/// The device a point runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// The device name in the generated source.
    pub device: &'static str,
    /// A `device` declaration to put in the source, for GPUs the catalog lacks.
    pub declaration: Option<&'static str>,
    /// Whether the source states the GPU and its memory (a verdict needs the capacity).
    pub capacity_stated: bool,
    /// Why this entry was chosen, when the wording leaves a choice.
    pub note: Option<&'static str>,
}

const RTX_3070: &str = "device rtx-3070 \"NVIDIA GeForce RTX 3070 8GB\" {\n  memory     8 GB marketed\n  arch       ampere\n  compute    8.6\n  precisions fp32 tf32 fp16 bf16 int8\n  vendor     nvidia\n}\n";
const RTX_A6000: &str = "device rtx-a6000 \"NVIDIA RTX A6000 48GB\" {\n  memory     48 GB marketed\n  arch       ampere\n  compute    8.6\n  precisions fp32 tf32 fp16 bf16 int8\n  vendor     nvidia\n}\n";
/// A placeholder for sources that do not name the GPU: Ampere, so that bf16 and fp16 run; its
/// capacity is never compared.
const NOT_STATED: &str = "device gpu-not-stated \"GPU not stated\" {\n  memory     80 GB marketed\n  arch       ampere\n  compute    8.0\n  precisions fp32 tf32 fp16 bf16 int8\n  vendor     nvidia\n}\n";

fn catalog(device: &'static str) -> Gpu {
    Gpu { device, declaration: None, capacity_stated: true, note: None }
}

fn variant(device: &'static str, note: &'static str) -> Gpu {
    Gpu { device, declaration: None, capacity_stated: true, note: Some(note) }
}

fn unstated(device: &'static str, declaration: Option<&'static str>, note: &'static str) -> Gpu {
    Gpu { device, declaration, capacity_stated: false, note: Some(note) }
}

/// The device for a `gpu_type` wording, or `None` for a wording this table does not know.
pub fn gpu(gpu_type: &str) -> Option<Gpu> {
    let same_80 = "SXM and PCIe 80 GB report the same 81,559 MiB; the form factor is not stated";
    let a100_80 = "SXM4 and PCIe 80 GB report the same 81,920 MiB; the form factor is not stated";
    Some(match gpu_type.trim() {
        "A100-SXM4-80G" => catalog("a100-sxm4-80gb"),
        "A100 80GB" | "A100 80GB (host RAM > 64GB)" | "A100 80GB (per README environment)" => {
            variant("a100-sxm4-80gb", a100_80)
        }
        "H100 80GB" | "H100 80GB (total_gpu_memory 79.22GiB)" => variant("h100-sxm-80gb", same_80),
        "H100" => unstated(
            "h100-sxm-80gb",
            None,
            "memory not stated (80 GB or the 94 GB NVL); the 80 GB SXM entry stands in",
        ),
        "Tesla V100-SXM2 16GB" => catalog("v100-sxm2-16gb"),
        "RTX 4090 24GB" => catalog("rtx-4090"),
        "RTX 3090 24GB (23.70 GiB usable)" => catalog("rtx-3090"),
        "GeForce RTX 3070 8GB" => Gpu {
            device: "rtx-3070",
            declaration: Some(RTX_3070),
            capacity_stated: true,
            note: Some("not in the catalog: declared with its marketed 8 GB"),
        },
        "RTX A6000 48GB" => Gpu {
            device: "rtx-a6000",
            declaration: Some(RTX_A6000),
            capacity_stated: true,
            note: Some("not in the catalog: declared with its marketed 48 GB"),
        },
        "A100" | "A100 (80GB assumed, not stated)" => unstated(
            "a100-sxm4-80gb",
            None,
            "memory not stated (40 or 80 GB); the 80 GB entry stands in",
        ),
        "not stated explicitly (guide says the model 'can be run on a single 40 GB A100')" => {
            unstated("a100-40gb", None, "not stated; the guide mentions a 40 GB A100")
        }
        "not stated" | "not stated (24 GB class)" => {
            unstated("gpu-not-stated", Some(NOT_STATED), "not stated: a placeholder device")
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_devices_check() {
        for declaration in [RTX_3070, RTX_A6000, NOT_STATED] {
            let outcome = vram_core::evaluate(declaration);
            let errors: Vec<_> = outcome.diagnostics.iter().filter(|d| d.is_error()).collect();
            assert!(errors.is_empty(), "{declaration}: {errors:?}");
        }
    }
}
