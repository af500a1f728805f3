//! The VAE decoder's tensors, in the order diffusers' `AutoencoderKL` decoder creates and drops
//! them, replayed through the caching allocator (`allocator.rs`): its allocated peak and what its
//! resolution stages leave reserved.
//!
//! The structure (diffusers `models/autoencoders/vae.py` `Decoder`, `resnet.py`
//! `ResnetBlock2D`, `unet_2d_blocks.py` `UNetMidBlock2D` and `UpDecoderBlock2D`,
//! `attention_processor.py` `AttnProcessor2_0`, `upsampling.py` `Upsample2D`; read at v0.34):
//! - `conv_in` to 4c channels at the latent resolution, where c is the base channel count and
//!   the SD, SDXL, SD3 and FLUX autoencoders have `block_out_channels` [c, 2c, 4c, 4c] with
//!   c = 128 and `layers_per_block` 2;
//! - the mid block: a ResNet block, a single-head self-attention over the latent positions
//!   (`attention_head_dim` = 4c = 512), another ResNet block (replayed in `vae_blocks.rs`, with
//!   the memory-efficient kernel's fp32 output accumulator for a 16-bit decoder);
//! - four up blocks with 4c, 4c, 2c and c channels, each `layers_per_block + 1` = 3 ResNet
//!   blocks, the first three followed by a nearest 2× upsample and a 3 × 3 convolution (no fp32
//!   round trip for bf16 since diffusers 0.31 on PyTorch 2.1 or later, PR #9480);
//! - `conv_norm_out` (GroupNorm), SiLU and `conv_out` to 3 channels.
//!
//! A ResNet block (`vae_blocks.rs`) holds its input for the residual while its norm, SiLU and
//! convolution outputs come and go. At the first full-resolution block the input has 2c
//! channels and its norm and SiLU outputs are alive together: 3 × 2c per pixel, the
//! decoder's allocated peak. cuDNN's convolution workspaces are not replayed (their sizes are
//! the library's choice, not in a source read here).

use super::allocator::{CachingAllocator, Tensor};
use super::calc::Overflow;
use super::vae_blocks::{Plane, Replay};
use crate::ratio::Ratio;

/// `block_out_channels` of the AutoencoderKL decoders above, as multiples of the base count.
const CHANNEL_MULTIPLIERS: [u64; 4] = [1, 2, 4, 4];
/// ResNet blocks per up block: `layers_per_block` (2) + 1.
const RESNETS_PER_UP_BLOCK: u64 = 3;
/// The VAE's spatial factor: three 2× upsamples.
pub(crate) const SPATIAL_FACTOR: u64 = 8;

pub(crate) struct DecoderShape {
    /// Images decoded together (batch × frames).
    pub images: u64,
    /// Output pixels, height and width.
    pub height: u64,
    pub width: u64,
    pub base_channels: u64,
    /// The decoder's activation element size.
    pub element: Ratio,
}

/// The decoder's own block: `Upsample2D`, nearest 2× then a 3 × 3 convolution with the same
/// channels.
fn upsample(
    replay: &mut Replay<'_>,
    input: Tensor,
    channels: u64,
    to: Plane,
) -> Result<Tensor, Overflow> {
    let nearest = replay.tensor(channels, to)?;
    let output = replay.tensor(channels, to)?;
    replay.alloc.free(nearest);
    replay.alloc.free(input);
    Ok(output)
}

