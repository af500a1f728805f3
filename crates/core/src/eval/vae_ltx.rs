//! The 3D VAE decoder of LTX-Video (diffusers `AutoencoderKLLTXVideo`), its tensors replayed
//! through the caching allocator (`allocator.rs`) in the order diffusers creates and drops
//! them. Unlike the causal decoders beside it, it decodes every latent frame in one call.
//!
//! Read in diffusers (huggingface/diffusers at 58eb52c, `models/autoencoders/
//! autoencoder_kl_ltx.py`, and `scripts/convert_ltx_to_diffusers.py` `get_vae_config` for each
//! release's decoder):
//! - `_decode` runs `LTXVideoDecoder3d` on all the latents (128 channels, 32 × 32 pixels and 8
//!   frames to a latent, the first frame alone) unless tiling or framewise decoding is enabled;
//! - the decoder is `conv_in`, a mid block of ResNet blocks, up blocks (a channel-changing
//!   ResNet block where the channels change, an upsampler, ResNet blocks), `norm_out`, SiLU
//!   and `conv_out` to 3 × 4 × 4 channels, unfolded into 4 × 4 pixels (`reshape`, `permute`,
//!   `flatten`: a copy). 0.9.0: channels 512 at the latents, up blocks of 512, 512 (2× up),
//!   256 (2× up) and 128 (2× up). 0.9.1 and 0.9.5 to 0.9.8: 1024 at the latents, then 512, 256
//!   and 128, each up block opening with a residual 2× upsampler, and every ResNet block and
//!   `norm_out` scaled and shifted by the decode timestep's embedding; 0.9.1's up-block ResNet
//!   blocks also add per-channel spatial noise;
//! - an upsampler convolves to 8× (0.9.0) or 4× (residual) the channels and moves them into
//!   2 × 2 × 2 frames and pixels (a copy), dropping the first frame (a view of the copy: the
//!   copy lives until the next block replaces it); the residual one also adds its input, moved
//!   the same way (a copy) and repeated to the output's channels (another);
//! - a ResNet block holds its input for the residual; its `RMSNorm`s compute the variance of an
//!   fp32 copy (`to(torch.float32).pow(2)`: two fp32 tensors), then multiply the 16-bit input by
//!   it (an fp32 product) and cast back; SiLU is not in place; a channel-changing block adds a
//!   `LayerNorm` of its input and a 1 × 1 shortcut convolution (its concatenation with empty
//!   pads copies the input);
//! - the decoder is not causal: a convolution of temporal kernel 3 repeats the first and last
//!   frames and concatenates them around its input, F + 2 frames.
//!
//! Under `enable_tiling` (`tiled_decode`) a video wider or taller than a tile (512 pixels) is
//! decoded tile by tile, every frame of a tile at once: tiles of 16 latents start every 14 (448
//! pixels, `tile_sample_stride`), every decoded tile is kept until the tiles are blended, each
//! row's kept parts (448 pixels of each tile) are concatenated, then the rows. Only the last
//! tile of each size is replayed through the decoder; the outputs of the tiles before it are
//! allocated together (a tile's transients do not depend on where it lies).
//!
//! Tensors of one value per position (a norm's variance, `LayerNorm`'s statistics) and the
//! timestep embedding are not replayed (under 1 % of the peak); nor are cuDNN's workspaces (the
//! library's choice, as in `vae_wan.rs`).

use super::allocator::{CachingAllocator, Tensor};
use super::calc::Overflow;
use super::vae_blocks::{At, Plane, Replay, Replays, VideoLatents, decode_tiles, tiles};
use crate::hir::LtxVae;
use crate::ratio::Ratio;

/// The latents' channels (`latent_channels`).
const LATENT_CHANNELS: u64 = 128;
/// Pixels per latent on a side: three 2× upsamples and the 4 × 4 patch (`patch_size` 4).
pub(crate) const SPATIAL_FACTOR: u64 = 32;
/// `conv_out`'s channels: 3 colours for each pixel of the 4 × 4 patch.
const OUT_CHANNELS: u64 = 3 * 4 * 4;

/// How an up block doubles frames and pixels.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Upsample {
    None,
    /// `LTXVideoUpsampler3d` with `residual` false and `upscale_factor` 1.
    Plain,
    /// `residual` true and `upscale_factor` 2: half the input's channels out.
    Residual,
}

/// An up block: its input and output channels as multiples of the base, its upsampler and its
/// ResNet blocks after it.
struct UpBlock {
    input: u64,
    output: u64,
    upsample: Upsample,
    resnets: usize,
}

