//! The causal 3D VAE decoder of a video pipeline (diffusers `AutoencoderKLCogVideoX`), its
//! tensors replayed through the caching allocator (`allocator.rs`) in the order diffusers
//! creates and drops them, one frame batch after another.
//!
//! Read in diffusers (huggingface/diffusers at 58eb52c, `models/autoencoders/
//! autoencoder_kl_cogvideox.py`, `models/upsampling.py` `CogVideoXUpsample3D`,
//! `pipelines/cogvideo/pipeline_cogvideox.py`):
//! - `_decode` cuts the latents into batches of `num_latent_frames_batch_size` = 2 latent frames
//!   (the first batch takes the remainder too: 3 of 13) and runs the whole decoder on each,
//!   passing every causal convolution's cache from one batch to the next; the decoded batches
//!   are kept in a list and concatenated at the end;
//! - the decoder (CogVideoX-2b and -5b `vae/config.json`: `block_out_channels` [128, 256, 256,
//!   512], `latent_channels` 16, `temporal_compression_ratio` 4; `layers_per_block` 3, the
//!   decoder's default): `conv_in` to 4c channels, a mid block of two ResNet blocks, four up
//!   blocks of 4c, 2c, 2c and c channels with `layers_per_block + 1` = 4 ResNet blocks each, the
//!   first three ending in an upsampler, then the output norm, SiLU and `conv_out` to 3
//!   channels. The first `log2(temporal_compression_ratio)` upsamplers double time as well as
//!   space (an odd frame count keeps its first frame single: T -> 2T - 1);
//! - every norm of the decoder is a `CogVideoXSpatialNorm3D`: the batch's latents (16 channels)
//!   are interpolated to the features' size, two 1 × 1 causal convolutions (`conv_y`, `conv_b`)
//!   map them to the features' channels, and `GroupNorm(f) * conv_y + conv_b` is computed, five
//!   tensors of the features' size beside the input at its end;
//! - a causal convolution of temporal kernel 3 concatenates its cache (or the first frame twice)
//!   before its input, T + 2 frames, and keeps a clone of the last two as the next batch's
//!   cache; one of kernel 1 keeps a clone of its whole input (`inputs[:, :, 0:]`). The new
//!   caches live until the decoder returns, beside the previous batch's, which the caller holds
//!   until it rebinds `conv_cache`;
//! - `CogVideoXSafeConv3d` splits an input of more than 2^30 elements into chunks along time,
//!   concatenating each with the previous chunk's last frames (a copy of the input in all) and
//!   the outputs (a copy of the output).
//!
//! cuDNN's convolution workspaces are not replayed (the library's choice, as in `vae_decode.rs`).

use super::allocator::{CachingAllocator, Tensor};
use super::calc::Overflow;
use super::vae_blocks::{Plane, Replay};
use crate::ratio::Ratio;

/// `block_out_channels` of the CogVideoX autoencoder as multiples of the base count, from the
/// deepest up block to the last.
const UP_CHANNELS: [u64; 4] = [4, 2, 2, 1];
/// ResNet blocks per up block: `layers_per_block` (3) + 1.
const RESNETS_PER_UP_BLOCK: usize = 4;
/// The latents' channels (`latent_channels`), the spatial norms' conditioning.
const LATENT_CHANNELS: u64 = 16;
/// Latent frames decoded together (`num_latent_frames_batch_size`).
pub(crate) const FRAME_BATCH: u64 = 2;
/// Frames a temporal kernel of 3 adds before its input, and keeps as its cache.
const CAUSAL_PAD: u64 = 2;
/// `CogVideoXSafeConv3d` chunks inputs whose element count × 2 / 2^30 exceeds 2.
const SAFE_CONV_ELEMENTS: u64 = 1 << 30;
/// The VAE's spatial factor: three 2× upsamples.
const SPATIAL_FACTOR: u64 = 8;

