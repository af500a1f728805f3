//! The decoder of a deep-compression autoencoder (diffusers `AutoencoderDC`, Sana's
//! dc-ae-f32c32-sana-1.0), its tensors replayed through the caching allocator (`allocator.rs`)
//! in the order diffusers creates and drops them.
//!
//! Read in diffusers (huggingface/diffusers at 58eb52c, `models/autoencoders/autoencoder_dc.py`,
//! `models/normalization.py` `RMSNorm`, and `scripts/convert_dcae_to_diffusers.py` for Sana's
//! configuration):
//! - 32 latent channels, 32 × 32 pixels to a latent; decoder channels 128, 256, 512, 512, 1024
//!   and 1024 from the output's level to the latents', three blocks a level: ResBlocks on the
//!   three levels nearest the pixels, EfficientViT blocks (multiscale linear attention and a
//!   GLU MBConv) on the three deepest;
//! - `conv_in` to 1024 channels plus the latents repeated to 1024 channels (`in_shortcut`, its
//!   `x` held until the forward returns);
//!   each level but the deepest opens with `DCUpBlock2d`: its input interpolated 2× (nearest),
//!   a convolution to the level's channels, plus the input repeated along channels and moved
//!   into 2 × 2 pixels (`repeat_interleave`, `pixel_shuffle`: two tensors); then the level's
//!   blocks, an `nn.Sequential` whose input the decoder's loop holds until it returns;
//! - a ResBlock holds its input for the residual: a convolution, SiLU, a convolution, then
//!   `RMSNorm` over the channels (a channels-last view): an fp32 copy and its square for the
//!   variance, the product with its reciprocal root (fp32), the cast back, the weight's product
//!   and the bias's sum, then the residual's sum;
//! - `norm_out` (the same `RMSNorm`), ReLU and `conv_out` to 3 colours.
//!
//! The peak, at any size, is a ResBlock's norm at the output's level: the level's input (half
//! the size in pixels, twice the channels), the block's input, its second convolution's output
//! and the norm's fp32 copy and square, 6.5 tensors of 128 channels at the output's size in
//! bf16. The EfficientViT blocks of the deep levels are replayed as their output and one
//! transient of [`EVIT_TRANSIENT`] times their input (counted on diffusers' block: 38.5 to
//! 40.4), at most 2.5 such tensors at the fourth level: never the peak.
//!
//! Under `enable_tiling` (`tiled_decode`) an image wider or taller than a tile (512 pixels) is
//! decoded tile by tile: tiles of 16 latents start every 14 (448 pixels), every decoded tile is
//! kept until they are blended, each row's kept parts are concatenated, then the rows.

use super::allocator::{CachingAllocator, Tensor};
use super::calc::Overflow;
use super::vae_blocks::{At, Plane, Replay, Replays, decode_tiles, tiles};
use crate::ratio::Ratio;

/// The latents' channels (`latent_channels`).
const LATENT_CHANNELS: u64 = 32;
/// Pixels per latent on a side: five 2× upsamplings.
pub(crate) const SPATIAL_FACTOR: u64 = 32;
/// Channels of each level as multiples of the output level's (`decoder_block_out_channels`
/// 128, 256, 512, 512, 1024, 1024), from the output's level to the deepest.
const LEVELS: [u64; 6] = [1, 2, 4, 4, 8, 8];
/// Levels nearest the pixels whose blocks are ResBlocks; the deeper ones are EfficientViT.
const RESBLOCK_LEVELS: usize = 3;
/// Blocks per level (`decoder_layers_per_block`).
const BLOCKS: usize = 3;
/// An EfficientViT block's largest live tensors beside its input, in multiples of it.
const EVIT_TRANSIENT: u64 = 40;
/// A tile starts 7/8 of a tile after the one before (`tile_sample_stride` 448 of
/// `tile_sample_min` 512 pixels, diffusers' defaults).
const TILE_STEP: (u64, u64) = (7, 8);

/// One decode of images' latents.
pub(crate) struct DcShape {
    pub images: u64,
    /// Output pixels, height and width.
    pub height: u64,
    pub width: u64,
    /// The output level's channels (128).
    pub base_channels: u64,
    pub element: Ratio,
    /// Under `vae_tiling`, the tile (height, width) in pixels.
    pub tile: Option<(u64, u64)>,
}

struct Decoder<'a> {
    replay: Replay<'a>,
    images: u64,
}

impl<'a> Replays<'a> for Decoder<'a> {
    fn replay(&mut self) -> &mut Replay<'a> {
        &mut self.replay
    }
}

