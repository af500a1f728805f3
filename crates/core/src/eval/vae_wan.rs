//! The causal 3D VAE decoder of Wan 2.1 (diffusers `AutoencoderKLWan`), its tensors replayed
//! through the caching allocator (`allocator.rs`) in the order diffusers creates and drops
//! them, one latent frame after another.
//!
//! Read in diffusers (huggingface/diffusers at 58eb52c, `models/autoencoders/
//! autoencoder_kl_wan.py`):
//! - `_decode` runs `post_quant_conv` over all the latents, then the decoder on one latent frame
//!   at a time, each causal convolution keeping the last `CACHE_T` = 2 frames of its input for
//!   the next call (`feat_cache`, replaced after the convolution runs), and concatenates every
//!   chunk's frames onto the video so far (`torch.cat([out, out_], 2)`), clamped at the end;
//! - the decoder (Wan2.1 `vae/config.json`: `base_dim` 96, `z_dim` 16, `dim_mult` [1, 2, 4, 4],
//!   `num_res_blocks` 2, `temperal_downsample` [false, true, true]): `conv_in` to 384 channels,
//!   a mid block (residual, single-head attention, residual), four up blocks of 3 residual
//!   blocks (384 → 384, 192 → 384, 192 → 192, 96 → 96), the first two ending in an
//!   `upsample3d`, the third in an `upsample2d` (each halving the channels), then `norm_out`,
//!   SiLU and `conv_out` to 3 channels. The first chunk passes both `upsample3d`s without their
//!   time convolution (the cache is marked `"Rep"`): one frame out. Later chunks double time at
//!   each: four frames out;
//! - a residual block keeps its input for the sum (a 1 × 1 `conv_shortcut` when its channels
//!   change); its `WanRMS_norm`s make `F.normalize`, `× scale`, `× gamma` and `+ bias` (bias 0),
//!   each a new tensor (a 16-bit input is normalised in fp32 first); SiLU is not in place;
//! - `WanCausalConv3d` concatenates the cache before its input (`torch.cat`), pads the rest of
//!   the causal frames and the plane (`F.pad`, a new tensor), then convolves.
//!
//! cuDNN's convolution workspaces are not replayed (the library's choice, as in `vae_decode.rs`).

use super::allocator::{CachingAllocator, Tensor};
use super::calc::Overflow;
use super::vae_blocks::{At, Plane, Replay, VideoLatents, tiles};
use crate::ratio::Ratio;

/// Frames a causal convolution keeps of its input (`CACHE_T`).
const CACHE_T: u64 = 2;
/// `dim_mult` [1, 2, 4, 4]: the decoder's channels, as multiples of the base, at conv_in and
/// the mid block, then each up block's residual input and output.
const MID: u64 = 4;
const UP_BLOCKS: [(u64, u64); 4] = [(4, 4), (2, 4), (2, 2), (1, 1)];
/// Residual blocks per up block: `num_res_blocks` + 1.
const RESIDUALS: usize = 3;
/// The latents' channels (`z_dim`).
const LATENT_CHANNELS: u64 = 16;
/// Three 2× spatial upsamples.
const SPATIAL_FACTOR: u64 = 8;

/// A tile starts 3/4 of a tile after the one before (`tile_sample_stride` 192 of
/// `tile_sample_min` 256 pixels, diffusers' defaults).
const TILE_STEP: (u64, u64) = (3, 4);

struct Decoder<'a> {
    replay: Replay<'a>,
    videos: u64,
    /// Each causal convolution's cache and its frames, by the order the convolutions run.
    caches: Vec<Option<(Tensor, u64)>>,
    /// The next convolution's index (`feat_idx`), reset for every chunk.
    next: usize,
    /// The first chunk: its `upsample3d`s skip their time convolution (the cache is `"Rep"`).
    first: bool,
}

