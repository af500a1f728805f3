//! What a UNet's training step stores for its backward pass, level by level (diffusers
//! `UNet2DConditionModel`): every ResNet, attention block and transformer layer keeps the inputs
//! of its operations at its level's positions and channels; eager attention adds each layer's
//! probabilities, with the level's heads. Full checkpointing (diffusers
//! `enable_gradient_checkpointing`: one checkpoint per ResNet and per `BasicTransformerBlock`,
//! huggingface/diffusers transformer_2d.py at 58eb52c) keeps each one's input and recomputes the
//! largest in the backward pass.
//!
//! The levels are counted in two halves, the down blocks with the mid block and the up blocks,
//! because a trained ControlNet (`controlnet_training.rs`) splits them: its own copy of the down
//! half and mid block is trained, and the frozen denoiser records only its up half, where the
//! ControlNet's residuals join it.

use super::calc::{self, Overflow, Product, formula};
use super::training as llm_training;
use crate::budget::{Category, Component, HeldBy, Provenance};
use crate::bytes::{Bytes, group_thousands};
use crate::hir::{
    Attention, BlockLayout, Checkpointing, DenoiserBlocks, Diffusion, LoraTarget, Training,
};
use crate::ratio::Ratio;

/// Tensors a ResNet block (diffusers `ResnetBlock2D`) stores per position, of its input's
/// channels: GroupNorm 1's input (also the shortcut convolution's), SiLU's input and conv 1's
/// input; and of its output's: GroupNorm 2's input, SiLU's input and conv 2's input. A
/// convolution keeps its input whether or not its weight is trained (PyTorch's
/// `convolution_backward` takes both from one saved pair).
const RESNET_TENSORS_PER_SIDE: u64 = 3;

/// Tensors of `c` channels a UNet attention block (diffusers `Transformer2DModel`) stores per
/// position around its transformer layers: GroupNorm input and output (proj_in's input) and
/// proj_out's input. Gradient checkpointing wraps the layers, not these. Where `proj_in` and
/// `proj_out` are linear layers (`linear_projection`) and frozen, they keep nothing: the
/// GroupNorm's input alone.
const ATTENTION_BLOCK_TENSORS: u64 = 3;

/// Tensors of `c` channels a frozen transformer layer (diffusers `BasicTransformerBlock`) stores
/// per position: the input of each of its three LayerNorms; the self-attention's q, k, v and
/// output and the cross-attention's q and output (SDPA keeps them; the keys and values over
/// the text tokens are small); the GEGLU projection (8c: value and gate, which the GELU and the
/// product read) and the GELU's output (4c). A frozen linear layer keeps nothing: its input's
/// gradient needs only its weight (PyTorch saves an `mm` operand only for the other operand's
/// gradient). 3 + 6 + 12 = 21; `tools/unet-train-peak.py`'s counter finds 21.2 per layer (the
/// rest the text's keys and values).
const FROZEN_LAYER_TENSORS: u64 = 21;

/// A trained transformer layer adds what its linear layers keep: each LayerNorm's output (the
/// projections' input) and the GEGLU product `ff.net.2` reads (4c); `to_out` reads the
/// attention's output, which SDPA keeps already (its heads transposed back are a view of it).
/// 21 + 3 + 4 = 28 (the counter: 28.2).
const TRAINED_LAYER_TENSORS: u64 = 28;

/// What a level's transformer layers keep, by what trains in them.
#[derive(Clone, Copy, Debug)]
pub(super) enum Weights<'a> {
    /// Every weight trained (full fine-tuning, a ControlNet).
    Trained,
    /// Frozen, with nothing trained inside (a denoiser beside a trained ControlNet).
    Frozen,
    /// Frozen, with LoRA adapters (PEFT's `to_q` … `to_out.0` match both attentions'
    /// projections, `up` and `down` the feed-forward's).
    Adapted { rank: u64, targets: &'a [LoraTarget] },
}

