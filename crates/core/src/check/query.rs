//! Checking `find` queries: the goal's words, whether the query needs a target, and whether
//! the workload has the parameter it asks about.

use super::{Scope, suggest, target};
use crate::ast::{Check, DeclarationKind, Find, FindGoal, Ident};
use crate::diagnostic::Diagnostic;
use crate::hir::{CheckSpec, Goal, Layered, QuerySpec, Split, Workload};
use crate::plan::Knob;
use crate::table::NameSet;

const KNOBS: [&str; 4] = ["sessions", "context", "batch", "gpu_layers"];

pub(super) fn query(
    find: &Find,
    scope: &Scope<'_>,
    program: &Layered<'_>,
    failed: &NameSet,
) -> (Option<QuerySpec>, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let text = crate::format::find_text(find);
    let goal = goal(&find.goal, scope, &mut diagnostics);
    let workload = match scope.expect(&find.workload, &[DeclarationKind::Workload]) {
        Ok(_) => program.workload(&find.workload.name),
        Err(diagnostic) => {
            diagnostics.push(diagnostic);
            None
        }
    };
    let Some(goal) = goal else { return (None, diagnostics) };

    // Which goals search on a target, and which choose the devices themselves.
    let needs_target = matches!(goal, Goal::Max(_) | Goal::Precision);
    match (&find.target, needs_target) {
        (None, true) => diagnostics.push(
            Diagnostic::error("E050", find.span, format!("`{}` needs a target", goal_words(&goal)))
                .with_help(format!("add where to search, e.g. `{text} on l4`")),
        ),
        (Some(_), false) => diagnostics.push(
            Diagnostic::error(
                "E050",
                find.span,
                format!("`{}` chooses the devices itself: drop `on ...`", goal_words(&goal)),
            )
            .with_help("`find min gpus of l4 for chat`, `find machines in catalog for chat`"),
        ),
        _ => {}
    }
    if !needs_target && (!find.split.is_empty() || !find.stage_layers.is_empty()) {
        diagnostics.push(Diagnostic::error(
            "E050",
            find.span,
            "a split goes with `on TARGET`; this query chooses the split itself",
        ));
    }
    if let Some(workload) = workload
        && let Some(message) = not_applicable(&goal, workload)
    {
        diagnostics.push(
            Diagnostic::error("E051", find.span, message).with_help(applicable_help(workload)),
        );
    }
    if diagnostics.iter().any(Diagnostic::is_error) || workload.is_none() {
        return (None, diagnostics);
    }

    let check = match (&goal, &find.target) {
        (Goal::Max(_) | Goal::Precision, Some(on)) => {
            let check = Check {
                title: None,
                workload: find.workload.clone(),
                also: Vec::new(),
                target: on.clone(),
                split: find.split.clone(),
                stage_layers: find.stage_layers.clone(),
                headroom: find.headroom.clone(),
                span: find.span,
            };
            let (spec, found) = target::check(&check, scope, program, failed);
            diagnostics.extend(found);
            spec
        }
        (Goal::MinDevices(device), _) => Some(bare(find, vec![device.clone()])),
        _ => Some(bare(find, Vec::new())),
    };
    if let Some(headroom) = &find.headroom
        && let Err(diagnostic) = scope.expect(headroom, &[DeclarationKind::Headroom])
        && find.target.is_none()
    {
        diagnostics.push(diagnostic);
        return (None, diagnostics);
    }
    let failed_dependency = failed.contains(&find.workload.name)
        || workload.is_some_and(|w| w.model.as_ref().is_some_and(|m| failed.contains(m)));
    let spec = check.filter(|_| !failed_dependency).map(|mut check| {
        check.id.clone_from(&text);
        QuerySpec { text, goal, check, span: find.span }
    });
    (spec, diagnostics)
}

/// A check with no target of its own: the planner puts the devices in.
fn bare(find: &Find, devices: Vec<String>) -> CheckSpec {
    CheckSpec {
        id: String::new(),
        title: None,
        workload: find.workload.name.clone(),
        also: Vec::new(),
        target: devices.first().cloned().unwrap_or_default(),
        machine: None,
        devices,
        split: Split::NONE,
        stage_layers: None,
        headroom: find.headroom.as_ref().map(|h| h.name.clone()),
        span: find.span,
    }
}

