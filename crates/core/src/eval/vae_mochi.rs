//! The 3D VAE decoder of Mochi 1 (diffusers `AutoencoderKLMochi`), its tensors replayed through
//! the caching allocator (`allocator.rs`) in the order diffusers creates and drops them. Like
//! LTX-Video's, it decodes every latent frame in one call.
//!
//! Read in diffusers (huggingface/diffusers at 58eb52c, `models/autoencoders/
//! autoencoder_kl_mochi.py`, and `autoencoder_kl_cogvideox.py` for the convolution it borrows):
//! - `_decode` runs `MochiDecoder3D` on all the latents (12 channels, 8 × 8 pixels and 6 frames
//!   to a latent) unless tiling is enabled (framewise decoding is off by default), then drops
//!   the first five frames of its output (a view: the storage keeps all 6 × F frames);
//! - the decoder (the class defaults, Mochi 1 preview's configuration): `conv_in` (1 × 1 × 1)
//!   to 768 channels, a block of three ResNet blocks, three up blocks (768 → 512 with six ResNet
//!   blocks and 3× time, 512 → 256 with four and 2× time, 256 → 128 with three and no time; 2×
//!   space each), a block of three ResNet blocks at 128 channels, SiLU and `proj_out`, a
//!   `Linear` to 3 colours;
//! - an up block's ResNet blocks run at its input channels; its `proj` is a `Linear` to
//!   `out × time × 2 × 2` channels over the permuted (channels-last view) tensor, which
//!   `matmul` copies to fold it; the result is moved into frames and pixels (`permute`,
//!   `contiguous`: a copy); `proj_out` folds its input the same way;
//! - a ResNet block holds its input for the residual; its norms (`MochiChunkedGroupNorm3D`)
//!   move time beside the batch (`permute`, `flatten`: a view for one video, a copy for more),
//!   group-normalise 8 frames at a time, every chunk's result kept in a list until they are
//!   concatenated; `group_norm` makes a chunk contiguous first (a copy of the chunk for one
//!   video, whose chunks are strided views); SiLU is not in place;
//! - every convolution is `CogVideoXCausalConv3d` with `pad_mode="replicate"`: the input padded
//!   (`F.pad` replicate: two frames before, a pixel on each side), no cache, then
//!   `CogVideoXSafeConv3d`, which splits an input of more than 2^30 elements into
//!   `elements / 2^30 + 1` chunks along time, every chunk after the first concatenated with the
//!   last two frames before it (copies, all kept), convolves each (outputs kept) and
//!   concatenates the outputs;
//! - each block's input is held by the decoder's forward until the block returns.
//!
//! Under `enable_tiling` (`tiled_decode`) a video wider or taller than a tile (256 pixels) is
//! decoded tile by tile, every frame of a tile at once: tiles of 32 latents start every 24 (192
//! pixels), every decoded tile (its 6 × F frames) is kept until the tiles are blended, each
//! row's kept parts are concatenated, then the rows. Only the last tile of each size is
//! replayed through the decoder; the tiles before it are allocated together.
//!
//! `GroupNorm`'s statistics (one value per group) are not replayed; nor are cuDNN's workspaces
//! (the library's choice, as in `vae_wan.rs`).

use super::allocator::{CachingAllocator, Tensor};
use super::calc::Overflow;
use super::vae_blocks::{At, Plane, Replay, Replays, VideoLatents, decode_tiles, tiles};

