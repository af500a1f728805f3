//! Benchmark: `vram import` on a 20 GB safetensors checkpoint reads only its header.
//!
//! Run with `cargo bench -p vram --bench import`. The checkpoint is made at run time in a
//! temporary folder: a Llama-shaped header (31 layers of hidden 5120, BF16) written at the start
//! of a sparse file extended with `File::set_len`, so it takes no disk space. The benchmark
//! times the reading code (`crates/files/src/read.rs`) and the core's import, in process,
//! then the whole `vram import --format json` command as a process, and prints the bytes read.
//! Target (issue 4): well under 10 ms.

#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]
#![allow(clippy::cast_precision_loss, reason = "sizes are shown in GB with two decimals")]

use vram_files::read;

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const LAYERS: u64 = 31;
const HIDDEN: u64 = 5120;
const FFN: u64 = 13824;
const VOCAB: u64 = 32000;

/// The header of a BF16 Llama-shaped checkpoint, and the length of its data section.
fn header() -> (Vec<u8>, u64) {
    let mut tensors: Vec<(String, Vec<u64>)> = vec![
        ("model.embed_tokens.weight".into(), vec![VOCAB, HIDDEN]),
        ("lm_head.weight".into(), vec![VOCAB, HIDDEN]),
        ("model.norm.weight".into(), vec![HIDDEN]),
    ];
    for layer in 0..LAYERS {
        let p = format!("model.layers.{layer}");
        for (name, shape) in [
            ("self_attn.q_proj", vec![HIDDEN, HIDDEN]),
            ("self_attn.k_proj", vec![HIDDEN, HIDDEN]),
            ("self_attn.v_proj", vec![HIDDEN, HIDDEN]),
            ("self_attn.o_proj", vec![HIDDEN, HIDDEN]),
            ("mlp.gate_proj", vec![FFN, HIDDEN]),
            ("mlp.up_proj", vec![FFN, HIDDEN]),
            ("mlp.down_proj", vec![HIDDEN, FFN]),
            ("input_layernorm", vec![HIDDEN]),
            ("post_attention_layernorm", vec![HIDDEN]),
        ] {
            tensors.push((format!("{p}.{name}.weight"), shape));
        }
    }
    let mut json = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut offset = 0u64;
    for (name, shape) in &tensors {
        let bytes = shape.iter().product::<u64>() * 2;
        let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
        let _ = write!(
            json,
            ",\"{name}\":{{\"dtype\":\"BF16\",\"shape\":[{}],\"data_offsets\":[{offset},{}]}}",
            dims.join(","),
            offset + bytes
        );
        offset += bytes;
    }
    json.push('}');
    while json.len() % 8 != 0 {
        json.push(' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend(json.as_bytes());
    (out, offset)
}

fn main() {
    let dir = std::env::temp_dir().join(format!("vram-import-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("model.safetensors");
    let (header, data) = header();
    let size = header.len() as u64 + data;
    {
        let mut file = File::create(&path).expect("creates the checkpoint");
        file.write_all(&header).expect("writes the header");
        file.set_len(size).expect("extends the file (sparse)");
    }
    println!(
        "checkpoint: {} ({} bytes = {:.2} GB, header {} bytes, {} tensors)",
        path.display(),
        size,
        size as f64 / 1e9,
        header.len(),
        LAYERS * 9 + 3
    );

    let (bytes_read, in_process) = time_in_process(&path);
    let process = time_process(&path);
    println!("bytes read:                        {bytes_read} of {size}");
    println!("read + import + model block (µs):  {in_process}");
    println!("`vram import --format json` (ms):  {process}");
    std::fs::remove_dir_all(&dir).expect("removes the checkpoint");
}

/// Times the reading code and the core's import; returns the bytes read and the figures.
fn time_in_process(path: &Path) -> (u64, String) {
    let once = || {
        let loaded = read::load(path).expect("the checkpoint loads");
        let model = loaded.checkpoint.import().expect("the checkpoint imports");
        std::hint::black_box(model.to_vram("bench"));
        loaded.files.iter().map(|f| f.bytes_read).sum::<u64>()
    };
    let bytes_read = once();
    let (mean, best, runs) = repeat(Duration::from_millis(500), || {
        std::hint::black_box(once());
    });
    let figures = format!(
        "mean {:.1}, min {:.1} over {runs} runs",
        mean.as_secs_f64() * 1e6,
        best.as_secs_f64() * 1e6
    );
    (bytes_read, figures)
}

/// Times the whole command, process start included.
fn time_process(path: &Path) -> String {
    let exe = env!("CARGO_BIN_EXE_vram");
    let run = || {
        let output = Command::new(exe)
            .args(["import", "--format", "json"])
            .arg(path)
            .output()
            .expect("vram runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    };
    run();
    let (mean, best, runs) = repeat(Duration::from_millis(500), run);
    format!(
        "mean {:.2}, min {:.2} over {runs} runs",
        mean.as_secs_f64() * 1e3,
        best.as_secs_f64() * 1e3
    )
}

/// Runs `f` until `budget` has passed: mean, fastest and count.
fn repeat(budget: Duration, mut f: impl FnMut()) -> (Duration, Duration, u32) {
    let start = Instant::now();
    let mut best = Duration::MAX;
    let mut runs = 0u32;
    while start.elapsed() < budget || runs < 5 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
        runs += 1;
    }
    (start.elapsed() / runs, best, runs)
}
