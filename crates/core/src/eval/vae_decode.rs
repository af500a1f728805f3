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
//! convolution outputs come and go, and each convolution holds cuDNN's NHWC copies of its input
//! and output while it runs (`vae_blocks.rs`). The decoder's allocated peak is the convolution
//! of the last upsample: its 2c-channel input at half resolution (2c/4 per output pixel), the
//! nearest copy and the convolution's output (2c each) and the two NHWC copies (4c): 8.5c per
//! pixel, above the first full-resolution ResNet block's conv1 (2c input, 2c SiLU, c output
//! and a 3c workspace, 8c). Without cuDNN's copies the replay's tensors are diffusers' own: a
//! CPU run of `AutoencoderKL` (SDXL's configuration) under a counter of every storage an
//! operator creates (`tools/decode-peak.py`) peaks at the same bytes. That run's decoder also
//! holds each up block's input until the block returns (`sample = up_block(sample, ...)`),
//! which the replay frees after the block's first ResNet: without the copies the peak is the
//! same either way; with them, holding it adds the up block's input to the last upsample's
//! convolution (2 quarters more), which is not modelled yet (changes.md, "Open").

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
/// The allocated peak in quarters of a 2c-channel tensor at the output resolution: the last
/// upsample's input 1, its nearest copy 4, its convolution's output 4 and cuDNN's copies of
/// those two 8 (the module's documentation). `diffusion.rs` states the peak with it.
pub(crate) const PEAK_QUARTERS: u64 = 17;

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
    let output = replay.conv(channels, to, channels, to)?;
    replay.alloc.free(nearest);
    replay.alloc.free(input);
    Ok(output)
}

/// Replays one decode of `shape` through `alloc`, whose cache may already hold freed blocks of
/// earlier phases. The latents the pipeline holds (4 or 16 channels at 1/64 of the pixels, under
/// 1 MiB at 1024²) live in the small pool and are left out; the decoded image is freed at the
/// end, as the pipeline's post-processing copies it to the host.
pub(crate) fn replay(alloc: &mut CachingAllocator, shape: &DecoderShape) -> Result<(), Overflow> {
    replay_with(alloc, shape, true)
}