/// Replays one decode of `shape` through `alloc`, whose cache may already hold freed blocks of
/// earlier phases. The latents the pipeline holds (4 or 16 channels at 1/64 of the pixels, under
/// 1 MiB at 1024²) live in the small pool and are left out; the decoded image is freed at the
/// end, as the pipeline's post-processing copies it to the host.
pub(crate) fn replay(alloc: &mut CachingAllocator, shape: &DecoderShape) -> Result<(), Overflow> {
    let mut replay = Replay { alloc, images: shape.images, element: shape.element };
    let mut plane =
        Plane { height: shape.height / SPATIAL_FACTOR, width: shape.width / SPATIAL_FACTOR };
    let base = shape.base_channels;
    let top = base * CHANNEL_MULTIPLIERS[3];
    let mut x = replay.tensor(top, plane)?;
    x = replay.resnet(x, top, top, plane)?;
    x = replay.attention(x, top, plane)?;
    x = replay.resnet(x, top, top, plane)?;
    let mut channels = top;
    for (stage, multiplier) in CHANNEL_MULTIPLIERS.iter().rev().enumerate() {
        let out = base * multiplier;
        for _ in 0..RESNETS_PER_UP_BLOCK {
            x = replay.resnet(x, channels, out, plane)?;
            channels = out;
        }
        if stage + 1 < CHANNEL_MULTIPLIERS.len() {
            plane = plane.doubled();
            x = upsample(&mut replay, x, out, plane)?;
        }
    }
    let norm = replay.tensor(channels, plane)?;
    let act = replay.tensor(channels, plane)?;
    replay.alloc.free(norm);
    replay.alloc.free(x);
    let image = replay.tensor(3, plane)?;
    replay.alloc.free(act);
    replay.alloc.free(image);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{Bytes, MIB};

    fn flux(pixels: u64) -> DecoderShape {
        DecoderShape {
            images: 1,
            height: pixels,
            width: pixels,
            base_channels: 128,
            element: Ratio::int(2),
        }
    }

    #[test]
    fn flux_decode_at_1024_by_hand() {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, &flux(1024)).unwrap();
        // Allocated: the first full-resolution ResNet block's input, GroupNorm and SiLU outputs,
        // 256 channels × 1024² × 2 B = 512 MiB each: 6 × 128 channels per pixel.
        assert_eq!(alloc.peak_allocated().0, 3 * 512 * MIB);
        // Reserved: each stage's tensors are 2× or 4× the previous stage's largest, so no freed
        // block of an earlier stage serves them, and every stage's peak stays in the cache:
        // - 1024², 256 channels (512 MiB): the upsample's nearest and conv outputs, then the
        //   first block's norm beside its input: 3 × 512 MiB (its 128-channel tensors, 256 MiB,
        //   fit the blocks left by 512²);
        // - 512², 512 channels (256 MiB): input, norm and SiLU: 3 × 256 MiB, whose freed blocks
        //   then hold the 256-channel tensors two to a block;
        // - 256², 512 channels (64 MiB): a ResNet block's end, input, conv2 output, sum and
        //   quotient: 4 × 64 MiB;
        // - 128², 512 channels (16 MiB): the attention's input, norm, q, k and v, 5 × 16 MiB, then
        //   its fp32 output accumulator, 32 MiB, which no 16 MiB block holds.
        let stages = 3 * 512 + 3 * 256 + 4 * 64 + 5 * 16 + 32;
        assert_eq!(alloc.peak_reserved().0, stages * MIB);
    }

    #[test]
    fn sdxl_decode_upcast_to_fp32_at_1024_by_hand() {
        // diffusers' SDXL pipelines decode in fp32 with `force_upcast` (eval/diffusion.rs).
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, &DecoderShape { element: Ratio::int(4), ..flux(1024) }).unwrap();
        // 256 channels × 1024² × 4 B = 1 GiB each: input, GroupNorm and SiLU outputs.
        assert_eq!(alloc.peak_allocated().0, 3 * 1024 * MIB);
        // Every stage's tensors double, so each stage still needs segments of its own; at 128²
        // the attention's fp32 output is its own accumulator, and its five 32 MiB tensors
        // (input, norm, q, k, v; the output takes the norm's block) are the stage's peak.
        let stages = 3 * 1024 + 3 * 512 + 4 * 128 + 5 * 32;
        assert_eq!(alloc.peak_reserved().0, stages * MIB);
    }

    #[test]
    fn the_allocated_peak_scales_with_the_images_and_the_element() {
        let mut one = CachingAllocator::new();
        replay(&mut one, &flux(512)).unwrap();
        let mut four = CachingAllocator::new();
        replay(&mut four, &DecoderShape { images: 4, element: Ratio::int(4), ..flux(512) })
            .unwrap();
        // 3 × 256 × 512² × 2 B = 384 MiB for one bf16 image; 8 times that for four fp32 ones.
        assert_eq!(one.peak_allocated().0, 384 * MIB);
        assert_eq!(four.peak_allocated().0, 8 * 384 * MIB);
    }

    #[test]
    fn blocks_already_cached_serve_the_early_stages() {
        // A cache holding two freed 108 MiB blocks (a transformer step's MLP tensors) serves the
        // 16 and 64 MiB tensors of the latent-resolution stages, which then add no segment.
        let mut alloc = CachingAllocator::new();
        let a = alloc.alloc(Bytes(108 * MIB)).unwrap();
        let b = alloc.alloc(Bytes(108 * MIB)).unwrap();
        alloc.free(a);
        alloc.free(b);
        replay(&mut alloc, &flux(1024)).unwrap();
        assert!(alloc.peak_reserved().0 < (216 + 3 * 512 + 3 * 256 + 3 * 64 + 5 * 16 + 2) * MIB);
    }

    #[test]
    fn huge_shapes_overflow_instead_of_wrapping() {
        let mut alloc = CachingAllocator::new();
        let shape = DecoderShape { images: u64::MAX / 2, ..flux(1024) };
        assert!(replay(&mut alloc, &shape).is_err());
    }
}
