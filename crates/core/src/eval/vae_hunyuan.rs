//! The causal 3D VAE decoder of HunyuanVideo (diffusers `AutoencoderKLHunyuanVideo`), its
//! tensors replayed through the caching allocator (`allocator.rs`) in the order diffusers
//! creates and drops them.
//!
//! Read in diffusers (huggingface/diffusers at 58eb52c, `models/autoencoders/
//! autoencoder_kl_hunyuan_video.py`):
//! - `_decode` decodes frame-wise (`use_framewise_decoding`, on by default) once the latents have
//!   more than `tile_sample_min_num_frames / 4` = 4 frames: chunks of 5 latent frames start
//!   every `tile_sample_stride_num_frames / 4` = 3, each decoded whole (17 frames out), every
//!   chunk's output kept until the chunks are blended and concatenated into the video;
//! - with `enable_tiling()` a chunk wider or taller than 32 latents decodes in tiles of 32 × 32
//!   latents starting every 24 (`tile_sample_min_height` 256 and `tile_sample_stride_height`
//!   192 pixels, the same across), clipped by the frame; every tile's output is kept, each row
//!   of tiles is concatenated, then the rows;
//! - the decoder (HunyuanVideo `vae/config.json`: `block_out_channels` [128, 256, 512, 512],
//!   `layers_per_block` 2, `latent_channels` 16): `conv_in` to 4c channels, a mid block
//!   (ResNet, single-head attention over every frame's positions, ResNet), four up blocks of
//!   three ResNets (4c → 4c, 4c → 4c, 4c → 2c, 2c → c) whose first three end in an upsampler
//!   that doubles the plane, the middle two doubling time after the first frame as well
//!   (T → 2T - 1), then GroupNorm, SiLU and `conv_out` to 3 channels;
//! - every `HunyuanVideoCausalConv3d` pads its input first (`F.pad`, replicate: a new tensor two
//!   frames and two positions larger for a 3-kernel, a plain copy for the 1-kernel shortcut);
//!   a ResNet's GroupNorms, SiLUs and convolutions each make a new tensor and it ends with the
//!   sum with its input (no output scale division);
//! - the upsampler interpolates the first frame and a contiguous copy of the others, keeps both
//!   (Python locals) while it concatenates them and convolves;
//! - the mid block's attention mask (`prepare_causal_attention_mask`) compares every pair of
//!   the chunk's positions (a boolean tensor), `torch.where` fills it from Python scalars (fp32)
//!   and `.to(dtype)` casts it to the activations' type: positions² values of each, the cast
//!   one held until the mid block returns. SDPA takes a float mask with the memory-efficient
//!   kernel, which never materialises the scores (`vae_blocks.rs`).
//!
//! cuDNN's convolution workspaces are not replayed (the library's choice, as in `vae_decode.rs`),
//! nor the blends' one-row temporaries, nor the padded copy the memory-efficient kernel makes of
//! a mask whose positions are not a multiple of 16 (a chunk of 90 × 160 latents has 72,000).

use super::allocator::{CachingAllocator, Tensor};
use super::calc::Overflow;
use super::vae_blocks::{
    At, Plane, Replay, Replays, VideoLatents, decode_tiles, last_of_kind, tiles,
};
use crate::bytes::Bytes;
use crate::ratio::Ratio;

/// The latents' channels (`latent_channels`).
const LATENT_CHANNELS: u64 = 16;
/// The VAE's spatial factor: three 2× upsamples.
pub(crate) const SPATIAL_FACTOR: u64 = 8;
/// The VAE's temporal factor (`temporal_compression_ratio`, the only one the decoder builds).
pub(crate) const TEMPORAL_FACTOR: u64 = 4;
/// Latent frames decoded together, and the step between chunks (16 and 12 sample frames).
const CHUNK: u64 = 5;
const CHUNK_STEP: u64 = 3;
/// Frame-wise decoding starts above this many latent frames (16 sample frames / 4).
const FRAMEWISE_ABOVE: u64 = 4;
/// The up blocks' (input, output) channels as multiples of the base, the spatial and temporal
/// doubling of each block's upsampler.
const UP_BLOCKS: [(u64, u64, bool, bool); 4] =
    [(4, 4, true, false), (4, 4, true, true), (4, 2, true, true), (2, 1, false, false)];
