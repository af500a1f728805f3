//! A diffusion pipeline's memory options as a suggestion: what diffusers offers a pipeline that
//! does not fit before anything changes the model or the image.
//!
//! First the options that move nothing between host and device, tried cumulatively, cheapest
//! first: the batch decoded one image at a time (`vae_slicing true`: `enable_vae_slicing()`,
//! the same work in smaller pieces), unfused attention's scores over half of a layer's heads
//! at a time, then one (`attention sliced`, `attention_slice max`:
//! `enable_attention_slicing()`, a little slower each), the decode tiled (`vae_tiling true`:
//! `enable_tiling()`, which bounds the decode by a tile and costs a little time and, where
//! tiles meet, blending). Then the offloads, each alone and then beside those options: whole
//! models moved to the device in turn (`offload model`: `enable_model_cpu_offload()`, a
//! transfer per phase); the denoiser a block at a time (`offload blocks`:
//! `enable_group_offload` at block level, a transfer per block and step, offered when the
//! denoiser declares its blocks); last, one module at a time (`offload sequential`:
//! `enable_sequential_cpu_offload()`, a transfer per module and step, much slower, offered
//! only when every model of the pipeline has a largest module to size it by). Each candidate
//! is a full evaluation of the changed workload; of a set that fits, an option the others fit
//! without is dropped.

use super::{Planner, Stop};
use crate::budget::Verdict;
use crate::hir::{AttentionSlice, Diffusion, DiffusionAttention, DiffusionOffload};

/// The first memory option that makes the check fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineAnswer {
    /// The change as the file would say it, options joined by ", ": `vae_tiling true`,
    /// `offload model`, `vae_slicing true, attention sliced`, ...
    pub change: String,
    pub at: Verdict,
}

/// One option that keeps every weight where it is: how the file says it (given the declared
/// pipeline), whether the declared pipeline can take it, and taking it.
struct InPlace {
    says: fn(&Diffusion) -> &'static str,
    applies: fn(&Diffusion) -> bool,
    take: fn(&mut Diffusion),
}

const IN_PLACE: [InPlace; 4] = [
    InPlace {
        says: |_| "vae_slicing true",
        applies: |d| d.vae.is_some() && d.batch > 1 && !d.vae_slicing,
        take: |d| d.vae_slicing = true,
    },
    InPlace {
        says: |_| "attention sliced",
        applies: |d| d.attention == DiffusionAttention::Eager,
        take: |d| d.attention = DiffusionAttention::Sliced(AttentionSlice::Auto),
    },
    InPlace {
        // Taken alone from eager attention, it is the slicing as well.
        says: |declared| match declared.attention {
            DiffusionAttention::Eager => "attention sliced, attention_slice max",
            _ => "attention_slice max",
        },
        applies: |d| {
            matches!(
                d.attention,
                DiffusionAttention::Eager
                    | DiffusionAttention::Sliced(AttentionSlice::Auto | AttentionSlice::Heads(2..))
            )
        },
        take: |d| d.attention = DiffusionAttention::Sliced(AttentionSlice::Max),
    },
    InPlace {
        says: |_| "vae_tiling true",
        applies: can_tile,
        take: |d| {
            d.vae_tile = Some(crate::hir::default_vae_tile(d.video.as_ref(), d.image_vae));
        },
    },
];

/// A tile decodes a smaller image only when the image is larger than the tile.
fn can_tile(d: &Diffusion) -> bool {
    let (tile_w, tile_h) = crate::hir::default_vae_tile(d.video.as_ref(), d.image_vae);
    d.vae.is_some() && d.vae_tile.is_none() && (d.width > tile_w || d.height > tile_h)
}

const MODEL: DiffusionOffload = DiffusionOffload::Model { loaded_on_device: false };
const BLOCKS: DiffusionOffload =
    DiffusionOffload::Group { per_group: 1, stream: false, loaded_on_device: false };
const SEQUENTIAL: DiffusionOffload = DiffusionOffload::Sequential { loaded_on_device: false };

