//! Measured values to bytes.
//!
//! The rule for `GB` whose base the source does not state: it is read as GiB (2^30 B). The
//! scripts behind these tables divide byte counts by 1024^3 and print `GB` (the sources that
//! show their code all do, see the `GB(=GiB)` points), and the decimal reading is impossible
//! where it can be tested: Qwen-7B's bf16 weights alone are 15.44e9 B, more than the 15.2 `GB`
//! measured for the whole generation (S05-012).

/// How a measured value becomes bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitRule {
    /// The unit says its base: MiB, GiB, or GB noted as GiB.
    Stated,
    /// `GB` with no base: read as GiB (module doc).
    GbAsGib,
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
}