/// A release's decoder (`get_vae_config`, reversed as `LTXVideoDecoder3d.__init__` reverses
/// it): `conv_in`'s channels as a multiple of the base, the mid block's ResNet blocks, the up
/// blocks, and whether the up blocks' ResNet blocks inject noise.
struct Layout {
    mid: u64,
    mid_resnets: usize,
    up: [UpBlock; 4],
    noise: bool,
}

const fn up(input: u64, output: u64, upsample: Upsample, resnets: usize) -> UpBlock {
    UpBlock { input, output, upsample, resnets }
}

/// No up block (0.9.1 and later have three).
const NONE: UpBlock = up(0, 0, Upsample::None, 0);

fn layout(version: LtxVae) -> Layout {
    use Upsample::{Plain, Residual};
    match version {
        // decoder_block_out_channels (128, 256, 512, 512), decoder_layers_per_block
        // (4, 3, 3, 3, 4), decoder_spatio_temporal_scaling (True, True, True, False).
        LtxVae::V090 => Layout {
            mid: 4,
            mid_resnets: 4,
            up: [
                up(4, 4, Upsample::None, 3),
                up(4, 4, Plain, 3),
                up(4, 2, Plain, 3),
                up(2, 1, Plain, 4),
            ],
            noise: false,
        },
        // decoder_block_out_channels (256, 512, 1024) halved by upsample_factor 2,
        // decoder_layers_per_block (5, 6, 7, 8), decoder_inject_noise (True, True, True, False).
        LtxVae::V091 => Layout {
            mid: 8,
            mid_resnets: 8,
            up: [up(8, 4, Residual, 7), up(4, 2, Residual, 6), up(2, 1, Residual, 5), NONE],
            noise: true,
        },
        // 0.9.5 to 0.9.8: decoder_layers_per_block (5, 5, 5, 5), no noise.
        LtxVae::V095 => Layout {
            mid: 8,
            mid_resnets: 5,
            up: [up(8, 4, Residual, 5), up(4, 2, Residual, 5), up(2, 1, Residual, 5), NONE],
            noise: false,
        },
    }
}

/// A tile starts 7/8 of a tile after the one before (`tile_sample_stride` 448 of
/// `tile_sample_min` 512 pixels, diffusers' defaults).
const TILE_STEP: (u64, u64) = (7, 8);

struct Decoder<'a> {
    replay: Replay<'a>,
    videos: u64,
    /// The ResNet blocks and `norm_out` are scaled and shifted by the timestep's embedding.
    timestep: bool,
}

impl<'a> Replays<'a> for Decoder<'a> {
    fn replay(&mut self) -> &mut Replay<'a> {
        &mut self.replay
    }
}

