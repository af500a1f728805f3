//! Measured values to bytes.
//!
//! The rule for `GB` whose base the source does not state: it is read as GiB (2^30 B). The
//! scripts behind these tables divide byte counts by 1024^3 and print `GB` (the sources that
//! show their code all do, see the `GB(=GiB)` points), and the decimal reading is impossible
//! where it can be tested: Qwen-7B's bf16 weights alone are 15.44e9 B, more than the 15.2 `GB`
//! measured for the whole generation (S05-012).
//!
//! The exception is a printing whose own figures rule the binary reading out and not the
//! decimal one ([`settle_bases`]): a figure that, read as GiB, is more than all the memory of
//! the GPUs it ran on cannot be a reading of them, so that figure and every other the source
//! printed the same way (same unit, same note) are read as decimal, unless another of them
//! read as decimal is below the weights it holds. Qwen's fine-tuning table prints `G` (S05-032
//! to S05-112): its full fine-tune of Qwen-7B on two A100 80GB at 1024 tokens is `162.0G`,
//! which as GiB is 81 GiB a card, beyond the card's 80 GiB, and none of its figures is below
//! its weights as decimal. Qwen2's speed table (T04) has a figure beyond its GPUs as GiB
//! (T04-055, 163.77 on two A100 80GB) and one below its weights as decimal (T04-049, 110.29
//! for Qwen2-57B-A14B's 114.8e9 B of bf16 weights): it keeps GiB.

use crate::data::Point;
use crate::evaluate::{Outcome, PointResult};
use crate::gaps::{Assumption, assume};
use crate::target::Target;

/// How a measured value becomes bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitRule {
    /// The unit says its base: MiB, GiB, or GB noted as GiB.
    Stated,
    /// `GB` with no base: read as GiB (module doc).
    GbAsGib,
    /// `GB` with no base, read as 10^9 B because the source's own figures rule GiB out
    /// ([`settle_bases`]).
    DecimalByCapacity,
}

const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1_073_741_824.0;

/// The measured bytes, or `None` when the unit is not a measurement (a GPU class for a fits
/// check) or not understood.
pub fn measured_bytes(value: f64, unit: &str) -> Option<(f64, UnitRule)> {
    let unit = unit.trim().to_lowercase().replace(' ', "");
    let (base, note) = match unit.split_once('(') {
        Some((base, note)) => (base, note.trim_end_matches(')')),
        None => (unit.as_str(), ""),
    };
    // The units spelled out.
    let base = match base {
        "gigabytes" | "gigabyte" | "gbytes" => "gb",
        "megabytes" | "megabyte" | "mbytes" => "mb",
        "gibibytes" | "gibibyte" => "gib",
        "mebibytes" | "mebibyte" => "mib",
        "byte" => "bytes",
        other => other,
    };
    // A note may say the base: `GB (=GiB)`, `MB (1e6 bytes)`, `GB (decimal)`; one that makes
    // the figure no measurement (`GB (GPU VRAM class)`) or says both is not understood.
    let (binary, decimal) = names_base(note);
    if (binary && decimal) || note.contains("class") {
        return None;
    }
    let scale = |mega: f64, giga: f64| match base {
        "mb" | "m" => Some(mega),
        "gb" | "g" => Some(giga),
        _ => None,
    };
    match base {
        "b" | "bytes" => Some((value, UnitRule::Stated)),
        "kib" => Some((value * 1024.0, UnitRule::Stated)),
        "mib" => Some((value * MIB, UnitRule::Stated)),
        "gib" => Some((value * GIB, UnitRule::Stated)),
        "tib" => Some((value * GIB * 1024.0, UnitRule::Stated)),
        _ if binary => scale(MIB, GIB).map(|factor| (value * factor, UnitRule::Stated)),
        _ if decimal => scale(1e6, 1e9).map(|factor| (value * factor, UnitRule::Stated)),
        // `MB` and `GB` with no base: binary, as the module doc says for `GB`.
        _ => scale(MIB, GIB).map(|factor| (value * factor, UnitRule::GbAsGib)),
    }
}