impl Decoder<'_> {
    fn tensor(&mut self, at: At) -> Result<Tensor, Overflow> {
        self.replay.video(self.videos, at)
    }

    fn free(&mut self, tensor: Tensor) {
        self.replay.free(tensor);
    }

    /// `WanCausalConv3d` of temporal kernel 3 over `input` (not consumed), to `out` channels:
    /// the cache clone, the concatenation with the previous cache, the padded input, the
    /// output; the new cache replaces the old after the convolution.
    fn causal_conv(&mut self, input: At, out: u64) -> Result<(Tensor, At), Overflow> {
        let idx = self.next;
        self.next += 1;
        if self.caches.len() <= idx {
            self.caches.resize_with(idx + 1, || None);
        }
        let previous = self.caches[idx].as_ref().map(|(_, frames)| *frames);
        // `x[:, :, -2:].clone()`, with the previous cache's last frame before a single frame.
        let kept = if input.frames < CACHE_T && previous.is_some() {
            CACHE_T
        } else {
            input.frames.min(CACHE_T)
        };
        let cache = self.tensor(At { frames: kept, ..input })?;
        let before = previous.unwrap_or(0);
        let joined = if before > 0 {
            Some(self.tensor(At { frames: before + input.frames, ..input })?)
        } else {
            None
        };
        // `F.pad` adds the causal frames and one row and column on every side of the plane.
        let plane = Plane { height: input.plane.height + 2, width: input.plane.width + 2 };
        let padded = self.tensor(At { frames: input.frames + CACHE_T, plane, ..input })?;
        if let Some(joined) = joined {
            self.free(joined);
        }
        let at = At { channels: out, ..input };
        let output = self.tensor(at)?;
        self.free(padded);
        if let Some((old, _)) = self.caches[idx].replace((cache, kept)) {
            self.free(old);
        }
        Ok((output, at))
    }

    /// An operation from `input` to `output` that a 16-bit input runs in fp32 (`x.float()`, the
    /// operation, the cast back): the fp32 copy and result beside the input, then the cast;
    /// an fp32 input makes only the result.
    fn through_fp32(&mut self, input: At, output: At) -> Result<Tensor, Overflow> {
        if self.replay.element >= Ratio::int(4) {
            return self.tensor(output);
        }
        self.replay.images = self.videos.checked_mul(input.frames).ok_or(Overflow)?;
        let upcast = self.replay.elements(input.channels, input.plane, Ratio::int(4))?;
        self.replay.images = self.videos.checked_mul(output.frames).ok_or(Overflow)?;
        let result = self.replay.elements(output.channels, output.plane, Ratio::int(4))?;
        self.free(upcast);
        let cast = self.tensor(output)?;
        self.free(result);
        Ok(cast)
    }

    /// `WanRMS_norm` over `input` (not consumed): `F.normalize`, then `× scale`, `× gamma` and
    /// `+ bias`, each new, the previous one dropped; a 16-bit input is normalised in fp32.
    fn rms_norm(&mut self, input: At) -> Result<Tensor, Overflow> {
        let mut current = self.through_fp32(input, input)?;
        for _ in 0..3 {
            let next = self.tensor(input)?;
            self.free(current);
            current = next;
        }
        Ok(current)
    }

    /// `WanResidualBlock.forward`; the caller keeps `input` alive until it returns and frees it.
    fn residual(&mut self, input: At, out: u64) -> Result<(Tensor, At), Overflow> {
        let shortcut = if input.channels == out {
            None
        } else {
            // A 1 × 1 causal convolution: zero padding (a copy), then the convolution.
            let padded = self.tensor(input)?;
            let h = self.tensor(At { channels: out, ..input })?;
            self.free(padded);
            Some(h)
        };
        let norm = self.rms_norm(input)?;
        let act = self.tensor(input)?;
        self.free(norm);
        let (conv, at) = self.causal_conv(input, out)?;
        self.free(act);
        let norm = self.rms_norm(at)?;
        self.free(conv);
        let act = self.tensor(at)?;
        self.free(norm);
        let (conv, _) = self.causal_conv(at, out)?;
        self.free(act);
        let sum = self.tensor(at)?;
        self.free(conv);
        if let Some(h) = shortcut {
            self.free(h);
        }
        Ok((sum, at))
    }

    /// `WanAttentionBlock`: norm, the 1 × 1 q/k/v projection and its contiguous permute, the
    /// attention output and its reshape, the projection and the residual sum.
    fn attention(&mut self, input: At) -> Result<(Tensor, At), Overflow> {
        let norm = self.rms_norm(input)?;
        let triple = At { channels: input.channels * 3, ..input };
        let qkv = self.tensor(triple)?;
        self.free(norm);
        let contiguous = self.tensor(triple)?;
        self.free(qkv);
        let attended = self.tensor(input)?;
        self.free(contiguous);
        let reshaped = self.tensor(input)?;
        self.free(attended);
        let projected = self.tensor(input)?;
        self.free(reshaped);
        let sum = self.tensor(input)?;
        self.free(projected);
        Ok((sum, input))
    }

    /// `WanResample`: for `upsample3d` after the first chunk, the time convolution to twice the
    /// channels and the stack that doubles the frames; then the frames as images (a copy), the
    /// nearest 2× upsample (through fp32 for a 16-bit input) and a 3 × 3 convolution to half the
    /// channels.
    fn upsample(&mut self, input: Tensor, at: At, in_time: bool) -> Result<(Tensor, At), Overflow> {
        let mut x = input;
        let mut at = at;
        if in_time && self.first {
            // The cache is marked "Rep": no time convolution, the frame count kept.
            self.next += 1;
        } else if in_time {
            let (time, _) = self.causal_conv(at, at.channels * 2)?;
            let stacked_at = At { frames: at.frames * 2, ..at };
            let stacked = self.tensor(stacked_at)?;
            self.free(time);
            self.free(x);
            x = stacked;
            at = stacked_at;
        }
        let images = self.tensor(at)?;
        self.free(x);
        let up = At { plane: at.plane.doubled(), ..at };
        let upsampled = self.through_fp32(at, up)?;
        self.free(images);
        let out = At { channels: at.channels / 2, ..up };
        let conv = self.tensor(out)?;
        self.free(upsampled);
        Ok((conv, out))
    }

    /// One call of `WanDecoder3d.forward` on a chunk of one latent frame: its decoded frames.
    /// A block's result replaces the one before it; gives where the new one is.
    fn step(&mut self, current: &mut Option<Tensor>, (result, at): (Tensor, At)) -> At {
        self.replay.replace(current, result);
        at
    }

    fn chunk(&mut self, latents: At, base: u64) -> Result<(Tensor, At), Overflow> {
        self.next = 0;
        let (mut input, mut at) = self.causal_conv(latents, base * MID)?;
        // The mid block: residual, attention, residual.
        let mut current = None;
        let r = self.residual(at, base * MID)?;
        at = self.step(&mut current, r);
        let r = self.attention(at)?;
        at = self.step(&mut current, r);
        let r = self.residual(at, base * MID)?;
        at = self.step(&mut current, r);
        input = self.replay.block_returns(input, current);
        for (block, (from, output)) in UP_BLOCKS.iter().enumerate() {
            debug_assert_eq!(at.channels, base * from);
            let mut current = None;
            for _ in 0..RESIDUALS {
                let r = self.residual(at, base * output)?;
                at = self.step(&mut current, r);
            }
            if block + 1 < UP_BLOCKS.len() {
                let x = current.take().unwrap_or_else(|| unreachable!("three residual blocks"));
                let r = self.upsample(x, at, block < 2)?;
                at = self.step(&mut current, r);
            }
            input = self.replay.block_returns(input, current);
        }
        let norm = self.rms_norm(at)?;
        self.free(input);
        let act = self.tensor(at)?;
        self.free(norm);
        let (rgb, rgb_at) = self.causal_conv(at, 3)?;
        self.free(act);
        Ok((rgb, rgb_at))
    }
}