fn offload_says(offload: DiffusionOffload) -> &'static str {
    match offload {
        DiffusionOffload::Sequential { .. } => "offload sequential",
        DiffusionOffload::Group { .. } => "offload blocks",
        _ => "offload model",
    }
}

impl Planner<'_> {
    /// The cheapest of diffusers' memory options the workload does not use yet that makes it
    /// fit (for a trained pipeline, the fewest blocks swapped to the host); `None` for a workload
    /// that is not a diffusion pipeline, or when none fits.
    pub fn find_pipeline_option(&mut self) -> Result<Option<PipelineAnswer>, Stop> {
        let Some(declared) = self.original.diffusion.clone() else { return Ok(None) };
        if self.original.training.is_some() {
            // A trained pipeline has none of sampling's options; a trained DiT swaps blocks.
            return self.find_block_swap(&declared);
        }
        let mut taken: Vec<&InPlace> = Vec::new();
        let mut diffusion = declared.clone();
        for option in &IN_PLACE {
            if !(option.applies)(&diffusion) {
                continue;
            }
            (option.take)(&mut diffusion);
            taken.push(option);
            let verdict = self.verdict_with_pipeline(&diffusion)?;
            if verdict.fits() {
                return self.fewest_options(&declared, taken, None, verdict).map(Some);
            }
        }
        for offload in self.offloads(&declared) {
            for with_options in [false, true] {
                if with_options && taken.is_empty() {
                    continue;
                }
                let mut changed = if with_options { diffusion.clone() } else { declared.clone() };
                changed.offload = offload;
                let verdict = self.verdict_with_pipeline(&changed)?;
                if verdict.fits() {
                    let options = if with_options { taken } else { Vec::new() };
                    return self
                        .fewest_options(&declared, options, Some(offload), verdict)
                        .map(Some);
                }
            }
        }
        Ok(None)
    }

    /// The offloads the declared pipeline can take, cheapest first.
    fn offloads(&self, declared: &Diffusion) -> Vec<DiffusionOffload> {
        if declared.offload != DiffusionOffload::None {
            return Vec::new();
        }
        let sized = |model: &String| {
            self.work.model(model).is_some_and(crate::hir::Model::sizes_its_largest_module)
        };
        let can_sequence = sized(&declared.denoiser.model)
            && declared.text_encoders.iter().all(sized)
            && declared.vae.iter().all(sized);
        let can_block =
            self.work.model(&declared.denoiser.model).is_some_and(|m| m.blocks.is_some());
        let mut offloads = vec![MODEL];
        offloads.extend(can_block.then_some(BLOCKS));
        offloads.extend(can_sequence.then_some(SEQUENTIAL));
        offloads
    }

    /// The check's verdict with `diffusion` in place of the workload's own.
    fn verdict_with_pipeline(&mut self, diffusion: &Diffusion) -> Result<Verdict, Stop> {
        self.verdict_changed(|w| w.diffusion = Some(diffusion.clone()))
    }

    /// Drops each in-place option of a fitting set, last first, that the rest fit without.
    fn fewest_options(
        &mut self,
        declared: &Diffusion,
        mut taken: Vec<&InPlace>,
        offload: Option<DiffusionOffload>,
        mut at: Verdict,
    ) -> Result<PipelineAnswer, Stop> {
        for index in (0..taken.len()).rev() {
            if taken.len() == 1 && offload.is_none() {
                break;
            }
            let mut without = declared.clone();
            for (i, option) in taken.iter().enumerate() {
                if i != index {
                    (option.take)(&mut without);
                }
            }
            if let Some(offload) = offload {
                without.offload = offload;
            }
            let verdict = self.verdict_with_pipeline(&without)?;
            if verdict.fits() {
                taken.remove(index);
                at = verdict;
            }
        }
        let mut says: Vec<&str> = offload.map(offload_says).into_iter().collect();
        says.extend(taken.iter().map(|option| (option.says)(declared)));
        Ok(PipelineAnswer { change: says.join(", "), at })
    }
}