impl Decoder<'_> {
    fn tensor(&mut self, at: At) -> Result<Tensor, Overflow> {
        self.replay.video(self.videos, at)
    }

    fn fp32(&mut self, at: At) -> Result<Tensor, Overflow> {
        self.replay.video_elements(self.videos, at, Ratio::int(4))
    }

    fn free(&mut self, tensor: Tensor) {
        self.replay.free(tensor);
    }

    /// `LTXVideoCausalConv3d` of temporal kernel 3, not causal, over `input` (not consumed):
    /// the first and last frames repeated, their concatenation around the input, the output.
    fn conv(&mut self, input: At, out: u64) -> Result<(Tensor, At), Overflow> {
        let edge = At { frames: 1, ..input };
        let first = self.tensor(edge)?;
        let last = self.tensor(edge)?;
        let padded = self.tensor(At { frames: input.frames + 2, ..input })?;
        let at = At { channels: out, ..input };
        let output = self.tensor(at)?;
        self.free(padded);
        self.free(first);
        self.free(last);
        Ok((output, at))
    }

    /// diffusers `RMSNorm` without weights over `input` (not consumed): a 16-bit input's fp32
    /// copy and its square for the variance, then the fp32 product and its cast back; an fp32
    /// input is its own copy and cast.
    fn rms_norm(&mut self, input: At) -> Result<Tensor, Overflow> {
        if self.replay.element >= Ratio::int(4) {
            let squared = self.tensor(input)?;
            self.free(squared);
            return self.tensor(input);
        }
        let upcast = self.fp32(input)?;
        let squared = self.fp32(input)?;
        self.free(upcast);
        self.free(squared);
        let product = self.fp32(input)?;
        let cast = self.tensor(input)?;
        self.free(product);
        Ok(cast)
    }

    /// `hidden_states * (1 + scale) + shift` under timestep conditioning, consuming `input`;
    /// without it, `input` itself.
    fn modulate(&mut self, input: Tensor, at: At) -> Result<Tensor, Overflow> {
        if !self.timestep {
            return Ok(input);
        }
        let product = self.tensor(at)?;
        let sum = self.tensor(at)?;
        self.free(product);
        self.free(input);
        Ok(sum)
    }

    /// 0.9.1's noise injection after a convolution, consuming `input`: the spatial noise times
    /// the per-channel scale (channels × pixels, no frames), then the sum.
    fn inject_noise(&mut self, input: Tensor, at: At, noise: bool) -> Result<Tensor, Overflow> {
        if !noise {
            return Ok(input);
        }
        let scaled = self.tensor(At { frames: 1, ..at })?;
        let sum = self.tensor(at)?;
        self.free(scaled);
        self.free(input);
        Ok(sum)
    }

    /// `LTXVideoResnetBlock3d.forward`; the caller keeps `input` alive until it returns.
    fn resnet(&mut self, input: At, out: u64, noise: bool) -> Result<(Tensor, At), Overflow> {
        let norm = self.rms_norm(input)?;
        let norm = self.modulate(norm, input)?;
        let act = self.tensor(input)?;
        self.free(norm);
        let (conv, at) = self.conv(input, out)?;
        self.free(act);
        let conv = self.inject_noise(conv, at, noise)?;
        let norm = self.rms_norm(at)?;
        self.free(conv);
        let norm = self.modulate(norm, at)?;
        let act = self.tensor(at)?;
        self.free(norm);
        let (conv, _) = self.conv(at, out)?;
        self.free(act);
        let conv = self.inject_noise(conv, at, noise)?;
        let shortcut = if input.channels == out {
            None
        } else {
            // `norm3` (LayerNorm, in the input's type), then the 1 × 1 `conv_shortcut`.
            let normed = self.tensor(input)?;
            let copy = self.tensor(input)?;
            let short = self.tensor(at)?;
            self.free(copy);
            self.free(normed);
            Some(short)
        };
        let sum = self.tensor(at)?;
        self.free(conv);
        if let Some(short) = shortcut {
            self.free(short);
        }
        Ok((sum, at))
    }

    /// `LTXVideoUpsampler3d` over `at` (the caller frees its input after): the output and the
    /// frames and plane it stands for (one frame fewer than its storage holds).
    fn upsample(&mut self, at: At, kind: Upsample) -> Result<(Tensor, At), Overflow> {
        let doubled = At { frames: at.frames * 2, plane: at.plane.doubled(), ..at };
        if kind == Upsample::Plain {
            let (conv, _) = self.conv(at, at.channels * 8)?;
            let moved = self.tensor(doubled)?;
            self.free(conv);
            return Ok((moved, At { frames: doubled.frames - 1, ..doubled }));
        }
        // The residual: the input moved into frames and pixels, then repeated to the output's
        // channels (4× the input's elements).
        let moved = self.tensor(at)?;
        let repeated = self.tensor(At { channels: at.channels * 4, ..at })?;
        self.free(moved);
        let (conv, _) = self.conv(at, at.channels * 4)?;
        let unfolded = self.tensor(At { channels: at.channels * 4, ..at })?;
        self.free(conv);
        let out = At { channels: at.channels / 2, frames: doubled.frames - 1, ..doubled };
        let sum = self.tensor(out)?;
        self.free(unfolded);
        self.free(repeated);
        Ok((sum, out))
    }

    /// `LTXVideoDecoder3d.forward` over `latents`: the decoded video. The forward loop's
    /// variable holds each block's input until the block returns, while the block rebinds its
    /// own (`hidden_states = up_block(hidden_states, temb)`).
    fn decode(&mut self, latents: At, base: u64, layout: &Layout) -> Result<Tensor, Overflow> {
        let (mut x, mut at) = self.conv(latents, base * layout.mid)?;
        let mid = vec![Op::Resnet(base * layout.mid, false); layout.mid_resnets];
        (x, at) = self.block(x, at, &mid)?;
        for block in layout.up.iter().filter(|b| b.output > 0) {
            let mut ops = Vec::new();
            if block.input != block.output && block.upsample != Upsample::Residual {
                ops.push(Op::Resnet(base * block.output, layout.noise));
            }
            if block.upsample != Upsample::None {
                ops.push(Op::Upsample(block.upsample));
            }
            ops.extend(vec![Op::Resnet(base * block.output, layout.noise); block.resnets]);
            (x, at) = self.block(x, at, &ops)?;
            debug_assert_eq!(at.channels, base * block.output);
        }
        let norm = self.rms_norm(at)?;
        self.free(x);
        let norm = self.modulate(norm, at)?;
        let act = self.tensor(at)?;
        self.free(norm);
        let (conv, out) = self.conv(at, OUT_CHANNELS)?;
        self.free(act);
        let unfolded = self.tensor(out)?;
        self.free(conv);
        Ok(unfolded)
    }

    /// A block's operations in turn over `input`, each result replacing the one before; the
    /// input itself is freed when the block returns.
    fn block(&mut self, input: Tensor, at: At, ops: &[Op]) -> Result<(Tensor, At), Overflow> {
        let mut current: Option<Tensor> = None;
        let mut at = at;
        for op in ops {
            let (result, result_at) = match *op {
                Op::Resnet(out, noise) => self.resnet(at, out, noise)?,
                Op::Upsample(kind) => self.upsample(at, kind)?,
            };
            self.replay.replace(&mut current, result);
            at = result_at;
        }
        Ok((self.replay.block_returns(input, current), at))
    }
}

