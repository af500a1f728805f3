//! The built-in catalog parses cleanly and agrees with the project's GPU facts.

#[test]
fn catalog_has_no_diagnostics_and_at_least_30_devices() {
    let (program, problems) = vram_core::catalog::build();
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(program.devices.len() >= 30, "{} devices", program.devices.len());
}

/// The catalog is parsed without its comments: the same declarations as the commented files.
#[test]
fn the_parsed_catalog_is_the_catalog_without_its_comments() {
    for ((name, source), (parsed_name, parsed)) in
        vram_core::catalog::SOURCES.into_iter().zip(vram_core::catalog::PARSED)
    {
        assert_eq!(name, parsed_name);
        assert!(source.contains('#') && !parsed.contains('#'), "{name}: comments left");
        assert!(
            parsed.len() < source.len() * 3 / 4,
            "{name}: {} of {}",
            parsed.len(),
            source.len()
        );
        assert_eq!(parsed.lines().count(), source.lines().count(), "{name}: lines moved");
        assert_eq!(crate::format::shape(parsed), crate::format::shape(source), "{name}");
    }
}

/// The facts file sits beside the repository (`../shared/data/gpus.json`), as it does in CI.
#[test]
fn device_memory_matches_the_reported_totals() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/gpus.json");
    let text = std::fs::read_to_string(path).expect("shared/data/gpus.json beside the repository");
    let facts: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let catalog = vram_core::catalog::builtin();
    let mut compared = 0;
    for gpu in facts.as_array().expect("an array") {
        let id = gpu["id"].as_str().expect("id");
        let Some(bytes) = gpu["reported_total_bytes"].as_u64() else { continue };
        let device =
            catalog.devices.get(id).unwrap_or_else(|| panic!("{id} missing from the catalog"));
        assert_eq!(device.memory.0, bytes, "{id}");
        assert!(device.memory_reported, "{id} is a reported total");
        compared += 1;
    }
    assert!(compared >= 25, "{compared}");
    // H100 80GB: nvidia-smi reports 81,559 MiB.
    assert_eq!(catalog.devices["h100-sxm-80gb"].memory.0, 81_559 << 20);
}

/// Capability before capacity on a Pascal card: the P100 computes in fp16, not in bf16.
#[test]
fn a_pascal_card_runs_fp16_and_refuses_bf16() {
    let source = |weights: &str| {
        format!(
            "workload w {{ model llama3.2-1b; runtime pytorch; inference {{ weights {weights}; context 512 tokens; sessions 1 }} }}\ncheck w on p100-pcie-16gb"
        )
    };
    let fp16 = vram_core::evaluate(&source("fp16"));
    assert!(fp16.diagnostics.iter().all(|d| !d.is_error()), "{:?}", fp16.diagnostics);
    assert!(fp16.budget.checks[0].verdict.fits());
    let bf16 = vram_core::evaluate(&source("bf16"));
    assert!(bf16.diagnostics.iter().any(|d| d.code == "E040"), "{:?}", bf16.diagnostics);
}
