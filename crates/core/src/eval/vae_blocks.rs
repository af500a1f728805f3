//! The blocks an AutoencoderKL's encoder and decoder share, replayed tensor by tensor through the
//! caching allocator (`allocator.rs`) as they run without gradients: every tensor an operation
//! creates, freed when Python drops its last reference.
//!
//! Read in diffusers (huggingface/diffusers at 04957c2, `models/resnet.py` `ResnetBlock2D`,
//! `models/attention_processor.py` `AttnProcessor2_0`, `models/unets/unet_2d_blocks.py`
//! `UNetMidBlock2D`):
//! - a ResNet block holds its input for the residual while GroupNorm, SiLU (not in place) and
//!   the convolutions each make a new tensor, rebinding `hidden_states` (which drops the
//!   previous one); the output is `(input + hidden) / output_scale_factor`, two more; a block
//!   that changes channels adds its 1 × 1 `conv_shortcut` of the input;
//! - the mid block's attention is single-head over the plane's positions with the block's
//!   channels as the head size, which PyTorch's SDPA runs with the memory-efficient kernel (any
//!   head size that is a multiple of 8, `sdp_utils.cpp` `check_head_dim_size_mem_efficient`;
//!   flash stops at 256), so the scores are never materialised.
//!
//! A convolution ([`Replay::conv`]) also holds cuDNN's workspace while it runs. PyTorch keeps
//! these activations in NCHW (`contiguous`) layout, and cuDNN's Tensor Core convolutions work
//! in NHWC: the library transposes the input to NHWC before the convolution and the result
//! back to NCHW after it (cuDNN developer guide, legacy API: "the cuDNN library may use
//! padding, folding, and NCHW-to-NHWC transformations to call the Tensor Core operations";
//! NVIDIA's channels-last guidance, as quoted in MosaicML Composer's "Channels Last" method
//! card: "the NCHW tensor must be transposed to NHWC before the convolution and transposed back
//! to NCHW after"). The replay gives each convolution a workspace of one copy of its input and
//! one of its output, allocated after the output (`Conv_v8.cpp` `run_conv_plan` allocates the
//! plan's workspace from the caching allocator once the output exists) and freed when the
//! convolution returns. cuDNN may choose an engine with a larger workspace; the copies are the
//! least a transposing engine needs.

use super::allocator::{CachingAllocator, Tensor};
use super::calc::Overflow;
use crate::bytes::Bytes;
use crate::ratio::Ratio;

/// A resolution a VAE stage works at, in positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Plane {
    pub height: u64,
    pub width: u64,
}

impl Plane {
    pub(super) fn doubled(self) -> Self {
        Plane { height: self.height * 2, width: self.width * 2 }
    }

    /// After a stride-2 3 × 3 convolution over the input padded by one row and column
    /// (`Downsample2D` with `padding=0`): `⌊(n + 1 - 3) / 2⌋ + 1 = ⌊n / 2⌋` (an odd size loses
    /// its last row, unlike the UNet's convolutions with padding 1, which round up).
    pub(super) fn halved(self) -> Self {
        Plane { height: self.height / 2, width: self.width / 2 }
    }

    /// One more row and column, the zero padding `Downsample2D` adds before its convolution.
    pub(super) fn padded(self) -> Self {
        Plane { height: self.height + 1, width: self.width + 1 }
    }
}

/// A video tensor's channels, frames and plane (the causal 3D decoders').
#[derive(Clone, Copy)]
pub(super) struct At {
    pub channels: u64,
    pub frames: u64,
    pub plane: Plane,
}

/// Whether each item is the last of its kind: a reverse scan over the few distinct sizes a
/// decode has (a chunk length or two, up to four tile shapes), linear in the items.
pub(super) fn last_of_kind<T: PartialEq + Copy>(items: &[T]) -> Vec<bool> {
    let mut seen: Vec<T> = Vec::new();
    let mut last = vec![false; items.len()];
    for (index, item) in items.iter().enumerate().rev() {
        if !seen.contains(item) {
            seen.push(*item);
            last[index] = true;
        }
    }
    last
}

