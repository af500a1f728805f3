//! Integration tests of vram-core, in one binary: every example, the formatter, the formulas,
//! the catalog and the generated schema. Expectations live in the fixtures' headers
//! (`# expect = "fits"`, `# codes = ["E040"]`); snapshots live in the top-level `snapshots/`.

mod block_swap;
mod catalog;
mod controlnet;
mod controlnet_training;
mod denoiser_experts;
mod denoiser_gather;
mod diffusion_attention;
mod diffusion_training;
mod dora;
mod driver_reserve;
mod encoder_decoder;
mod examples;
mod format;
mod formulas;
mod freeze_prefix;
mod galore;
mod grid;
mod header;
mod image_vae;
mod import;
mod kv_quantized;
mod layer_offload;
mod limits;
mod offload;
mod optimizers;
mod patch_pixels;
mod pipeline_loading;
mod planner;
mod preference;
mod properties;
mod reference;
mod serving;
mod step_memory;
mod support;
mod tidy;
mod video_hunyuan;
mod video_ltx;
mod video_mochi;
mod video_wan;