impl Weights<'_> {
    /// The values one transformer layer of `c` channels keeps per position: a frozen layer's,
    /// and, adapted, each adapter's input that is not kept already (`lora_A` keeps it: the
    /// self-attention's LayerNorm output once for q, k and v, the cross-attention's for q, the
    /// feed-forward's LayerNorm output for `up`, the GEGLU product for `down`; `to_out.0` reads
    /// the attention's output, which SDPA keeps) and each adapter's rank-wide output (`lora_B`'s
    /// input) over the positions.
    fn layer_values(self, c: u64) -> Result<u64, Overflow> {
        let Weights::Adapted { rank, targets } = self else {
            let tensors = match self {
                Weights::Trained => TRAINED_LAYER_TENSORS,
                _ => FROZEN_LAYER_TENSORS,
            };
            return tensors.checked_mul(c).ok_or(Overflow);
        };
        let has = |t: LoraTarget| targets.contains(&t);
        let self_input = u64::from(has(LoraTarget::Q) || has(LoraTarget::K) || has(LoraTarget::V));
        let inputs = self_input
            + u64::from(has(LoraTarget::Q))
            + u64::from(has(LoraTarget::Up))
            + 4 * u64::from(has(LoraTarget::Down));
        // Adapters over the positions: q and o in both attentions, k and v in the
        // self-attention (the cross-attention's read the text), up and down.
        let adapters: u64 = targets
            .iter()
            .map(|t| match t {
                LoraTarget::Q | LoraTarget::O => 2,
                LoraTarget::K | LoraTarget::V | LoraTarget::Up | LoraTarget::Down => 1,
                LoraTarget::Gate => 0,
            })
            .sum();
        (FROZEN_LAYER_TENSORS + inputs)
            .checked_mul(c)
            .and_then(|n| rank.checked_mul(adapters)?.checked_add(n))
            .ok_or(Overflow)
    }
}

/// The blocks of one half of a level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Half {
    resnets: u64,
    /// The ResNets' input channels, summed (coming up, each input is the previous output
    /// concatenated with a skip connection), the first's, and the widest.
    resnet_inputs: u64,
    first_input: u64,
    widest_input: u64,
    /// Attention blocks (`Transformer2DModel`).
    attention_blocks: u64,
    /// Transformer layers (`BasicTransformerBlock`) of those attention blocks.
    layers: u64,
    /// Values per position the convolutions between blocks keep at this level: a
    /// downsampler's input; the input of the upsampler's convolution that brings the level
    /// above up to this one; at the first level, the output norm's, SiLU's and `conv_out`'s.
    between: u64,
}

/// One level of a UNet: its positions per sample, channels, and blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Level {
    width: u64,
    height: u64,
    positions: u64,
    pub(super) channels: u64,
    /// Heads of this level's attention layers.
    heads: u64,
    /// `proj_in` and `proj_out` are linear layers.
    linear_projection: bool,
    /// Going down, and at the deepest level the mid block.
    down: Half,
    /// Coming up.
    up: Half,
}

impl Level {
    /// Transformer layers of both halves.
    pub(super) fn layers(&self) -> u64 {
        self.down.layers + self.up.layers
    }
}