impl Decoder<'_> {
    fn tensor(&mut self, at: At) -> Result<Tensor, Overflow> {
        self.replay.video(self.images, at)
    }

    fn fp32(&mut self, at: At) -> Result<Tensor, Overflow> {
        self.replay.video_elements(self.images, at, Ratio::int(4))
    }

    fn free(&mut self, tensor: Tensor) {
        self.replay.free(tensor);
    }

    /// diffusers `RMSNorm` with a weight and a bias over `input` (not consumed): its output.
    /// `variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)` (an fp32
    /// copy, its square, one fp32 value per pixel kept until the norm returns), then
    /// `hidden_states * torch.rsqrt(variance + eps)` (fp32), cast back to the weight's type,
    /// times the weight, plus the bias. An fp32 input is its own copy, and needs no cast.
    fn rms_norm(&mut self, input: At) -> Result<Tensor, Overflow> {
        let sixteen_bit = self.replay.element < Ratio::int(4);
        let upcast = if sixteen_bit { Some(self.fp32(input)?) } else { None };
        let squared = self.fp32(input)?;
        if let Some(upcast) = upcast {
            self.free(upcast);
        }
        let per_pixel = At { channels: 1, ..input };
        let variance = self.fp32(per_pixel)?;
        self.free(squared);
        let shifted = self.fp32(per_pixel)?;
        let root = self.fp32(per_pixel)?;
        self.free(shifted);
        let product = self.fp32(input)?;
        self.free(root);
        let normed = if sixteen_bit {
            let cast = self.tensor(input)?;
            self.free(product);
            cast
        } else {
            product
        };
        let output = self.affine(normed, input)?;
        self.free(variance);
        Ok(output)
    }

    /// `hidden_states * weight + bias`, consuming `normed`.
    fn affine(&mut self, normed: Tensor, at: At) -> Result<Tensor, Overflow> {
        let weighted = self.tensor(at)?;
        self.free(normed);
        let biased = self.tensor(at)?;
        self.free(weighted);
        Ok(biased)
    }

    /// `ResBlock.forward` over `input`, which the caller keeps until it returns.
    fn resblock(&mut self, input: At) -> Result<Tensor, Overflow> {
        let conv = self.tensor(input)?;
        let act = self.tensor(input)?;
        self.free(conv);
        let conv = self.tensor(input)?;
        self.free(act);
        let norm = self.rms_norm(input)?;
        self.free(conv);
        let sum = self.tensor(input)?;
        self.free(norm);
        Ok(sum)
    }

    /// An EfficientViT block over `input` (kept by the caller): its transients as one tensor,
    /// then its output.
    fn evit(&mut self, input: At) -> Result<Tensor, Overflow> {
        let transient = self.tensor(At { channels: input.channels * EVIT_TRANSIENT, ..input })?;
        let output = self.tensor(input)?;
        self.free(transient);
        Ok(output)
    }

    /// `DCUpBlock2d` (interpolated, with the shortcut) from `input` to `channels`: its output.
    fn upsample(&mut self, input: At, channels: u64) -> Result<(Tensor, At), Overflow> {
        let doubled = At { plane: input.plane.doubled(), ..input };
        let out = At { channels, ..doubled };
        let interpolated = self.tensor(doubled)?;
        let conv = self.tensor(out)?;
        self.free(interpolated);
        let repeated = self.tensor(out)?;
        let shuffled = self.tensor(out)?;
        self.free(repeated);
        let sum = self.tensor(out)?;
        self.free(conv);
        self.free(shuffled);
        Ok((sum, out))
    }

    /// `Decoder.forward` over `latents`: the image.
    fn decode(&mut self, latents: At, base: u64) -> Result<Tensor, Overflow> {
        let deepest = LEVELS.len() - 1;
        let mut at = At { channels: base * LEVELS[deepest], ..latents };
        // The repeated latents stay bound to the forward's `x` until it returns.
        let repeated = self.tensor(at)?;
        let conv = self.tensor(at)?;
        let mut x = self.tensor(at)?;
        self.free(conv);
        for level in (0..=deepest).rev() {
            let input = x;
            let mut current: Option<Tensor> = None;
            let mut current_at = at;
            if level < deepest {
                let (up, up_at) = self.upsample(at, base * LEVELS[level])?;
                current = Some(up);
                current_at = up_at;
            }
            for _ in 0..BLOCKS {
                let output = if level < RESBLOCK_LEVELS {
                    self.resblock(current_at)?
                } else {
                    self.evit(current_at)?
                };
                self.replay.replace(&mut current, output);
            }
            x = self.replay.block_returns(input, current);
            at = current_at;
        }
        let norm = self.rms_norm(at)?;
        self.free(x);
        let act = self.tensor(at)?;
        self.free(norm);
        let image = self.tensor(At { channels: 3, ..at })?;
        self.free(act);
        self.free(repeated);
        Ok(image)
    }

    /// `tiled_decode` of `latents` in tiles of `tile` pixels (height, width): the image.
    fn tiled(&mut self, latents: At, tile: (u64, u64), base: u64) -> Result<Tensor, Overflow> {
        let plan = tiles(latents.plane, tile, SPATIAL_FACTOR, TILE_STEP);
        let held = decode_tiles(
            self,
            &plan,
            |decoder, plane| {
                let (h, w) = (plane.height * SPATIAL_FACTOR, plane.width * SPATIAL_FACTOR);
                decoder.replay.rgb_bytes(decoder.images, 1, h, w)
            },
            |decoder, plane| decoder.decode(At { plane, ..latents }, base),
        )?;
        let spans = (plan.rows.as_slice(), plan.columns.as_slice());
        self.replay.join_tiles((self.images, 1), spans, plan.step, SPATIAL_FACTOR, held)
    }
}