fn goal(goal: &FindGoal, scope: &Scope<'_>, diagnostics: &mut Vec<Diagnostic>) -> Option<Goal> {
    let unknown = |word: &Ident, choices: &[&str], example: &str| {
        let diagnostic = Diagnostic::error(
            "E015",
            word.span,
            format!("`{}` is not something `find` can look for here", word.name),
        );
        match suggest(&word.name, choices) {
            Some(near) => diagnostic.with_help(format!("did you mean `{near}`?")),
            None => diagnostic.with_help(example.to_string()),
        }
    };
    match goal {
        FindGoal::Max(what) => {
            let knob = Knob::from_name(&what.name);
            if knob.is_none() {
                diagnostics.push(unknown(
                    what,
                    &KNOBS,
                    "`find max` takes `sessions`, `context`, `batch` or `gpu_layers`",
                ));
            }
            knob.map(Goal::Max)
        }
        FindGoal::Min { what, of } => {
            let mut ok = true;
            if what.name != "gpus" && what.name != "devices" {
                diagnostics.push(unknown(
                    what,
                    &["gpus", "devices"],
                    "write `find min gpus of l4 for chat`",
                ));
                ok = false;
            }
            if let Err(diagnostic) = scope.expect(of, &[DeclarationKind::Device]) {
                diagnostics.push(diagnostic);
                ok = false;
            }
            ok.then(|| Goal::MinDevices(of.name.clone()))
        }
        FindGoal::In { what, collection } => {
            let mut ok = true;
            if what.name != "machines" {
                diagnostics.push(unknown(
                    what,
                    &["machines"],
                    "write `find machines in catalog for chat`",
                ));
                ok = false;
            }
            if collection.name != "catalog" {
                diagnostics.push(unknown(
                    collection,
                    &["catalog"],
                    "write `find machines in catalog for chat`",
                ));
                ok = false;
            }
            ok.then_some(Goal::Machines)
        }
        FindGoal::Word(word) if word.name == "precision" => Some(Goal::Precision),
        FindGoal::Word(word) => {
            diagnostics.push(unknown(
                word,
                &["precision", "max", "min", "machines"],
                "`find` looks for `max sessions|context|batch`, `min gpus of DEVICE`, `machines in catalog` or `precision`",
            ));
            None
        }
    }
}

fn goal_words(goal: &Goal) -> String {
    match goal {
        Goal::Max(knob) => format!("find max {}", knob.name()),
        Goal::MinDevices(device) => format!("find min gpus of {device}"),
        Goal::Machines => "find machines in catalog".to_string(),
        Goal::Precision => "find precision".to_string(),
    }
}

/// Why `goal` cannot be asked of `workload`, if it cannot.
fn not_applicable(goal: &Goal, w: &Workload) -> Option<String> {
    let has = match goal {
        Goal::Max(Knob::Sessions) | Goal::Precision => w.inference.is_some(),
        // A trained denoiser's positions come from its resolution, not a sequence.
        Goal::Max(Knob::Context) => {
            w.inference.is_some() || (w.training.is_some() && w.diffusion.is_none())
        }
        Goal::Max(Knob::Batch) => w.training.is_some() || w.diffusion.is_some(),
        Goal::Max(Knob::GpuLayers) => {
            w.inference.is_some() && w.runtime == crate::hir::Runtime::LlamaCpp
        }
        Goal::MinDevices(_) | Goal::Machines => true,
    };
    (!has).then(|| {
        let what = match goal {
            Goal::Max(Knob::Sessions) => "sessions (an inference block)",
            Goal::Max(Knob::Context) => "a context or a training sequence",
            Goal::Max(Knob::Batch) => "a batch (a training micro-batch or a diffusion batch)",
            Goal::Max(Knob::GpuLayers) => "layers to keep in host memory (llama.cpp inference)",
            _ => "weights to change (an inference block)",
        };
        format!("workload `{}` has no {what}", w.name)
    })
}

fn applicable_help(w: &Workload) -> String {
    let mut goals = Vec::new();
    if w.inference.is_some() {
        goals.extend(["max sessions", "max context", "precision"]);
    }
    if w.inference.is_some() && w.runtime == crate::hir::Runtime::LlamaCpp {
        goals.push("max gpu_layers");
    }
    if w.training.is_some() && w.diffusion.is_none() {
        goals.extend(["max batch", "max context"]);
    }
    if w.diffusion.is_some() {
        goals.push("max batch");
    }
    goals.extend(["min gpus of DEVICE", "machines in catalog"]);
    format!("for this workload, `find` can look for: {}", goals.join(", "))
}