/// One decode of a video's latents.
pub(crate) struct VideoShape {
    /// Videos decoded together.
    pub videos: u64,
    pub latent_frames: u64,
    /// The VAE's temporal compression: 1, 2, 4 or 8.
    pub temporal: u64,
    /// Output pixels (of a tile, when tiled), height and width.
    pub height: u64,
    pub width: u64,
    pub base_channels: u64,
    pub element: Ratio,
    /// When the decode is tiled, the pixels (per frame) of the other tiles, whose decoded
    /// frames are held while a tile decodes ([`other_tiles`]); 0 otherwise.
    pub other_tiles: u64,
    /// Each causal convolution replaces its own cache as it runs (diffusers before 0.31).
    pub caches_replaced: bool,
}

/// AutoencoderKLCogVideoX's tile overlap factors (`tile_overlap_factor_height` 1/6 and
/// `tile_overlap_factor_width` 1/5): tiles start every `tile × (1 - factor)` latents.
const TILE_STEP_HEIGHT: (u64, u64) = (5, 6);
const TILE_STEP_WIDTH: (u64, u64) = (4, 5);

/// The pixels per frame of the tiles other than one whole tile, when a video of `height` ×
/// `width` pixels is decoded in tiles of `tile_height` × `tile_width` (diffusers
/// `AutoencoderKLCogVideoX.tiled_decode`: tiles of the tile's latents start every
/// `int(tile × (1 - factor))` latents, each clipped by the video, and every decoded tile is kept
/// until they are blended). Held while the last whole tile decodes: the tiles after it, smaller,
/// are counted too, an over-estimate of at most a row and a column of clipped tiles.
pub(crate) fn other_tiles(height: u64, width: u64, tile_height: u64, tile_width: u64) -> u64 {
    let span = |size: u64, tile: u64, (num, den): (u64, u64)| {
        let (size, tile) = (size / SPATIAL_FACTOR, (tile / SPATIAL_FACTOR).max(1));
        // A step of 0 would be a Python error; a tile this small is not diffusers' use.
        let step = usize::try_from((tile * num / den).max(1)).unwrap_or(usize::MAX);
        (0..size).step_by(step).map(|start| tile.min(size - start)).sum::<u64>() * SPATIAL_FACTOR
    };
    let all = span(height, tile_height, TILE_STEP_HEIGHT).saturating_mul(span(
        width,
        tile_width,
        TILE_STEP_WIDTH,
    ));
    all.saturating_sub(height.min(tile_height) * width.min(tile_width))
}

/// A tensor's frames and plane.
#[derive(Clone, Copy)]
struct At {
    frames: u64,
    plane: Plane,
}

struct Decoder<'a> {
    replay: Replay<'a>,
    videos: u64,
    /// The batch's latent frames and plane (the spatial norms' conditioning).
    latents: At,
    /// The caches this batch's causal convolutions keep.
    caches: Vec<Tensor>,
    /// The previous batch's caches, in the order the convolutions made them.
    previous: std::collections::VecDeque<Tensor>,
    /// Each convolution replaces its own cache as it runs (diffusers before 0.31), rather than
    /// the caller holding the previous batch's set until the batch returns.
    replaced: bool,
}