/// The latents' channels (`latent_channels`).
const LATENT_CHANNELS: u64 = 12;
/// Pixels per latent on a side: three 2× up blocks (`spatial_expansions` (2, 2, 2)).
pub(crate) const SPATIAL_FACTOR: u64 = 8;
/// Frames per latent frame: `temporal_expansions` (1, 2, 3) multiplied.
pub(crate) const TEMPORAL_FACTOR: u64 = 6;
/// `conv_in`'s and the first block's channels as a multiple of the base (768 of 128).
const MID: u64 = 6;
/// ResNet blocks of the first and last blocks (`layers_per_block` (3, 3, 4, 6, 3), its last and
/// first).
const END_RESNETS: usize = 3;
/// Frames `MochiChunkedGroupNorm3D` normalises at a time (`chunk_size`).
const NORM_CHUNK: u64 = 8;
/// `CogVideoXSafeConv3d` chunks inputs of more than this many elements (its "2 GB" of 2 bytes
/// each).
const SAFE_CONV_ELEMENTS: u64 = 1 << 30;
/// Chunks replayed one by one; the rest of a longer list is allocated as one block, their sum.
/// Only the caching allocator's segments see the difference (the live bytes are the same), and
/// the replay stays bounded for any batch or length a file gives.
const CHUNKS_REPLAYED: usize = 64;
/// A tile starts 3/4 of a tile after the one before (`tile_sample_stride` 192 of
/// `tile_sample_min` 256 pixels, diffusers' defaults).
const TILE_STEP: (u64, u64) = (3, 4);

/// An up block: input and output channels as multiples of the base, its ResNet blocks and its
/// temporal expansion (`MochiDecoder3D.__init__` reverses the configuration's tuples).
struct UpBlock {
    input: u64,
    output: u64,
    resnets: usize,
    time: u64,
}

const UP_BLOCKS: [UpBlock; 3] = [
    UpBlock { input: 6, output: 4, resnets: 6, time: 3 },
    UpBlock { input: 4, output: 2, resnets: 4, time: 2 },
    UpBlock { input: 2, output: 1, resnets: 3, time: 1 },
];

