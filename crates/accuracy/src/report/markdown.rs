//! The report as `docs/accuracy.md`: the latest table, the command that regenerates it, the
//! rules the harness applies, and the unexpressed points grouped by reason.

use std::fmt::Write as _;

use super::{
    amount, assumption_groups, band_cell, band_share, counts, fits_word, gap_groups, gib, percent,
    signed_percent,
};
use crate::Run;
use crate::evaluate::Outcome;
use crate::stats;

/// The rules, stated once for readers of the page (the code that applies them cites them).
/// What changed in the model since the last figures, written by hand beside the generator.
const CHANGES: &str = include_str!("changes.md");

const RULES: &str = "\
## How a point is compared

Each point of the data set is written as a `.vram` file: the models of
`crates/accuracy/models.vram` (shapes from each model's config.json, sources in its comments), a
workload with the point's conditions, a zero headroom, and a check on the catalog device the source
names (or a declared one). `cargo run -p vram-accuracy -- --show ID` prints the file of a point.
The estimate is then read in the same terms as the measurement:

| the source measured | compared with |
|---|---|
| `torch.cuda.max_memory_allocated()` | the budget's `allocated` view |
| `torch.cuda.max_memory_reserved()` (`max_memory_cached()` before PyTorch 1.4) | the `reserved` view |
| `nvidia-smi`, `pynvml`, NVML, and the tools that read the driver's count (nvitop, gpustat, DCGM, rocm-smi, W&B system metrics, Task Manager) | the `device` view |
| a peak whose method is not stated | the `allocated` view; for training, for llama.cpp and the applications built on it, and for the serving engines, the `device` view (below) |
| `torch.cuda.memory_allocated()` read after the runs, where the data leaves the method out but the source publishes its script (S17) | the `at rest` view: what stays allocated, persistent tensors and the allocator-held cuBLAS workspace |
| a runtime log's component (vLLM profiler, llama.cpp buffers) | the matching components: weights = persistent, KV = cache, activations = intermediate, non-PyTorch memory = held by the runtime, the vLLM KV pool = the budget's `kv_pool` |
| an out-of-memory report | the check must say *does not fit* |
| the largest run that fitted | the check must say *fits* |

- **Method not stated: allocated view for inference and diffusion, device view for training.**
  The inference and diffusion sources that do not say are framework READMEs and blog tables
  printed by Python scripts; the peak such scripts print is `torch.cuda.max_memory_allocated()`
  far more often than anything else, and every script in this data set that is shown calls it or
  `max_memory_reserved()`. Training is a fit, not a reading: over the 88 single-device training
  peaks with no stated method (11 sources), every source's median error is nearer zero in the
  device view than in the allocated one (median |error| 13.2 % allocated, 10.7 % reserved, 8.3 %
  device), while the unstated inference and diffusion peaks fit the allocated view (2.6 % against
  5.8 %, 2.3 % against 15.3 %); `views::unstated_view` names them. llama.cpp and the
  applications built on it have no PyTorch counter to print, and the serving engines (vLLM,
  SGLang, TensorRT-LLM, LMDeploy, TGI) print no allocator peak, so an unstated reading of them
  is the driver's (the device view). A method that starts with \"not stated\" stays not stated
  even when it guesses at a call. A source that publishes the script
  it measured with is read from the script instead (`crates/accuracy/src/views.rs`,
  `script_method`): S17's benchmark.py prints `torch.cuda.memory_allocated()` after its timed
  runs, a reading at rest (its batch-1 and batch-4 figures agree to within a MB).
- **Units.** MiB and GiB as written; `GB` whose base is not stated is read as GiB (2^30 B): the
  scripts behind these tables divide by 1024^3, and the decimal reading is impossible where it can
  be tested (Qwen-7B's bf16 weights alone are 15.44e9 B, above the 15.2 `GB` measured for the
  whole run, S05-012). A printing (one source, unit and note) whose own figures rule GiB out
  and not decimal is read as decimal: one of its figures read as GiB is more than the GPUs it
  ran on hold, and none read as decimal is below the weights on its devices. Qwen's fine-tuning
  table prints `162.0G` for Qwen-7B on two A100 80GB, 81 GiB a card, so its 81 figures (S05-032
  to S05-112) are decimal; Qwen2's speed table has a figure beyond its GPUs too (T04-055) but
  another below its weights as decimal (T04-049), and keeps GiB (`crates/accuracy/src/units.rs`,
  `settle_bases`). The sensitivity line under the table shows the median with decimal GB.
- **Scope.** A per-GPU measurement is compared with the largest device of the split; a total over
  GPUs with the sum of the devices.
- **Verdicts** use a zero headroom: the question is whether the run fitted, not whether it left
  the recommended margin.
- **Error** is `(estimate - measured) / measured`; the tables give |error| percentiles by the
  nearest-rank method.
- **Band.** Each device budget carries a band (`low`, `high`) around its total: on each side the
  wider of the components' own uncertainty (exact, formula, assumed) and the spread measured for
  its kind of workload (the fitted margins below; the in-band share is therefore a check that the
  fit holds, not an independent test, and the unseen data sets are its real test). A peak is *in band* when the measurement
  lies inside the band of the compared device, moved into the compared view: the allocated and
  reserved views sit below the device total by the components they leave out, so the band is
  moved down by those bytes and keeps its width (the left-out components' uncertainty stays in
  it, which makes those bands slightly wide). A total over GPUs is compared with the sum of the
  devices' bands. Components have no band of their own (the band of a whole device says nothing
  about one of its components), so the in-band share counts peaks only: `share (in/peaks)`.