impl Decoder<'_> {
    fn tensor(&mut self, channels: u64, at: At) -> Result<Tensor, Overflow> {
        self.replay.images = self.videos.checked_mul(at.frames).ok_or(Overflow)?;
        self.replay.tensor(channels, at.plane)
    }

    fn free(&mut self, tensor: Tensor) {
        self.replay.alloc.free(tensor);
    }

    /// Keeps a convolution's new cache for the next batch. Where each convolution holds its
    /// cache as a module attribute (diffusers before 0.31: `_clear_fake_context_parallel_cache`
    /// deletes it once joined to the input, then `conv_cache` takes the clone), the previous
    /// batch's cache of this convolution goes as the new one comes.
    fn keep_cache(&mut self, cache: Tensor) {
        if self.replaced
            && let Some(old) = self.previous.pop_front()
        {
            self.free(old);
        }
        self.caches.push(cache);
    }

    /// `CogVideoXCausalConv3d` with a temporal kernel of 3 over its input at `at`, from `from` to
    /// `to` channels; the caller drops the input.
    fn causal_conv(&mut self, from: u64, to: u64, at: At) -> Result<Tensor, Overflow> {
        let padded_at = At { frames: at.frames + CAUSAL_PAD, ..at };
        let padded = self.tensor(from, padded_at)?;
        let cache = self.tensor(from, At { frames: CAUSAL_PAD, ..at })?;
        self.keep_cache(cache);
        let elements = (self.videos.checked_mul(from))
            .and_then(|n| n.checked_mul(padded_at.frames))
            .and_then(|n| n.checked_mul(padded_at.plane.height))
            .and_then(|n| n.checked_mul(padded_at.plane.width))
            .ok_or(Overflow)?;
        let output = if elements > SAFE_CONV_ELEMENTS {
            let chunks = self.tensor(from, padded_at)?;
            let outputs = self.tensor(to, at)?;
            let output = self.tensor(to, at)?;
            self.free(outputs);
            self.free(chunks);
            output
        } else {
            self.tensor(to, at)?
        };
        self.free(padded);
        Ok(output)
    }

    /// `CogVideoXSpatialNorm3D` of `channels` features at `at`; the caller drops the input.
    fn spatial_norm(&mut self, channels: u64, at: At) -> Result<Tensor, Overflow> {
        // The latents interpolated to the features' size: an odd count above one interpolates
        // its first frame and the rest apart (both kept until the norm returns) and joins them.
        let parts = if at.frames > 1 && at.frames % 2 == 1 {
            let first = self.tensor(LATENT_CHANNELS, At { frames: 1, ..at })?;
            let rest = self.tensor(LATENT_CHANNELS, At { frames: at.frames - 1, ..at })?;
            Some((first, rest))
        } else {
            None
        };
        let zq = self.tensor(LATENT_CHANNELS, at)?;
        let mut held = Vec::with_capacity(8);
        for _ in 0..2 {
            // conv_y, conv_b: kernel 1, a clone of the whole input kept as the cache.
            let cache = self.tensor(LATENT_CHANNELS, at)?;
            self.keep_cache(cache);
            held.push(self.tensor(channels, at)?);
        }
        held.push(self.tensor(channels, at)?); // GroupNorm(f)
        let product = self.tensor(channels, at)?;
        let output = self.tensor(channels, at)?;
        self.free(product);
        for tensor in held.into_iter().chain([zq]) {
            self.free(tensor);
        }
        if let Some((first, rest)) = parts {
            self.free(first);
            self.free(rest);
        }
        Ok(output)
    }

    /// `CogVideoXResnetBlock3D` with spatial norms; the caller frees its input after it returns.
    fn resnet(&mut self, from: u64, to: u64, at: At) -> Result<Tensor, Overflow> {
        let norm1 = self.spatial_norm(from, at)?;
        let act1 = self.tensor(from, at)?;
        self.free(norm1);
        let conv1 = self.causal_conv(from, to, at)?;
        self.free(act1);
        let norm2 = self.spatial_norm(to, at)?;
        self.free(conv1);
        let act2 = self.tensor(to, at)?;
        self.free(norm2);
        let conv2 = self.causal_conv(to, to, at)?;
        self.free(act2);
        // A 1 × 1 `CogVideoXSafeConv3d` shortcut when the channels change.
        let shortcut = if from == to { None } else { Some(self.tensor(to, at)?) };
        let sum = self.tensor(to, at)?;
        self.free(conv2);
        if let Some(shortcut) = shortcut {
            self.free(shortcut);
        }
        Ok(sum)
    }

    /// `CogVideoXUpsample3D`: nearest 2× in space, and in time when `in_time`, then a 2D 3 × 3
    /// convolution over every frame; the caller frees its input after it returns. The frames are
    /// brought next to the
    /// batch (`permute(...).reshape(b * t, ...)`), a copy of any tensor of more than one frame.
    fn upsample(&mut self, channels: u64, at: At, in_time: bool) -> Result<(Tensor, At), Overflow> {
        let plane = at.plane.doubled();
        let mut held = Vec::with_capacity(3);
        let (frames, grouped) = if in_time && at.frames > 1 && at.frames % 2 == 1 {
            // The first frame and the rest interpolated apart (both kept until the upsampler
            // returns), then joined and grouped.
            let frames = 2 * at.frames - 1;
            held.push(self.tensor(channels, At { frames: 1, plane })?);
            held.push(self.tensor(channels, At { frames: frames - 1, plane })?);
            let joined = self.tensor(channels, At { frames, plane })?;
            let grouped = self.tensor(channels, At { frames, plane })?;
            self.free(joined);
            (frames, grouped)
        } else if in_time && at.frames > 1 {
            let frames = 2 * at.frames;
            let interpolated = self.tensor(channels, At { frames, plane })?;
            let grouped = self.tensor(channels, At { frames, plane })?;
            self.free(interpolated);
            (frames, grouped)
        } else if at.frames > 1 {
            let grouped = self.tensor(channels, at)?;
            let interpolated = self.tensor(channels, At { plane, ..at })?;
            self.free(grouped);
            (at.frames, interpolated)
        } else {
            (1, self.tensor(channels, At { plane, ..at })?)
        };
        let to = At { frames, plane };
        let output = self.tensor(channels, to)?;
        self.free(grouped);
        for tensor in held {
            self.free(tensor);
        }
        Ok((output, to))
    }

    /// One batch through `CogVideoXDecoder3D.forward`: the decoded frames, and where they are.
    /// The forward's variable holds each block's input until the block returns
    /// (`hidden_states, ... = up_block(hidden_states, ...)`), while the block rebinds its own.
    fn forward(&mut self, shape: &VideoShape) -> Result<(Tensor, At), Overflow> {
        let base = shape.base_channels;
        let mut at = self.latents;
        let mut channels = base * UP_CHANNELS[0];
        let mut x = self.causal_conv(LATENT_CHANNELS, channels, at)?;
        let mut current = None;
        for _ in 0..2 {
            let out = self.resnet(channels, channels, at)?;
            self.replay.replace(&mut current, out);
        }
        x = self.replay.block_returns(x, current);
        let in_time = shape.temporal.trailing_zeros() as usize;
        for (block, multiplier) in UP_CHANNELS.iter().enumerate() {
            let out = base * multiplier;
            let mut current = None;
            for _ in 0..RESNETS_PER_UP_BLOCK {
                let sum = self.resnet(channels, out, at)?;
                self.replay.replace(&mut current, sum);
                channels = out;
            }
            if block + 1 < UP_CHANNELS.len() {
                let up;
                (up, at) = self.upsample(out, at, block < in_time)?;
                self.replay.replace(&mut current, up);
            }
            x = self.replay.block_returns(x, current);
        }
        let norm = self.spatial_norm(channels, at)?;
        let act = self.tensor(channels, at)?;
        self.free(norm);
        self.free(x);
        let image = self.causal_conv(channels, 3, at)?;
        self.free(act);
        Ok((image, at))
    }
}

