//! The GPU each source names, as a device of the catalog or a declared one.
//!
//! One row per `gpu_type` wording in the data set, so that every mapping is a visible decision;
//! a wording the table does not list (a data set the harness has not seen) is read by its words
//! ([`read`]): the GPU family, the memory it states and the form factor, to the catalog entry
//! they name. A GPU the catalog lacks is declared with its marketed size, read in binary units:
//! a GPU's "12 GB" is 12 GiB of memory chips (an RTX 3060 12GB reports 12,288 MiB, an A100 80GB
//! 81,920 MiB), which the driver's reserve then trims. When the source does not state
//! the GPU or its memory, the point can still be compared on a peak or a component (neither
//! depends on capacity), but not on a fits / does-not-fit verdict.

/// The device a point runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// The device name in the generated source.
    pub device: String,
    /// A `device` declaration to put in the source, for GPUs the catalog lacks.
    pub declaration: Option<String>,
    /// Whether the source states the GPU and its memory (a verdict needs the capacity).
    pub capacity_stated: bool,
    /// Why this entry was chosen, when the wording leaves a choice.
    pub note: Option<String>,
}

const RTX_3070: &str = "device rtx-3070 \"NVIDIA GeForce RTX 3070 8GB\" {\n  memory     8 GiB marketed\n  arch       ampere\n  compute    8.6\n  precisions fp32 tf32 fp16 bf16 int8\n  vendor     nvidia\n}\n";
const RTX_A6000: &str = "device rtx-a6000 \"NVIDIA RTX A6000 48GB\" {\n  memory     48 GiB marketed\n  arch       ampere\n  compute    8.6\n  precisions fp32 tf32 fp16 bf16 int8\n  vendor     nvidia\n}\n";
/// A placeholder for sources that do not name the GPU: Ampere, so that bf16 and fp16 run; its
/// capacity is never compared.
const NOT_STATED: &str = "device gpu-not-stated \"GPU not stated\" {\n  memory     80 GiB marketed\n  arch       ampere\n  compute    8.0\n  precisions fp32 tf32 fp16 bf16 int8\n  vendor     nvidia\n}\n";

fn catalog(device: &str) -> Gpu {
    Gpu { device: device.to_owned(), declaration: None, capacity_stated: true, note: None }
}

fn variant(device: &str, note: &str) -> Gpu {
    Gpu { note: Some(note.to_owned()), ..catalog(device) }
}

fn unstated(device: &str, declaration: Option<&str>, note: &str) -> Gpu {
    Gpu {
        device: device.to_owned(),
        declaration: declaration.map(str::to_owned),
        capacity_stated: false,
        note: Some(note.to_owned()),
    }
}

fn declared(device: &str, declaration: String, note: String) -> Gpu {
    Gpu {
        device: device.to_owned(),
        declaration: Some(declaration),
        capacity_stated: true,
        note: Some(note),
    }
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
        "GeForce RTX 3070 8GB" => declared(
            "rtx-3070",
            RTX_3070.to_owned(),
            "not in the catalog: declared with its marketed 8 GB".to_owned(),
        ),
        "RTX A6000 48GB" => declared(
            "rtx-a6000",
            RTX_A6000.to_owned(),
            "not in the catalog: declared with its marketed 48 GB".to_owned(),
        ),
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
        _ => return read(gpu_type),
    })
}