- **Expressed or not.** A point is expressed only when every condition that changes the compared
  number can be written in the language and is stated by the source, or is one of the assumptions
  listed below. Otherwise it is listed with every reason: a missing feature (a bug to fix in the
  core; the grouped list is its to-do list) or missing data.
- **New wordings.** The rules read words, not this data set's sentences, so that a data set the
  harness has not seen is read the same way: a GPU by its family, stated memory and form factor
  (`NVIDIA H100 80GB HBM3 PCIe` is the catalog's `h100-pcie-80gb`; a card the catalog lacks is
  declared with the memory it states), a model by the usual spellings of the models the harness
  declares (`meta-llama/Llama-3.1-8B-Instruct` is `llama3.1-8b`), precisions and quantizers by
  their common names (`bfloat16`, `AWQ`, `bitsandbytes 8-bit`; an AWQ or GPTQ group size not
  stated is the quantizers' default 128, an assumption), diffusion pipelines by their usual
  names (SD 1.x, SDXL, FLUX.1), and a setting transformers' `Trainer` defaults (optimizer,
  activation checkpointing) as that default when the source leaves it out. A model with no config.json in the
  harness is declared from the point's own architecture fields, Llama-style, its feed-forward
  width solved from the stated parameter count (an assumption; a mixture of experts is not).
";

/// The whole page; its band widths are those fitted over `fitted` (the dev set and the checks:
/// [`crate::bands::all_points`]).
pub fn render(run: &Run, fitted: &Run, points: &[crate::data::Point], data_path: &str) -> String {
    let mut out = String::new();
    let c = counts(run);
    out.push_str("# Accuracy benchmark\n\n");
    out.push_str("<!-- Generated by crates/accuracy; do not edit. -->\n\n");
    let _ = writeln!(
        out,
        "How close vram-core's estimates come to published measurements of GPU memory \
         (`{data_path}`: {} points). Regenerate this page with:\n\n```sh\n{}\n```\n",
        c.points,
        crate::REGENERATE
    );
    let _ = writeln!(
        out,
        "vram-core {}, runtime profiles {}. Compared: {} points as numbers and {} as verdicts; \
         unexpressed: {}; harness errors: {}.\n",
        vram_core::VERSION,
        vram_core::eval::PROFILES_VERSION,
        c.compared,
        c.verdicts,
        c.unexpressed,
        c.harness_errors
    );
    summary(&mut out, run, points);
    out.push_str(CHANGES);
    out.push_str(RULES);
    out.push('\n');
    band_widths(&mut out, fitted);
    assumptions(&mut out, run);
    compared(&mut out, run);
    verdicts(&mut out, run);
    unexpressed(&mut out, run);
    out
}