impl Decoder<'_> {
    /// `tiled_decode` of `latents` in tiles of `tile` pixels (height, width): the video.
    fn tiled(
        &mut self,
        latents: At,
        tile: (u64, u64),
        base: u64,
        layout: &Layout,
    ) -> Result<Tensor, Overflow> {
        let plan = tiles(latents.plane, tile, SPATIAL_FACTOR, TILE_STEP);
        let frames = output_frames(latents.frames);
        let held = decode_tiles(
            self,
            &plan,
            |decoder, plane| decoder.tile_video(At { plane, ..latents }, frames),
            |decoder, plane| decoder.decode(At { plane, ..latents }, base, layout),
        )?;
        let videos = self.videos;
        let spans = (plan.rows.as_slice(), plan.columns.as_slice());
        self.replay.join_tiles((videos, frames), spans, plan.step, SPATIAL_FACTOR, held)
    }

    /// Bytes of a decoded tile of `at`'s plane: `frames` frames of 3 colours.
    fn tile_video(&self, at: At, frames: u64) -> Result<u64, Overflow> {
        let (h, w) = (at.plane.height * SPATIAL_FACTOR, at.plane.width * SPATIAL_FACTOR);
        self.replay.rgb_bytes(self.videos, frames, h, w)
    }
}

/// An operation of a block: a ResNet block to its output channels (with noise injection or
/// not), or an upsampler.
#[derive(Clone, Copy)]
enum Op {
    Resnet(u64, bool),
    Upsample(Upsample),
}

/// Replays one decode of `shape` by `version`'s decoder through `alloc`, whose cache may already
/// hold freed blocks of earlier phases: the latents (held by the pipeline throughout), the
/// decoder, its output.
pub(crate) fn replay(
    alloc: &mut CachingAllocator,
    shape: &VideoLatents,
    version: LtxVae,
) -> Result<(), Overflow> {
    let plane =
        Plane { height: shape.height / SPATIAL_FACTOR, width: shape.width / SPATIAL_FACTOR };
    let layout = layout(version);
    let mut decoder = Decoder {
        replay: Replay { alloc, images: 1, element: shape.element, workspaces: true },
        videos: shape.videos,
        timestep: version != LtxVae::V090,
    };
    let latents_at = At { channels: LATENT_CHANNELS, frames: shape.latent_frames, plane };
    let latents = decoder.tensor(latents_at)?;
    // diffusers tiles when the latents are wider or taller than a tile.
    let tile = shape.tile.filter(|&(height, width)| {
        plane.height > height / SPATIAL_FACTOR || plane.width > width / SPATIAL_FACTOR
    });
    let video = match tile {
        Some(tile) => decoder.tiled(latents_at, tile, shape.base_channels, &layout)?,
        None => decoder.decode(latents_at, shape.base_channels, &layout)?,
    };
    decoder.free(video);
    decoder.free(latents);
    Ok(())
}

