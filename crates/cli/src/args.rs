//! Command-line arguments. Clap types live here and are converted into what the commands need.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Plan and check GPU memory budgets written in .vram files.
#[derive(Debug, Parser)]
#[command(
    name = "vram",
    version,
    after_help = "Exit codes: 0 every check fits; 1 a check does not fit, or its device cannot run it; \
                  2 the input has errors, or the command line is wrong."
)]
pub(crate) struct Args {
    /// When to colour output: auto colours a terminal unless NO_COLOR is set.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true)]
    pub(crate) color: ColorChoice,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Evaluate every check in the files and print per-device budgets.
    Check {
        /// Workload files; `-` reads standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long, short, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// A catalog file of devices, machines and models: added to the built-in catalog, and
        /// its machines, if it declares any, replace the built-in machines.
        #[arg(long)]
        catalog: Option<PathBuf>,
    },
    /// Show the arithmetic and the source behind every component of a check.
    Explain {
        file: PathBuf,
        /// The check to explain: its id (`chat on l4`), its title, its workload's name, or its
        /// position from 1. Without it, every check is explained.
        #[arg(long)]
        check: Option<String>,
    },
    /// Rewrite files in the one canonical layout.
    Fmt {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Change nothing; exit 1 if a file is not formatted.
        #[arg(long)]
        check: bool,
    },
    /// List the built-in devices and models.
    Catalog {
        #[arg(long, short, value_enum, default_value_t = CatalogFormat::Table)]
        format: CatalogFormat,
    },
    /// Print the JSON Schema of the budget that `check --format json` writes.
    Schema,
    /// Import a model from config.json, safetensors or GGUF headers, as a model block.
    ///
    /// Only headers are read, never tensors; `--format json` says how many bytes that took.
    Import {
        /// A config.json, a .safetensors or .gguf file, a model.safetensors.index.json, or a
        /// checkpoint folder.
        path: PathBuf,
        #[arg(long, short, value_enum, default_value_t = ImportFormat::Vram)]
        format: ImportFormat,
        /// The model's name in the block; default: the folder's or the file's name.
        #[arg(long)]
        name: Option<String>,
    },
    /// Where a check fits: a grid of context × sessions on one device.
    Map {
        file: PathBuf,
        /// The check to map (its id); needed when the file has several.
        #[arg(long)]
        check: Option<String>,
        /// The device to map on, with the check's split; default: the check's own device.
        #[arg(long)]
        device: Option<String>,
        /// Context lengths in tokens, increasing (default: 1024 to 131072, doubling).
        #[arg(long, value_delimiter = ',')]
        contexts: Vec<u64>,
        /// Session counts, increasing (default: 1 to 256, doubling).
        #[arg(long, value_delimiter = ',')]
        sessions: Vec<u64>,
    },
    /// Turn vram-probe reports into a headroom rule justified by measurements.
    ///
    /// Reads reports of `vram-probe run --check` and, per architecture, keeps the worst excess
    /// of the measured peak over the estimate plus the run-to-run spread.
    Calibrate {
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// The headroom block's name.
        #[arg(long, default_value = "calibrated")]
        name: String,
        #[arg(long, short, value_enum, default_value_t = CalibrateFormat::Vram)]
        format: CalibrateFormat,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum CalibrateFormat {
    /// A `headroom` block with the evidence in comments.
    Vram,
    /// The observations per architecture, as JSON.
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ImportFormat {
    /// A `model` block.
    Vram,
    /// The model, the bytes read and any diagnostics, as JSON.
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Table,
    Json,
    Markdown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum CatalogFormat {
    Table,
    Json,
    /// The catalog's own .vram text.
    Vram,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ColorChoice {
    Auto,
    Always,
    Never,
}
