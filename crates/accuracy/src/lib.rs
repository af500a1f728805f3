//! vram-accuracy: how close vram-core's estimates come to published measurements.
//!
//! The pipeline, one module per stage:
//!
//! 1. [`data`] reads `measured-peaks.json` as it is written: one [`data::Point`] per measurement,
//!    with its conditions as free text and numbers;
//! 2. [`express`] turns each point into `.vram` source text (the models of `models.vram`, a
//!    workload, a check) and says what to compare it with ([`target::Target`]), or lists the
//!    [`gaps::Gap`]s that stop it: a language feature the core lacks, or a condition the source
//!    does not state;
//! 3. [`evaluate`] runs `vram_core::evaluate` on the source and reads the estimate in the view the
//!    measurement used ([`views`]);
//! 4. [`stats`] and [`report`] summarise the errors per workload kind and print or write them.
//!
//! The harness never changes an estimate: every number it prints is the core's.

pub mod bands;
pub mod data;
pub mod evaluate;
pub mod express;
pub mod gaps;
pub mod gpus;
pub mod models;
pub mod report;
pub mod stats;
pub mod target;
pub mod units;
pub mod views;

use data::Point;
use evaluate::PointResult;

/// The model table every generated source starts with.
pub const MODELS_VRAM: &str = include_str!("../models.vram");

/// The command that regenerates `docs/accuracy.md`, printed in it.
pub const REGENERATE: &str = "cargo run -p vram-accuracy --release -- --markdown docs/accuracy.md";

/// Every point of the data set, expressed and evaluated, in file order.
#[derive(Debug)]
pub struct Run {
    pub results: Vec<PointResult>,
}

/// Expresses and evaluates every point, then reads as decimal the printings whose own figures
/// rule their binary reading out ([`units::settle_bases`]).
pub fn run(points: &[Point]) -> Run {
    let mut results: Vec<PointResult> = points
        .iter()
        .map(|point| {
            let expressed = express::express(point);
            evaluate::evaluate(point, expressed)
        })
        .collect();
    units::settle_bases(points, &mut results);
    Run { results }
}