struct Decoder<'a> {
    replay: Replay<'a>,
    videos: u64,
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

    /// A tensor of `frames` frames in all (time moved beside the batch).
    fn frames(&mut self, frames: u64, at: At) -> Result<Tensor, Overflow> {
        self.replay.video(1, At { frames, ..at })
    }

    fn free(&mut self, tensor: Tensor) {
        self.replay.free(tensor);
    }

    /// `MochiChunkedGroupNorm3D` over `input` (not consumed): its result.
    fn norm(&mut self, input: At) -> Result<Tensor, Overflow> {
        let all = self.videos.checked_mul(input.frames).ok_or(Overflow)?;
        // Several videos: `flatten` copies the permuted input, and its chunks are contiguous.
        let flattened = if self.videos > 1 { Some(self.tensor(input)?) } else { None };
        let mut chunks = Vec::new();
        let sizes = (0..all.div_ceil(NORM_CHUNK)).map(|k| NORM_CHUNK.min(all - k * NORM_CHUNK));
        for (index, frames) in sizes.enumerate() {
            if index == CHUNKS_REPLAYED {
                // The rest at once: their results' sum (the last chunk's copy never peaks).
                let rest = all - NORM_CHUNK * CHUNKS_REPLAYED as u64;
                chunks.push(self.frames(rest, input)?);
                break;
            }
            let copy = if flattened.is_none() { Some(self.frames(frames, input)?) } else { None };
            chunks.push(self.frames(frames, input)?);
            if let Some(copy) = copy {
                self.free(copy);
            }
        }
        let joined = self.tensor(input)?;
        for chunk in chunks.into_iter().chain(flattened) {
            self.free(chunk);
        }
        Ok(joined)
    }

    /// `CogVideoXCausalConv3d` (replicate padding, temporal kernel 3) over `input` (not
    /// consumed) to `out` channels: its output.
    fn conv(&mut self, input: At, out: u64) -> Result<Tensor, Overflow> {
        let padded_at = At {
            frames: input.frames + 2,
            plane: Plane { height: input.plane.height + 2, width: input.plane.width + 2 },
            ..input
        };
        let padded = self.tensor(padded_at)?;
        let elements = [self.videos, input.channels, padded_at.frames]
            .into_iter()
            .chain([padded_at.plane.height, padded_at.plane.width])
            .try_fold(1u64, u64::checked_mul)
            .ok_or(Overflow)?;
        let at = At { channels: out, ..input };
        let output = if elements > SAFE_CONV_ELEMENTS {
            self.safe_conv(padded_at, elements / SAFE_CONV_ELEMENTS + 1, at)?
        } else {
            self.tensor(at)?
        };
        self.free(padded);
        Ok(output)
    }

    /// `CogVideoXSafeConv3d`'s split of the padded input into `parts` along time
    /// (`torch.chunk`), to `at`: the copies of every chunk after the first with the two frames
    /// before it, each chunk's output, their concatenation.
    fn safe_conv(&mut self, padded: At, parts: u64, at: At) -> Result<Tensor, Overflow> {
        let size = padded.frames.div_ceil(parts);
        let count = padded.frames.div_ceil(size);
        let sizes = |from: u64| (from..count).map(move |k| size.min(padded.frames - k * size));
        let mut held = Vec::new();
        // Every chunk after the first is copied with the two frames before it.
        let copies: Vec<u64> = sizes(1).map(|frames| frames + 2).collect();
        self.chunks(&copies, padded, &mut held)?;
        // The first chunk's output is two frames shorter than its input.
        let outputs: Vec<u64> = sizes(0)
            .enumerate()
            .map(|(k, f)| if k == 0 { f.saturating_sub(2) } else { f })
            .collect();
        self.chunks(&outputs, at, &mut held)?;
        let output = self.tensor(at)?;
        for tensor in held {
            self.free(tensor);
        }
        Ok(output)
    }

    /// Tensors of `frames` frames each at `at`, into `held`: the first [`CHUNKS_REPLAYED`] one by
    /// one, the rest as one block.
    fn chunks(&mut self, frames: &[u64], at: At, held: &mut Vec<Tensor>) -> Result<(), Overflow> {
        let split = frames.len().min(CHUNKS_REPLAYED);
        for &count in &frames[..split] {
            held.push(self.tensor(At { frames: count, ..at })?);
        }
        let rest: u64 = frames[split..].iter().sum();
        if rest > 0 {
            held.push(self.tensor(At { frames: rest, ..at })?);
        }
        Ok(())
    }

    /// `MochiResnetBlock3D.forward` over `input`, which the caller keeps until it returns.
    fn resnet(&mut self, input: At) -> Result<Tensor, Overflow> {
        let norm = self.norm(input)?;
        let act = self.tensor(input)?;
        self.free(norm);
        let conv = self.conv(input, input.channels)?;
        self.free(act);
        let norm = self.norm(input)?;
        self.free(conv);
        let act = self.tensor(input)?;
        self.free(norm);
        let conv = self.conv(input, input.channels)?;
        self.free(act);
        let sum = self.tensor(input)?;
        self.free(conv);
        Ok(sum)
    }

    /// ResNet blocks in turn over `input`, each result replacing the one before: the last
    /// result (`None` for no block).
    fn resnets(&mut self, at: At, count: usize) -> Result<Option<Tensor>, Overflow> {
        let mut current = None;
        for _ in 0..count {
            let result = self.resnet(at)?;
            self.replay.replace(&mut current, result);
        }
        Ok(current)
    }

    /// `MochiMidBlock3D` without attention over `input`, freed when it returns.
    fn mid_block(&mut self, input: Tensor, at: At, count: usize) -> Result<Tensor, Overflow> {
        let output = self.resnets(at, count)?;
        Ok(self.replay.block_returns(input, output))
    }

    /// `MochiUpBlock3D` over `input`, freed when it returns: the moved projection and its
    /// frames and plane.
    fn up_block(
        &mut self,
        input: Tensor,
        at: At,
        block: &UpBlock,
        base: u64,
    ) -> Result<(Tensor, At), Overflow> {
        let last = self.resnets(at, block.resnets)?;
        let projected = At { channels: base * block.output * block.time * 4, ..at };
        let folded = self.tensor(at)?;
        let proj = self.tensor(projected)?;
        self.free(folded);
        if let Some(last) = last {
            self.free(last);
        }
        let out = At {
            channels: base * block.output,
            frames: at.frames * block.time,
            plane: at.plane.doubled(),
        };
        let moved = self.tensor(out)?;
        self.free(proj);
        self.free(input);
        Ok((moved, out))
    }

    /// `MochiDecoder3D.forward` over `latents`: the decoded video (6 × F frames).
    fn decode(&mut self, latents: At, base: u64) -> Result<Tensor, Overflow> {
        let mut at = At { channels: base * MID, ..latents };
        let mut x = self.tensor(at)?;
        x = self.mid_block(x, at, END_RESNETS)?;
        for block in &UP_BLOCKS {
            debug_assert_eq!(at.channels, base * block.input);
            (x, at) = self.up_block(x, at, block, base)?;
        }
        x = self.mid_block(x, at, END_RESNETS)?;
        let act = self.tensor(at)?;
        self.free(x);
        let folded = self.tensor(at)?;
        let colours = self.tensor(At { channels: 3, ..at })?;
        self.free(folded);
        self.free(act);
        Ok(colours)
    }

    /// `tiled_decode` of `latents` in tiles of `tile` pixels (height, width): the video.
    fn tiled(&mut self, latents: At, tile: (u64, u64), base: u64) -> Result<Tensor, Overflow> {
        let plan = tiles(latents.plane, tile, SPATIAL_FACTOR, TILE_STEP);
        // A decoded tile keeps all its 6 × F frames: the first five are dropped as a view.
        let decoded = latents.frames * TEMPORAL_FACTOR;
        let held = decode_tiles(
            self,
            &plan,
            |decoder, plane| {
                let (h, w) = (plane.height * SPATIAL_FACTOR, plane.width * SPATIAL_FACTOR);
                decoder.replay.rgb_bytes(decoder.videos, decoded, h, w)
            },
            |decoder, plane| decoder.decode(At { plane, ..latents }, base),
        )?;
        let frames = output_frames(latents.frames);
        let spans = (plan.rows.as_slice(), plan.columns.as_slice());
        self.replay.join_tiles((self.videos, frames), spans, plan.step, SPATIAL_FACTOR, held)
    }
}

