//! Weight formats over a whole model: one precision for every layer matrix, a llama.cpp preset
//! that mixes ggml types per tensor and per layer, or one precision on the matrices a
//! checkpoint's quantizer converted (the rest at its 16-bit companion).
//!
//! Presets follow `llama_tensor_get_type_impl` in llama.cpp's `src/llama-quant.cpp`
//! (DOMAIN.md §1.6): norms and other 1-D tensors stay F32, the output projection goes to Q6_K
//! (Q8_0 stays Q8_0), and `attn_v` / `ffn_down` get more bits on some layers. The tests pin
//! the resulting sizes to the ones llama.cpp publishes for Llama 3 8B.

use std::borrow::Cow;

use crate::precision::{Feature, GgmlType, Precision};

/// The linear layers of a decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Matrix {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
    /// A mixture-of-experts router (kept at 16-bit by every quantizer).
    Router,
}

/// A llama.cpp quantization preset (`llama-quantize` ftype).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Preset {
    Q2K,
    Q2KS,
    Q3KS,
    Q3KM,
    Q3KL,
    Q4_0,
    Q4_1,
    Q4KS,
    Q4KM,
    Q5_0,
    Q5_1,
    Q5KS,
    Q5KM,
    Q6K,
    Q8_0,
    Iq1S,
    Iq1M,
    Iq2Xxs,
    Iq2Xs,
    Iq2S,
    Iq2M,
    Iq3Xxs,
    Iq3Xs,
    Iq3S,
    Iq3M,
    Iq4Nl,
    Iq4Xs,
}