/// Output frames of `latent_frames`: the first alone, then eight per latent frame.
pub(crate) fn output_frames(latent_frames: u64) -> u64 {
    latent_frames.saturating_sub(1) * 8 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peak(version: LtxVae, latent_frames: u64, latents: (u64, u64), element: i128) -> u64 {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, &video(latent_frames, latents, element, None), version).unwrap();
        alloc.peak_requested().0
    }

    /// A video of `latent_frames` frames of `latents` (height, width) latents.
    fn video(
        latent_frames: u64,
        latents: (u64, u64),
        element: i128,
        tile: Option<(u64, u64)>,
    ) -> VideoLatents {
        VideoLatents {
            videos: 1,
            latent_frames,
            height: latents.0 * SPATIAL_FACTOR,
            width: latents.1 * SPATIAL_FACTOR,
            tile,
            base_channels: 128,
            element: Ratio::int(element),
        }
    }

    /// The reference figures are the largest sum of live tensors diffusers' own decoder
    /// (`AutoencoderKLLTXVideo` built from `get_vae_config(version)`, diffusers 0.42.1) creates
    /// while decoding random latents on the CPU, every tensor an operator returns counted
    /// until Python drops its storage (`tools/decode-peak.py`), plus the latents the replay
    /// holds beside the decoder (128 channels × frames × plane × the element). They are
    /// compared with the replay's requested bytes (no allocator rounding). The replay leaves
    /// out the tensors of one value per position and the timestep embedding, so it may fall
    /// short by a little (under 0.1 %); 0.9.0's decoder has none at its peak and matches to
    /// the byte.
    fn close(replayed: u64, reference: u64, latents: u64) {
        let reference = reference + latents;
        let low = reference - reference / 1000;
        assert!(
            (low..=reference).contains(&replayed),
            "replayed {replayed} B, reference {reference} B"
        );
    }

    #[test]
    fn the_090_decoder_peaks_as_diffusers_does() {
        assert_eq!(peak(LtxVae::V090, 2, (2, 3), 2), 5_652_480 + 128 * 2 * 6 * 2);
        assert_eq!(peak(LtxVae::V090, 3, (4, 4), 2), 28_180_480 + 128 * 3 * 16 * 2);
        assert_eq!(peak(LtxVae::V090, 3, (8, 12), 2), 169_082_880 + 128 * 3 * 96 * 2);
        assert_eq!(peak(LtxVae::V090, 2, (2, 3), 4), 8_552_448 + 128 * 2 * 6 * 4);
    }

    #[test]
    fn the_timestep_conditioned_decoders_peak_as_diffusers_does() {
        close(peak(LtxVae::V091, 2, (2, 3), 2), 5_556_994, 128 * 2 * 6 * 2);
        close(peak(LtxVae::V095, 2, (2, 3), 2), 5_556_226, 128 * 2 * 6 * 2);
        close(peak(LtxVae::V095, 3, (8, 12), 2), 167_512_066, 128 * 3 * 96 * 2);
        close(peak(LtxVae::V095, 2, (2, 3), 4), 8_359_940, 128 * 2 * 6 * 4);
    }

    /// Tiled (`enable_tiling`, tiles of 512 pixels every 448), against the same counter over
    /// diffusers' own tiled decode of 2 latent frames of 20 × 18 (`tools/decode-peak.py ltx
    /// 0.9.0 2 20 18 --tiling`: 241,172,480 B): rows of 16 and 6 latents, columns of 16 and 4,
    /// the first tile decoded while nothing else is, each later one beside the tiles before.
    #[test]
    fn a_tiled_decode_peaks_as_diffusers_does() {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, &video(2, (20, 18), 2, Some((512, 512))), LtxVae::V090).unwrap();
        let latents = 128 * 2 * 20 * 18 * 2;
        assert_eq!(alloc.peak_requested().0, 241_172_480 + latents);
    }

    /// The peak is a ResNet block of the last up block: its input, the first convolution's
    /// output and the two fp32 tensors of the second norm's variance, six tensors of 128
    /// channels at the output's frames and a quarter of its pixels (a hand count).
    #[test]
    fn a_16_bit_decode_peaks_at_six_tensors_of_the_last_up_block() {
        let (frames, latents) = (3, (8, 12));
        let unit = 128 * output_frames(frames) * (latents.0 * 8) * (latents.1 * 8) * 2;
        let replayed = peak(LtxVae::V090, frames, latents, 2);
        let latents_bytes = 128 * frames * latents.0 * latents.1 * 2;
        assert!(replayed >= 6 * unit + latents_bytes, "{replayed} against {}", 6 * unit);
        assert!(replayed < 7 * unit, "{replayed} against {}", 7 * unit);
    }

    #[test]
    fn output_frames_are_eight_per_latent_frame_after_the_first() {
        assert_eq!(output_frames(1), 1);
        assert_eq!(output_frames(16), 121);
        assert_eq!(output_frames(21), 161);
    }
}
