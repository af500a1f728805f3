//! Build tasks, run as `cargo xtask TASK` (an alias in `.cargo/config.toml`), with no downloads:
//!
//! - `web`: the release wasm of `vram-wasm`, twice (the calculator, and the importers that the
//!   page loads when a file is first dropped), each with its JS glue and `.d.ts` from the
//!   wasm-bindgen CLI *library* (pinned in Cargo.lock to the exact version of the `wasm-bindgen`
//!   crate), shrunk by `wasm-opt -Oz` from npm `binaryen` when `web/node_modules` has it, and
//!   the page laid out in `web/dist/`. Prints the sizes, raw and gzipped.
//! - `test-wasm`: the `vram-wasm` tests compiled for wasm32 and run under Node by the
//!   workspace's own `wasm-bindgen-test-runner` (the second binary of this crate).

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a build tool reports progress")]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const WASM_TARGET: &str = "wasm32-unknown-unknown";

fn main() -> Result<()> {
    let task = std::env::args().nth(1).unwrap_or_default();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize()?;
    match task.as_str() {
        "web" => web(&root),
        "test-wasm" => test_wasm(&root),
        _ => bail!("usage: cargo xtask web | test-wasm"),
    }
}

fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

fn run(command: &mut Command) -> Result<()> {
    let status = command.status().with_context(|| format!("cannot start {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}

/// The two modules of the page: the calculator, loaded at once, and the importers, loaded
/// when a model file is first dropped (features of `vram-wasm`).
const MODULES: [(&str, &str); 2] = [("calc", "vram"), ("import", "vram_import")];

fn web(root: &Path) -> Result<()> {
    let dist = root.join("web/dist");
    if dist.exists() {
        std::fs::remove_dir_all(&dist)?;
    }
    let pkg = dist.join("pkg");
    let wasm_opt = std::env::var_os("WASM_OPT")
        .map(PathBuf::from)
        .or_else(|| Some(root.join("web/node_modules/.bin/wasm-opt")).filter(|p| p.exists()))
        .filter(|_| std::env::var_os("NO_WASM_OPT").is_none());
    if wasm_opt.is_none() {
        println!("wasm-opt not found (run `npm ci` in web/): the wasm is not shrunk");
    }
    let mut bindgen_sizes = Vec::new();
    for (feature, name) in MODULES {
        bindgen_sizes.push(build_module(root, &pkg, feature, name, wasm_opt.as_deref())?);
    }
    copy_dir(&root.join("web/src"), &dist)?;
    copy_dir(&root.join("web/examples"), &dist.join("examples"))?;
    for entry in std::fs::read_dir(root.join("examples"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "vram") {
            let name = path.file_name().context("file name")?;
            std::fs::copy(&path, dist.join("examples").join(name))?;
        }
    }
    println!("web/dist/ laid out; sizes (bytes, raw / gzip -9):");
    for ((_, name), size) in MODULES.iter().zip(&bindgen_sizes) {
        println!("  {name}_bg.wasm after wasm-bindgen {size:>9}");
    }
    for (index, (_, name)) in MODULES.iter().enumerate() {
        let mut total = (0, 0);
        for file in [format!("pkg/{name}_bg.wasm"), format!("pkg/{name}.js")] {
            let (raw, gzip) = sizes(&dist.join(&file))?;
            total = (total.0 + raw, total.1 + gzip);
            println!("  {file:<28} {raw:>9} / {gzip:>7}");
        }
        let what = if index == 0 { "first load" } else { "on the first drop" };
        println!("  {:<28} {:>9} / {:>7}  ({what})", "wasm + JS glue", total.0, total.1);
    }
    Ok(())
}

/// Builds `vram-wasm` with only `feature`, generates its glue as `pkg/{name}.js` and shrinks
/// it; returns the wasm's size after wasm-bindgen.
fn build_module(
    root: &Path,
    pkg: &Path,
    feature: &str,
    name: &str,
    wasm_opt: Option<&Path>,
) -> Result<u64> {
    let prefixes = local_prefixes(root);
    require_std_source()?;
    // The standard library is rebuilt with the module, for size: `optimize_for_size` picks
    // its smaller algorithms (sorts, formatting), and `-Zlocation-detail=none` (in the
    // rustflags) drops the file, line and column of every panic site. Together 15 KB gzip off
    // the first load; both are unstable, hence `RUSTC_BOOTSTRAP` for these builds only.
    run(Command::new(cargo())
        .current_dir(root)
        .env("RUSTC_BOOTSTRAP", "1")
        .args([
            "build",
            "-Zbuild-std=std,panic_abort",
            "-Zbuild-std-features=optimize_for_size",
            "-p",
            "vram-wasm",
            "--lib",
            "--target",
            WASM_TARGET,
            "--profile",
            "wasm-release",
            "--no-default-features",
            "--features",
            feature,
            "--locked",
            "--config",
        ])
        .arg(remap_config(&prefixes)))?;
    let input = target_dir(root).join(WASM_TARGET).join("wasm-release/vram_wasm.wasm");
    // The CLI's own entry point, so the output is exactly what `wasm-bindgen` would write.
    wasm_bindgen_cli::wasm_bindgen::run_cli_with_args([
        OsString::from("wasm-bindgen"),
        "--target".into(),
        "web".into(),
        "--out-dir".into(),
        pkg.into(),
        "--out-name".into(),
        name.into(),
        input.into(),
    ])?;
    let wasm = pkg.join(format!("{name}_bg.wasm"));
    let bindgen_size = std::fs::metadata(&wasm)?.len();
    if let Some(wasm_opt) = wasm_opt {
        let shrunk = pkg.join(format!("{name}_bg.opt.wasm"));
        // -Oz twice reaches a little further than once; the name, producer and debug
        // sections are dropped (the panic hook prints messages, not symbol names).
        // `VRAM_WASM_NAMES=1` keeps the function names, to see what is big (twiggy).
        let names = std::env::var_os("VRAM_WASM_NAMES").is_some();
        run(Command::new(wasm_opt)
            .args(["-Oz", "-Oz", "--strip-debug", "--strip-producers"])
            .args(names.then_some("--debuginfo"))
            .arg(&wasm)
            .arg("-o")
            .arg(&shrunk))?;
        std::fs::rename(&shrunk, &wasm)?;
    }
    let module = std::fs::read(&wasm)?;
    for prefix in &prefixes {
        let prefix = prefix.to_string_lossy();
        if module.windows(prefix.len()).any(|w| w == prefix.as_bytes()) {
            bail!("{} names a path of this machine: {prefix}", wasm.display());
        }
    }
    Ok(bindgen_size)
}

/// `-Zbuild-std` compiles the standard library from the toolchain's `rust-src` component.
fn require_std_source() -> Result<()> {
    let output = Command::new("rustc").args(["--print", "sysroot"]).output()?;
    let sysroot = PathBuf::from(String::from_utf8(output.stdout)?.trim());
    if !sysroot.join("lib/rustlib/src/rust/library/std/Cargo.toml").exists() {
        bail!("the wasm build needs the standard library's source: rustup component add rust-src");
    }
    Ok(())
}

/// Folders of this machine whose paths must not ship in the page's modules: panic locations
/// name their source files, which rustc writes with absolute paths unless they are remapped.
fn local_prefixes(root: &Path) -> Vec<PathBuf> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));
    let cargo_home = cargo_home.and_then(|path| path.canonicalize().ok());
    [Some(root.to_path_buf()), cargo_home].into_iter().flatten().collect()
}

