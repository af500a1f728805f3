//! A training step's memory levers as a suggestion: what the step can give up before the model,
//! the batch or the hardware changes.
//!
//! Tried cumulatively, cheapest first, each by a full evaluation of the changed workload: a
//! denoiser's attention fused (`attention fused`: SDPA or xformers, which keep no
//! probabilities), DPO's reference log-probabilities computed before training (`reference precomputed`: one
//! pass over the data up front, then no reference model or reference pass in the step),
//! activation checkpointing (`checkpointing full`: each layer recomputed in the backward pass,
//! about a third more compute), 8-bit AdamW moments (`optimizer adamw-8bit`, bitsandbytes),
//! the optimizer stepped in the backward pass (`step_in_backward true`: one gradient held at a
//! time; one micro-batch per step, no sharding or offload), then the cross-entropy in chunks
//! (`loss_chunks 8`). A lever the workload already pulls, or cannot pull, is skipped; of a set
//! that fits, a lever the others fit without is dropped. When all of them leave the step over,
//! the optimizer's master copy and moments go to the host (`offload optimizer`, DeepSpeed's
//! ZeRO-Offload: host RAM, and a CPU optimizer step), beside the levers that go with it.

use super::{Planner, Stop};
use crate::budget::Verdict;
use crate::hir::{
    Attention, Checkpointing, Method, Objective, Offload, Optimizer, Reference, Sharding,
    StatesMemory, Training,
};

/// The first set of levers that makes the check fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainingAnswer {
    /// The change as the file's `training` section would say it, levers joined by ", ".
    pub change: String,
    pub at: Verdict,
}

/// One memory lever: how the file says it, whether this workload can pull it, and pulling it.
struct Lever {
    says: &'static str,
    applies: fn(&Training, bool) -> bool,
    pull: fn(&mut Training),
}

const LEVERS: [Lever; 6] = [
    Lever {
        // A denoiser's attention without a fused kernel keeps every layer's probabilities:
        // PyTorch 2's SDPA or xformers (diffusers' --enable_xformers_memory_efficient_attention)
        // keep none, at no cost in compute. Not offered for a language model, whose eager
        // attention may be the model's own need (T5's relative position bias).
        says: "attention fused",
        applies: |t, denoiser| denoiser && t.attention == Attention::Eager,
        pull: |t| t.attention = Attention::Fused,
    },
    Lever {
        says: "reference precomputed",
        applies: |t, _| {
            matches!(t.objective, Objective::Dpo(Reference::Copy | Reference::AdaptersOff))
        },
        pull: |t| t.objective = Objective::Dpo(Reference::Precomputed),
    },
    Lever {
        says: "checkpointing full",
        applies: |t, _| t.checkpointing != Checkpointing::Full,
        pull: |t| t.checkpointing = Checkpointing::Full,
    },
    Lever {
        says: "optimizer adamw-8bit",
        applies: |t, _| t.optimizer == Optimizer::AdamW && t.offload == Offload::None,
        pull: |t| t.optimizer = Optimizer::AdamW8bit,
    },
    Lever {
        // The checker's own rule (E014): no accumulation, sharding or offload; and it is not
        // modelled for a denoiser.
        says: "step_in_backward true",
        applies: |t, denoiser| {
            !denoiser
                && !t.levers.step_in_backward
                && t.accumulation == 1
                && t.sharding == Sharding::None
                && t.offload == Offload::None
        },
        pull: |t| t.levers.step_in_backward = true,
    },
    Lever {
        says: "loss_chunks 8",
        applies: |t, denoiser| !denoiser && t.loss_chunks == 1,
        pull: |t| t.loss_chunks = 8,
    },
];

/// The optimizer's master copy and moments on the host: tried last, beside the other levers.
const OFFLOAD: Lever = Lever {
    says: "offload optimizer",
    applies: |t, _| {
        t.offload == Offload::None
            && t.optimizer.states() > 0
            && t.galore_rank.is_none()
            && !t.levers.step_in_backward
            && t.states_memory == StatesMemory::Allocator
            && !matches!(
                t.method,
                Method::Freeze { .. } | Method::Prefix { .. } | Method::Prompt { .. }
            )
    },
    pull: |t| t.offload = Offload::Optimizer,
};

impl Planner<'_> {
    /// The fewest of the training levers, taken in order, that make the check fit; `None` for a
    /// workload that does not train, or when even all of them leave it over.
    pub fn find_training_option(&mut self) -> Result<Option<TrainingAnswer>, Stop> {
        let Some(declared) = self.original.training.clone() else { return Ok(None) };
        let denoiser = self.original.diffusion.is_some();
        let mut pulled: Vec<&Lever> = Vec::new();
        let mut training = declared.clone();
        for lever in &LEVERS {
            if !(lever.applies)(&training, denoiser) {
                continue;
            }
            (lever.pull)(&mut training);
            pulled.push(lever);
            let verdict = self.verdict_with(&training)?;
            if verdict.fits() {
                return self.fewest(&declared, pulled, verdict).map(Some);
            }
        }
        self.with_offloaded_optimizer(&declared, denoiser)
    }

    /// When the levers leave the step over: the optimizer's master copy and moments on the
    /// host (`offload optimizer`, DeepSpeed's ZeRO-Offload), beside the levers that go with it.
    /// Pulled first, it leaves out by their own rules the step in the backward pass (the
    /// checker's `E014`) and 8-bit moments (moot once the moments live on the host); it is said
    /// last.
    fn with_offloaded_optimizer(
        &mut self,
        declared: &Training,
        denoiser: bool,
    ) -> Result<Option<TrainingAnswer>, Stop> {
        if !(OFFLOAD.applies)(declared, denoiser) {
            return Ok(None);
        }
        let mut training = declared.clone();
        (OFFLOAD.pull)(&mut training);
        let mut pulled: Vec<&Lever> = Vec::new();
        for lever in &LEVERS {
            if (lever.applies)(&training, denoiser) {
                (lever.pull)(&mut training);
                pulled.push(lever);
            }
        }
        pulled.push(&OFFLOAD);
        let verdict = self.verdict_with(&training)?;
        if !verdict.fits() {
            return Ok(None);
        }
        self.fewest(declared, pulled, verdict).map(Some)
    }

    /// The check's verdict with `training` in place of the workload's own.
    fn verdict_with(&mut self, training: &Training) -> Result<Verdict, Stop> {
        self.verdict_changed(|w| w.training = Some(training.clone()))
    }

    /// Drops each lever of a fitting set, last first, that the others fit without: a lever
    /// pulled early can stop mattering (checkpointing a freeze-tuned model, whose frozen layers
    /// store nothing anyway, only adds checkpoints).
    fn fewest(
        &mut self,
        declared: &Training,
        mut pulled: Vec<&Lever>,
        mut at: Verdict,
    ) -> Result<TrainingAnswer, Stop> {
        for index in (0..pulled.len()).rev() {
            if pulled.len() == 1 {
                break;
            }
            let mut without = declared.clone();
            for (i, lever) in pulled.iter().enumerate() {
                if i != index {
                    (lever.pull)(&mut without);
                }
            }
            let verdict = self.verdict_with(&without)?;
            if verdict.fits() {
                pulled.remove(index);
                at = verdict;
            }
        }
        let change = pulled.iter().map(|lever| lever.says).collect::<Vec<_>>().join(", ");
        Ok(TrainingAnswer { change, at })
    }
}