/// ResNets per up block: `layers_per_block` + 1.
const RESNETS: usize = 3;

/// The frames a chunk of `latent` frames decodes to.
pub(crate) fn output_frames(latent: u64) -> u64 {
    latent.saturating_sub(1) * TEMPORAL_FACTOR + 1
}

/// The latent frames of each chunk `_temporal_tiled_decode` decodes, in order.
pub(crate) fn chunks(latent_frames: u64) -> Vec<u64> {
    if latent_frames <= FRAMEWISE_ABOVE {
        return vec![latent_frames];
    }
    let starts = latent_frames.div_ceil(CHUNK_STEP);
    (0..starts).map(|i| CHUNK.min(latent_frames - i * CHUNK_STEP)).collect()
}

impl At {
    /// Padded by a causal 3-kernel: two frames before, a position on every side.
    fn padded(self) -> At {
        At {
            frames: self.frames + 2,
            plane: Plane { height: self.plane.height + 2, width: self.plane.width + 2 },
            ..self
        }
    }

    fn with_channels(self, channels: u64) -> At {
        At { channels, ..self }
    }
}

struct Decoder<'a> {
    replay: Replay<'a>,
    videos: u64,
    base: u64,
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

    fn free(&mut self, tensor: Tensor) {
        self.replay.free(tensor);
    }

    /// `HunyuanVideoCausalConv3d` with a 3-kernel: the padded input, then the output.
    fn conv(&mut self, input: At, channels: u64) -> Result<Tensor, Overflow> {
        let padded = self.tensor(input.padded())?;
        let output = self.tensor(input.with_channels(channels))?;
        self.free(padded);
        Ok(output)
    }

    /// `HunyuanVideoResnetBlockCausal3D.forward`; the caller frees its input after it returns.
    fn resnet(&mut self, at: At, to: u64) -> Result<Tensor, Overflow> {
        let norm1 = self.tensor(at)?;
        let act1 = self.tensor(at)?;
        self.free(norm1);
        let conv1 = self.conv(at, to)?;
        self.free(act1);
        let out = at.with_channels(to);
        let norm2 = self.tensor(out)?;
        self.free(conv1);
        let act2 = self.tensor(out)?;
        self.free(norm2);
        let conv2 = self.conv(out, to)?;
        self.free(act2);
        // The 1 × 1 × 1 shortcut pads by nothing: a copy, then the convolution.
        let shortcut = if at.channels == to {
            None
        } else {
            let copy = self.tensor(at)?;
            let shortcut = self.tensor(out)?;
            self.free(copy);
            Some(shortcut)
        };
        let sum = self.tensor(out)?;
        self.free(conv2);
        if let Some(shortcut) = shortcut {
            self.free(shortcut);
        }
        Ok(sum)
    }

    /// The mask of `prepare_causal_attention_mask` over `positions` positions: the comparison,
    /// the fp32 `torch.where`, the cast.
    fn mask(&mut self, positions: u64) -> Result<Tensor, Overflow> {
        let pairs = positions.checked_mul(positions).ok_or(Overflow)?;
        let bytes = |each: Ratio| Bytes::for_elements(pairs, each).ok_or(Overflow);
        let compared = self.replay.alloc.alloc(bytes(Ratio::int(1))?)?;
        let filled = self.replay.alloc.alloc(bytes(Ratio::int(4))?)?;
        self.free(compared);
        if self.replay.element == Ratio::int(4) {
            return Ok(filled);
        }
        let cast = self.replay.alloc.alloc(bytes(self.replay.element)?)?;
        self.free(filled);
        Ok(cast)
    }

    /// `Attention` (`AttnProcessor2_0`, one head of the block's channels, residual connection)
    /// over the flattened positions, consuming them. Its locals (the norm, query, key, value)
    /// live until it returns.
    fn attention(&mut self, input: Tensor, at: At) -> Result<Tensor, Overflow> {
        // GroupNorm of the transposed input runs on a contiguous copy.
        let copy = self.tensor(at)?;
        let norm = self.tensor(at)?;
        self.free(copy);
        let query = self.tensor(at)?;
        let key = self.tensor(at)?;
        let value = self.tensor(at)?;
        let attended = self.tensor(at)?;
        // A 16-bit output accumulates in fp32 for this head size (`vae_blocks.rs`).
        if self.replay.element < Ratio::int(4) {
            let accumulator = self.replay.video_elements(self.videos, at, Ratio::int(4))?;
            self.free(accumulator);
        }
        let projected = self.tensor(at)?;
        self.free(attended);
        let residual = self.tensor(at)?;
        self.free(projected);
        let rescaled = self.tensor(at)?;
        self.free(residual);
        for tensor in [norm, query, key, value, input] {
            self.free(tensor);
        }
        Ok(rescaled)
    }

    /// `HunyuanVideoMidBlock3D.forward`; the caller (the decoder's forward, whose variable
    /// holds the block's input until it returns) frees its input after it returns.
    fn mid_block(&mut self, at: At) -> Result<Tensor, Overflow> {
        let first = self.resnet(at, at.channels)?;
        // permute + flatten: a copy in position order.
        let flat = self.tensor(at)?;
        self.free(first);
        let positions = at
            .frames
            .checked_mul(at.plane.height)
            .and_then(|n| n.checked_mul(at.plane.width))
            .ok_or(Overflow)?;
        let mask = self.mask(positions)?;
        let attended = self.attention(flat, at)?;
        // unflatten + permute is a view; the ResNet makes it contiguous, a copy.
        let contiguous = self.tensor(at)?;
        let output = self.resnet(at, at.channels)?;
        self.free(contiguous);
        self.free(attended);
        self.free(mask);
        Ok(output)
    }

    /// `HunyuanVideoUpsampleCausal3D.forward`; the caller frees its input after it returns.
    fn upsample(&mut self, at: At, time: bool) -> Result<(Tensor, At), Overflow> {
        let doubled = at.plane.doubled();
        let first = self.tensor(At { frames: 1, plane: doubled, ..at })?;
        let later = at.frames.saturating_sub(1);
        let (joined, others) = if later == 0 {
            (None, None)
        } else {
            let copy = self.tensor(At { frames: later, ..at })?;
            let grown = if time { later * 2 } else { later };
            let others = self.tensor(At { frames: grown, plane: doubled, ..at })?;
            self.free(copy);
            (Some(self.tensor(At { frames: grown + 1, plane: doubled, ..at })?), Some(others))
        };
        let out =
            At { frames: if time { 2 * at.frames - 1 } else { at.frames }, plane: doubled, ..at };
        let output = self.conv(out, at.channels)?;
        for tensor in [joined, others].into_iter().flatten().chain([first]) {
            self.free(tensor);
        }
        Ok((output, out))
    }

    /// `HunyuanVideoDecoder3D.forward` over latents of `latent`'s frames and plane (the caller
    /// holds them): the decoded frames. The forward's variable holds each block's input until
    /// the block returns (`hidden_states = up_block(hidden_states)`), while the block rebinds its
    /// own.
    fn forward(&mut self, latent: At) -> Result<Tensor, Overflow> {
        let mut at = latent.with_channels(4 * self.base);
        let mut hidden = self.conv(latent, at.channels)?;
        let mid = self.mid_block(at)?;
        self.free(hidden);
        hidden = mid;
        for (from, to, spatial, time) in UP_BLOCKS {
            at = at.with_channels(from * self.base);
            let mut current: Option<Tensor> = None;
            for i in 0..RESNETS {
                let input = if i == 0 { at } else { at.with_channels(to * self.base) };
                let sum = self.resnet(input, to * self.base)?;
                self.replay.replace(&mut current, sum);
            }
            at = at.with_channels(to * self.base);
            if spatial || time {
                let up;
                (up, at) = self.upsample(at, time)?;
                self.replay.replace(&mut current, up);
            }
            hidden = self.replay.block_returns(hidden, current);
        }
        let norm = self.tensor(at)?;
        self.free(hidden);
        let act = self.tensor(at)?;
        self.free(norm);
        let output = self.conv(at, 3)?;
        self.free(act);
        Ok(output)
    }

    /// `post_quant_conv`, then the decoder, on latents of `frames` × `plane`: the decoded frames
    /// (the convolved latents are dropped when the caller rebinds `tile`).
    fn decode(&mut self, frames: u64, plane: Plane) -> Result<Tensor, Overflow> {
        let latent = At { channels: LATENT_CHANNELS, frames, plane };
        let convolved = self.tensor(latent)?;
        let decoded = self.forward(latent)?;
        self.free(convolved);
        Ok(decoded)
    }

    /// `tiled_decode` over a chunk of `frames` latent frames of `plane`: every tile decoded and
    /// kept, the rows concatenated, then the rows. Only the last tile of each size is replayed
    /// through the decoder; the outputs of the tiles before it are allocated together, which
    /// leaves the allocated peak exact (a tile's transients do not depend on where they go).
    fn tiled(&mut self, frames: u64, plane: Plane, tile: (u64, u64)) -> Result<Tensor, Overflow> {
        // Tiles start every three quarters of a tile.
        let plan = tiles(plane, tile, SPATIAL_FACTOR, (3, 4));
        let out_frames = output_frames(frames);
        let held = decode_tiles(
            self,
            &plan,
            |decoder, plane| {
                let (height, width) = (plane.height * SPATIAL_FACTOR, plane.width * SPATIAL_FACTOR);
                decoder.replay.rgb_bytes(decoder.videos, out_frames, height, width)
            },
            |decoder, plane| decoder.decode(frames, plane),
        )?;
        let videos = self.videos;
        let spans = (plan.rows.as_slice(), plan.columns.as_slice());
        self.replay.join_tiles((videos, out_frames), spans, plan.step, SPATIAL_FACTOR, held)
    }
}