/// A wording the table does not list, read by its words: the family (`h100`, `a100`, `4090`,
/// `l40s`...), a stated memory (`80GB`, `40 GB`) and a form factor (`pcie`, `nvl`, `sxm`).
/// `None` when no family is named and no memory is stated.
///
/// A wording that starts with "not stated" states no memory, whatever its note holds ("not
/// stated (35.6 GB per GPU in use)" is a reading, not a card), and a card it guesses at stands
/// in with its memory unstated; with no card named it is the placeholder device.
pub fn read(gpu_type: &str) -> Option<Gpu> {
    let lower = gpu_type.to_lowercase();
    // Decimal figures stay whole (`23.70 GiB usable` is not 70 GB).
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .map(|w| w.trim_matches('.'))
        .filter(|w| !w.is_empty())
        .collect();
    let has = |word: &str| words.contains(&word);
    let not_stated = lower.trim_start().starts_with("not stated");
    let memory = if not_stated { None } else { stated_memory(&words) };
    let read_as = format!("read from the wording {gpu_type:?}");
    let same_80 = "SXM and PCIe 80 GB report the same 81,559 MiB; the form factor is not stated";
    let chosen = |device: &str| variant_or_unstated(device, memory, &read_as);
    let gpu = if has("h200") {
        chosen(if has("nvl") { "h200-nvl" } else { "h200-sxm" })
    } else if has("h100") || has("h800") {
        // The H800 is the H100 with its NVLink cut for export; the same 80 GB.
        if has("nvl") || matches!(memory, Some(94 | 96)) {
            chosen("h100-nvl")
        } else if has("pcie") {
            chosen("h100-pcie-80gb")
        } else if has("sxm") || has("sxm5") {
            chosen("h100-sxm-80gb")
        } else {
            variant_or_unstated("h100-sxm-80gb", memory, same_80)
        }
    } else if has("a100") || has("a800") {
        // Likewise the A800 beside the A100, in 40 and 80 GB.
        match memory {
            Some(40) => variant("a100-40gb", &read_as),
            Some(_) if has("pcie") => variant("a100-pcie-80gb", &read_as),
            Some(_) => variant("a100-sxm4-80gb", &read_as),
            None => unstated(
                "a100-sxm4-80gb",
                None,
                "memory not stated (40 or 80 GB); the 80 GB entry stands in",
            ),
        }
    } else if has("v100") {
        match memory {
            Some(32) => variant("v100-sxm2-32gb", &read_as),
            Some(_) => variant("v100-sxm2-16gb", &read_as),
            None => unstated("v100-sxm2-16gb", None, "memory not stated (16 or 32 GB)"),
        }
    } else if has("a10g") {
        declared(
            "a10g",
            declaration("a10g", "NVIDIA A10G", 24, "ampere", "8.6", AMPERE_PRECISIONS),
            "not in the catalog: AWS's A10G declared with its marketed 24 GB".to_owned(),
        )
    } else if has("a6000") {
        declared(
            "rtx-a6000",
            RTX_A6000.to_owned(),
            "not in the catalog: declared with its marketed 48 GB".to_owned(),
        )
    } else if has("6000") && has("ada") {
        catalog("rtx-6000-ada")
    } else if has("6000") && (has("pro") || has("blackwell")) {
        catalog("rtx-pro-6000-blackwell")
    } else if has("gh200") {
        // Grace Hopper's GPU is an H100 with 96 GB of HBM3, or 144 GB of HBM3e in the later
        // GH200 (NVIDIA's GH200 data sheet).
        let gigabytes = memory.unwrap_or(96);
        let declared_as = declaration(
            "gh200",
            "NVIDIA GH200 (Hopper GPU)",
            gigabytes,
            "hopper",
            "9.0",
            "fp32 tf32 fp16 bf16 fp8 int8",
        );
        if memory.is_some() {
            declared(
                "gh200",
                declared_as,
                format!(
                    "not in the catalog: declared with the {gigabytes} GB it states, as hopper"
                ),
            )
        } else {
            unstated(
                "gh200",
                Some(&declared_as),
                "memory not stated (96 or 144 GB); the first GH200's 96 GB, as hopper",
            )
        }
    } else if let Some((_, device)) = ONE_WORD.iter().find(|(word, _)| has(word)) {
        catalog(device)
    } else if let Some((device, _)) = GEFORCE.iter().find(|(_, number)| has(number)) {
        catalog(device)
    } else {
        // A card the catalog lacks, declared with the memory it states; a GeForce card named
        // without its memory, with the size it usually ships with (the comparison of a peak
        // does not read it, a verdict does not trust it).
        let usual = if memory.is_none() { usual_memory(&words) } else { None };
        let Some(gigabytes) = memory.or(usual.as_ref().map(|(gigabytes, _)| *gigabytes)) else {
            return not_stated.then(|| {
                unstated("gpu-not-stated", Some(NOT_STATED), "not stated: a placeholder device")
            });
        };
        let (arch, compute, precisions) = geforce_generation(&words);
        let device = format!("gpu-{gigabytes}gb");
        let title = gpu_type.replace(['"', '\\'], "");
        let declared_as = declaration(&device, &title, gigabytes, arch, compute, precisions);
        match usual {
            Some((_, card)) => unstated(
                &device,
                Some(&declared_as),
                &format!(
                    "memory not stated: the {card}'s usual {gigabytes} GB, declared as {arch}"
                ),
            ),
            None => declared(
                &device,
                declared_as,
                format!(
                    "not in the catalog: declared with the {gigabytes} GB it states, as {arch} \
                     (capability {compute})"
                ),
            ),
        }
    };
    // A card a "not stated" wording guesses at stands in; its capacity is not the source's.
    if not_stated && gpu.capacity_stated {
        let note = gpu.note.clone().unwrap_or_default();
        return Some(Gpu {
            capacity_stated: false,
            note: Some(format!("not stated; {read_as} {note}").trim_end().to_string()),
            ..gpu
        });
    }
    Some(gpu)
}

