//! The config.json importer on any bytes, and the model block it writes evaluated as `.vram`
//! text: a diagnostic or a model, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(model) = vram_core::import::config_json::parse(data) {
        let _ = vram_core::evaluate(&model.to_vram("imported"));
    }
});