/// The levels of a UNet (diffusers `UNet2DConditionModel`, huggingface/diffusers
/// src/diffusers/models/unets/unet_2d_condition.py and unet_2d_blocks.py at 58eb52c): level `i`
/// at the latent resolution halved `i` times (stride-2 convolutions round up) with channels
/// `c_i`, `layers_per_block` ResNets going down (the first reading the level below's `c_(i-1)`,
/// `conv_in`'s `c_0` at the first) and one more coming up, each followed by an attention block
/// of the level's transformer layers where it has any (`CrossAttnDownBlock2D`,
/// `CrossAttnUpBlock2D`); the deepest level adds the mid block, two ResNets around one attention
/// block (`UNetMidBlock2DCrossAttn`). Coming up, ResNet `j` reads the previous output (the level
/// above's `c_(i+1)` for the first, the mid block's at the deepest) concatenated with the skip
/// connections popped in reverse: `c_i`, but the last, which is the level below's downsampler
/// output (`c_(i-1)`, `conv_in`'s at the first level). SD 1.x: layers 1 1 1 0, mid 1; SDXL
/// (stabilityai/stable-diffusion-xl-base-1.0 unet/config.json, `transformer_layers_per_block`
/// [1, 2, 10] over `DownBlock2D`, `CrossAttnDownBlock2D`, `CrossAttnDownBlock2D`): 0 2 10, mid 10.
pub(super) fn levels(
    diffusion: &Diffusion,
    blocks: &DenoiserBlocks,
) -> Result<Vec<Level>, Overflow> {
    let BlockLayout::Unet {
        channel_mult,
        layers_per_block,
        transformer_layers,
        mid_transformer_layers,
        linear_projection,
        ..
    } = &blocks.layout
    else {
        return Ok(Vec::new());
    };
    let lpb = *layers_per_block;
    let channels: Vec<u64> = channel_mult
        .iter()
        .map(|m| diffusion.denoiser.hidden.checked_mul(*m).ok_or(Overflow))
        .collect::<Result<_, _>>()?;
    let (mut w, mut h) = (diffusion.width.div_ceil(8), diffusion.height.div_ceil(8));
    let last = channels.len() - 1;
    let mut levels = Vec::with_capacity(channels.len());
    for (i, &layers) in transformer_layers.iter().enumerate().take(channels.len()) {
        let deepest = i == last;
        let c = channels[i];
        let below = channels[i.saturating_sub(1)];
        let above = channels[(i + 1).min(last)];
        // One attention block after every ResNet going down and coming up.
        let attends = u64::from(layers > 0);
        let mid = u64::from(deepest && *mid_transformer_layers > 0);
        let down_blocks = attends * lpb;
        let up_blocks = attends * (lpb + 1);
        let mid_resnets = if deepest { 2 } else { 0 };
        let sum = |parts: &[u64]| -> Result<u64, Overflow> {
            parts.iter().try_fold(0u64, |a, b| a.checked_add(*b)).ok_or(Overflow)
        };
        let times = |a: u64, b: u64| a.checked_mul(b).ok_or(Overflow);
        let down = Half {
            resnets: lpb + mid_resnets,
            resnet_inputs: sum(&[below, times(lpb.saturating_sub(1) + mid_resnets, c)?])?,
            first_input: below,
            widest_input: below.max(c),
            attention_blocks: down_blocks + mid,
            layers: sum(&[times(down_blocks, layers)?, times(mid, *mid_transformer_layers)?])?,
            between: if deepest { 0 } else { c },
        };
        let upsampled = if deepest { 0 } else { above };
        let output_convs = if i == 0 { times(RESNET_TENSORS_PER_SIDE, c)? } else { 0 };
        let up = Half {
            resnets: lpb + 1,
            resnet_inputs: sum(&[above, times(2 * lpb, c)?, below])?,
            first_input: above.checked_add(c).ok_or(Overflow)?,
            widest_input: above.max(c).checked_add(c).ok_or(Overflow)?,
            attention_blocks: up_blocks,
            layers: times(up_blocks, layers)?,
            between: sum(&[upsampled, output_convs])?,
        };
        levels.push(Level {
            width: w,
            height: h,
            positions: w
                .checked_mul(h)
                .and_then(|n| n.checked_mul(diffusion.frames))
                .ok_or(Overflow)?,
            channels: c,
            heads: blocks.heads.at(c),
            linear_projection: *linear_projection,
            down,
            up,
        });
        (w, h) = (w.div_ceil(2), h.div_ceil(2));
    }
    Ok(levels)
}

/// Which halves of the levels a component counts, and what trains in each.
#[derive(Clone, Copy, Debug)]
pub(super) enum Halves<'a> {
    /// A trained or adapted denoiser's whole step.
    Both(Weights<'a>),
    /// A ControlNet's copy of the down blocks and the mid block, trained.
    Down,
    /// The frozen denoiser's up blocks beside a trained ControlNet.
    Up,
}

impl<'a> Halves<'a> {
    fn of(self, level: &Level) -> Vec<(Half, Weights<'a>)> {
        match self {
            Halves::Both(weights) => vec![(level.down, weights), (level.up, weights)],
            Halves::Down => vec![(level.down, Weights::Trained)],
            Halves::Up => vec![(level.up, Weights::Frozen)],
        }
    }
}

/// What a frozen denoiser's step records nothing for, going down: no tensor needs a gradient
/// until the first adapter, in the first transformer layer. The levels before the first with
/// attention record nothing; at that level, neither does its first ResNet, its attention
/// block's GroupNorm (input and output) nor, unchecked, the layer's input (LayerNorm 1's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prefix {
    /// Recorded from its start.
    None,
    /// A level before the first adapter: nothing recorded.
    Whole,
    /// The first adapter's level.
    FirstBlocks,
}