impl Preset {
    pub const ALL: [Preset; 27] = [
        Preset::Q2K,
        Preset::Q2KS,
        Preset::Q3KS,
        Preset::Q3KM,
        Preset::Q3KL,
        Preset::Q4_0,
        Preset::Q4_1,
        Preset::Q4KS,
        Preset::Q4KM,
        Preset::Q5_0,
        Preset::Q5_1,
        Preset::Q5KS,
        Preset::Q5KM,
        Preset::Q6K,
        Preset::Q8_0,
        Preset::Iq1S,
        Preset::Iq1M,
        Preset::Iq2Xxs,
        Preset::Iq2Xs,
        Preset::Iq2S,
        Preset::Iq2M,
        Preset::Iq3Xxs,
        Preset::Iq3Xs,
        Preset::Iq3S,
        Preset::Iq3M,
        Preset::Iq4Nl,
        Preset::Iq4Xs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Q2K => "q2_k",
            Preset::Q2KS => "q2_k_s",
            Preset::Q3KS => "q3_k_s",
            Preset::Q3KM => "q3_k_m",
            Preset::Q3KL => "q3_k_l",
            Preset::Q4_0 => "q4_0",
            Preset::Q4_1 => "q4_1",
            Preset::Q4KS => "q4_k_s",
            Preset::Q4KM => "q4_k_m",
            Preset::Q5_0 => "q5_0",
            Preset::Q5_1 => "q5_1",
            Preset::Q5KS => "q5_k_s",
            Preset::Q5KM => "q5_k_m",
            Preset::Q6K => "q6_k",
            Preset::Q8_0 => "q8_0",
            Preset::Iq1S => "iq1_s",
            Preset::Iq1M => "iq1_m",
            Preset::Iq2Xxs => "iq2_xxs",
            Preset::Iq2Xs => "iq2_xs",
            Preset::Iq2S => "iq2_s",
            Preset::Iq2M => "iq2_m",
            Preset::Iq3Xxs => "iq3_xxs",
            Preset::Iq3Xs => "iq3_xs",
            Preset::Iq3S => "iq3_s",
            Preset::Iq3M => "iq3_m",
            Preset::Iq4Nl => "iq4_nl",
            Preset::Iq4Xs => "iq4_xs",
        }
    }

    /// The type most tensors get (`llama_ftype_get_default_type`): note that IQ2_S is mostly
    /// IQ2_XS and IQ2_M mostly IQ2_S, and IQ3_XS, IQ3_S and IQ3_M are all mostly IQ3_S.
    fn base(self) -> GgmlType {
        use GgmlType as T;
        match self {
            Preset::Q2K | Preset::Q2KS => T::Q2K,
            Preset::Q3KS | Preset::Q3KM | Preset::Q3KL => T::Q3K,
            Preset::Q4_0 => T::Q4_0,
            Preset::Q4_1 => T::Q4_1,
            Preset::Q4KS | Preset::Q4KM => T::Q4K,
            Preset::Q5_0 => T::Q5_0,
            Preset::Q5_1 => T::Q5_1,
            Preset::Q5KS | Preset::Q5KM => T::Q5K,
            Preset::Q6K => T::Q6K,
            Preset::Q8_0 => T::Q8_0,
            Preset::Iq1S => T::Iq1S,
            Preset::Iq1M => T::Iq1M,
            Preset::Iq2Xxs => T::Iq2Xxs,
            Preset::Iq2Xs | Preset::Iq2S => T::Iq2Xs,
            Preset::Iq2M => T::Iq2S,
            Preset::Iq3Xxs => T::Iq3Xxs,
            Preset::Iq3Xs | Preset::Iq3S | Preset::Iq3M => T::Iq3S,
            Preset::Iq4Nl => T::Iq4Nl,
            Preset::Iq4Xs => T::Iq4Xs,
        }
    }

    /// The 1- and 2-bit i-quant mixes, which llama.cpp treats as one family: their output
    /// projection is Q5_K, and their attention and first `ffn_down` layers get fixed types.
    fn below_three_bits(self) -> bool {
        matches!(
            self,
            Preset::Iq1S
                | Preset::Iq1M
                | Preset::Iq2Xxs
                | Preset::Iq2Xs
                | Preset::Iq2S
                | Preset::Iq2M
        )
    }

    /// The type of `matrix` in layer `layer` of `layers`; `gqa` is heads per KV head.
    ///
    /// The i-quant rules are those for a file made with an importance matrix, which
    /// `llama-quantize` requires for IQ1, IQ2 and IQ3_XXS tensors and which published i-quant
    /// files carry; without one, IQ4_XS and IQ4_NL would also give the first eighth of
    /// `ffn_down` Q5_K. The 8-expert rule (`n_expert == 8`: `attn_v`/`attn_k` at Q8_0) is not
    /// modelled.
    fn matrix(self, matrix: Matrix, layer: u64, layers: u64, gqa: u64) -> GgmlType {
        use GgmlType::{Iq2Xxs, Iq3S, Q2K, Q3K, Q4K, Q5K};
        let base = self.base();
        let first_eighth = layer < layers / 8;
        if self.below_three_bits() {
            let wider = if matches!(self, Preset::Iq2S | Preset::Iq2M) { Iq3S } else { Q2K };
            return match matrix {
                Matrix::V if gqa >= 4 => Q4K,
                Matrix::V => wider,
                Matrix::Down if first_eighth => wider,
                Matrix::O if matches!(self, Preset::Iq1S | Preset::Iq1M) => Iq2Xxs,
                Matrix::O if matches!(self, Preset::Iq2S | Preset::Iq2M) => Iq3S,
                _ => base,
            };
        }
        let chosen = self.matrix_by_rule(matrix, layer, layers, gqa);
        // llama.cpp's 70B type (80 layers with grouped KV heads) has an `attn_v` a
        // group-size fraction of `attn_q`'s, so a Q3_K or Q4_K one is raised to Q5_K.
        if matrix == Matrix::V && layers == 80 && gqa > 1 && matches!(chosen, Q3K | Q4K) {
            return Q5K;
        }
        chosen
    }

    fn matrix_by_rule(self, matrix: Matrix, layer: u64, layers: u64, gqa: u64) -> GgmlType {
        use GgmlType::{Iq2S, Iq3S, Iq3Xxs, Q3K, Q4K, Q5K, Q6K};
        use Preset as P;
        let base = self.base();
        let first_eighth = layer < layers / 8;
        let more_bits = use_more_bits(layer, layers);
        match matrix {
            Matrix::V => match self {
                P::Q2K | P::Q2KS | P::Iq3Xxs | P::Iq3Xs | P::Iq3S if gqa >= 4 => Q4K,
                P::Q2K => Q3K,
                P::Q3KM if layer >= 2 => Q4K,
                P::Iq3M => Q4K,
                P::Q3KM | P::Q3KL => Q5K,
                P::Iq4Nl | P::Iq4Xs if gqa >= 4 => Q5K,
                P::Q4KS if layer < 4 => Q5K,
                P::Q4KM | P::Q5KM if more_bits => Q6K,
                _ => base,
            },
            Matrix::Down => match self {
                P::Q2K => Q3K,
                P::Q2KS | P::Iq3M if first_eighth => Q4K,
                P::Q3KM if layer >= layers / 16 => Q4K,
                P::Q3KM | P::Q3KL => Q5K,
                P::Q4KS if first_eighth => Q5K,
                P::Q4KM | P::Q5KM if more_bits => Q6K,
                _ => base,
            },
            Matrix::O => match self {
                P::Q2K => Q3K,
                P::Q3KM | P::Iq3M => Q4K,
                P::Q3KL => Q5K,
                P::Iq3Xxs => Iq3S,
                _ => base,
            },
            Matrix::Q | Matrix::K => match self {
                P::Iq3Xs => Iq3Xxs,
                P::Iq3Xxs => Iq2S,
                _ => base,
            },
            Matrix::Gate | Matrix::Up
                if self == P::Iq3Xs && !first_eighth && layer < 7 * layers / 8 =>
            {
                Iq3Xxs
            }
            // Routers (`ffn_gate_inp`) are never quantized; `WeightFormat` keeps them 16-bit.
            Matrix::Gate | Matrix::Up | Matrix::Router => base,
        }
    }

    /// The output projection: Q5_K for the 1- and 2-bit mixes and IQ3_XXS, Q8_0 for Q8_0,
    /// Q6_K otherwise.
    fn output(self) -> GgmlType {
        match self {
            Preset::Q8_0 => GgmlType::Q8_0,
            Preset::Iq3Xxs => GgmlType::Q5K,
            p if p.below_three_bits() => GgmlType::Q5K,
            _ => GgmlType::Q6K,
        }
    }

    /// An input embedding that is not also the output: Q2_K for the 1- and 2.06/2.31-bit
    /// mixes, IQ3_S for IQ2_S, IQ2_M and IQ3_XXS, the base type otherwise.
    fn embedding(self) -> GgmlType {
        match self {
            Preset::Iq1S | Preset::Iq1M | Preset::Iq2Xxs | Preset::Iq2Xs => GgmlType::Q2K,
            Preset::Iq2S | Preset::Iq2M | Preset::Iq3Xxs => GgmlType::Iq3S,
            _ => self.base(),
        }
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers, and every third
/// layer between.
fn use_more_bits(layer: u64, layers: u64) -> bool {
    let eighth = layers / 8;
    if layer < eighth || layer >= 7 * layers / 8 {
        return true;
    }
    (layer - eighth) % 3 == 2
}

/// How a model's weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightFormat {
    Uniform(Precision),
    Preset(Preset),
    /// A quantized precision on the layer matrices `Scope` names, the 16-bit companion on the
    /// others, as the embedding and head.
    Partial(Precision, Scope),
}

