//! The VAE encoder's tensors, in the order diffusers' `AutoencoderKL` encoder creates and drops
//! them under `torch.no_grad()`, replayed through the caching allocator (`allocator.rs`): the
//! allocated peak and what the encode leaves reserved. Diffusion training encodes every batch's
//! pixels this way before the denoiser runs (`diffusion_training.rs`).
//!
//! The structure (huggingface/diffusers at 04957c2: `models/autoencoders/vae.py` `Encoder`,
//! `models/unets/unet_2d_blocks.py` `DownEncoderBlock2D` and `UNetMidBlock2D`,
//! `models/downsampling.py` `Downsample2D`; the shared blocks in `vae_blocks.rs`):
//! - `conv_in` from the 3 pixel channels to c at full resolution, where c is the base channel
//!   count (`block_out_channels` [c, 2c, 4c, 4c], c = 128, `layers_per_block` 2 in the SD, SDXL,
//!   SD3 and FLUX autoencoders);
//! - four down blocks with c, 2c, 4c and 4c channels, each `layers_per_block` ResNet blocks (the
//!   first takes the previous block's channels), the first three followed by `Downsample2D`
//!   with `padding=0`: `F.pad` by one row and column (a new tensor), then a stride-2 3 × 3
//!   convolution;
//! - the mid block at an eighth of the resolution: a ResNet block, the single-head attention
//!   over those positions (4c wide), another ResNet block;
//! - `conv_norm_out` (GroupNorm), SiLU and `conv_out` to twice the latent channels (mean and
//!   log-variance). What follows (`quant_conv`, `DiagonalGaussianDistribution`'s sample, the
//!   scaling) works on latent-sized tensors, small-pool blocks under 1 MiB per image at 1024²,
//!   and is left out.
//!
//! The training scripts (diffusers `examples/dreambooth/train_dreambooth*.py`) move the
//! dataloader's fp32 pixels to the device and cast them to the VAE's type
//! (`batch["pixel_values"].to(dtype=...)`): both are live through the encode.
//!
//! Each convolution holds cuDNN's NHWC copies of its input and output while it runs
//! (`vae_blocks.rs`), and `Encoder.forward` rebinds `sample` to a block's output only when the
//! block returns, so each down block's input is held beside everything the block makes. In the
//! second full-resolution ResNet block's conv1 or conv2 the down block's input (`conv_in`'s
//! output), the ResNet block's input, the SiLU output, the convolution's output and the two
//! copies are alive together: 6c per pixel beside the pixels, the encoder's allocated peak.
//! Without cuDNN's copies the replay's tensors are diffusers' own: a CPU run of `AutoencoderKL`
//! (SDXL's configuration) under a counter of every storage an operator creates
//! (`tools/decode-peak.py`) peaks at the same bytes beside the pixels.

use super::allocator::{CachingAllocator, Tensor};
use super::calc::Overflow;
use super::vae_blocks::{Plane, Replay};
use crate::ratio::Ratio;

/// `block_out_channels` of the AutoencoderKL encoders above, as multiples of the base count.
const CHANNEL_MULTIPLIERS: [u64; 4] = [1, 2, 4, 4];
/// ResNet blocks per down block: `layers_per_block`.
const RESNETS_PER_DOWN_BLOCK: u64 = 2;
/// Pixel channels (RGB).
const PIXEL_CHANNELS: u64 = 3;

pub(crate) struct EncoderShape {
    /// Images encoded together (batch × frames).
    pub images: u64,
    /// Input pixels, height and width.
    pub height: u64,
    pub width: u64,
    pub base_channels: u64,
    /// Channels of a latent (4 for SD and SDXL, 16 for SD3 and FLUX); `conv_out` makes twice
    /// as many.
    pub latent_channels: u64,
    /// The encoder's activation element size (the VAE's type).
    pub element: Ratio,
}

