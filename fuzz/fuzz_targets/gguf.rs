//! The GGUF reader on any bytes, complete or cut short, and the model it imports: a diagnostic
//! or a model, never a panic, and `NeedMore` never asks past the cap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_core::import::Parsed;
use vram_core::import::gguf::{MAX_HEADER_BYTES, model, parse};

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    match parse(data, Some(len)) {
        Parsed::Done(gguf) => {
            let _ = model(&[("model.gguf".to_string(), gguf)]);
        }
        Parsed::NeedMore(n) => panic!("NeedMore({n}) for a complete file of {len} bytes"),
        Parsed::Failed(_) => {}
    }
    if let Parsed::NeedMore(n) = parse(data, None) {
        assert!(n > len && n <= MAX_HEADER_BYTES, "NeedMore({n}) with {len} bytes");
    }
});
