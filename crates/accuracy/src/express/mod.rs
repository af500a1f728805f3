//! Points to `.vram` source text.
//!
//! Each point's conditions are read by keyword rules on the data set's own wording (one function
//! per condition, in `conditions`, `inference` and `training`). A condition the language
//! cannot state, or that the source does not give, becomes a [`Gap`]; all gaps of a point are
//! collected, so the report lists every reason, not only the first. Where a rule has to choose
//! (a runtime default, a stand-in for a condition the compared component does not depend on), it
//! records an [`Assumption`] and says so in the generated source.

mod conditions;
mod inference;
mod training;

use std::fmt::Write as _;

use crate::data::Point;
use crate::gaps::{Assumption, Gap, data, feature};
use crate::target::Target;
use crate::units::UnitRule;

/// A point written as a `.vram` file, with what to compare its estimate to.
#[derive(Clone, Debug)]
pub struct Expressed {
    pub source: String,
    pub target: Target,
    /// The measurement in bytes, for peaks and components.
    pub measured: Option<f64>,
    pub unit_rule: Option<UnitRule>,
    pub assumptions: Vec<Assumption>,
}

/// A point's expression, or every reason it has none.
pub type Expression = Result<Expressed, Vec<Gap>>;

/// The name of the workload in every generated source.
const WORKLOAD: &str = "point";

/// Collects a point's gaps and assumptions while its conditions are read.
pub(crate) struct Cx<'a> {
    pub(crate) point: &'a Point,
    gaps: Vec<Gap>,
    assumptions: Vec<Assumption>,
}

impl<'a> Cx<'a> {
    fn new(point: &'a Point) -> Cx<'a> {
        Cx { point, gaps: Vec::new(), assumptions: Vec::new() }
    }

    pub(crate) fn gap(&mut self, gap: Gap) {
        if !self.gaps.contains(&gap) {
            self.gaps.push(gap);
        }
    }

    pub(crate) fn assume(&mut self, label: &'static str, detail: impl Into<String>) {
        self.assumptions.push(Assumption::new(label, detail));
    }

    /// A wording the rules do not recognise: a new source uses words the harness must learn.
    pub(crate) fn unreadable(&mut self, field: &str, value: &str) {
        self.gap(Gap::data(data::UNREADABLE, format!("{field} = {value:?}")));
    }
}

/// Expresses one point.
pub fn express(point: &Point) -> Expression {
    let mut cx = Cx::new(point);
    let target = cx.target();
    let measured = target.as_ref().and_then(|t| cx.measured(t));
    let gpu = target.as_ref().and_then(|t| cx.gpu(t));
    let split = cx.split();
    cx.sharding_and_offload();
    let runtime = cx.runtime();
    let selector = match &target {
        Some(Target::Component { selector, .. }) => Some(*selector),
        _ => None,
    };

    let kind = point.workload.as_str();
    let mut model = None;
    let body = match kind {
        "diffusion_inference" | "diffusion_training" => {
            cx.gap(Gap::feature(feature::DIFFUSION, format!("{}: {kind}", point.model)));
            None
        }
        "runtime_overhead" => Some(runtime_only_body()),
        "llm_inference" | "llm_weights_load" => {
            model = cx.model();
            runtime.and_then(|r| inference::body(&mut cx, r, selector))
        }
        "training_full" | "training_lora" | "training_qlora" => {
            model = cx.model();
            // Read the training conditions even without a model, so that their gaps are listed.
            let family = model.as_ref().map(|m| m.family);
            training::body(&mut cx, family)
        }
        other => {
            cx.unreadable("workload", other);
            None
        }
    };

    if !cx.gaps.is_empty() {
        return Err(cx.gaps);
    }
    let (Some(target), Some(gpu), Some(split), Some(runtime), Some(body)) =
        (target, gpu, split, runtime, body)
    else {
        // Every `None` above pushed a gap, so this is unreachable with the rules as written;
        // a rule that forgets to explain itself still produces a reason rather than a panic.
        return Err(vec![Gap::data(data::UNREADABLE, "a condition the rules did not explain")]);
    };
    let mut source = String::new();
    let _ = writeln!(
        source,
        "# {}: {} · {} · {} {} {} · measured by {}",
        point.id,
        point.model,
        point.workload,
        point.measured_kind,
        point.value.map_or_else(|| "-".to_string(), |v| v.to_string()),
        point.unit,
        point.measurement_method
    );
    source.push_str(crate::MODELS_VRAM);
    source.push('\n');
    if let Some(declaration) = gpu.declaration {
        source.push_str(declaration);
        source.push('\n');
    }
    // Verdicts and capacities are compared without headroom: the question is whether the run
    // fitted in the memory, not whether it left the recommended margin.
    source.push_str("headroom default {\n  at_least 0 B\n}\n\n");
    let _ = writeln!(source, "workload {WORKLOAD} \"{}\" {{", point.id);
    if let Some(model) = &model {
        let _ = writeln!(source, "  model   {}", model.name);
    }
    let _ = writeln!(source, "  runtime {}", runtime.word());
    source.push_str(&body);
    source.push_str("}\n\n");
    let _ = writeln!(source, "check {WORKLOAD} on {}", split.target(gpu.device));
    let unit_rule = measured.map(|(_, rule)| rule);
    Ok(Expressed {
        source,
        target,
        measured: measured.map(|(bytes, _)| bytes),
        unit_rule,
        assumptions: cx.assumptions,
    })
}

/// A workload with no model: only the runtime's own memory (a CUDA context measured alone).
fn runtime_only_body() -> String {
    "  components {\n    no_model 0 B workspace  # the measurement loads no model\n  }\n"
        .to_string()
}