/// The unit with the base its note states: `GB` noted "decimal GB (bytes / 1e9)" is
/// `GB (decimal)`, noted "bytes / 1024**3" is `GB (=GiB)`. A note that says the base is not
/// stated ("GB vs GiB not stated") or names neither leaves the unit as it is.
pub fn with_note(unit: &str, note: Option<&str>) -> String {
    let bare = unit.trim().to_lowercase().replace(' ', "");
    let note = note.unwrap_or_default().to_lowercase().replace(' ', "");
    if !matches!(bare.as_str(), "gb" | "mb" | "g" | "m") || note.contains("notstated") {
        return unit.to_string();
    }
    match names_base(&note) {
        (false, true) => format!("{unit} (decimal)"),
        (true, false) => format!("{unit} (=GiB)").replace("MB (=GiB)", "MB (=MiB)"),
        _ => unit.to_string(),
    }
}

/// Whether a unit's note (lower case, no spaces) names a binary base and a decimal one:
/// `=GiB`, `1024**3`, `2^30`; "decimal", `1e9`, `10^6`, `1000**3`, SI.
fn names_base(note: &str) -> (bool, bool) {
    let binary = ["gib", "mib", "1024", "2^30", "2**30", "2^20"].iter().any(|w| note.contains(w));
    let decimal = ["decimal", "1e6", "1e9", "10^6", "10^9", "10**", "1000000", "1000**3"]
        .iter()
        .any(|w| note.contains(w))
        || note.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| w == "si");
    (binary, decimal)
}

/// The unit with its base settled, for a note that names both bases ("`MB` = 10^6 bytes;
/// value_gib = MB x 1e6 / 2^30"): the base under which the point's own `value_gib` conversion
/// holds, when it holds under exactly one. Any other unit is [`with_note`]'s.
pub fn with_note_and_conversion(
    unit: &str,
    note: Option<&str>,
    value: Option<f64>,
    value_gib: Option<f64>,
) -> String {
    let noted = with_note(unit, note);
    let folded = note.unwrap_or_default().to_lowercase().replace(' ', "");
    let (Some(value), Some(gib)) = (value, value_gib) else { return noted };
    if names_base(&folded) != (true, true) || gib <= 0.0 {
        return noted;
    }
    let (binary, decimal) = match unit.trim().to_lowercase().as_str() {
        "gb" | "g" => (value, value * 1e9 / GIB),
        "mb" | "m" => (value / 1024.0, value * 1e6 / GIB),
        _ => return noted,
    };
    let holds = |reading: f64| ((reading - gib) / gib).abs() < 2e-3;
    match (holds(binary), holds(decimal)) {
        (true, false) => format!("{unit} (=GiB)").replace("MB (=GiB)", "MB (=MiB)"),
        (false, true) => format!("{unit} (decimal)"),
        _ => noted,
    }
}

/// Reads as decimal every compared point of a printing (one source, one unit, one note) whose
/// `GB` (or `MB`) of unstated base its own figures show cannot be binary and can be decimal:
/// - binary is ruled out by a figure that, read as GiB (MiB), is more than all the memory of
///   the GPUs its point ran on; no reading of those devices, per GPU or summed, can be;
/// - decimal is ruled out by a whole-device peak that, read as 10^9 B, is less than the weights
///   the estimate puts on its devices (S05-012's test, module doc).
///
/// A printing with neither, or with both (a figure beyond its GPUs may be a GPU count misprinted
/// as well), keeps the binary reading. A figure beyond its GPUs in either reading, and a GPU
/// whose memory the wording leaves open (an `A100` of 40 or 80 GB), test nothing.
pub fn settle_bases(points: &[Point], results: &mut [PointResult]) {
    let printing = |p: &Point| {
        (p.source_id.clone(), p.unit.trim().to_lowercase(), p.unit_note.clone().unwrap_or_default())
    };
    let mut binary_out = Vec::new();
    let mut decimal_out = Vec::new();
    for (point, result) in points.iter().zip(results.iter()) {
        let Outcome::Compared(c) = &result.outcome else { continue };
        let (true, Some(value)) = (c.unit_rule == UnitRule::GbAsGib, point.value) else {
            continue;
        };
        let Some(decimal) = decimal_reading(value, &point.unit) else { continue };
        if let Some(memory) = crate::gpus::memory_bytes(&point.gpu_type) {
            let gpus = point.num_gpus.unwrap_or(1).max(1);
            #[allow(clippy::cast_precision_loss, reason = "memory sizes far below 2^52")]
            let held = memory as f64 * f64::from(gpus);
            // A figure beyond its GPUs in both readings (26 `GB` on a 24 GB card) is a
            // misprint of something else, and says nothing of the base.
            if c.measured > held && decimal <= held {
                binary_out.push((
                    printing(point),
                    format!(
                        "{}'s {value} {} read as binary is {:.2} GiB, more than its {gpus} × {} \
                         hold ({:.2} GiB)",
                        point.id,
                        point.unit.trim(),
                        c.measured / GIB,
                        point.gpu_type,
                        held / GIB
                    ),
                ));
            }
        }
        if matches!(c.target, Target::Peak { .. }) && decimal < c.persistent {
            decimal_out.push(printing(point));
        }
    }
    for (point, result) in points.iter().zip(results.iter_mut()) {
        let key = printing(point);
        let Some((_, why)) = binary_out.iter().find(|(printed, _)| *printed == key) else {
            continue;
        };
        let Outcome::Compared(c) = &mut result.outcome else { continue };
        let decimal = point.value.and_then(|value| decimal_reading(value, &point.unit));
        let (Some(decimal), UnitRule::GbAsGib, false) =
            (decimal, c.unit_rule, decimal_out.contains(&key))
        else {
            continue;
        };
        c.measured = decimal;
        c.error_percent = (c.estimate - decimal) / decimal * 100.0;
        c.unit_rule = UnitRule::DecimalByCapacity;
        c.assumptions.push(Assumption::new(assume::DECIMAL_BY_CAPACITY, why.clone()));
    }
}

