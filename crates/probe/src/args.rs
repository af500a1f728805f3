//! Command-line arguments.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

/// Verify delivered GPUs through NVML and run acceptance tests against a .vram plan.
#[derive(Debug, Parser)]
#[command(
    name = "vram-probe",
    version,
    after_help = "Exit codes: 0 passed; 1 a check failed, the command failed or timed out; 2 \
                  usage or input error; 3 no NVIDIA driver (NVML missing); 4 NVML failed; \
                  130/143 interrupted by SIGINT/SIGTERM (the report is still written)."
)]
pub(crate) struct Args {
    /// The NVML library to load instead of the driver's libnvidia-ml.so.1 (also
    /// VRAM_PROBE_NVML_LIB).
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) nvml_lib: Option<PathBuf>,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Every GPU: identity, exact memory, architecture, compute capability, versions, MIG, ECC.
    Devices {
        #[arg(long, short, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Run commands and measure them: baseline, fast sampling, peaks, timeline, exit status.
    ///
    /// Several commands run at the same time when separated by `---`:
    /// `vram-probe run -- python serve.py --- python embed.py`. The report is written on every
    /// way out: a normal exit, a crash, Ctrl-C or SIGTERM (forwarded to the commands).
    Run {
        /// Hold the measurement against a check of a .vram file: its id, title, workload or
        /// position.
        #[arg(long, num_args = 2, value_names = ["NAME", "FILE"])]
        check: Option<Vec<String>>,
        /// Time between samples: `1ms` (the default), `500us`, `10ms`.
        #[arg(long, default_value = "1ms", value_parser = parse_duration)]
        interval: Duration,
        /// Where the JSON report goes.
        #[arg(long, default_value = "vram-probe-report.json")]
        out: PathBuf,
        /// Record the command lines and the environment in the report (left out by default:
        /// they may hold secrets).
        #[arg(long)]
        record_command: bool,
        /// How long commands get to exit after a forwarded signal before SIGKILL.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        grace: Duration,
        /// Stop the commands once they have run this long (`30s`, `90m`, `8h`), as Ctrl-C does:
        /// SIGTERM, then SIGKILL after the grace period. The report records `timed_out`.
        #[arg(long, value_parser = parse_timeout)]
        timeout: Option<Duration>,
        /// The summary: a table on standard error (the command's own output passes through
        /// standard output unchanged), or JSON or Prometheus text on standard output.
        #[arg(long, short, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// The command(s), after `--`; `---` separates co-resident commands.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<OsString>,
    },
    /// The machine a .vram file declares against the real one: GPU count and model, exact
    /// bytes, architecture, compute capability and precision support, one line per item.
    Verify {
        file: PathBuf,
        /// The machine to verify (in the file or the catalog); default: the file's only machine,
        /// else its first check's target.
        #[arg(long)]
        machine: Option<String>,
        #[arg(long, short, value_enum, default_value_t = CompareFormat::Table)]
        format: CompareFormat,
    },
    /// Two run reports side by side: peak per GPU, time, errors and quality (B against A).
    Compare {
        a: PathBuf,
        b: PathBuf,
        #[arg(long, short, value_enum, default_value_t = CompareFormat::Table)]
        format: CompareFormat,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum CompareFormat {
    Table,
    Json,
}

/// Splits `a b --- c d` into `[[a, b], [c, d]]`.
pub(crate) fn split_commands(words: Vec<OsString>) -> Vec<Vec<OsString>> {
    let mut commands = vec![Vec::new()];
    for word in words {
        if word == "---" {
            commands.push(Vec::new());
        } else if let Some(last) = commands.last_mut() {
            last.push(word);
        }
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// `1ms`, `500us`, `0.5ms`, `2s`: at most an hour.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let seconds = parse_seconds(text)?;
    if seconds > 3600.0 {
        return Err(format!("`{text}` must be at most an hour"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A run's time limit: `30s`, `90m`, `8h`; at most a week.
pub(crate) fn parse_timeout(text: &str) -> Result<Duration, String> {
    let seconds = parse_seconds(text)?;
    if seconds > 7.0 * 24.0 * 3600.0 {
        return Err(format!("`{text}` must be at most a week"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A positive duration with its unit (`us`, `ms`, `s`, `m`, `h`), in seconds.
fn parse_seconds(text: &str) -> Result<f64, String> {
    let split = text.find(|c: char| c.is_alphabetic()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 =
        number.trim().parse().map_err(|_| format!("`{text}` is not a duration such as 1ms"))?;
    let seconds = match unit {
        "us" | "µs" => value / 1e6,
        "ms" => value / 1e3,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("`{text}`: the unit must be us, ms, s, m or h")),
    };
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(format!("`{text}` must be above 0"));
    }
    Ok(seconds)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Table,
    Json,
    /// The Prometheus textfile format, for a node exporter's textfile collector.
    Prometheus,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_timeouts() {
        assert_eq!(parse_duration("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("2h").is_err(), "an interval or grace of hours is a mistake");
        assert_eq!(parse_timeout("90m"), Ok(Duration::from_mins(90)));
        assert_eq!(parse_timeout("8h"), Ok(Duration::from_hours(8)));
        assert!(parse_timeout("0s").is_err());
        assert!(parse_timeout("30 days").is_err());
        assert!(parse_timeout("10d").is_err());
    }
}