/// A `--config` value with the wasm target's rustflags: `prefixes` remapped (the repository to
/// `.`, cargo's home to `cargo`) and panic locations dropped, in the wasm target's builds only,
/// so host builds and their caches are untouched.
fn remap_config(prefixes: &[PathBuf]) -> String {
    let flags: Vec<String> = prefixes
        .iter()
        .zip([".", "cargo"])
        .map(|(from, to)| {
            let flag = format!("--remap-path-prefix={}={to}", from.to_string_lossy());
            format!("\"{}\"", flag.replace('\\', "\\\\").replace('"', "\\\""))
        })
        .chain(["\"-Zlocation-detail=none\"".to_owned()])
        .collect();
    format!("target.{WASM_TARGET}.rustflags=[{}]", flags.join(", "))
}

/// Raw and `gzip -9` sizes of a file.
fn sizes(path: &Path) -> Result<(u64, u64)> {
    let raw = std::fs::metadata(path)?.len();
    let output = Command::new("gzip").arg("-9").arg("-c").arg(path).output()?;
    if !output.status.success() {
        bail!("gzip failed on {}", path.display());
    }
    Ok((raw, output.stdout.len() as u64))
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let path = entry?.path();
        let target = to.join(path.file_name().context("file name")?);
        if path.is_dir() {
            copy_dir(&path, &target)?;
        } else {
            std::fs::copy(&path, &target)?;
        }
    }
    Ok(())
}

fn test_wasm(root: &Path) -> Result<()> {
    run(Command::new(cargo()).current_dir(root).args([
        "build",
        "-p",
        "xtask",
        "--bin",
        "wasm-bindgen-test-runner",
        "--locked",
    ]))?;
    let runner = target_dir(root).join("debug/wasm-bindgen-test-runner");
    run(Command::new(cargo())
        .current_dir(root)
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER", runner)
        .args(["test", "-p", "vram-wasm", "--target", WASM_TARGET, "--locked"]))
}