/// Which layer matrices a checkpoint's quantizer converted, when not all of them: Meta's FP8
/// Llama 3.1 checkpoints quantize the feed-forward matrices only, and none in the first and
/// last layers (Llama 3 paper, arXiv 2407.21783, §6.2: "we do not quantize parameters in the
/// self-attention layers", "we do not perform quantization in the first and last Transformer
/// layers").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope {
    pub matrices: Matrices,
    /// Layers at each end left unquantized: the first `kept_ends` and the last `kept_ends`.
    pub kept_ends: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matrices {
    All,
    /// Gate, up and down projections (and the experts').
    Mlp,
    /// Query, key, value and output projections.
    Attention,
}

impl Matrices {
    pub fn name(self) -> &'static str {
        match self {
            Matrices::All => "all",
            Matrices::Mlp => "mlp",
            Matrices::Attention => "attention",
        }
    }
}

impl Scope {
    fn covers(self, matrix: Matrix, layer: u64, layers: u64) -> bool {
        let kind = match matrix {
            Matrix::Q | Matrix::K | Matrix::V | Matrix::O => self.matrices != Matrices::Mlp,
            Matrix::Gate | Matrix::Up | Matrix::Down => self.matrices != Matrices::Attention,
            Matrix::Router => false,
        };
        let end = layer < self.kept_ends || layer.saturating_add(self.kept_ends) >= layers;
        kind && !end
    }
}