/// [`replay`], with or without cuDNN's convolution copies (without them, the tensors diffusers
/// itself creates, as a CPU run shows them).
fn replay_with(
    alloc: &mut CachingAllocator,
    shape: &DecoderShape,
    workspaces: bool,
) -> Result<(), Overflow> {
    let mut replay = Replay { alloc, images: shape.images, element: shape.element, workspaces };
    let mut plane =
        Plane { height: shape.height / SPATIAL_FACTOR, width: shape.width / SPATIAL_FACTOR };
    let base = shape.base_channels;
    let top = base * CHANNEL_MULTIPLIERS[3];
    // `conv_in` reads latents of 4 or 16 channels at 1/64 of the pixels: its workspace is a
    // copy of them and of its output, far below the full-resolution stage, and is left out.
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
    let image = replay.conv(channels, plane, 3, plane)?;
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

    /// The FLUX decode at 1024² in bf16 leaves 4208 MiB reserved (`flux_decode_at_1024_by_hand`).
    const FLUX_1024_RESERVED: u64 = 112 + 384 + 1408 + 2304;

    #[test]
    fn flux_decode_at_1024_by_hand() {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, &flux(1024)).unwrap();
        // Allocated: the convolution of the last upsample, 512² → 1024² at 256 channels. A
        // 256-channel tensor at 1024² in bf16 is 512 MiB; its input at 512² 128 MiB, the
        // nearest copy and the convolution's output 512 MiB each, cuDNN's NHWC copies of those
        // two 1024 MiB: 128 + 512 + 512 + 1024 = 2176 MiB (17 quarters of 512 MiB).
        assert_eq!(alloc.peak_allocated().0, 2176 * MIB);
        // Reserved: each stage's tensors are 4× the previous stage's, so its peak takes
        // segments of its own that stay in the cache:
        // - 128², 512 channels (16 MiB): the first ResNet block's input, norm and SiLU, 3 × 16,
        //   and conv1's workspace (two copies), 32; the attention's input, norm, q, k and v fit
        //   those blocks, its fp32 output accumulator (32) does not: 3 × 16 + 2 × 32 = 112;
        // - 256², 512 channels (64 MiB): the upsample's nearest copy and output, 2 × 64, its
        //   workspace 128; the first block's conv1 finds its 128 MiB workspace block split by
        //   the SiLU and the output and takes another: 2 × 64 + 2 × 128 = 384;
        // - 512² (256 MiB at 512 channels): the upsample's nearest copy and output 2 × 256, its
        //   workspace 512; the first block (512 → 256 channels) has conv1's workspace hold a
        //   copy of its SiLU output (256) and of its 128 MiB output, 384, which no free block
        //   holds: 2 × 256 + 512 + 384 = 1408;
        // - 1024² (512 MiB at 256 channels): the nearest copy takes 512²'s 512 MiB block, the
        //   output 512 and the workspace 1024 are new, and the first block's conv1 workspace,
        //   512 + 256 = 768, is new too: 512 + 1024 + 768 = 2304.
        assert_eq!(alloc.peak_reserved().0, FLUX_1024_RESERVED * MIB);
    }

    #[test]
    fn sdxl_decode_upcast_to_fp32_at_1024_by_hand() {
        // diffusers' SDXL pipelines decode in fp32 with `force_upcast` (eval/diffusion.rs).
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, &DecoderShape { element: Ratio::int(4), ..flux(1024) }).unwrap();
        // Every tensor doubles: 256 + 1024 + 1024 + 2048 MiB at the last upsample's
        // convolution.
        assert_eq!(alloc.peak_allocated().0, 2 * 2176 * MIB);
        // The segments double with them. At 128² the attention's output is its own fp32
        // accumulator, and the second 64 MiB segment is the second ResNet block's conv1
        // workspace instead (the accumulator's in bf16): 3 × 32 + 2 × 64 = 2 × 112 MiB.
        assert_eq!(alloc.peak_reserved().0, 2 * FLUX_1024_RESERVED * MIB);
    }

    #[test]
    fn the_allocated_peak_scales_with_the_images_and_the_element() {
        let mut one = CachingAllocator::new();
        replay(&mut one, &flux(512)).unwrap();
        let mut four = CachingAllocator::new();
        replay(&mut four, &DecoderShape { images: 4, element: Ratio::int(4), ..flux(512) })
            .unwrap();
        // 17 quarters of 256 × 512² × 2 B (128 MiB) = 544 MiB for one bf16 image; 8 times
        // that for four fp32 ones.
        assert_eq!(one.peak_allocated().0, 544 * MIB);
        assert_eq!(four.peak_allocated().0, 8 * 544 * MIB);
    }

    #[test]
    fn the_stated_peak_is_the_replayed_one() {
        // `diffusion.rs` states 17 quarters of 2c channels per pixel; the replay must agree
        // across shapes, channel counts, batches and elements.
        for (images, height, width, base_channels, element) in [
            (1, 1024, 1024, 128, 2_u64),
            (2, 768, 1344, 128, 4),
            (3, 512, 512, 64, 2),
            (1, 2048, 1024, 128, 2),
        ] {
            let shape = DecoderShape {
                images,
                height,
                width,
                base_channels,
                element: Ratio::int(i128::from(element)),
            };
            let mut alloc = CachingAllocator::new();
            replay(&mut alloc, &shape).unwrap();
            let stated = images * height * width * PEAK_QUARTERS * 2 * base_channels * element / 4;
            assert_eq!(alloc.peak_allocated().0, stated, "{height} × {width}, c = {base_channels}");
        }
    }

    #[test]
    fn blocks_already_cached_serve_the_early_stages() {
        // A cache holding two freed 108 MiB blocks (a transformer step's MLP tensors) serves the
        // 16, 32 and 64 MiB tensors of the latent-resolution stages, which then add no segment;
        // the 128 MiB workspaces at 256² still do.
        let mut alloc = CachingAllocator::new();
        let a = alloc.alloc(Bytes(108 * MIB)).unwrap();
        let b = alloc.alloc(Bytes(108 * MIB)).unwrap();
        alloc.free(a);
        alloc.free(b);
        replay(&mut alloc, &flux(1024)).unwrap();
        let saved = 3 * 16 + 2 * 32 + 2 * 64;
        assert_eq!(alloc.peak_reserved().0, (2 * 108 + FLUX_1024_RESERVED - saved) * MIB);
    }

    #[test]
    fn a_device_without_room_gets_back_the_earlier_stages() {
        // Pressed (unused segments returned before each new one), the peak reserve is the first
        // full-resolution block's conv1 workspace (768 MiB), beside the segments its live
        // tensors sit in: the block's input in the upsample output's 512 MiB segment, its SiLU in
        // the upsample workspace's 1,024 MiB one, its 256 MiB output in the 384 MiB segment of
        // 512². Every other segment went back: 4,208 − 2,688 = 1,520 MiB are releasable.
        let mut alloc = CachingAllocator::pressed();
        replay(&mut alloc, &flux(1024)).unwrap();
        assert_eq!(alloc.peak_reserved().0, (512 + 1024 + 384 + 768) * MIB);
        assert_eq!(alloc.peak_allocated().0, 2176 * MIB);
    }

    /// Without cuDNN's copies, the replay against diffusers' own decoder (`AutoencoderKL` with
    /// SDXL's configuration, diffusers 0.42.1) decoding random 16 × 16 latents on the CPU, every
    /// tensor an operator returns counted until Python drops it (`tools/decode-peak.py kl - 1 16
    /// 16`: 25,167,872 B in bf16, 50,348,032 B in fp32 with 16 latent channels), less what the
    /// replay leaves out, `post_quant_conv`'s latent-sized output (4 and 16 channels × 16²).
    #[test]
    fn the_decoder_s_tensors_are_diffusers_own() {
        let cases = [(2, 25_167_872, 4 * 256 * 2), (4, 50_348_032, 16 * 256 * 4)];
        for (element, reference, latents) in cases {
            let mut alloc = CachingAllocator::new();
            let shape = DecoderShape { element: Ratio::int(element), ..flux(128) };
            replay_with(&mut alloc, &shape, false).unwrap();
            assert_eq!(alloc.peak_requested().0, reference - latents, "element {element}");
        }
    }

    #[test]
    fn huge_shapes_overflow_instead_of_wrapping() {
        let mut alloc = CachingAllocator::new();
        let shape = DecoderShape { images: u64::MAX / 2, ..flux(1024) };
        assert!(replay(&mut alloc, &shape).is_err());
    }
}