/// Replays one decode of `shape` through `alloc`, whose cache may already hold freed blocks of
/// earlier phases: the latents (held by the pipeline throughout), the decoder, its output.
pub(crate) fn replay(alloc: &mut CachingAllocator, shape: &DcShape) -> Result<(), Overflow> {
    let plane =
        Plane { height: shape.height / SPATIAL_FACTOR, width: shape.width / SPATIAL_FACTOR };
    let mut decoder = Decoder {
        replay: Replay { alloc, images: 1, element: shape.element, workspaces: true },
        images: shape.images,
    };
    let latents_at = At { channels: LATENT_CHANNELS, frames: 1, plane };
    let latents = decoder.tensor(latents_at)?;
    // diffusers tiles when the latents are wider or taller than a tile.
    let tile = shape.tile.filter(|&(height, width)| {
        plane.height > height / SPATIAL_FACTOR || plane.width > width / SPATIAL_FACTOR
    });
    let image = match tile {
        Some(tile) => decoder.tiled(latents_at, tile, shape.base_channels)?,
        None => decoder.decode(latents_at, shape.base_channels)?,
    };
    decoder.free(image);
    decoder.free(latents);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(latents: (u64, u64), element: i128, tile: Option<(u64, u64)>) -> DcShape {
        DcShape {
            images: 1,
            height: latents.0 * SPATIAL_FACTOR,
            width: latents.1 * SPATIAL_FACTOR,
            base_channels: 128,
            element: Ratio::int(element),
            tile,
        }
    }

    fn peak(shape: &DcShape) -> u64 {
        let mut alloc = CachingAllocator::new();
        replay(&mut alloc, shape).unwrap();
        alloc.peak_requested().0
    }

    /// The latents the replay holds beside the decoder, which the reference leaves out.
    fn latents(shape: &DcShape, element: u64) -> u64 {
        LATENT_CHANNELS * (shape.height / SPATIAL_FACTOR) * (shape.width / SPATIAL_FACTOR) * element
    }

    /// Against diffusers' own decoder (`AutoencoderDC` with dc-ae-f32c32-sana-1.0's
    /// configuration, diffusers 0.42.1) on random latents on the CPU, every tensor an
    /// operator returns counted until Python drops it (`tools/decode-peak.py dc - 1 H W`).
    #[test]
    fn the_decoder_peaks_as_diffusers_does() {
        let small = shape((2, 3), 2, None);
        assert_eq!(peak(&small), 10_235_904 + latents(&small, 2));
        let square = shape((4, 4), 2, None);
        assert_eq!(peak(&square), 27_295_744 + latents(&square, 2));
        let fp32 = shape((2, 3), 4, None);
        assert_eq!(peak(&fp32), 14_204_928 + latents(&fp32, 4));
    }

    /// Tiled (`enable_tiling`, tiles of 512 pixels every 448), against diffusers' own tiled
    /// decode of 20 × 18 latents (`tools/decode-peak.py dc - 1 20 18 --tiling`): rows of 16
    /// and 6 latents, columns of 16 and 4.
    #[test]
    fn a_tiled_decode_peaks_as_diffusers_does() {
        let tiled = shape((20, 18), 2, Some((512, 512)));
        assert_eq!(peak(&tiled), 436_731_904 + latents(&tiled, 2));
    }

    /// 6.5 tensors of 128 channels at the output's size: the level's input (0.5), the
    /// ResBlock's input and its second convolution's output, the norm's fp32 copy and square;
    /// beside them the latents repeated to 1,024 channels.
    #[test]
    fn the_peak_is_a_top_level_norm() {
        let image = shape((4, 4), 2, None);
        let unit = 128 * 128 * 128 * 2;
        let repeated = 1024 * 4 * 4 * 2;
        assert_eq!(peak(&image), unit * 13 / 2 + repeated + latents(&image, 2));
    }
}