fn summary(out: &mut String, run: &Run, points: &[crate::data::Point]) {
    out.push_str("## Latest figures\n\n");
    out.push_str(
        "| workload kind | points | compared | median \\|error\\| | p90 \\|error\\| | in band | verdicts right | unexpressed |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    let (rows, overall) = stats::summary(run);
    for row in rows.iter().chain([&overall]) {
        let kind = if row.kind == "overall" { "**overall**".to_string() } else { row.kind.clone() };
        let _ = writeln!(
            out,
            "| {kind} | {} | {} | {} | {} | {} | {}/{} | {} |",
            row.points,
            row.compared,
            percent(row.median),
            percent(row.p90),
            band_share(row),
            row.verdicts.0,
            row.verdicts.1,
            row.unexpressed
        );
    }
    let _ = writeln!(
        out,
        "\nTargets (issue 3): median |error| <= 5 %, p90 <= 15 %, band holds >= 90 % of points. \
         With `GB` of unstated base read as 10^9 B instead of GiB, the overall median would be {}.\n",
        percent(stats::median_with_decimal_gb(run, points))
    );
}

fn band_widths(out: &mut String, run: &Run) {
    out.push_str("## Band widths\n\n");
    out.push_str(
        "The measured part of each band: how far below and above the estimate the compared peaks \
         of each kind fall, this data set's and the crate's own checks' (`crates/accuracy/data/`) \
         together, in thousandths of the device total (95th percentile of each side, \
         see `crates/accuracy/src/bands.rs`). The core's constants are these fits rounded up to \
         the next 10 ‰; `cargo run -p vram-accuracy --release -- --fit-bands` prints them.\n\n",
    );
    out.push_str("| basis | peaks | fitted below | fitted above | core uses (below / above) |\n");
    out.push_str("|---|---:|---:|---:|---:|\n");
    for fit in crate::bands::fit(run) {
        let _ = writeln!(
            out,
            "| {} | {} | {} ‰ | {} ‰ | {} / {} ‰ |",
            format!("{:?}", fit.basis).to_lowercase(),
            fit.peaks,
            fit.below,
            fit.above,
            fit.core.0,
            fit.core.1
        );
    }
    out.push('\n');
}

fn assumptions(out: &mut String, run: &Run) {
    out.push_str("## Assumptions the compared points carry\n\n");
    out.push_str("| assumption | points |\n|---|---|\n");
    for (label, ids) in assumption_groups(run) {
        let _ = writeln!(out, "| {label} | {} |", ids.join(", "));
    }
    out.push('\n');
}

fn compared(out: &mut String, run: &Run) {
    out.push_str("## Compared points\n\n");
    out.push_str(
        "| id | kind | model | compared in | measured | estimate | error | band | allocated / reserved / device |\n",
    );
    out.push_str("|---|---|---|---|---:|---:|---:|---|---|\n");
    for result in &run.results {
        let Outcome::Compared(c) = &result.outcome else { continue };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} |",
            result.id,
            result.workload,
            result.model,
            c.target.label(),
            amount(&c.target, c.measured),
            amount(&c.target, c.estimate),
            signed_percent(c.error_percent),
            band_cell(c),
            gib(c.views[0]),
            gib(c.views[1]),
            gib(c.views[2])
        );
    }
    out.push('\n');
}

fn verdicts(out: &mut String, run: &Run) {
    out.push_str("## Verdict checks\n\n");
    out.push_str(
        "| id | model | measured | estimate | estimated device peak / usable capacity |\n",
    );
    out.push_str("|---|---|---|---|---|\n");
    for result in &run.results {
        let Outcome::Verdict(v) = &result.outcome else { continue };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}{} | {} / {} |",
            result.id,
            result.model,
            fits_word(v.expect_fits),
            fits_word(v.estimate_fits),
            if v.agrees() { "" } else { " (disagrees)" },
            gib(v.device_peak),
            gib(v.capacity)
        );
    }
    out.push('\n');
}

fn unexpressed(out: &mut String, run: &Run) {
    out.push_str("## Unexpressed points, grouped by reason\n\n");
    out.push_str(
        "A point with several reasons is counted under each; *alone* counts the points that \
         reason alone stops (fixing it makes them expressible).\n\n",
    );
    out.push_str("| kind | reason | points | alone | ids |\n|---|---|---:|---:|---|\n");
    for group in gap_groups(run) {
        let ids: Vec<&str> = group.points.iter().map(|(id, _)| id.as_str()).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            group.kind.name(),
            group.label,
            group.points.len(),
            group.alone,
            ids.join(", ")
        );
    }
    out.push_str(
        "\n### Every unexpressed point\n\n| id | kind | model | reasons |\n|---|---|---|---|\n",
    );
    for result in &run.results {
        let Outcome::Unexpressed(gaps) = &result.outcome else { continue };
        let reasons: Vec<String> = gaps.iter().map(|g| escape(&g.to_string())).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            result.id,
            result.workload,
            escape(&result.model),
            reasons.join("<br>")
        );
    }
}

/// Table cells cannot hold `|`.
fn escape(text: &str) -> String {
    text.replace('|', "\\|")
}