/// Decoded frames of one latent-frame chunk: 1 for the first, then 4.
fn chunk_frames(index: u64) -> u64 {
    if index == 0 { 1 } else { 4 }
}

/// Replays one decode of `shape` through `alloc`, whose cache may already hold freed blocks of
/// earlier phases.
pub(crate) fn replay(alloc: &mut CachingAllocator, shape: &VideoLatents) -> Result<(), Overflow> {
    let plane =
        Plane { height: shape.height / SPATIAL_FACTOR, width: shape.width / SPATIAL_FACTOR };
    let mut decoder = Decoder {
        replay: Replay { alloc, images: 1, element: shape.element, workspaces: true },
        videos: shape.videos,
        caches: Vec::new(),
        next: 0,
        first: true,
    };
    let latents_at = At { channels: LATENT_CHANNELS, frames: shape.latent_frames, plane };
    // diffusers tiles when the latents are wider or taller than a tile.
    let tile = shape.tile.filter(|&(height, width)| {
        plane.height > height / SPATIAL_FACTOR || plane.width > width / SPATIAL_FACTOR
    });
    if let Some(tile) = tile {
        // The latents, held by the pipeline; each tile's frames pass `post_quant_conv` alone.
        let latents = decoder.tensor(latents_at)?;
        let video = decoder.tiled(latents_at, tile, shape.base_channels)?;
        decoder.free(video);
        decoder.free(latents);
        return Ok(());
    }
    // `post_quant_conv` over every latent frame at once.
    let latents = decoder.tensor(latents_at)?;
    let mut video: Option<(Tensor, u64)> = None;
    for index in 0..shape.latent_frames {
        let chunk_at = At { frames: 1, ..latents_at };
        decoder.first = index == 0;
        let (frames_out, at) = decoder.chunk(chunk_at, shape.base_channels)?;
        debug_assert_eq!(at.frames, chunk_frames(index));
        video = Some(match video.take() {
            None => (frames_out, at.frames),
            Some((so_far, frames)) => {
                let joined_frames = frames + at.frames;
                let joined = decoder.tensor(At { frames: joined_frames, ..at })?;
                decoder.free(so_far);
                decoder.free(frames_out);
                (joined, joined_frames)
            }
        });
    }
    // `torch.clamp` beside the video, then the caches are cleared.
    if let Some((video, frames)) = video {
        let rgb =
            At { channels: 3, frames, plane: Plane { height: shape.height, width: shape.width } };
        let clamped = decoder.tensor(rgb)?;
        decoder.free(video);
        decoder.free(clamped);
    }
    decoder.free(latents);
    decoder.clear_caches();
    Ok(())
}

