//! `vram-probe`: the command-line front end of the probe. It owns arguments, printing and exit
//! codes; the library does the work.

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a command-line tool prints")]

/// `println!` that ignores a closed standard output (`vram-probe devices | head`) instead of
/// panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `print!` that ignores a closed standard output.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($arg)*);
    }};
}

mod args;
mod output;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use args::{Args, Command};

/// Exit codes, documented in `vram-probe --help` and docs/probe.md.
pub(crate) mod exit {
    /// Everything passed.
    pub(crate) const OK: u8 = 0;
    /// A verification or acceptance check failed, or the command failed.
    pub(crate) const FAILED: u8 = 1;
    /// The command line or an input file is wrong.
    pub(crate) const USAGE: u8 = 2;
    /// NVML is missing: no NVIDIA driver (or not at the path given).
    pub(crate) const NO_DRIVER: u8 = 3;
    /// NVML is present but failed.
    pub(crate) const NVML_ERROR: u8 = 4;
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() { exit::USAGE } else { exit::OK });
        }
    };
    let code = match args.command {
        Command::Devices { format } => output::devices(args.nvml_lib, format),
        Command::Verify { file, machine, format } => {
            output::verify(args.nvml_lib, &file, machine.as_deref(), format)
        }
        Command::Compare { a, b, format } => output::compare(&a, &b, format),
        Command::Run { check, interval, out, record_command, grace, timeout, format, command } => {
            output::run(&output::RunArgs {
                library: args.nvml_lib,
                check,
                interval,
                out,
                record_command,
                grace,
                timeout,
                format,
                commands: args::split_commands(command),
            })
        }
    };
    let _ = std::io::stdout().flush();
    ExitCode::from(code)
}

/// Opens NVML or prints why not, returning the exit code to use.
pub(crate) fn open(library: Option<std::path::PathBuf>) -> Result<vram_probe::nvml::Handle, u8> {
    vram_probe::nvml::open(library).map_err(|error| {
        eprintln!("error: {error}");
        match error {
            vram_probe::nvml::OpenError::NoLibrary { .. }
            | vram_probe::nvml::OpenError::DriverNotLoaded { .. } => exit::NO_DRIVER,
            vram_probe::nvml::OpenError::Init { .. } => exit::NVML_ERROR,
        }
    })
}