/// The decoded frames of a batch of `latent_frames` latent frames.
pub(crate) fn output_frames(latent_frames: u64, temporal: u64) -> u64 {
    let mut frames = latent_frames;
    for _ in 0..temporal.trailing_zeros() {
        // One frame is squeezed and interpolated in space only.
        frames = match frames {
            1 => 1,
            odd if odd % 2 == 1 => 2 * odd - 1,
            even => 2 * even,
        };
    }
    frames
}

/// Replays the decode of `shape` through `alloc`: the first batch (with the remainder), the
/// second with the first's caches held, the outputs of the batches between (one block), and
/// the last,
/// whose tensors are the second's with more decoded frames held (the batches between repeat
/// the second's sizes); then the concatenation of the decoded frames.
pub(crate) fn replay(alloc: &mut CachingAllocator, shape: &VideoShape) -> Result<(), Overflow> {
    let latent_plane =
        Plane { height: shape.height / SPATIAL_FACTOR, width: shape.width / SPATIAL_FACTOR };
    let full = Plane { height: shape.height, width: shape.width };
    let element = shape.element;
    let mut decoder = Decoder {
        replay: Replay { alloc, images: shape.videos, element, workspaces: true },
        videos: shape.videos,
        latents: At { frames: 0, plane: latent_plane },
        caches: Vec::new(),
        previous: std::collections::VecDeque::new(),
        replaced: shape.caches_replaced,
    };
    // The pipeline's scaled latents (`1 / scaling_factor * latents`), alive through the decode;
    // a tiled decode also holds the other tiles' decoded frames.
    let all_latents = At { frames: shape.latent_frames, plane: latent_plane };
    let mut held = vec![decoder.tensor(LATENT_CHANNELS, all_latents)?];
    if shape.other_tiles > 0 {
        let tiles = At {
            frames: output_frames(shape.latent_frames, shape.temporal),
            plane: Plane { height: 1, width: shape.other_tiles },
        };
        held.push(decoder.tensor(3, tiles)?);
    }
    let batches = (shape.latent_frames / FRAME_BATCH).max(1);
    let first = shape.latent_frames.min(FRAME_BATCH + shape.latent_frames % FRAME_BATCH);
    let mut outputs = Vec::new();
    for batch in 0..batches.min(3) {
        let frames = if batch == 0 { first } else { FRAME_BATCH };
        if batch == 2 && batches > 3 {
            // The batches between the second and the last: their decoded frames, as one block
            // (the same bytes allocated, and a replay whose length does not grow with the video).
            let frames = output_frames(FRAME_BATCH, shape.temporal)
                .checked_mul(batches - 3)
                .ok_or(Overflow)?;
            outputs.push(decoder.tensor(3, At { frames, plane: full })?);
        }
        decoder.latents = At { frames, plane: latent_plane };
        let (image, _) = decoder.forward(shape)?;
        outputs.push(image);
        let kept = std::mem::take(&mut decoder.caches).into();
        for cache in std::mem::replace(&mut decoder.previous, kept) {
            decoder.free(cache);
        }
    }
    let video = At { frames: output_frames(shape.latent_frames, shape.temporal), plane: full };
    let joined = decoder.tensor(3, video)?;
    let previous = std::mem::take(&mut decoder.previous);
    for tensor in outputs.into_iter().chain(previous).chain(held).chain([joined]) {
        decoder.free(tensor);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::MIB;

    fn cogvideox(height: u64, width: u64, latent_frames: u64) -> VideoShape {
        VideoShape {
            videos: 1,
            latent_frames,
            temporal: 4,
            height,
            width,
            base_channels: 128,
            element: Ratio::int(2),
            other_tiles: 0,
            caches_replaced: false,
        }
    }

    /// The replay against diffusers' own decoder (`AutoencoderKLCogVideoX()`, CogVideoX-2b's and
    /// -5b's configuration, diffusers 0.42.1) decoding random latents of 3 frames of 16 × 24 in
    /// bf16 on the CPU, every tensor an operator returns counted until Python drops it
    /// (`tools/decode-peak.py cogvideox - 3 16 24`: 844,750,848 B), within 0.1 %.
    #[test]
    fn the_decoder_peaks_as_diffusers_does() {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, &cogvideox(128, 192, 3)).unwrap();
        let (replayed, reference) = (alloc.peak_requested().0, 844_750_848u64);
        assert!(replayed.abs_diff(reference) < reference / 1000, "{replayed}");
    }

    /// Tiled (`enable_tiling` with tiles of 96 × 128 pixels, the overlap factors' steps), against
    /// the same counter over diffusers' own tiled decode of 3 latent frames of 16 × 24
    /// (`tools/decode-peak.py cogvideox - 3 16 24 --tile 96 128`: 422,375,424 B): one tile's
    /// batches replayed beside the other tiles' decoded pixels, within 0.5 %.
    #[test]
    fn a_tiled_decode_peaks_as_diffusers_does() {
        let mut alloc = CachingAllocator::new();
        let shape =
            VideoShape { other_tiles: other_tiles(128, 192, 96, 128), ..cogvideox(96, 128, 3) };
        replay(&mut alloc, &shape).unwrap();
        let (replayed, reference) = (alloc.peak_requested().0, 422_375_424u64);
        assert!(replayed.abs_diff(reference) < reference / 200, "{replayed}");
    }

    #[test]
    fn latent_frames_grow_through_the_temporal_upsamplers() {
        // 3 latent frames: 5, then 9 (the first kept single); 2: 4, then 8; 1 stays 1. Thirteen
        // latent frames decode as 3 + 5 × 2: 9 + 5 × 8 = 49 frames, CogVideoX's default video.
        assert_eq!(output_frames(3, 4), 9);
        assert_eq!(output_frames(2, 4), 8);
        assert_eq!(output_frames(1, 4), 1);
        assert_eq!(output_frames(2, 8), 16);
        assert_eq!(output_frames(3, 1), 3);
    }

    fn decoder(alloc: &mut CachingAllocator) -> Decoder<'_> {
        let plane = Plane { height: 16, width: 16 };
        Decoder {
            replay: Replay { alloc, images: 1, element: Ratio::int(2), workspaces: true },
            videos: 1,
            latents: At { frames: 3, plane },
            caches: Vec::new(),
            previous: std::collections::VecDeque::new(),
            replaced: false,
        }
    }

    #[test]
    fn cogvideox_tiles_at_720_by_480_by_hand() {
        // Tiles of 30 × 45 latents (240 × 360 pixels) start every int(30 × 5/6) = 25 latent
        // rows and int(45 × 4/5) = 36 latent columns of 60 × 90: rows at 0, 25 and 50 (30, 30
        // and 10 latents high), columns at 0, 36 and 72 (45, 45 and 18 wide): 70 × 108 latents,
        // 560 × 864 pixels in all, less one whole tile.
        assert_eq!(other_tiles(480, 720, 240, 360), 560 * 864 - 240 * 360);
        // One tile wide: columns at 0 and 36 (45 and 9 latents wide), 54 latents, 432 pixels.
        // (A video no larger than a tile is not tiled at all: `eval/diffusion.rs`.)
        assert_eq!(other_tiles(480, 360, 240, 360), 560 * 432 - 240 * 360);
        // Tiny tiles step by one latent rather than by zero.
        assert_eq!(other_tiles(16, 16, 8, 8), 4 * 64 - 64);
    }

    #[test]
    fn a_spatial_norm_by_hand() {
        // 64 channels, 3 frames of 16 × 16 (768 positions), 2 B: 96 KiB per feature tensor,
        // 24 KiB per 16-channel tensor of 3 frames (8 KiB for one frame, 16 KiB for two).
        // Alive at its end: the input, the first and other frames of the interpolated latents
        // (8 + 16 KiB) and the joined latents (24), the two clones kept as caches (24 each),
        // conv_y, conv_b, the GroupNorm, the product and the output (96 each).
        let mut alloc = CachingAllocator::new();
        let mut d = decoder(&mut alloc);
        let at = d.latents;
        let input = d.tensor(64, at).unwrap();
        let output = d.spatial_norm(64, at).unwrap();
        let kib = 1024;
        assert_eq!(d.replay.alloc.peak_allocated().0, (96 + 24 + 24 + 2 * 24 + 5 * 96) * kib);
        // After it: the input, the output and the two caches.
        assert_eq!(d.caches.len(), 2);
        d.free(input);
        d.free(output);
        for cache in std::mem::take(&mut d.caches) {
            d.free(cache);
        }
        assert_eq!(alloc.peak_allocated().0, 672 * kib);
    }

    #[test]
    fn a_causal_convolution_by_hand() {
        // 64 to 32 channels over 3 frames of 16 × 16: the input padded to 5 frames (160 KiB),
        // its last 2 frames cloned as the cache (64 KiB), the output (48 KiB), beside the
        // input (96 KiB).
        let mut alloc = CachingAllocator::new();
        let mut d = decoder(&mut alloc);
        let at = d.latents;
        let input = d.tensor(64, at).unwrap();
        let output = d.causal_conv(64, 32, at).unwrap();
        assert_eq!(d.replay.alloc.peak_allocated().0, (96 + 160 + 64 + 48) * 1024);
        assert_eq!(d.caches.len(), 1);
        d.free(input);
        d.free(output);
    }

    #[test]
    fn the_later_batches_hold_the_caches_of_the_batch_before() {
        // Thirteen latent frames: a first batch of 3, then five of 2 beside the first's caches;
        // three latent frames are the first batch alone.
        let mut one = CachingAllocator::new();
        replay(&mut one, &cogvideox(480, 720, 3)).unwrap();
        let mut all = CachingAllocator::new();
        replay(&mut all, &cogvideox(480, 720, 13)).unwrap();
        assert!(all.peak_allocated() > one.peak_allocated());
    }

    #[test]
    fn caches_replaced_as_they_run_hold_one_set() {
        let peak = |latent_frames, caches_replaced| {
            let mut alloc = CachingAllocator::new();
            let shape = VideoShape { caches_replaced, ..cogvideox(480, 720, latent_frames) };
            replay(&mut alloc, &shape).unwrap();
            alloc.peak_allocated()
        };
        // One batch has no batch before: the two ways are the same.
        assert_eq!(peak(3, true), peak(3, false));
        // Thirteen latent frames: diffusers 0.31 holds the previous batch's whole set beside
        // the new caches; replaced as they run, the later batches hold one set between them,
        // so their peak falls, and stays at or above the first batch's, which has none.
        assert!(peak(13, true) < peak(13, false));
        assert!(peak(13, true) >= peak(3, true));
    }

    #[test]
    fn cogvideox_first_batch_at_720_by_480_by_hand() {
        // The first batch (3 latent frames, 9 decoded) peaks in the last up block's first
        // ResNet's first spatial norm: 256 channels × 9 frames × 480 × 720 × 2 B = 1,592,524,800
        // B each for its input, conv_y, conv_b, GroupNorm, product and output: 6 × that,
        // 8.9 GiB, beside the latents and caches (about 1.9 GiB: the caches of the 240 × 360
        // and 120 × 180 up blocks, the interpolated latents and the norm's clones) and the
        // block inputs the decoder's loop holds (the 240 × 360 up block's, 0.2 GiB).
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, &cogvideox(480, 720, 3)).unwrap();
        let full = 256 * 9 * 480 * 720 * 2;
        let peak = alloc.peak_allocated().0;
        assert!(peak > 6 * full, "{peak}");
        assert!(peak < 6 * full + 2304 * MIB, "{peak}");
    }

    #[test]
    fn a_long_video_holds_every_decoded_batch_at_its_last() {
        // 99 and 101 latent frames: one more batch of 2 latent frames, whose 8 decoded frames
        // (3 channels × 8 × 480 × 720 × 2 B = 16,588,800 B) are held while the last batch
        // decodes, and 2 more latent frames held throughout (16 × 2 × 60 × 90 × 2 B = 345,600
        // B); the batches' own tensors are the same. With this many batches held (48 and 49, 8
        // decoded frames each) the last batch is the peak, rather than the second, which holds
        // the first's caches of 9 frames.
        let mut before = CachingAllocator::new();
        replay(&mut before, &cogvideox(480, 720, 99)).unwrap();
        let mut after = CachingAllocator::new();
        replay(&mut after, &cogvideox(480, 720, 101)).unwrap();
        let one_batch = 3 * 8 * 480 * 720 * 2;
        let latents = 16 * 2 * 60 * 90 * 2;
        assert_eq!(after.peak_allocated().0 - before.peak_allocated().0, one_batch + latents);
    }

    #[test]
    fn huge_shapes_overflow_instead_of_wrapping() {
        let mut alloc = CachingAllocator::new();
        let shape = VideoShape { videos: u64::MAX / 2, ..cogvideox(480, 720, 13) };
        assert!(replay(&mut alloc, &shape).is_err());
    }
}