fn variant_or_unstated(device: &str, memory: Option<u64>, note: &str) -> Gpu {
    match memory {
        Some(_) => variant(device, note),
        None => unstated(device, None, &format!("memory not stated; {note}")),
    }
}

/// Whether the device computes in FP8 (Ada, Hopper, Blackwell): the catalog's precisions, or the
/// declaration's for a device the catalog lacks.
pub fn runs_fp8(gpu: &Gpu) -> bool {
    match &gpu.declaration {
        Some(declaration) => declaration
            .lines()
            .any(|line| line.trim_start().starts_with("precisions") && line.contains("fp8")),
        None => vram_core::catalog::builtin()
            .devices
            .get(&gpu.device)
            .is_some_and(|device| device.supports(vram_core::precision::Feature::Fp8)),
    }
}

/// Catalog devices named by one word of the wording.
const ONE_WORD: [(&str, &str); 17] = [
    ("h20", "h20"),
    ("p100", "p100-pcie-16gb"),
    ("a30", "a30"),
    ("a10", "a10"),
    ("a40", "a40"),
    ("l4", "l4"),
    ("l40", "l40"),
    ("l40s", "l40s"),
    ("t4", "t4"),
    ("b200", "b200"),
    ("gb200", "gb200"),
    ("b300", "b300-sxm"),
    ("gb300", "gb300"),
    ("mi300x", "mi300x"),
    ("mi325x", "mi325x"),
    ("mi250x", "mi250x"),
    ("gaudi3", "gaudi3"),
];

/// GeForce cards of the catalog, by their model number.
const GEFORCE: [(&str, &str); 3] =
    [("rtx-5090", "5090"), ("rtx-4090", "4090"), ("rtx-3090", "3090")];

const AMPERE_PRECISIONS: &str = "fp32 tf32 fp16 bf16 int8";

/// GeForce cards by model number and suffix, with the memory of their common (or only)
/// variant, from NVIDIA's specifications pages: `(number, suffix, GB)`; "" is the plain card.
const GEFORCE_MEMORY: [(&str, &str, u64); 49] = [
    ("1060", "", 6),
    ("1650", "", 4),
    ("1660", "", 6),
    ("1660", "ti", 6),
    ("1660", "super", 6),
    ("2060", "super", 8),
    ("2070", "super", 8),
    ("2080", "super", 8),
    ("3050", "", 8),
    ("4070", "ti super", 16),
    ("5060", "", 8),
    // RTX A-series (Ampere) and RTX Ada workstation cards.
    ("a4000", "", 16),
    ("a4500", "", 20),
    ("a5000", "", 24),
    ("a5500", "", 24),
    ("2000", "ada", 16),
    ("4000", "ada", 20),
    ("4500", "ada", 24),
    ("5000", "ada", 32),
    ("4000", "sff", 20),
    ("1070", "", 8),
    ("1080", "", 8),
    ("1080", "ti", 11),
    ("2060", "", 6),
    ("2070", "", 8),
    ("2080", "", 8),
    ("2080", "ti", 11),
    ("3060", "", 12),
    ("3060", "ti", 8),
    ("3070", "", 8),
    ("3070", "ti", 8),
    ("3080", "", 10),
    ("3080", "ti", 12),
    ("3090", "ti", 24),
    ("4060", "", 8),
    ("4060", "ti", 8),
    ("4070", "", 12),
    ("4070", "ti", 12),
    ("4070", "super", 12),
    ("4080", "", 16),
    ("4080", "super", 16),
    ("5060", "ti", 16),
    ("5070", "", 12),
    ("5070", "ti", 16),
    ("5080", "", 16),
    ("titan", "rtx", 24),
    ("titan", "v", 12),
    // Data-center and workstation cards of those generations: the Tesla P40 (24 GB GDDR5) and
    // the Quadro RTX 8000 (48 GB GDDR6), whose only variants these are.
    ("p40", "", 24),
    ("8000", "", 48),
];