impl Decoder<'_> {
    /// `clear_cache`: every causal convolution's cache dropped.
    fn clear_caches(&mut self) {
        for (cache, _) in std::mem::take(&mut self.caches).into_iter().flatten() {
            self.free(cache);
        }
    }

    /// One tile's latent frames decoded one at a time, the chunks kept in a list (`time`) and
    /// concatenated once: the tile's video, and the chunks (which live until the next tile).
    fn tile(&mut self, latents: At, base: u64) -> Result<(Tensor, Vec<Tensor>), Overflow> {
        let mut chunks = Vec::new();
        let mut frames = 0;
        let mut plane = latents.plane;
        for index in 0..latents.frames {
            self.first = index == 0;
            let (out, at) = self.chunk(At { frames: 1, ..latents }, base)?;
            frames += at.frames;
            plane = at.plane;
            chunks.push(out);
        }
        let video = self.tensor(At { channels: 3, frames, plane })?;
        Ok((video, chunks))
    }

    /// `tiled_decode` over `latents` in tiles of `tile` pixels (height, width): tiles of 32
    /// latents every 24, each tile's caches cleared before it and its chunks dropped after
    /// them, every tile's video kept until the tiles are blended, each row's kept parts
    /// concatenated, then the rows, then clamped. Only the last tile of each size is replayed
    /// through the decoder; the videos of the tiles before it are allocated together.
    fn tiled(&mut self, latents: At, tile: (u64, u64), base: u64) -> Result<Tensor, Overflow> {
        let plan = tiles(latents.plane, tile, SPATIAL_FACTOR, TILE_STEP);
        let frames = output_frames(latents.frames);
        let (mut held, mut pending, mut chunks) = (Vec::new(), 0u64, Vec::new());
        for &((h, w), last) in &plan.each {
            if !last {
                let (height, width) = (h * SPATIAL_FACTOR, w * SPATIAL_FACTOR);
                let bytes = self.replay.rgb_bytes(self.videos, frames, height, width)?;
                pending = pending.checked_add(bytes).ok_or(Overflow)?;
                continue;
            }
            held.extend(self.replay.lump(std::mem::take(&mut pending))?);
            self.clear_caches();
            for chunk in std::mem::take(&mut chunks) {
                self.free(chunk);
            }
            let at = At { plane: Plane { height: h, width: w }, ..latents };
            let (video, kept) = self.tile(at, base)?;
            held.push(video);
            chunks = kept;
        }
        self.clear_caches();
        let videos = self.videos;
        let spans = (plan.rows.as_slice(), plan.columns.as_slice());
        let joined =
            self.replay.join_tiles((videos, frames), spans, plan.step, SPATIAL_FACTOR, held)?;
        let kept =
            |spans: &[u64], step: u64| spans.iter().map(|s| s.min(&step) * SPATIAL_FACTOR).sum();
        let (height, width) = (kept(&plan.rows, plan.step.0), kept(&plan.columns, plan.step.1));
        let bytes = self.replay.rgb_bytes(videos, frames, height, width)?;
        let clamped = self.replay.alloc.alloc(crate::bytes::Bytes(bytes))?;
        self.free(joined);
        for chunk in chunks {
            self.free(chunk);
        }
        Ok(clamped)
    }
}

