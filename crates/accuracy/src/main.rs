//! The `vram-accuracy` command: expresses every point of the measured-peaks data set as a
//! `.vram` workload, evaluates it with vram-core and prints the error table.
//!
//! ```text
//! vram-accuracy [DATA] [--markdown FILE] [--show ID] [--fit-bands]
//! ```
//!
//! `DATA` defaults to `<workspace>/../shared/data/measured-peaks.json`. `--markdown` also writes
//! the report as Markdown (docs/accuracy.md); `--show` prints one point's generated source or its
//! reasons; `--fit-bands` prints the band margins the compared peaks of `DATA` and of the
//! project's checks (`data/`) support together (see `bands`). Exit codes: 0 the report was made (whatever the figures), 1 a generated source failed
//! to check (a harness bug), 2 the data could not be read or the command line is wrong.

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a command-line tool prints")]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use vram_accuracy::evaluate::Outcome;
use vram_accuracy::report::{self, counts};

/// The data set beside the workspace, as CI has it.
fn default_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/measured-peaks.json")
}

struct Args {
    data: PathBuf,
    markdown: Option<PathBuf>,
    show: Option<String>,
    fit_bands: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { data: default_data(), markdown: None, show: None, fit_bands: false };
    let mut rest = std::env::args().skip(1);
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--markdown" => {
                args.markdown = Some(rest.next().ok_or("--markdown needs a file")?.into());
            }
            "--fit-bands" => args.fit_bands = true,
            "--show" => args.show = Some(rest.next().ok_or("--show needs a point id")?),
            "-h" | "--help" => {
                return Err(
                    "usage: vram-accuracy [DATA] [--markdown FILE] [--show ID] [--fit-bands]"
                        .into(),
                );
            }
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            path => args.data = path.into(),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let text = match std::fs::read_to_string(&args.data) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("cannot read {}: {error}", args.data.display());
            return ExitCode::from(2);
        }
    };
    let points = match vram_accuracy::data::parse(&text) {
        Ok(points) => points,
        Err(error) => {
            eprintln!("{} is not the measured-peaks format: {error}", args.data.display());
            return ExitCode::from(2);
        }
    };
    let run = vram_accuracy::run(&points);
    let shown = display_path(&args.data);

    if let Some(id) = &args.show {
        return show(&run, id);
    }
    if args.fit_bands {
        let fitted = match fitted_run(points) {
            Ok(fitted) => fitted,
            Err(code) => return code,
        };
        print!("{}", report::text::bands(&fitted));
        return ExitCode::SUCCESS;
    }
    print!("{}", report::text::render(&run, &shown));
    if let Some(path) = &args.markdown {
        let fitted = match fitted_run(points.clone()) {
            Ok(fitted) => fitted,
            Err(code) => return code,
        };
        let page = report::markdown::render(&run, &fitted, &points, &shown);
        if let Err(error) = std::fs::write(path, page) {
            eprintln!("cannot write {}: {error}", path.display());
            return ExitCode::from(2);
        }
        println!("wrote {}", path.display());
    }
    if counts(&run).harness_errors > 0 {
        eprintln!("some generated sources do not check: a bug in crates/accuracy");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// The run the band margins are fitted over: `points` and the project's checks together.
fn fitted_run(points: Vec<vram_accuracy::data::Point>) -> Result<vram_accuracy::Run, ExitCode> {
    match vram_accuracy::bands::all_points(points) {
        Ok(all) => Ok(vram_accuracy::run(&all)),
        Err(error) => {
            eprintln!("a check's data set does not parse: {error}");
            Err(ExitCode::from(2))
        }
    }
}

/// Prints one point's source (or its reasons).
fn show(run: &vram_accuracy::Run, id: &str) -> ExitCode {
    let Some(result) = run.results.iter().find(|r| r.id == id) else {
        eprintln!("no point {id}");
        return ExitCode::from(2);
    };
    match &result.outcome {
        Outcome::Compared(c) => {
            print!("{}", c.source);
            for assumption in &c.assumptions {
                println!("# assumption: {}: {}", assumption.label, assumption.detail);
            }
        }
        Outcome::Verdict(v) => print!("{}", v.source),
        Outcome::Unexpressed(gaps) => {
            for gap in gaps {
                println!("{gap}");
            }
        }
        Outcome::HarnessError { source, diagnostics } => {
            print!("{source}");
            for diagnostic in diagnostics {
                println!("# error: {diagnostic}");
            }
        }
    }
    ExitCode::SUCCESS
}

/// The data path as the report prints it: relative to the workspace when it lies beside it, so
/// that the page is the same on every machine.
fn display_path(path: &Path) -> String {
    if path == default_data() {
        "../shared/data/measured-peaks.json".to_string()
    } else {
        path.display().to_string()
    }
}