/// The sizes of the tiles along one axis of `size` latents: `tile` latents every `step`.
pub(super) fn spans(size: u64, tile: u64, step: u64) -> Vec<u64> {
    let step = usize::try_from(step.max(1)).unwrap_or(usize::MAX);
    (0..size).step_by(step).map(|start| tile.min(size - start)).collect()
}

/// One decode of a video's latents by a 3D VAE decoder (Wan 2.1's, HunyuanVideo's, LTX-Video's).
pub(crate) struct VideoLatents {
    /// Videos decoded together.
    pub videos: u64,
    pub latent_frames: u64,
    /// The video's pixels, height and width.
    pub height: u64,
    pub width: u64,
    /// Under `vae_tiling`, the tile's pixels, height and width (each decoder starts its tiles
    /// at its own fraction of a tile).
    pub tile: Option<(u64, u64)>,
    pub base_channels: u64,
    pub element: Ratio,
}

/// The tiles of a tiled decode over `plane` latents of `factor` pixels: tiles of `tile` pixels
/// (height, width) starting every `step` (a fraction: 7/8, 3/4) of a tile, row by row.
pub(super) struct Tiles {
    pub rows: Vec<u64>,
    pub columns: Vec<u64>,
    /// The tiles' starts apart, in latents (height, width).
    pub step: (u64, u64),
    /// Every tile's size in latents, and whether it is the last of its size.
    pub each: Vec<((u64, u64), bool)>,
}

/// A decoder replayed through a [`Replay`].
pub(super) trait Replays<'a> {
    fn replay(&mut self) -> &mut Replay<'a>;
}

/// The tiles of `plan` decoded in turn, every decoded tile kept until they are joined: only the
/// last tile of each size is replayed (`decode`, given its latent plane); the tiles before it
/// are allocated together, `tile_bytes` each, which leaves the allocated peak exact (a
/// tile's transients do not depend on where it lies) and the replay's length independent of
/// the number of tiles. Gives the tensors held for the join.
pub(super) fn decode_tiles<'a, D: Replays<'a>>(
    decoder: &mut D,
    plan: &Tiles,
    tile_bytes: impl Fn(&D, Plane) -> Result<u64, Overflow>,
    mut decode: impl FnMut(&mut D, Plane) -> Result<Tensor, Overflow>,
) -> Result<Vec<Tensor>, Overflow> {
    let (mut held, mut pending) = (Vec::new(), 0u64);
    for &((height, width), last) in &plan.each {
        let plane = Plane { height, width };
        if !last {
            pending = pending.checked_add(tile_bytes(decoder, plane)?).ok_or(Overflow)?;
            continue;
        }
        held.extend(decoder.replay().lump(std::mem::take(&mut pending))?);
        held.push(decode(decoder, plane)?);
    }
    Ok(held)
}

pub(super) fn tiles(plane: Plane, tile: (u64, u64), factor: u64, step: (u64, u64)) -> Tiles {
    let (tile_h, tile_w) = ((tile.0 / factor).max(1), (tile.1 / factor).max(1));
    let apart = |t: u64| (t * step.0 / step.1).max(1);
    let (step_h, step_w) = (apart(tile_h), apart(tile_w));
    let rows = spans(plane.height, tile_h, step_h);
    let columns = spans(plane.width, tile_w, step_w);
    let sizes: Vec<(u64, u64)> =
        rows.iter().flat_map(|&h| columns.iter().map(move |&w| (h, w))).collect();
    let last = last_of_kind(&sizes);
    Tiles { rows, columns, step: (step_h, step_w), each: sizes.into_iter().zip(last).collect() }
}

/// One pass of a VAE half over `images` images whose activations are `element` bytes each.
pub(super) struct Replay<'a> {
    pub alloc: &'a mut CachingAllocator,
    pub images: u64,
    pub element: Ratio,
    /// Each convolution also holds cuDNN's NHWC copies while it runs (the module's
    /// documentation); off only to compare the tensors with diffusers' own on a CPU.
    pub workspaces: bool,
}