/// Output frames of `latent_frames`: the first alone, then four per latent frame.
pub(crate) fn output_frames(latent_frames: u64) -> u64 {
    (0..latent_frames).map(chunk_frames).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The replay against diffusers' own decoder (`AutoencoderKLWan()`, the Wan 2.1
    /// configuration, diffusers 0.42.1) decoding random latents of 3 frames of 16 × 24 in fp32
    /// on the CPU, every tensor an operator returns counted until Python drops it
    /// (`tools/decode-peak.py wan - 3 16 24 fp32`: 482,018,304 B). The replay's requested bytes
    /// (no allocator rounding) fall short by the per-position tensors of its norms, under 0.5 %.
    #[test]
    fn the_decoder_peaks_as_diffusers_does() {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, &wan(128, 192, 3, 4)).unwrap();
        let (replayed, reference) = (alloc.peak_requested().0, 482_018_304);
        assert!((reference - reference / 200..=reference).contains(&replayed), "{replayed}");
    }

    /// Tiled (`enable_tiling`, tiles of 256 pixels every 192), against the same counter over
    /// diffusers' own tiled decode of 2 latent frames of 34 × 33 in bf16 (`tools/decode-peak.py
    /// wan - 2 34 33 --tiling`: 638,550,016 B): rows of 32 and 10 latents, columns of 32 and 9.
    #[test]
    fn a_tiled_decode_peaks_as_diffusers_does() {
        let mut alloc = CachingAllocator::new();
        let shape = VideoLatents { tile: Some((256, 256)), ..wan(272, 264, 2, 2) };
        replay(&mut alloc, &shape).unwrap();
        let (replayed, reference) = (alloc.peak_requested().0, 638_550_016u64);
        assert!((reference - reference / 200..=reference).contains(&replayed), "{replayed}");
    }

    fn wan(height: u64, width: u64, latent_frames: u64, element: i128) -> VideoLatents {
        VideoLatents {
            videos: 1,
            latent_frames,
            height,
            width,
            base_channels: 96,
            element: Ratio::int(element),
            tile: None,
        }
    }

    #[test]
    fn eighty_one_frames_from_twenty_one_latent_frames() {
        assert_eq!(output_frames(21), 81);
        assert_eq!(output_frames(1), 1);
    }

    #[test]
    fn the_second_chunk_peaks_at_a_full_resolution_convolution() {
        // One latent frame decodes to one frame; two to five, the second chunk at four frames.
        let mut one = CachingAllocator::new();
        replay(&mut one, &wan(64, 64, 1, 4)).unwrap();
        let mut two = CachingAllocator::new();
        replay(&mut two, &wan(64, 64, 2, 4)).unwrap();
        assert!(two.peak_allocated() > one.peak_allocated());
        // By hand, fp32 at 64 × 64: a full-resolution frame of 96 channels is 96 × 4,096 × 4 B
        // = 1.5 MiB. At the second chunk's last residual block's conv2, live: the block's input
        // (4 frames), the SiLU output (4), the new cache clone (2), the concatenation with the
        // previous cache (2 + 4 = 6), the padded input (6); then the caches of every
        // convolution run so far and not yet replaced.
        let frame = 96 * 4096 * 4;
        assert!(two.peak_allocated().0 >= 22 * frame);
    }

    #[test]
    fn caches_persist_and_each_chunk_frees_its_tensors() {
        // The allocated peak grows with the chunks only by the video being concatenated.
        let mut five = CachingAllocator::new();
        replay(&mut five, &wan(64, 64, 5, 4)).unwrap();
        let mut nine = CachingAllocator::new();
        replay(&mut nine, &wan(64, 64, 9, 4)).unwrap();
        let growth = nine.peak_allocated().0 - five.peak_allocated().0;
        // Sixteen more frames of 3 channels, held twice while joined: 2 × 16 × 3 × 4,096 × 4 B.
        assert!(growth <= 2 * 16 * 3 * 4096 * 4, "{growth}");
    }

    #[test]
    fn sixteen_bit_decodes_hold_less() {
        let mut fp32 = CachingAllocator::new();
        replay(&mut fp32, &wan(480, 832, 3, 4)).unwrap();
        let mut bf16 = CachingAllocator::new();
        replay(&mut bf16, &wan(480, 832, 3, 2)).unwrap();
        assert!(bf16.peak_allocated() < fp32.peak_allocated());
    }

    #[test]
    fn huge_shapes_overflow_instead_of_wrapping() {
        let mut alloc = CachingAllocator::new();
        let shape = VideoLatents { videos: u64::MAX / 2, ..wan(480, 832, 3, 4) };
        assert!(replay(&mut alloc, &shape).is_err());
    }
}
