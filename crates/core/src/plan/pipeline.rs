//! A diffusion pipeline's memory options as a suggestion: what diffusers offers a pipeline that
//! does not fit before anything changes the model or the image.
//!
//! Tried cheapest first, each by a full evaluation of the changed workload: the VAE decode tiled
//! (`vae_tiling true`: `enable_tiling()`, which bounds the decode by a tile and costs a little
//! time and, where tiles meet, blending), whole models moved to the device in turn (`offload
//! model`: `enable_model_cpu_offload()`, which costs a transfer per phase), then both; then the
//! denoiser a block at a time (`offload blocks`: `enable_group_offload` at block level, a
//! transfer per block and step, offered when the denoiser declares its blocks); last, one
//! module at a time (`offload sequential`: `enable_sequential_cpu_offload()`, a transfer per
//! module and step, much slower), with tiling when the image is larger than a tile. Sequential
//! offload is offered only when every model of the pipeline has a largest module to size it by.

use super::{Planner, Stop};
use crate::budget::Verdict;
use crate::hir::{DEFAULT_VAE_TILE, DiffusionOffload};

/// The first memory option that makes the check fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineAnswer {
    /// The change as the file would say it: `vae_tiling true`, `offload model`, `offload blocks`
    /// or `offload sequential`, or an offload and tiling.
    pub change: String,
    pub at: Verdict,
}

#[derive(Clone, Copy)]
struct MemoryOption {
    tile: bool,
    offload: Option<DiffusionOffload>,
}

const MODEL: Option<DiffusionOffload> = Some(DiffusionOffload::Model { loaded_on_device: false });
const SEQUENTIAL: Option<DiffusionOffload> =
    Some(DiffusionOffload::Sequential { loaded_on_device: false });
const BLOCKS: Option<DiffusionOffload> =
    Some(DiffusionOffload::Group { per_group: 1, stream: false, loaded_on_device: false });

impl Planner<'_> {
    /// The cheapest of diffusers' memory options the workload does not use yet that makes it
    /// fit; `None` for a workload that is not a diffusion inference, or when none fits.
    pub fn find_pipeline_option(&mut self) -> Result<Option<PipelineAnswer>, Stop> {
        let Some(diffusion) = &self.original.diffusion else { return Ok(None) };
        if self.original.training.is_some() {
            return Ok(None);
        }
        // A tile decodes a smaller image only when the image is larger than the tile; Wan's
        // tiled decode is not modelled.
        let tile = crate::hir::default_vae_tile(diffusion.video.as_ref());
        let can_tile = diffusion.vae.is_some()
            && diffusion.vae_tile.is_none()
            && tile.is_some_and(|(tile_w, tile_h)| {
                diffusion.width > tile_w || diffusion.height > tile_h
            });
        let tile = tile.unwrap_or(DEFAULT_VAE_TILE);
        let can_offload = diffusion.offload == DiffusionOffload::None;
        let sized = |model: &String| {
            self.work.model(model).is_some_and(crate::hir::Model::sizes_its_largest_module)
        };
        let can_sequence = can_offload
            && sized(&diffusion.denoiser.model)
            && diffusion.text_encoders.iter().all(sized)
            && diffusion.vae.iter().all(sized);
        let can_block = can_offload
            && self.work.model(&diffusion.denoiser.model).is_some_and(|m| m.blocks.is_some());
        let options = [
            MemoryOption { tile: true, offload: None },
            MemoryOption { tile: false, offload: MODEL },
            MemoryOption { tile: true, offload: MODEL },
            MemoryOption { tile: false, offload: BLOCKS },
            MemoryOption { tile: true, offload: BLOCKS },
            MemoryOption { tile: false, offload: SEQUENTIAL },
            MemoryOption { tile: true, offload: SEQUENTIAL },
        ];
        let spec = self.spec.clone();
        for option in options {
            let allowed = match option.offload {
                None => true,
                Some(DiffusionOffload::Sequential { .. }) => can_sequence,
                Some(DiffusionOffload::Group { .. }) => can_block,
                Some(_) => can_offload,
            };
            if (option.tile && !can_tile) || !allowed {
                continue;
            }
            if let Some(diffusion) = self.workload_mut().diffusion.as_mut() {
                if option.tile {
                    diffusion.vae_tile = Some(tile);
                }
                if let Some(offload) = option.offload {
                    diffusion.offload = offload;
                }
            }
            let verdict = self.verdict();
            self.reset(&spec);
            let verdict = verdict?;
            if verdict.fits() {
                let offload = match option.offload {
                    Some(DiffusionOffload::Sequential { .. }) => Some("offload sequential"),
                    Some(DiffusionOffload::Group { .. }) => Some("offload blocks"),
                    Some(_) => Some("offload model"),
                    None => None,
                };
                let change = match (offload, option.tile) {
                    (Some(offload), true) => format!("{offload}, vae_tiling true"),
                    (Some(offload), false) => offload.to_string(),
                    (None, _) => "vae_tiling true".to_string(),
                };
                return Ok(Some(PipelineAnswer { change, at: verdict }));
            }
        }
        Ok(None)
    }
}