impl Replay<'_> {
    pub(super) fn tensor(&mut self, channels: u64, plane: Plane) -> Result<Tensor, Overflow> {
        self.elements(channels, plane, self.element)
    }

    /// A tensor of `videos` videos at `at`'s channels, frames and plane.
    pub(super) fn video(&mut self, videos: u64, at: At) -> Result<Tensor, Overflow> {
        self.video_elements(videos, at, self.element)
    }

    /// As [`Replay::video`], `each` bytes an element.
    pub(super) fn video_elements(
        &mut self,
        videos: u64,
        at: At,
        each: Ratio,
    ) -> Result<Tensor, Overflow> {
        self.images = videos.checked_mul(at.frames).ok_or(Overflow)?;
        self.elements(at.channels, at.plane, each)
    }

    pub(super) fn free(&mut self, tensor: Tensor) {
        self.alloc.free(tensor);
    }

    /// Bytes of `frames` decoded frames of `videos` videos at `height` × `width` pixels (3
    /// colours).
    pub(super) fn rgb_bytes(
        &self,
        videos: u64,
        frames: u64,
        height: u64,
        width: u64,
    ) -> Result<u64, Overflow> {
        let count = [videos, 3, frames, height, width]
            .into_iter()
            .try_fold(1u64, u64::checked_mul)
            .ok_or(Overflow)?;
        Ok(Bytes::for_elements(count, self.element).ok_or(Overflow)?.0)
    }

    /// Tensors of `bytes` held together (outputs the replay does not trace one by one), when
    /// there are any.
    pub(super) fn lump(&mut self, bytes: u64) -> Result<Option<Tensor>, Overflow> {
        if bytes == 0 { Ok(None) } else { self.alloc.alloc(Bytes(bytes)).map(Some) }
    }

    /// A tiled decode's end (diffusers' `tiled_decode`): each row keeps the step's pixels of
    /// every tile (a tile clipped by the video keeps what it has), concatenated across, then
    /// the rows down; the decoded `tiles`, held until then, are freed after. `rows` and
    /// `columns` are the tiles' sizes in latents of `factor` pixels. Gives the joined video.
    pub(super) fn join_tiles(
        &mut self,
        (videos, frames): (u64, u64),
        (rows, columns): (&[u64], &[u64]),
        (step_h, step_w): (u64, u64),
        factor: u64,
        tiles: Vec<Tensor>,
    ) -> Result<Tensor, Overflow> {
        let kept =
            |spans: &[u64], step: u64| -> u64 { spans.iter().map(|s| s.min(&step) * factor).sum() };
        let width = kept(columns, step_w);
        let mut joined_rows = Vec::new();
        for &h in rows {
            let bytes = self.rgb_bytes(videos, frames, h.min(step_h) * factor, width)?;
            joined_rows.extend(self.lump(bytes)?);
        }
        let bytes = self.rgb_bytes(videos, frames, kept(rows, step_h), width)?;
        let video = self.alloc.alloc(Bytes(bytes))?;
        for tensor in joined_rows.into_iter().chain(tiles) {
            self.alloc.free(tensor);
        }
        Ok(video)
    }

    /// A block's next result replaces the one before it (the block rebinds its own variable).
    pub(super) fn replace(&mut self, current: &mut Option<Tensor>, result: Tensor) {
        if let Some(previous) = current.replace(result) {
            self.alloc.free(previous);
        }
    }

    /// A block returns: the decoder's forward, whose variable held the block's input throughout
    /// (`hidden_states = up_block(hidden_states, ...)` rebinds it only now), takes its output.
    pub(super) fn block_returns(&mut self, input: Tensor, output: Option<Tensor>) -> Tensor {
        match output {
            Some(output) => {
                self.alloc.free(input);
                output
            }
            None => input,
        }
    }

    pub(super) fn elements(
        &mut self,
        channels: u64,
        plane: Plane,
        each: Ratio,
    ) -> Result<Tensor, Overflow> {
        let count = self.count(channels, plane)?;
        let bytes = Bytes::for_elements(count, each).ok_or(Overflow)?;
        self.alloc.alloc(bytes)
    }

    /// Elements of a tensor of the images at `channels` and `plane`.
    fn count(&self, channels: u64, plane: Plane) -> Result<u64, Overflow> {
        self.images
            .checked_mul(channels)
            .and_then(|n| n.checked_mul(plane.height))
            .and_then(|n| n.checked_mul(plane.width))
            .ok_or(Overflow)
    }

    /// A convolution from `from` channels at `input` to `to` channels at `output`: its output,
    /// and while it runs cuDNN's workspace holding NHWC copies of its input and output (see the
    /// module's documentation).
    pub(super) fn conv(
        &mut self,
        from: u64,
        input: Plane,
        to: u64,
        output: Plane,
    ) -> Result<Tensor, Overflow> {
        let result = self.tensor(to, output)?;
        if !self.workspaces {
            return Ok(result);
        }
        let copies =
            self.count(from, input)?.checked_add(self.count(to, output)?).ok_or(Overflow)?;
        let workspace =
            self.alloc.alloc(Bytes::for_elements(copies, self.element).ok_or(Overflow)?)?;
        self.alloc.free(workspace);
        Ok(result)
    }

    /// `ResnetBlock2D.forward`, consuming its input (the caller rebinds it).
    pub(super) fn resnet(
        &mut self,
        input: Tensor,
        from: u64,
        to: u64,
        at: Plane,
    ) -> Result<Tensor, Overflow> {
        let output = self.resnet_beside(from, to, at)?;
        self.alloc.free(input);
        Ok(output)
    }

    /// `ResnetBlock2D.forward` beside its input, which the caller holds and frees.
    pub(super) fn resnet_beside(
        &mut self,
        from: u64,
        to: u64,
        at: Plane,
    ) -> Result<Tensor, Overflow> {
        let norm1 = self.tensor(from, at)?;
        let act1 = self.tensor(from, at)?;
        self.alloc.free(norm1);
        let conv1 = self.conv(from, at, to, at)?;
        self.alloc.free(act1);
        let norm2 = self.tensor(to, at)?;
        self.alloc.free(conv1);
        let act2 = self.tensor(to, at)?;
        self.alloc.free(norm2);
        let conv2 = self.conv(to, at, to, at)?;
        self.alloc.free(act2);
        let shortcut = if from == to { None } else { Some(self.conv(from, at, to, at)?) };
        let sum = self.tensor(to, at)?;
        let output = self.tensor(to, at)?;
        self.alloc.free(sum);
        self.alloc.free(conv2);
        if let Some(shortcut) = shortcut {
            self.alloc.free(shortcut);
        }
        Ok(output)
    }

    /// `AttnProcessor2_0` over the plane's positions with one head of `channels`.
    pub(super) fn attention(
        &mut self,
        input: Tensor,
        channels: u64,
        at: Plane,
    ) -> Result<Tensor, Overflow> {
        let norm = self.tensor(channels, at)?;
        let query = self.tensor(channels, at)?;
        let key = self.tensor(channels, at)?;
        let value = self.tensor(channels, at)?;
        self.alloc.free(norm);
        let attended = self.tensor(channels, at)?;
        // For head sizes above its key block the kernel iterates over the value's columns and
        // accumulates the output in fp32 when the output is 16-bit: `_efficient_attention_forward`
        // allocates `output_accum`, [batch, positions, heads, head size] in float32, beside the
        // output (`kNeedsOutputAccumulatorBuffer`: not kept in registers and `output_accum_t`,
        // float, differs from `output_t`; PyTorch `kernel_forward.h`). An fp32 output is its own
        // accumulator. The log-sum-exp is empty without gradients.
        let accumulator = if self.element < Ratio::int(4) {
            Some(self.elements(channels, at, Ratio::int(4))?)
        } else {
            None
        };
        for tensor in [query, key, value].into_iter().chain(accumulator) {
            self.alloc.free(tensor);
        }
        let projected = self.tensor(channels, at)?;
        self.alloc.free(attended);
        // Back from (positions, channels) to (channels, height, width): a copy.
        let image = self.tensor(channels, at)?;
        self.alloc.free(projected);
        let residual = self.tensor(channels, at)?;
        self.alloc.free(image);
        let output = self.tensor(channels, at)?;
        self.alloc.free(residual);
        self.alloc.free(input);
        Ok(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_padded_stride_2_convolution_rounds_odd_sizes_down() {
        // 7 rows padded to 8: windows start at rows 0, 2 and 4 (one at 6 would need row 8): 3.
        let plane = Plane { height: 7, width: 64 };
        assert_eq!(plane.halved(), Plane { height: 3, width: 32 });
        assert_eq!(plane.padded(), Plane { height: 8, width: 65 });
    }
}
