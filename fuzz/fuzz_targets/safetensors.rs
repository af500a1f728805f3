//! The safetensors header reader (and the shard index reader) on any bytes, complete or cut
//! short: a diagnostic or a header, never a panic, and `NeedMore` never asks past the cap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_core::import::Parsed;
use vram_core::import::safetensors::{MAX_HEADER_BYTES, parse_header, parse_index};

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    for file_len in [Some(len), None, Some(len.saturating_mul(2))] {
        if let Parsed::NeedMore(n) = parse_header(data, file_len) {
            assert!(n > len && n <= MAX_HEADER_BYTES + 8, "NeedMore({n}) with {len} bytes");
        }
    }
    let _ = parse_index(data);
});