/// Replays the decode of `shape` through `alloc`: the latents the pipeline holds, every chunk's
/// decode (tiled or whole) with the earlier chunks' outputs held, then the video concatenated.
/// As for tiles, only the last chunk of each length is replayed through the decoder.
pub(crate) fn replay(alloc: &mut CachingAllocator, shape: &VideoLatents) -> Result<(), Overflow> {
    let plane =
        Plane { height: shape.height / SPATIAL_FACTOR, width: shape.width / SPATIAL_FACTOR };
    let mut decoder = Decoder {
        replay: Replay { alloc, images: shape.videos, element: shape.element, workspaces: true },
        videos: shape.videos,
        base: shape.base_channels,
    };
    let latents =
        decoder.tensor(At { channels: LATENT_CHANNELS, frames: shape.latent_frames, plane })?;
    let chunks = chunks(shape.latent_frames);
    let mut held = vec![latents];
    let mut pending = 0u64;
    let last = last_of_kind(&chunks);
    for (index, &frames) in chunks.iter().enumerate() {
        if !last[index] {
            let bytes = decoder.replay.rgb_bytes(
                decoder.videos,
                output_frames(frames),
                shape.height,
                shape.width,
            )?;
            pending = pending.checked_add(bytes).ok_or(Overflow)?;
            continue;
        }
        held.extend(decoder.replay.lump(std::mem::take(&mut pending))?);
        let tiled = shape.tile.filter(|&(tile_h, tile_w)| {
            plane.height > tile_h / SPATIAL_FACTOR || plane.width > tile_w / SPATIAL_FACTOR
        });
        held.push(match tiled {
            Some(tile) => decoder.tiled(frames, plane, tile)?,
            None => decoder.decode(frames, plane)?,
        });
    }
    let video = decoder.replay.rgb_bytes(
        decoder.videos,
        output_frames(shape.latent_frames),
        shape.height,
        shape.width,
    )?;
    let joined = decoder.replay.alloc.alloc(Bytes(video))?;
    for tensor in held.into_iter().chain([joined]) {
        decoder.free(tensor);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(
        height: u64,
        width: u64,
        latent_frames: u64,
        tile: Option<(u64, u64)>,
    ) -> VideoLatents {
        VideoLatents {
            videos: 1,
            latent_frames,
            height,
            width,
            tile,
            base_channels: 128,
            element: Ratio::int(2),
        }
    }

    fn peak(shape: &VideoLatents) -> u64 {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, shape).expect("no overflow");
        alloc.peak_allocated().0
    }

    #[test]
    fn chunks_of_five_latent_frames_every_three() {
        // 129 frames: 33 latent frames, chunks starting at 0, 3, ..., 30, the last of 3. Their
        // kept frames (13, then 12 each, then what is left) make the 129 frames again.
        let chunks = chunks(33);
        assert_eq!(chunks.len(), 11);
        assert_eq!((chunks[0], chunks[9], chunks[10]), (5, 5, 3));
        assert_eq!(output_frames(5), 17);
        assert_eq!(output_frames(33), 129);
        assert_eq!(13 + 12 * 9 + (output_frames(3) - 1), 129);
        // Four latent frames or fewer decode whole.
        assert_eq!(super::chunks(4), vec![4]);
        assert_eq!(super::chunks(1), vec![1]);
    }

    #[test]
    fn only_the_last_of_each_kind_is_replayed() {
        assert_eq!(last_of_kind(&[5, 5, 5, 3]), [false, false, true, true]);
        let tiles = [(32, 32), (32, 16), (32, 32), (32, 16)];
        assert_eq!(last_of_kind(&tiles), [false, false, true, true]);
        // A very large tiled video replays a handful of decoder passes, whatever its size:
        // 16384 × 16384 pixels, 2048 × 2048 latents, 86 × 86 tiles a chunk.
        let huge = shape(16_384, 16_384, 33, Some((256, 256)));
        assert!(peak(&huge) > 129 * 16_384 * 16_384 * 3 * 2);
    }

    #[test]
    fn tiles_of_32_latents_every_24_by_hand() {
        // 720 × 1280 pixels: 90 × 160 latents; rows start at 0, 24, 48, 72 (the last 18 high),
        // columns at 0, 24, ..., 144 (the last 16 wide).
        let plan = tiles(Plane { height: 90, width: 160 }, (256, 256), SPATIAL_FACTOR, (3, 4));
        assert_eq!(plan.rows, vec![32, 32, 32, 18]);
        assert_eq!(plan.columns, vec![32, 32, 32, 32, 32, 32, 16]);
        assert_eq!(plan.step, (24, 24));
    }

    #[test]
    fn the_untiled_mask_is_the_peak_at_720p() {
        // A chunk of 5 latent frames of 90 × 160: 72,000 positions, whose mask is 72,000² values
        // in fp32 (20.7 GB) beside the boolean comparison (5.2 GB): the decode needs more than
        // both, and at least the 16-bit cast beside the fp32 fill.
        let positions: u64 = 5 * 90 * 160;
        let pairs = positions * positions;
        let untiled = peak(&shape(720, 1280, 33, None));
        assert!(untiled > pairs * 5, "{untiled}");
        // Tiled, a chunk's tile has 5 × 32 × 32 = 5,120 positions: the mask is 100 MiB in fp32
        // and the decode needs a small part of the untiled one.
        let tiled = peak(&shape(720, 1280, 33, Some((256, 256))));
        assert!(tiled < untiled / 8, "{tiled} vs {untiled}");
        assert!(tiled > 129 * 720 * 1280 * 3 * 2, "the video itself is held: {tiled}");
    }

    /// The replay against diffusers' own decoder (`AutoencoderKLHunyuanVideo()`, HunyuanVideo's
    /// configuration, diffusers 0.42.1) decoding random latents of 3 frames of 16 × 24 in bf16
    /// on the CPU, every tensor an operator returns counted until Python drops it
    /// (`tools/decode-peak.py hunyuan - 3 16 24`: 529,000,448 B), within 0.1 % (the replay's
    /// latents and per-position tensors differ by a few kilobytes).
    #[test]
    fn the_decoder_peaks_as_diffusers_does() {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, &shape(128, 192, 3, None)).unwrap();
        let (replayed, reference) = (alloc.peak_requested().0, 529_000_448u64);
        assert!(replayed.abs_diff(reference) < reference / 1000, "{replayed}");
    }

    /// Tiled, against the same counter over diffusers' own tiled decode of 3 latent frames of
    /// 16 × 24 in bf16 with tiles of 64 pixels every 48 (`tools/decode-peak.py hunyuan - 3 16 24
    /// --tile 64 64`: 90,298,368 B), within 0.1 %.
    #[test]
    fn a_tiled_decode_peaks_as_diffusers_does() {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, &shape(128, 192, 3, Some((64, 64)))).unwrap();
        let (replayed, reference) = (alloc.peak_requested().0, 90_298_368u64);
        assert!(replayed.abs_diff(reference) < reference / 1000, "{replayed}");
    }

    fn decoder(alloc: &mut CachingAllocator, element: i128) -> Decoder<'_> {
        Decoder {
            replay: Replay { alloc, images: 1, element: Ratio::int(element), workspaces: true },
            videos: 1,
            base: 1,
        }
    }

    #[test]
    fn the_mask_by_hand() {
        // 100 positions, 16-bit: the comparison (10,000 B, 10,240 in 512-byte blocks), the fp32
        // fill (40,000 B: 40,448), then the cast (20,000 B: 20,480) while the fill is live. The
        // peak is the fill and the cast: 60,928 B; the cast is what stays.
        let mut alloc = CachingAllocator::new();
        let mask = decoder(&mut alloc, 2).mask(100).expect("no overflow");
        assert_eq!(alloc.peak_allocated().0, 40_448 + 20_480);
        assert_eq!(alloc.allocated().0, 20_480);
        alloc.free(mask);
        // In fp32 the fill is the mask: the comparison and the fill, 50,688 B.
        let mut alloc = CachingAllocator::new();
        let _mask = decoder(&mut alloc, 4).mask(100).expect("no overflow");
        assert_eq!(alloc.peak_allocated().0, 10_240 + 40_448);
    }

    #[test]
    fn a_resnet_holds_four_tensors_at_once() {
        // One position of one channel: every tensor is one 512-byte block. Beside its input a
        // ResNet holds an activation, its padded copy and the convolution's output (or, with a
        // shortcut, the second convolution's output, the input's copy and the shortcut).
        for to in [1, 2] {
            let mut alloc = CachingAllocator::new();
            let mut decoder = decoder(&mut alloc, 4);
            let at = At { channels: 1, frames: 1, plane: Plane { height: 1, width: 1 } };
            let input = decoder.tensor(at).expect("no overflow");
            let output = decoder.resnet(at, to).expect("no overflow");
            decoder.free(input);
            decoder.free(output);
            assert_eq!(alloc.peak_allocated().0, 4 * 512, "to {to}");
            assert_eq!(alloc.allocated().0, 0);
        }
    }
}