/// The usual memory of a GeForce card named without it, and the card's name.
fn usual_memory(words: &[&str]) -> Option<(u64, String)> {
    let suffix_of = |at: usize| words.get(at + 1).copied().unwrap_or("");
    let two_words = |at: usize| match (words.get(at + 1), words.get(at + 2)) {
        (Some(a), Some(b)) => format!("{a} {b}"),
        _ => String::new(),
    };
    // The most specific entry first: `4070 ti super` before `4070 ti` before `4070`.
    let found = words.iter().enumerate().find_map(|(at, word)| {
        let (one, two) = (suffix_of(at), two_words(at));
        let with = |suffix: &str| {
            GEFORCE_MEMORY
                .iter()
                .find(|(number, s, _)| number == word && !s.is_empty() && *s == suffix)
        };
        with(&two)
            .or_else(|| with(one))
            .or_else(|| GEFORCE_MEMORY.iter().find(|(number, s, _)| number == word && s.is_empty()))
    })?;
    let (number, suffix, gigabytes) = *found;
    let name = if suffix.is_empty() { number.to_owned() } else { format!("{number} {suffix}") };
    Some((gigabytes, name.to_uppercase().replace("TITAN", "Titan")))
}

/// The memory, in bytes, of the GPU a wording names, where the wording states it or names a card
/// with one size (a catalog device, with the size its driver reports; a card the harness
/// declares, with its marketed GiB): `RTX 3060 12GB` 12 GiB, `RTX 4090` 24,564 MiB, `A100`
/// (40 or 80 GB) none.
pub fn memory_bytes(gpu_type: &str) -> Option<u64> {
    let gpu = gpu(gpu_type).filter(|gpu| gpu.capacity_stated)?;
    match &gpu.declaration {
        Some(declaration) => declaration.lines().find_map(|line| {
            let rest = line.trim_start().strip_prefix("memory")?;
            crate::data::leading_number(rest.trim_start())?.checked_mul(1 << 30)
        }),
        None => Some(vram_core::catalog::builtin().devices.get(&gpu.device)?.memory.0),
    }
}

/// The memory a wording states: `80gb`, `80g`, `24gib`, or a number followed by `gb`.
/// A decimal figure is rounded (`23.70 GiB` usable of a 24 GB card).
fn stated_memory(words: &[&str]) -> Option<u64> {
    words.iter().enumerate().find_map(|(at, word)| {
        let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let unit = &word[digits.len()..];
        let unit = if unit.is_empty() { words.get(at + 1).copied().unwrap_or("") } else { unit };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        let whole: u64 = whole.parse().ok()?;
        let rounds_up = fraction.chars().next().is_some_and(|c| c >= '5');
        if !fraction.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let gigabytes = whole + u64::from(rounds_up);
        (matches!(unit, "gb" | "g" | "gib") && (1..=1024).contains(&gigabytes)).then_some(gigabytes)
    })
}

