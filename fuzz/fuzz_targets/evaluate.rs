//! Parse, check and evaluate any text (the web page's text box), then format it: no input may
//! panic, overflow the stack or hang. Non-UTF-8 bytes are the front end's business.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else { return };
    let outcome = vram_core::evaluate(source);
    for diagnostic in &outcome.diagnostics {
        assert!(diagnostic.primary.end as usize <= source.len(), "span outside the text");
    }
    if let Ok(formatted) = vram_core::format::format(source) {
        // What the formatter prints parses again.
        assert!(vram_core::format::format(&formatted).is_ok(), "formatted text does not parse");
    }
    let _ = vram_core::import_paths(source);
});