/// Replays one decode of `shape` through `alloc`, whose cache may already hold freed blocks of
/// earlier phases: the latents (held by the pipeline throughout), the decoder, its output.
pub(crate) fn replay(alloc: &mut CachingAllocator, shape: &VideoLatents) -> Result<(), Overflow> {
    let plane =
        Plane { height: shape.height / SPATIAL_FACTOR, width: shape.width / SPATIAL_FACTOR };
    let mut decoder = Decoder {
        replay: Replay { alloc, images: 1, element: shape.element, workspaces: true },
        videos: shape.videos,
    };
    let latents_at = At { channels: LATENT_CHANNELS, frames: shape.latent_frames, plane };
    let latents = decoder.tensor(latents_at)?;
    // diffusers tiles when the latents are wider or taller than a tile.
    let tile = shape.tile.filter(|&(height, width)| {
        plane.height > height / SPATIAL_FACTOR || plane.width > width / SPATIAL_FACTOR
    });
    let video = match tile {
        Some(tile) => decoder.tiled(latents_at, tile, shape.base_channels)?,
        None => decoder.decode(latents_at, shape.base_channels)?,
    };
    decoder.free(video);
    decoder.free(latents);
    Ok(())
}

/// Output frames of `latent_frames`: six per latent frame, less the first five.
pub(crate) fn output_frames(latent_frames: u64) -> u64 {
    (latent_frames * TEMPORAL_FACTOR).saturating_sub(TEMPORAL_FACTOR - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratio::Ratio;

    /// `videos` videos of `latent_frames` frames of `latents` (height, width) latents.
    fn video(
        videos: u64,
        latent_frames: u64,
        latents: (u64, u64),
        element: i128,
        tile: Option<(u64, u64)>,
    ) -> VideoLatents {
        VideoLatents {
            videos,
            latent_frames,
            height: latents.0 * SPATIAL_FACTOR,
            width: latents.1 * SPATIAL_FACTOR,
            tile,
            base_channels: 128,
            element: Ratio::int(element),
        }
    }

    fn peak(shape: &VideoLatents) -> u64 {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, shape).unwrap();
        alloc.peak_requested().0
    }

    /// The latents the replay holds beside the decoder, which the reference leaves out.
    fn latents(shape: &VideoLatents) -> u64 {
        let plane = (shape.height / SPATIAL_FACTOR) * (shape.width / SPATIAL_FACTOR);
        let element = if shape.element == Ratio::int(4) { 4 } else { 2 };
        shape.videos * LATENT_CHANNELS * shape.latent_frames * plane * element
    }

    /// The reference figures are the largest sum of live tensors diffusers' own decoder
    /// (`AutoencoderKLMochi()`, diffusers 0.42.1) creates while decoding random latents on the
    /// CPU, every tensor an operator returns counted until Python drops its storage
    /// (`tools/decode-peak.py mochi - F H W`), plus the latents the replay holds beside it;
    /// compared with the replay's requested bytes (no allocator rounding).
    #[test]
    fn the_decoder_peaks_as_diffusers_does() {
        for (shape, reference) in [
            (video(1, 2, (4, 6), 2, None), 24_967_168),
            (video(1, 3, (8, 12), 2, None), 146_362_368),
            (video(1, 2, (4, 6), 4, None), 49_934_336),
            // `--batch 2`: the norms copy the flattened input, and peak above the convolution.
            (video(2, 2, (4, 6), 2, None), 56_623_104),
            (video(2, 2, (10, 12), 2, None), 283_115_520),
        ] {
            assert_eq!(peak(&shape), reference + latents(&shape));
        }
    }

    /// Tiled (`enable_tiling`, tiles of 256 pixels every 192), against the same counter over
    /// diffusers' own tiled decode of 2 latent frames of 40 × 36 (`tools/decode-peak.py mochi -
    /// 2 40 36 --tiling`): rows of 32 and 16 latents, columns of 32 and 12.
    #[test]
    fn a_tiled_decode_peaks_as_diffusers_does() {
        let shape = video(1, 2, (40, 36), 2, Some((256, 256)));
        assert_eq!(peak(&shape), 1_043_871_744 + latents(&shape));
    }

    /// The peak is the second ResNet block of the last block at its second convolution: the
    /// block's input, the ResNet block's input, the SiLU output and the convolution's output
    /// (128 channels at the decoder's 6 × F frames and full size each) beside the padded input
    /// (two frames and two pixels each way more): a hand count.
    #[test]
    fn a_decode_peaks_at_the_last_blocks_padded_convolution() {
        let shape = video(1, 2, (4, 6), 2, None);
        let unit = 128 * 12 * 32 * 48 * 2;
        let padded = 128 * 14 * 34 * 50 * 2;
        assert_eq!(peak(&shape), 4 * unit + padded + latents(&shape));
        // 100 latent frames, 600 decoded: 75 chunks to each norm, the last 11 allocated as one
        // block, and the same peak.
        let long = video(1, 100, (4, 6), 2, None);
        let unit = 128 * 600 * 32 * 48 * 2;
        let padded = 128 * 602 * 34 * 50 * 2;
        assert_eq!(peak(&long), 4 * unit + padded + latents(&long));
    }

    /// Past 2^30 elements the convolution splits its padded input along time, and the chunks'
    /// copies and outputs join the padded input (a hand count).
    #[test]
    fn a_large_convolution_splits_its_input_along_time() {
        let mut alloc = CachingAllocator::new();
        let mut decoder = Decoder {
            replay: Replay {
                alloc: &mut alloc,
                images: 1,
                element: Ratio::int(2),
                workspaces: true,
            },
            videos: 1,
        };
        // 128 channels × 100 frames × 300 × 300 pixels: padded, 102 × 302 × 302 × 128 =
        // 1,190,789,376 elements, past 2^30: two parts of 51 frames, the second copied with
        // two frames before it (53), outputs of 49 and 51 frames, their concatenation.
        let input = At { channels: 128, frames: 100, plane: Plane { height: 300, width: 300 } };
        let output = decoder.conv(input, 128).unwrap();
        decoder.free(output);
        let frame = 128 * 300 * 300 * 2;
        let padded = 128 * 302 * 302 * 2;
        assert_eq!(alloc.peak_requested().0, 102 * padded + 53 * padded + (49 + 51 + 100) * frame);
    }

    #[test]
    fn output_frames_are_six_per_latent_frame_less_five() {
        assert_eq!(output_frames(1), 1);
        assert_eq!(output_frames(15), 85);
        assert_eq!(output_frames(28), 163);
    }
}