/// A GeForce or RTX workstation card's generation from its model number (`3080`, `4070`),
/// Ampere otherwise: architecture, compute capability and the precisions it runs.
fn geforce_generation(words: &[&str]) -> (&'static str, &'static str, &'static str) {
    if words.contains(&"titan") {
        return if words.contains(&"v") {
            ("volta", "7.0", "fp32 fp16 int8")
        } else {
            ("turing", "7.5", "fp32 fp16 int8")
        };
    }
    if words.contains(&"quadro") && words.contains(&"rtx") {
        // Quadro RTX 4000 to 8000: Turing, sm_75.
        return ("turing", "7.5", "fp32 fp16 int8");
    }
    if words.contains(&"ada") {
        // The RTX Ada workstation cards (2000 to 5000 Ada): sm_89.
        return ("ada", "8.9", "fp32 tf32 fp16 bf16 fp8 int8");
    }
    let number =
        words.iter().find_map(|w| w.parse::<u32>().ok().filter(|n| (1000..10000).contains(n)));
    if number.is_some_and(|n| n / 100 == 16) {
        // GTX 16 series (1650, 1660): Turing without tensor cores, sm_75.
        return ("turing", "7.5", "fp32 fp16 int8");
    }
    if number.is_some_and(|n| n / 100 == 10) || words.contains(&"p40") {
        // GeForce 10 series (GTX 1080 Ti, 1070) and the Tesla P40: Pascal, sm_61.
        return ("pascal", "6.1", "fp32 fp16 int8");
    }
    match number.map(|n| n / 1000) {
        Some(2) => ("turing", "7.5", "fp32 fp16 int8"),
        Some(4) => ("ada", "8.9", "fp32 tf32 fp16 bf16 fp8 int8"),
        Some(5) => ("blackwell", "12.0", "fp32 tf32 fp16 bf16 fp8 int8"),
        _ => ("ampere", "8.6", AMPERE_PRECISIONS),
    }
}