/// The values per position a half stores: unchecked, every block's tensors; under full
/// checkpointing, each ResNet's and transformer layer's input and what lies outside the
/// checkpoints (the attention blocks' own tensors, the convolutions between blocks); less what
/// a frozen prefix does not record.
fn half_values(
    half: &Half,
    weights: Weights<'_>,
    level: &Level,
    full: bool,
    prefix: Prefix,
) -> Result<u64, Overflow> {
    let c = level.channels;
    let frozen = !matches!(weights, Weights::Trained);
    let block_tensors = if frozen && level.linear_projection { 1 } else { ATTENTION_BLOCK_TENSORS };
    // Before the first adapter the GroupNorm records nothing: its input, and its output where
    // a convolution reads it.
    let norm = block_tensors.min(2);
    let unrecorded = match prefix {
        Prefix::None => 0,
        Prefix::Whole => return Ok(0),
        Prefix::FirstBlocks if full => half.first_input + norm * c,
        Prefix::FirstBlocks => RESNET_TENSORS_PER_SIDE * (half.first_input + c) + (norm + 1) * c,
    };
    let attention = block_tensors * half.attention_blocks * c;
    let values = if full {
        half.resnet_inputs
            .checked_add(half.layers.checked_mul(c).ok_or(Overflow)?)
            .and_then(|n| n.checked_add(attention))
    } else {
        let resnets = RESNET_TENSORS_PER_SIDE
            * (half.resnet_inputs + half.resnets.checked_mul(c).ok_or(Overflow)?);
        half.layers
            .checked_mul(weights.layer_values(c)?)
            .and_then(|n| n.checked_add(resnets))
            .and_then(|n| n.checked_add(attention))
    };
    values
        .and_then(|n| n.checked_add(half.between))
        .and_then(|n| n.checked_sub(unrecorded))
        .ok_or(Overflow)
}

/// Bytes of eager attention probabilities per score: the fp32 softmax output and, when the
/// activations are 16-bit, its cast copy that the product with V keeps (as for a language model,
/// `training/activations.rs`).
fn per_score(training: &Training) -> Result<Ratio, Overflow> {
    let e = training.activations.bytes_per_element();
    if e < Ratio::int(4) { Ratio::int(4).checked_add(e).ok_or(Overflow) } else { Ok(Ratio::int(4)) }
}

