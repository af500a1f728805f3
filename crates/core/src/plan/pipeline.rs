//! A diffusion pipeline's memory options as a suggestion: what diffusers offers a pipeline that
//! does not fit before anything changes the model or the image.
//!
//! Tried cheapest first, each by a full evaluation of the changed workload: the VAE decode tiled
//! (`vae_tiling true`: `enable_tiling()`, which bounds the decode by a tile and costs a little
//! time and, where tiles meet, blending), whole models moved to the device in turn (`offload
//! model`: `enable_model_cpu_offload()`, which costs a transfer per phase), then both.

use super::{Planner, Stop};
use crate::budget::Verdict;
use crate::hir::{DEFAULT_VAE_TILE, DiffusionOffload};

/// The first memory option that makes the check fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineAnswer {
    /// The change as the file would say it: `vae_tiling true`, `offload model`, or both.
    pub change: String,
    pub at: Verdict,
}

#[derive(Clone, Copy)]
struct MemoryOption {
    tile: bool,
    offload: bool,
}

impl Planner<'_> {
    /// The cheapest of diffusers' memory options the workload does not use yet that makes it
    /// fit; `None` for a workload that is not a diffusion inference, or when none fits.
    pub fn find_pipeline_option(&mut self) -> Result<Option<PipelineAnswer>, Stop> {
        let Some(diffusion) = &self.original.diffusion else { return Ok(None) };
        if self.original.training.is_some() {
            return Ok(None);
        }
        // A tile decodes a smaller image only when the image is larger than the tile.
        let (tile_w, tile_h) = DEFAULT_VAE_TILE;
        let can_tile = diffusion.vae.is_some()
            && diffusion.vae_tile.is_none()
            && (diffusion.width > tile_w || diffusion.height > tile_h);
        let can_offload = diffusion.offload == DiffusionOffload::None;
        let options = [
            MemoryOption { tile: true, offload: false },
            MemoryOption { tile: false, offload: true },
            MemoryOption { tile: true, offload: true },
        ];
        let spec = self.spec.clone();
        for option in options {
            if (option.tile && !can_tile) || (option.offload && !can_offload) {
                continue;
            }
            if let Some(diffusion) = self.workload_mut().diffusion.as_mut() {
                if option.tile {
                    diffusion.vae_tile = Some(DEFAULT_VAE_TILE);
                }
                if option.offload {
                    diffusion.offload = DiffusionOffload::Model { loaded_on_device: false };
                }
            }
            let verdict = self.verdict();
            self.reset(&spec);
            let verdict = verdict?;
            if verdict.fits() {
                let change = match (option.offload, option.tile) {
                    (true, true) => "offload model, vae_tiling true",
                    (true, false) => "offload model",
                    _ => "vae_tiling true",
                };
                return Ok(Some(PipelineAnswer { change: change.to_string(), at: verdict }));
            }
        }
        Ok(None)
    }
}