fn declaration(
    device: &str,
    title: &str,
    gigabytes: u64,
    arch: &str,
    compute: &str,
    precisions: &str,
) -> String {
    format!(
        "device {device} \"{title}\" {{\n  memory     {gigabytes} GiB marketed\n  arch       \
         {arch}\n  compute    {compute}\n  precisions {precisions}\n  vendor     nvidia\n}}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_wordings_are_read_by_their_words() {
        let device = |wording: &str| read(wording).map(|gpu| (gpu.device, gpu.capacity_stated));
        let stated = |name: &str| Some((name.to_owned(), true));
        assert_eq!(device("NVIDIA H100 80GB HBM3 PCIe"), stated("h100-pcie-80gb"));
        assert_eq!(device("1x H100 SXM5 (80 GB)"), stated("h100-sxm-80gb"));
        assert_eq!(device("NVIDIA A100-SXM4-40GB"), stated("a100-40gb"));
        assert_eq!(device("A100 PCIe 80GB"), stated("a100-pcie-80gb"));
        assert_eq!(device("NVIDIA L40S"), stated("l40s"));
        assert_eq!(device("NVIDIA GeForce RTX 4090"), stated("rtx-4090"));
        assert_eq!(device("Tesla T4 16GB"), stated("t4"));
        assert_eq!(device("AWS g5 (A10G 24GB)"), stated("a10g"));
        assert_eq!(device("H200 141GB"), stated("h200-sxm"));
        assert_eq!(device("NVIDIA B300"), stated("b300-sxm"));
        assert_eq!(device("A100"), Some(("a100-sxm4-80gb".to_owned(), false)));
        assert_eq!(device("8x A800-SXM4-80GB"), stated("a100-sxm4-80gb"));
        assert_eq!(device("H800"), Some(("h100-sxm-80gb".to_owned(), false)));
        assert_eq!(device("Kaggle Tesla P100-PCIE-16GB"), stated("p100-pcie-16gb"));
        // A decimal figure is one number, and a note on an unstated card states no memory.
        assert_eq!(device("RTX 6000 Ada (47.5 GiB total)"), stated("rtx-6000-ada"));
        let declared = read("Radeon Pro card (23.98 GiB total)").and_then(|gpu| gpu.declaration);
        assert!(declared.is_some_and(|d| d.contains("memory     24 GiB")));
        assert_eq!(
            device("not stated (35.6 GB/GPU in use)"),
            Some(("gpu-not-stated".to_owned(), false))
        );
        assert_eq!(
            device("not stated (an A100 80GB, going by the speed)"),
            Some(("a100-sxm4-80gb".to_owned(), false))
        );
        assert_eq!(
            device("not stated in this turn (a later turn lists an RTX 3090)"),
            Some(("rtx-3090".to_owned(), false))
        );
        let gtx = read("GTX 1080 Ti 11GB").and_then(|gpu| gpu.declaration).unwrap_or_default();
        assert!(gtx.contains("pascal") && gtx.contains("compute    6.1"), "{gtx}");
        let fp8 = |wording: &str| read(wording).is_some_and(|gpu| runs_fp8(&gpu));
        assert!(fp8("H100 80GB") && fp8("RTX 4090") && fp8("RTX 4070 12GB"));
        assert!(!fp8("A100 80GB") && !fp8("RTX 3060") && !fp8("Tesla T4 16GB"));
        // A card the catalog lacks is declared with the memory it states.
        assert_eq!(device("RTX 3080 10GB"), stated("gpu-10gb"));
        let declared = read("RTX 3080 10GB").and_then(|gpu| gpu.declaration).unwrap_or_default();
        assert!(declared.contains("memory     10 GiB marketed") && declared.contains("ampere"));
        assert_eq!(device("a GPU"), None);
        // A card named without its memory: its usual size, not stated.
        assert_eq!(device("RTX 3060"), Some(("gpu-12gb".to_owned(), false)));
        assert_eq!(device("GeForce RTX 3080 Ti"), Some(("gpu-12gb".to_owned(), false)));
        // The Tesla P40 and the Quadro RTX 8000, with their only sizes and generations.
        let p40 = read("Tesla P40").and_then(|gpu| gpu.declaration).unwrap_or_default();
        assert!(p40.contains("memory     24 GiB marketed") && p40.contains("pascal"), "{p40}");
        let quadro = read("Quadro RTX 8000").and_then(|gpu| gpu.declaration).unwrap_or_default();
        assert!(quadro.contains("48 GiB") && quadro.contains("turing"), "{quadro}");
        assert_eq!(device("RTX 4060 Ti 16GB"), stated("gpu-16gb"));
        // The memory of a named card, stated or its only size.
        assert_eq!(memory_bytes("RTX 3060 12GB"), Some(12 << 30));
        assert_eq!(memory_bytes("RTX 4090"), Some(24_564 << 20));
        assert_eq!(memory_bytes("A100"), None);
        // Two-word suffixes, workstation cards and Grace Hopper.
        let unstated = |name: &str| Some((name.to_owned(), false));
        assert_eq!(device("RTX 4070 Ti Super"), unstated("gpu-16gb"));
        assert_eq!(device("RTX 4070 Ti"), unstated("gpu-12gb"));
        assert_eq!(device("NVIDIA RTX A4000"), unstated("gpu-16gb"));
        assert_eq!(device("RTX 4000 Ada"), unstated("gpu-20gb"));
        assert_eq!(device("RTX PRO 6000 Blackwell"), stated("rtx-pro-6000-blackwell"));
        assert_eq!(device("GH200"), unstated("gh200"));
        assert_eq!(device("GH200 144GB"), stated("gh200"));
        let arch =
            |wording: &str| read(wording).and_then(|gpu| gpu.declaration).unwrap_or_default();
        assert!(arch("RTX 2000 Ada").contains("ada"), "{}", arch("RTX 2000 Ada"));
        assert!(arch("GTX 1660 Super").contains("turing"), "{}", arch("GTX 1660 Super"));
        assert!(arch("GH200").contains("hopper") && arch("GH200").contains("96 GiB"));
        let titan = read("NVIDIA Titan RTX").and_then(|gpu| gpu.declaration).unwrap_or_default();
        assert!(
            titan.contains("memory     24 GiB marketed") && titan.contains("turing"),
            "{titan}"
        );
    }

    #[test]
    fn declared_devices_check() {
        let read_ones = [
            "AWS A10G",
            "RTX 3080 10GB",
            "RTX 2080 Ti 11 GB",
            "RTX 4070 12GB",
            "RTX 3060",
            "Titan RTX",
            "GH200",
            "RTX 4000 Ada",
        ]
        .map(|wording| read(wording).and_then(|gpu| gpu.declaration).unwrap_or_default());
        for declaration in [RTX_3070, RTX_A6000, NOT_STATED]
            .iter()
            .copied()
            .chain(read_ones.iter().map(String::as_str))
        {
            assert!(!declaration.is_empty());
            let outcome = vram_core::evaluate(declaration);
            let errors: Vec<_> = outcome.diagnostics.iter().filter(|d| d.is_error()).collect();
            assert!(errors.is_empty(), "{declaration}: {errors:?}");
        }
    }
}