/// The activations `halves` of a UNet's levels store under `checkpointing`, named `name`; with
/// full checkpointing, every ResNet's and transformer layer's input, what lies outside them, and
/// the largest block recomputed.
pub(super) fn stored(
    diffusion: &Diffusion,
    levels: &[Level],
    training: &Training,
    halves: Halves,
    checkpointing: Checkpointing,
    name: &str,
) -> Result<Component, Overflow> {
    let elem = training.activations;
    let e = elem.bytes_per_element();
    let batch = diffusion.batch;
    let eager = training.attention == Attention::Eager;
    let full = checkpointing == Checkpointing::Full;
    let scores_per_layer = |level: &Level, layers: u64| -> Result<Bytes, Overflow> {
        if !eager || layers == 0 {
            return Ok(Bytes::ZERO);
        }
        // Self-attention over the level's positions, cross-attention over the text tokens.
        let keys = level.positions.checked_add(diffusion.text_tokens).ok_or(Overflow)?;
        Product::new()
            .times(batch, "batch")?
            .times(level.heads, "heads")?
            .times(level.positions, "queries")?
            .times(keys, "keys")?
            .bytes_each(per_score(training)?, "")?
            .value()
    };
    let mut terms = Vec::new();
    let mut total = Bytes::ZERO;
    let mut largest_block = Bytes::ZERO;
    let mut largest_text = String::new();
    // A frozen denoiser going down records from its first adapter on.
    let frozen_prefix = matches!(halves, Halves::Both(Weights::Frozen | Weights::Adapted { .. }));
    let first_adapted = levels.iter().position(|l| l.down.layers > 0).unwrap_or(levels.len());
    for (i, level) in levels.iter().enumerate() {
        let present = halves.of(level);
        let layers: u64 = present.iter().map(|(half, _)| half.layers).sum();
        let c = level.channels;
        // The down half comes first in `present`.
        let prefix = |index: usize| match (frozen_prefix && index == 0, i.cmp(&first_adapted)) {
            (true, std::cmp::Ordering::Less) => Prefix::Whole,
            (true, std::cmp::Ordering::Equal) => Prefix::FirstBlocks,
            _ => Prefix::None,
        };
        let mut values = 0u64;
        for (index, (half, weights)) in present.iter().enumerate() {
            let half_values = half_values(half, *weights, level, full, prefix(index))?;
            values = half_values.checked_add(values).ok_or(Overflow)?;
        }
        let stored = Product::new()
            .times(batch, "batch")?
            .times(level.positions, "positions")?
            .times(values, "values")?
            .bytes_each(e, elem.name())?
            .value()?;
        // Each cross-attention's keys and values over the text tokens, which SDPA keeps.
        let text = Product::new()
            .times(batch, "batch")?
            .times(if full { 0 } else { layers }, "layers")?
            .times(2 * diffusion.text_tokens, "text keys and values")?
            .times(c, "channels")?
            .bytes_each(e, "")?
            .value()?;
        let stored = calc::add(stored, text)?;
        let scores = scores_per_layer(level, layers)?;
        let level_scores = if checkpointing == Checkpointing::None {
            Bytes(scores.0.checked_mul(layers).ok_or(Overflow)?)
        } else {
            Bytes::ZERO
        };
        let level_bytes = calc::add(stored, level_scores)?;
        total = calc::add(total, level_bytes)?;
        let scores_text = if level_scores > Bytes::ZERO {
            formula!(" + {layers} blocks' eager probabilities {level_scores}")
        } else {
            String::new()
        };
        let text_text = if text > Bytes::ZERO {
            formula!(" with {layers} layers' text keys and values {text}")
        } else {
            String::new()
        };
        terms.push(formula!(
            "level {i} ({} × {} positions × {} values, {c} ch{text_text}) {stored}{scores_text}",
            level.width,
            level.height,
            group_thousands(values),
        ));
        if full {
            // The block recomputed in the backward pass holds all its tensors (and scores): a
            // transformer layer's (its attention block's own are stored outside the
            // checkpoints), or a ResNet's, the widest input's.
            let mut block_values = 0u64;
            let mut label = "ResNet block";
            for (index, (half, weights)) in present.iter().enumerate() {
                if prefix(index) == Prefix::Whole {
                    continue;
                }
                let values = if half.layers > 0 {
                    label = "transformer layer";
                    weights.layer_values(c)?
                } else {
                    RESNET_TENSORS_PER_SIDE * (half.widest_input + c)
                };
                block_values = block_values.max(values);
            }
            let block = Product::new()
                .times(batch, "batch")?
                .times(level.positions, "positions")?
                .times(block_values, "")?
                .bytes_each(e, "")?
                .value()?;
            let block = calc::add(block, scores)?;
            if block > largest_block {
                largest_block = block;
                largest_text = formula!("level {i} {label} recomputed {block}");
            }
        }
    }
    let bytes = calc::add(total, largest_block)?;
    let checkpoints = if full { "block inputs and what lies outside them: " } else { "" };
    let mut text = formula!("{checkpoints}{} (batch {batch}, {})", terms.join(" + "), elem.name());
    if largest_block > Bytes::ZERO {
        text = formula!("{text} + {largest_text}");
    }
    Ok(Component {
        held_by: HeldBy::Tensors,
        name: name.to_owned().into(),
        category: Category::Intermediate,
        bytes,
        provenance: Provenance::Formula,
        formula: formula!("{text} = {bytes}"),
        source: Some(
            "derived from diffusers ResnetBlock2D and BasicTransformerBlock (tensors autograd \
             keeps); eval/unet_activations.rs"
                .into(),
        ),
    })
}

/// The softmax backward of the first attention differentiated at the largest level (see
/// `training::softmax_gradients`) is the peak, while the rest of the stored activations are
/// still alive.
pub(super) fn softmax_backward(
    diffusion: &Diffusion,
    levels: &[Level],
    training: &Training,
) -> Result<Option<Component>, Overflow> {
    let Some(level) = levels.iter().filter(|l| l.layers() > 0).max_by_key(|l| l.positions) else {
        return Ok(None);
    };
    if training.attention != Attention::Eager {
        return Ok(None);
    }
    let keys = level.positions.checked_add(diffusion.text_tokens).ok_or(Overflow)?;
    llm_training::softmax_gradients(
        (diffusion.batch, "batch"),
        level.heads,
        level.positions,
        (keys, "keys (positions + text tokens)"),
    )
    .map(Some)
}