/// The same value read with decimal units, for the sensitivity line of the report.
pub fn decimal_reading(value: f64, unit: &str) -> Option<f64> {
    match unit.trim().to_lowercase().as_str() {
        "gb" | "g" => Some(value * 1e9),
        "mb" | "m" => Some(value * 1e6),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(measured_bytes(1.0, "MiB"), Some((MIB, UnitRule::Stated)));
        assert_eq!(measured_bytes(2.0, "GB(=GiB)"), Some((2.0 * GIB, UnitRule::Stated)));
        assert_eq!(measured_bytes(2.0, "GB"), Some((2.0 * GIB, UnitRule::GbAsGib)));
        assert_eq!(measured_bytes(80.0, "GB (GPU VRAM class)"), None);
        // Other data sets' spellings.
        assert_eq!(measured_bytes(14_949.0, "MB"), Some((14_949.0 * MIB, UnitRule::GbAsGib)));
        assert_eq!(measured_bytes(3.0, "gib"), Some((3.0 * GIB, UnitRule::Stated)));
        assert_eq!(measured_bytes(2.0, "GB (decimal)"), Some((2e9, UnitRule::Stated)));
        assert_eq!(decimal_reading(14_949.0, "MB"), Some(14_949e6));
        assert_eq!(measured_bytes(2.0, "GB (1e9 bytes)"), Some((2e9, UnitRule::Stated)));
        assert_eq!(measured_bytes(3.0, "MB (1e6 bytes)"), Some((3e6, UnitRule::Stated)));
        assert_eq!(measured_bytes(1.0, "MB (=MiB)"), Some((MIB, UnitRule::Stated)));
        assert_eq!(measured_bytes(1.0, "GB (bytes / 1024^3)"), Some((GIB, UnitRule::Stated)));
        assert_eq!(measured_bytes(1.0, "GB (as printed)"), Some((GIB, UnitRule::GbAsGib)));
        // Spelled out.
        assert_eq!(measured_bytes(2.0, "gigabytes"), Some((2.0 * GIB, UnitRule::GbAsGib)));
        assert_eq!(measured_bytes(5.0, "MiB "), Some((5.0 * MIB, UnitRule::Stated)));
        assert_eq!(measured_bytes(5.0, "mebibytes"), Some((5.0 * MIB, UnitRule::Stated)));
        // A note naming both bases is settled by the point's own conversion.
        let both = Some("'MB' = 10^6 bytes; value_gib = MB x 1e6 / 2^30");
        let settled = |gib| with_note_and_conversion("MB", both, Some(32_251.33), Some(gib));
        assert_eq!(settled(30.0364), "MB (decimal)");
        assert_eq!(settled(31.4954), "MB (=MiB)");
        assert_eq!(settled(12.0), "MB");
        // A note naming one base is read as before, whatever the conversion says.
        assert_eq!(
            with_note_and_conversion("GB", Some("1e9"), Some(2.0), Some(2.0)),
            "GB (decimal)"
        );
        // A unit's note may say its base.
        assert_eq!(with_note("GB", Some("decimal GB (bytes / 1e9)")), "GB (decimal)");
        assert_eq!(with_note("GB", Some("printed from bytes / 1024**3")), "GB (=GiB)");
        assert_eq!(with_note("MB", Some("torch bytes / 2^20")), "MB (=MiB)");
        assert_eq!(with_note("GB", Some("as printed; GB vs GiB not stated")), "GB");
        assert_eq!(with_note("GiB", Some("1e9")), "GiB");
    }

    /// A point of one printing (source `S`, `GB`) and its comparison, as the harness leaves them
    /// before settling: `value` read as GiB, `weights` on its devices.
    fn compared(
        id: &str,
        value: f64,
        note: &str,
        gpu: (u32, &str),
        weights: f64,
    ) -> (Point, PointResult) {
        use crate::evaluate::Compared;
        use crate::target::Scope;
        use crate::views::{Basis, View};
        let point = Point {
            id: id.into(),
            source_id: "S".into(),
            value: Some(value),
            unit: "GB".into(),
            unit_note: Some(note.into()),
            num_gpus: Some(gpu.0),
            gpu_type: gpu.1.into(),
            ..Point::default()
        };
        let compared = Compared {
            target: Target::Peak {
                view: View::Device,
                basis: Basis::NotStated,
                scope: Scope::SumOfDevices,
            },
            measured: value * GIB,
            estimate: 50.0 * GIB,
            views: [50.0 * GIB; 3],
            error_percent: (50.0 - value) / value * 100.0,
            band: None,
            unit_rule: UnitRule::GbAsGib,
            persistent: weights * GIB,
            assumptions: Vec::new(),
            source: String::new(),
        };
        let result = PointResult {
            id: id.into(),
            workload: "training_full".into(),
            model: String::new(),
            quality: String::new(),
            outcome: Outcome::Compared(compared),
        };
        (point, result)
    }

    fn settled(points: Vec<(Point, PointResult)>) -> Vec<Option<f64>> {
        let (points, mut results): (Vec<_>, Vec<_>) = points.into_iter().unzip();
        settle_bases(&points, &mut results);
        results
            .iter()
            .map(|r| match &r.outcome {
                Outcome::Compared(c) if c.unit_rule == UnitRule::DecimalByCapacity => {
                    assert!(c.assumptions.iter().any(|a| a.label == assume::DECIMAL_BY_CAPACITY));
                    assert!(
                        (c.error_percent - (c.estimate - c.measured) / c.measured * 100.0).abs()
                            < 1e-9
                    );
                    Some(c.measured)
                }
                _ => None,
            })
            .collect()
    }

    const A100: (u32, &str) = (1, "A100-SXM4-80G");
    const TWO_A100: (u32, &str) = (2, "A100-SXM4-80G");

    #[test]
    fn a_figure_beyond_its_gpus_as_gib_makes_its_printing_decimal() {
        let found = settled(vec![
            // 162 GiB is more than two 80 GiB cards hold; 162e9 B (150.9 GiB) is not.
            compared("a", 162.0, "printed as 'G'", TWO_A100, 14.4),
            compared("b", 6.7, "printed as 'G'", A100, 3.4),
            // Another printing of the same source keeps the binary reading.
            compared("c", 15.2, "as printed", A100, 14.4),
        ]);
        assert_eq!(found, vec![Some(162e9), Some(6.7e9), None]);
    }

    #[test]
    fn a_printing_that_rules_out_both_bases_keeps_gib() {
        // 110.29e9 B is less than the 114.8e9 B of weights it holds: decimal is ruled out too.
        let found = settled(vec![
            compared("a", 163.77, "column", TWO_A100, 107.0),
            compared("b", 110.29, "column", TWO_A100, 106.9),
        ]);
        assert_eq!(found, vec![None, None]);
    }

    #[test]
    fn a_figure_beyond_its_gpus_either_way_or_on_an_open_size_tests_nothing() {
        let found = settled(vec![
            // 26 GB is more than a 24 GB card in both readings.
            compared("a", 26.0, "approximate", (1, "RTX 4090 24GB"), 20.0),
            compared("b", 9.0, "approximate", (1, "RTX 4090 24GB"), 5.0),
            // An A100 of unstated size has no capacity to test against.
            compared("c", 90.0, "as printed", (1, "A100"), 20.0),
        ]);
        assert_eq!(found, vec![None, None, None]);
    }
}