impl WeightFormat {
    /// Presets first: `q8_0` as a weight format means llama.cpp's preset, whose output
    /// projection rule differs from plain Q8_0 tensors only in name.
    pub fn from_name(name: &str) -> Option<WeightFormat> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .map(WeightFormat::Preset)
            .or_else(|| Precision::from_name(name).map(WeightFormat::Uniform))
    }

    pub fn name(self) -> Cow<'static, str> {
        match self {
            WeightFormat::Uniform(p) => p.name(),
            WeightFormat::Preset(p) => Cow::Borrowed(p.name()),
            WeightFormat::Partial(p, scope) => {
                let ends = match scope.kept_ends {
                    0 => String::new(),
                    1 => format!(", first and last layer {}", p.companion().name()),
                    n => format!(", first and last {n} layers {}", p.companion().name()),
                };
                Cow::Owned(format!("{} ({} matrices{ends})", p.name(), scope.matrices.name()))
            }
        }
    }

    /// The one precision a uniform or partial format quantizes to; `None` for a preset.
    pub fn quantized(self) -> Option<Precision> {
        match self {
            WeightFormat::Uniform(p) | WeightFormat::Partial(p, _) => Some(p),
            WeightFormat::Preset(_) => None,
        }
    }

    /// The precision of one layer matrix.
    pub fn matrix(self, matrix: Matrix, layer: u64, layers: u64, gqa: u64) -> Precision {
        match self {
            // llama.cpp never quantizes the MoE router (`ffn_gate_inp`): DOMAIN.md §1.6.
            WeightFormat::Preset(_) if matrix == Matrix::Router => Precision::Fp32,
            WeightFormat::Uniform(p) if matrix == Matrix::Router && !p.is_float_compute() => {
                p.companion()
            }
            WeightFormat::Uniform(p) => p,
            WeightFormat::Partial(p, scope) if scope.covers(matrix, layer, layers) => p,
            WeightFormat::Partial(p, _) => p.companion(),
            WeightFormat::Preset(preset) => {
                Precision::Ggml(preset.matrix(matrix, layer, layers, gqa))
            }
        }
    }

    /// The input embedding. Quantizers leave it at 16-bit (bitsandbytes, GPTQ/AWQ, FP8), except
    /// llama.cpp, which quantizes it to the base type, or to Q6_K when it doubles as the output.
    pub fn embedding(self, tied: bool) -> Precision {
        match self {
            WeightFormat::Preset(_) if tied => self.output(),
            WeightFormat::Preset(preset) => Precision::Ggml(preset.embedding()),
            WeightFormat::Uniform(p) | WeightFormat::Partial(p, _) => p.companion(),
        }
    }

    /// The output projection (lm_head).
    pub fn output(self) -> Precision {
        match self {
            WeightFormat::Preset(preset) => Precision::Ggml(preset.output()),
            WeightFormat::Uniform(p) | WeightFormat::Partial(p, _) => p.companion(),
        }
    }

    /// Norms and biases: F32 in GGUF files, the 16-bit companion otherwise.
    pub fn small(self) -> Precision {
        match self {
            WeightFormat::Preset(_) => Precision::Fp32,
            WeightFormat::Uniform(p) | WeightFormat::Partial(p, _) => p.companion(),
        }
    }

    /// The precision activations use beside these weights.
    pub fn companion(self) -> Precision {
        match self {
            // llama.cpp computes in fp16 on CUDA.
            WeightFormat::Preset(_) => Precision::Fp16,
            WeightFormat::Uniform(p) | WeightFormat::Partial(p, _) => p.companion(),
        }
    }

    pub fn required_feature(self) -> Option<Feature> {
        match self {
            WeightFormat::Uniform(p) | WeightFormat::Partial(p, _) => p.required_feature(),
            WeightFormat::Preset(_) => None,
        }
    }

    pub fn is_float_compute(self) -> bool {
        matches!(self, WeightFormat::Uniform(p) | WeightFormat::Partial(p, _) if p.is_float_compute())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_layers_of_a_32_layer_model() {
        let layers: Vec<u64> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
        assert_eq!(layers, [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]);
    }

    #[test]
    fn presets_win_over_types_of_the_same_name() {
        assert_eq!(WeightFormat::from_name("q8_0"), Some(WeightFormat::Preset(Preset::Q8_0)));
        assert_eq!(
            WeightFormat::from_name("q4_k"),
            Some(WeightFormat::Uniform(Precision::Ggml(GgmlType::Q4K)))
        );
        assert_eq!(WeightFormat::from_name("q4_k_m"), Some(WeightFormat::Preset(Preset::Q4KM)));
    }
}