/// `Downsample2D` with `padding=0`: the padded copy, then the stride-2 convolution's output.
fn downsample(
    replay: &mut Replay<'_>,
    input: Tensor,
    channels: u64,
    from: Plane,
) -> Result<Tensor, Overflow> {
    let padded = replay.tensor(channels, from.padded())?;
    let output = replay.conv(channels, from.padded(), channels, from.halved())?;
    replay.alloc.free(padded);
    replay.alloc.free(input);
    Ok(output)
}

/// Replays one encode of `shape` through `alloc`; every tensor is freed at the end (the latents
/// the denoiser then reads are left out, see above).
pub(crate) fn replay(alloc: &mut CachingAllocator, shape: &EncoderShape) -> Result<(), Overflow> {
    replay_with(alloc, shape, true)
}

/// [`replay`], with or without cuDNN's convolution copies (without them, the tensors diffusers
/// itself creates, as a CPU run shows them).
fn replay_with(
    alloc: &mut CachingAllocator,
    shape: &EncoderShape,
    workspaces: bool,
) -> Result<(), Overflow> {
    let mut replay = Replay { alloc, images: shape.images, element: shape.element, workspaces };
    let mut plane = Plane { height: shape.height, width: shape.width };
    let pixels = replay.elements(PIXEL_CHANNELS, plane, Ratio::int(4))?;
    let cast = if shape.element == Ratio::int(4) {
        None
    } else {
        Some(replay.tensor(PIXEL_CHANNELS, plane)?)
    };
    let base = shape.base_channels;
    // `Encoder.forward` rebinds `sample` to each block's output only when the block returns: a
    // block's input is held beside everything the block makes.
    let mut x = replay.conv(PIXEL_CHANNELS, plane, base, plane)?;
    let mut channels = base;
    for (stage, multiplier) in CHANNEL_MULTIPLIERS.iter().enumerate() {
        let out = base.checked_mul(*multiplier).ok_or(Overflow)?;
        let mut current = None;
        for _ in 0..RESNETS_PER_DOWN_BLOCK {
            let sum = replay.resnet_beside(channels, out, plane)?;
            replay.replace(&mut current, sum);
            channels = out;
        }
        if stage + 1 < CHANNEL_MULTIPLIERS.len() {
            let last = current.take().unwrap_or_else(|| unreachable!("two ResNet blocks"));
            let down = downsample(&mut replay, last, out, plane)?;
            replay.replace(&mut current, down);
            plane = plane.halved();
        }
        x = replay.block_returns(x, current);
    }
    let first = replay.resnet_beside(channels, channels, plane)?;
    let attended = replay.attention(first, channels, plane)?;
    let mid = replay.resnet(attended, channels, channels, plane)?;
    x = replay.block_returns(x, Some(mid));
    let norm = replay.tensor(channels, plane)?;
    let act = replay.tensor(channels, plane)?;
    replay.alloc.free(norm);
    replay.alloc.free(x);
    let moments = replay.conv(channels, plane, 2 * shape.latent_channels, plane)?;
    replay.alloc.free(act);
    replay.alloc.free(moments);
    if let Some(cast) = cast {
        replay.alloc.free(cast);
    }
    replay.alloc.free(pixels);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::MIB;

    /// SD 1.x's and SDXL's autoencoder (c = 128, 4 latent channels) over square images.
    fn sd_vae(images: u64, pixels: u64, element: i128) -> EncoderShape {
        EncoderShape {
            images,
            height: pixels,
            width: pixels,
            base_channels: 128,
            latent_channels: 4,
            element: Ratio::int(element),
        }
    }

    fn peaks(shape: &EncoderShape) -> (u64, u64) {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, shape).unwrap();
        (alloc.peak_allocated().0, alloc.peak_reserved().0)
    }

    #[test]
    fn sd_at_512_in_fp32_by_hand() {
        // A full-resolution tensor of 128 channels: 512² × 128 × 4 B = 128 MiB per image; the
        // fp32 pixels 512² × 3 × 4 B = 3 MiB.
        // Allocated: the second full-resolution ResNet block's conv1 (or conv2), the down block's
        // input, its own input, the SiLU output, the convolution's output and cuDNN's copies of
        // the last two: 6 × 128 MiB beside the pixels.
        // Reserved: the pixels take a 20 MiB segment (under kMinLargeAlloc); conv_in's output
        // 128 MiB and its workspace, copies of the pixels and the output, 131 MiB in 132 (rounded
        // to 2 MiB); the first ResNet block's norm1 takes that block, its SiLU a new 128 MiB
        // segment and conv1's workspace a new 256; the second block's conv1 finds the 256 MiB
        // block split by the first block's sum and output and takes another 256. Every later
        // tensor, the padded copy of the downsample (128 × 513² × 4 B, 128.5 MiB) included, fits
        // the cached blocks; conv_out's moments (8 × 64² × 4 B = 128 KiB) open a 2 MiB small-pool
        // segment.
        assert_eq!(
            peaks(&sd_vae(1, 512, 4)),
            ((3 + 6 * 128) * MIB, (20 + 128 + 132 + 128 + 2 * 256 + 2) * MIB)
        );
        // Two images: 256 MiB tensors; 6 MiB of pixels in a 20 MiB segment; conv_in's workspace
        // 6 + 256 = 262 MiB; the moments (256 KiB) 2 MiB.
        assert_eq!(
            peaks(&sd_vae(2, 512, 4)),
            ((6 + 6 * 256) * MIB, (20 + 256 + 262 + 256 + 2 * 512 + 2) * MIB)
        );
    }

    #[test]
    fn sdxl_at_1024_in_fp32_by_hand() {
        // 1024² × 128 × 4 B = 512 MiB per image; 12 MiB of pixels, a segment of their own
        // (above kMinLargeAlloc, rounded to 2 MiB); conv_in's workspace 12 + 512 MiB; the
        // moments (8 × 128² × 4 B = 512 KiB) 2 MiB; the rest as at 512².
        assert_eq!(
            peaks(&sd_vae(1, 1024, 4)),
            ((12 + 6 * 512) * MIB, (12 + 512 + 524 + 512 + 2 * 1024 + 2) * MIB)
        );
        // Two images: 1 GiB tensors, 24 MiB of pixels, the moments (exactly 1 MiB, still the
        // small pool) 2 MiB.
        assert_eq!(
            peaks(&sd_vae(2, 1024, 4)),
            ((24 + 6 * 1024) * MIB, (24 + 1024 + 1048 + 1024 + 2 * 2048 + 2) * MIB)
        );
    }

    #[test]
    fn a_16_bit_encoder_holds_the_cast_pixels_too() {
        // fp16 at 512²: 64 MiB tensors, the fp32 pixels (3 MiB) and their fp16 copy (1.5 MiB).
        assert_eq!(peaks(&sd_vae(1, 512, 2)).0, 3 * MIB + 3 * MIB / 2 + 6 * 64 * MIB);
    }

    /// Without cuDNN's copies, the replay against diffusers' own encoder (`AutoencoderKL` with
    /// SDXL's configuration, diffusers 0.42.1) encoding random 128 × 128 pixels on the CPU, every
    /// tensor an operator returns counted until Python drops it (`tools/decode-peak.py kl - 1 16
    /// 16`: 20,971,520 B in bf16, 41,943,040 B in fp32), beside what the replay adds, the
    /// pipeline's fp32 pixels (128² × 3 × 4 B) and their 16-bit cast.
    #[test]
    fn the_encoder_s_tensors_are_diffusers_own() {
        let pixels = 128 * 128 * 3 * 4;
        for (element, reference, cast) in [(2, 20_971_520, pixels / 2), (4, 41_943_040, 0)] {
            let mut alloc = CachingAllocator::new();
            replay_with(&mut alloc, &sd_vae(1, 128, element), false).unwrap();
            assert_eq!(alloc.peak_requested().0, reference + pixels + cast, "element {element}");
        }
    }

    #[test]
    fn huge_shapes_overflow_instead_of_wrapping() {
        let mut alloc = CachingAllocator::new();
        assert!(replay(&mut alloc, &sd_vae(u64::MAX / 2, 1024, 4)).is_err());
    }
}
