//! `vram`: the command-line front end. It owns IO, formats and exit codes; every number comes
//! from `vram-core`.

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a command-line tool prints")]

/// `println!` that ignores a closed standard output (`vram check ... | head`) instead of
/// panicking: what was wanted has been read.
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
mod calibrate;
mod catalog;
mod explain;
mod import;
mod input;
mod map;
mod output;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use vram_core::Status;
use vram_render::Color;

use args::{Args, ColorChoice, Command};

/// Exit codes, documented in `vram --help` and the README.
const EXIT_FITS: u8 = 0;
const EXIT_DOES_NOT_FIT: u8 = 1;
const EXIT_INPUT_ERRORS: u8 = 2;

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() { EXIT_INPUT_ERRORS } else { EXIT_FITS });
        }
    };
    let colors = Colors::new(args.color);
    let code = match args.command {
        Command::Check { files, format, catalog } => {
            output::check(&files, format, catalog.as_deref(), colors)
        }
        Command::Explain { file, check } => explain::run(&file, check.as_deref(), colors),
        Command::Fmt { files, check } => fmt(&files, check, colors),
        Command::Catalog { format } => catalog::run(format),
        Command::Import { path, format, name } => {
            import::run(&path, format, name.as_deref(), colors)
        }
        Command::Calibrate { reports, name, format } => calibrate::run(&reports, &name, format),
        Command::Map { file, check, device, contexts, sessions } => map::run(
            &map::Request {
                file: &file,
                check: check.as_deref(),
                device: device.as_deref(),
                contexts: &contexts,
                sessions: &sessions,
            },
            colors,
        ),
        Command::Schema => {
            outln!("{}", output::json::schema());
            EXIT_FITS
        }
    };
    let _ = std::io::stdout().flush();
    ExitCode::from(code)
}

/// Whether standard output and standard error get ANSI colours.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Colors {
    pub(crate) stdout: Color,
    pub(crate) stderr: Color,
}

impl Colors {
    fn new(choice: ColorChoice) -> Colors {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let pick = |terminal: bool| match choice {
            ColorChoice::Always => Color::Ansi,
            ColorChoice::Auto if terminal && !no_color => Color::Ansi,
            ColorChoice::Auto | ColorChoice::Never => Color::Never,
        };
        Colors {
            stdout: pick(std::io::stdout().is_terminal()),
            stderr: pick(std::io::stderr().is_terminal()),
        }
    }
}

pub(crate) fn exit_code(status: Status) -> u8 {
    match status {
        Status::Fits => EXIT_FITS,
        Status::DoesNotFit => EXIT_DOES_NOT_FIT,
        Status::InputErrors => EXIT_INPUT_ERRORS,
    }
}

fn fmt(files: &[std::path::PathBuf], check: bool, colors: Colors) -> u8 {
    let mut code = EXIT_FITS;
    for path in files {
        let Some(input) = input::read(path) else {
            code = EXIT_INPUT_ERRORS;
            continue;
        };
        match vram_core::format::format(&input.text) {
            Ok(formatted) if formatted == input.text => {}
            Ok(formatted) if check => {
                eprintln!("{}: not formatted (run `vram fmt {}`)", input.name, input.name);
                code = code.max(EXIT_DOES_NOT_FIT);
                let _ = formatted;
            }
            Ok(formatted) if input.is_stdin => out!("{formatted}"),
            Ok(formatted) => {
                if let Err(error) = std::fs::write(path, formatted) {
                    eprintln!("{}: cannot write: {error}", input.name);
                    code = EXIT_INPUT_ERRORS;
                }
            }
            Err(diagnostics) => {
                eprint!(
                    "{}",
                    vram_render::render(&diagnostics, &input.name, &input.text, colors.stderr)
                );
                code = EXIT_INPUT_ERRORS;
            }
        }
    }
    code
}
