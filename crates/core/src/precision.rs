//! Numeric formats: their storage cost per element and the hardware support they need.
//!
//! Bytes per element are exact rationals that include every block scale and zero point the
//! format stores (`nf4-dq` is 4 + 8/64 + 32/(64·256) bits). Sources: DOMAIN.md §1, repeated on
//! each variant. Mixes of formats over a model's tensors (llama.cpp presets) are in
//! [`crate::quant`].

use std::borrow::Cow;
use std::fmt;

use crate::ratio::Ratio;

/// One storage format for a tensor's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Precision {
    Fp32,
    Fp16,
    Bf16,
    /// FP8 (E4M3 or E5M2), one byte per element, per-tensor scale.
    Fp8,
    /// FP8 storage by diffusers' `enable_layerwise_casting`: one byte per element, no scale;
    /// each layer is cast to the compute dtype as it runs, so no FP8 hardware is needed. The
    /// modules its name patterns skip stay 16-bit (a model's `layerwise_skip`).
    Fp8Layerwise,
    /// FP8 with one fp32 scale per 128×128 block (DeepSeek-V3's release): 8 + 32/16384 bits.
    Fp8Block,
    Int8,
    /// bitsandbytes LLM.int8 (`Linear8bitLt`, transformers `load_in_8bit`): int8 weights and an
    /// fp32 scale per output row (`SCB`, left out: 4 B per row, < 0.1 % of real layers). The
    /// bytes of `int8`; the loader differs: it keeps `_keep_in_fp32_modules` in fp32, as the
    /// 4-bit bitsandbytes formats do (`eval/diffusion.rs`).
    Int8Bnb,
    /// 8-bit KV cache with an fp32 scale and zero point per token and head (Qwen's
    /// `use_cache_quantization`, vLLM's `int8_per_token_head`): 1 B per element here, the
    /// per-token-head 8 B are added by the KV cache formula.
    Int8Token,
    /// LMDeploy's quantized KV cache (TurboMind's and its PyTorch engine's `quant_policy` 8 and
    /// 4): `bits`-bit values with a 16-bit scale and zero point per token and KV head, for K and
    /// for V (`kernels/attention/block.h`: `t_bits() * 2 / 8` parameter bytes beside
    /// `q_bits() * head_dim / 8` of data). `bits / 8` B per element here, the per-token-head
    /// 4 B are added by the KV cache formula.
    Lmdeploy {
        bits: u8,
    },
    /// Packed 4-bit integers without scales (ggml/aiconfigurator `int4_wo`).
    Int4,
    /// Packed 4-bit integers with a 16-bit scale and a 16-bit zero point per `group` inputs:
    /// torchao `int4_weight_only` (tinygemm layout, `group_size` 128, bf16 scales and zeros) and
    /// optimum-quanto `qint4` (group 128, scale and shift in the weight's dtype).
    Int4Grouped {
        group: u16,
    },
    /// bitsandbytes NF4: 4 bits + an fp32 absmax per 64-element block = 4.5 bits.
    Nf4,
    /// NF4 with double quantization (QLoRA): absmax as 8-bit codes + one fp32 per 256 blocks.
    Nf4Dq,
    /// bitsandbytes FP4, same layout as NF4: 4.5 bits.
    Fp4,
    /// FP4 with double quantization: 4.127 bits.
    Fp4Dq,
    /// OCP MXFP4: 32 E2M1 values + one E8M0 scale: 4.25 bits.
    Mxfp4,
    /// NVFP4: 4-bit values + one FP8 scale per 16: 4.5 bits.
    Nvfp4,
    /// GPTQ: `bits`-bit weights, an fp16 scale and a `bits`-bit zero per `group` inputs.
    Gptq {
        bits: u8,
        group: u16,
    },
    /// AWQ: 4-bit weights, an fp16 scale and a 4-bit zero per `group` inputs.
    Awq {
        group: u16,
    },
    /// quanto 0.2.0's affine format (the `quanto` package that transformers' QuantoQuantizedCache
    /// required, `>= 0.2.0`, before the `optimum-quanto` rename): `bits`-bit values packed into bytes, a scale in the tensor's 16-bit
    /// type and an int8 zero point per `group` elements (`MaxOptimizer`, `AffineQuantizer`,
    /// `PackedTensor`). optimum-quanto 0.2.3 made the zero point a 16-bit shift: `int4-g64`.
    Quanto {
        bits: u8,
        group: u16,
    },
    /// A ggml block type (GGUF files, llama.cpp KV cache types).
    Ggml(GgmlType),
}

/// ggml block types: `(elements per block, bytes per block)` from gguf-py `GGML_QUANT_SIZES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GgmlType {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Iq4Xs,
    Iq4Nl,
    Iq3S,
    Iq3Xxs,
    Iq2S,
    Iq2Xs,
    Iq2Xxs,
    Iq1M,
    Iq1S,
}

impl GgmlType {
    pub const ALL: [GgmlType; 19] = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::Iq4Xs,
        GgmlType::Iq4Nl,
        GgmlType::Iq3S,
        GgmlType::Iq3Xxs,
        GgmlType::Iq2S,
        GgmlType::Iq2Xs,
        GgmlType::Iq2Xxs,
        GgmlType::Iq1M,
        GgmlType::Iq1S,
    ];

    pub fn name(self) -> &'static str {
        match self {
            GgmlType::Q4_0 => "q4_0",
            GgmlType::Q4_1 => "q4_1",
            GgmlType::Q5_0 => "q5_0",
            GgmlType::Q5_1 => "q5_1",
            GgmlType::Q8_0 => "q8_0",
            GgmlType::Q2K => "q2_k",
            GgmlType::Q3K => "q3_k",
            GgmlType::Q4K => "q4_k",
            GgmlType::Q5K => "q5_k",
            GgmlType::Q6K => "q6_k",
            GgmlType::Iq4Xs => "iq4_xs",
            GgmlType::Iq4Nl => "iq4_nl",
            GgmlType::Iq3S => "iq3_s",
            GgmlType::Iq3Xxs => "iq3_xxs",
            GgmlType::Iq2S => "iq2_s",
            GgmlType::Iq2Xs => "iq2_xs",
            GgmlType::Iq2Xxs => "iq2_xxs",
            GgmlType::Iq1M => "iq1_m",
            GgmlType::Iq1S => "iq1_s",
        }
    }

    /// `(elements, bytes)` of one block.
    pub fn block(self) -> (i128, i128) {
        match self {
            GgmlType::Q4_0 | GgmlType::Iq4Nl => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q5_0 => (32, 22),
            GgmlType::Q5_1 => (32, 24),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q2K => (256, 84),
            GgmlType::Q3K | GgmlType::Iq3S => (256, 110),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q5K => (256, 176),
            GgmlType::Q6K => (256, 210),
            GgmlType::Iq4Xs => (256, 136),
            GgmlType::Iq3Xxs => (256, 98),
            GgmlType::Iq2S => (256, 82),
            GgmlType::Iq2Xs => (256, 74),
            GgmlType::Iq2Xxs => (256, 66),
            GgmlType::Iq1M => (256, 56),
            GgmlType::Iq1S => (256, 50),
        }
    }
}

/// A hardware feature a precision needs on the device, as listed in a device's `precisions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    Fp16,
    Bf16,
    Fp8,
    Fp4,
}

impl Feature {
    pub fn name(self) -> &'static str {
        match self {
            Feature::Fp16 => "fp16",
            Feature::Bf16 => "bf16",
            Feature::Fp8 => "fp8",
            Feature::Fp4 => "fp4",
        }
    }
}

/// The GPTQ/AWQ group size used when a name gives none (AutoGPTQ and AutoAWQ default).
const DEFAULT_GROUP: u16 = 128;

/// The quanto group size used when a name gives none: transformers' `QuantizedCacheConfig`
/// default `q_group_size`.
const QUANTO_GROUP: u16 = 64;

impl Precision {
    /// Names of the fixed formats, for suggestions and help text. GPTQ and AWQ also accept a
    /// group size suffix (`gptq-int4-g64`), and quanto's (`quanto-int4-g32`).
    pub const NAMES: [&'static str; 34] = [
        "fp32",
        "fp16",
        "bf16",
        "fp8",
        "fp8-block",
        "fp8-layerwise",
        "int8",
        "int8-bnb",
        "int4",
        "int4-g128",
        "nf4",
        "nf4-dq",
        "fp4",
        "fp4-dq",
        "mxfp4",
        "nvfp4",
        "gptq-int4",
        "gptq-int8",
        "gptq-int3",
        "gptq-int2",
        "awq-int4",
        "quanto-int4",
        "quanto-int2",
        "q4_0",
        "q4_1",
        "q5_0",
        "q5_1",
        "q8_0",
        "q2_k",
        "q3_k",
        "q4_k",
        "q5_k",
        "q6_k",
        "iq4_xs",
    ];

    pub fn name(self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Fp8 => "fp8",
            Precision::Fp8Block => "fp8-block",
            Precision::Fp8Layerwise => "fp8-layerwise",
            Precision::Int8 => "int8",
            Precision::Int8Bnb => "int8-bnb",
            Precision::Int8Token => "int8-token",
            Precision::Lmdeploy { bits } => return Cow::Owned(format!("lmdeploy-int{bits}")),
            Precision::Int4 => "int4",
            Precision::Nf4 => "nf4",
            Precision::Nf4Dq => "nf4-dq",
            Precision::Fp4 => "fp4",
            Precision::Fp4Dq => "fp4-dq",
            Precision::Mxfp4 => "mxfp4",
            Precision::Nvfp4 => "nvfp4",
            Precision::Ggml(t) => t.name(),
            Precision::Gptq { bits, group } if group == DEFAULT_GROUP => {
                return Cow::Owned(format!("gptq-int{bits}"));
            }
            Precision::Gptq { bits, group } => {
                return Cow::Owned(format!("gptq-int{bits}-g{group}"));
            }
            Precision::Awq { group } if group == DEFAULT_GROUP => "awq-int4",
            Precision::Awq { group } => return Cow::Owned(format!("awq-int4-g{group}")),
            Precision::Int4Grouped { group } => return Cow::Owned(format!("int4-g{group}")),
            Precision::Quanto { bits, group } if group == QUANTO_GROUP => {
                return Cow::Owned(format!("quanto-int{bits}"));
            }
            Precision::Quanto { bits, group } => {
                return Cow::Owned(format!("quanto-int{bits}-g{group}"));
            }
        })
    }

    pub fn from_name(name: &str) -> Option<Precision> {
        Some(match name {
            "fp32" | "float32" => Precision::Fp32,
            "fp16" | "float16" | "f16" => Precision::Fp16,
            "bf16" | "bfloat16" => Precision::Bf16,
            "fp8" | "fp8_e4m3" | "fp8_e5m2" => Precision::Fp8,
            "fp8-block" => Precision::Fp8Block,
            "fp8-layerwise" => Precision::Fp8Layerwise,
            "int8" => Precision::Int8,
            "int8-bnb" | "llm-int8" => Precision::Int8Bnb,
            "int8-token" => Precision::Int8Token,
            "lmdeploy-int8" => Precision::Lmdeploy { bits: 8 },
            "lmdeploy-int4" => Precision::Lmdeploy { bits: 4 },
            "int4" => Precision::Int4,
            "nf4" => Precision::Nf4,
            "nf4-dq" => Precision::Nf4Dq,
            "fp4" => Precision::Fp4,
            "fp4-dq" => Precision::Fp4Dq,
            "mxfp4" => Precision::Mxfp4,
            "nvfp4" => Precision::Nvfp4,
            _ => {
                return Precision::parse_grouped(name).or_else(|| {
                    GgmlType::ALL.into_iter().find(|t| t.name() == name).map(Precision::Ggml)
                });
            }
        })
    }

    /// `gptq-int4`, `gptq-int3-g64`, `awq-int4-g32`, `quanto-int4`.
    fn parse_grouped(name: &str) -> Option<Precision> {
        let (base, group) = match name.rsplit_once("-g") {
            Some((base, group)) => {
                (base, group.parse::<u16>().ok().filter(|g| (16..=4096).contains(g))?)
            }
            None if name.starts_with("quanto-") => (name, QUANTO_GROUP),
            None => (name, DEFAULT_GROUP),
        };
        match base {
            // Plain `int4` is the format without scales; the grouped one needs its suffix.
            "int4" if name != base => Some(Precision::Int4Grouped { group }),
            "awq-int4" => Some(Precision::Awq { group }),
            "gptq-int2" => Some(Precision::Gptq { bits: 2, group }),
            "gptq-int3" => Some(Precision::Gptq { bits: 3, group }),
            "gptq-int4" => Some(Precision::Gptq { bits: 4, group }),
            "gptq-int8" => Some(Precision::Gptq { bits: 8, group }),
            // transformers' quanto backend takes `nbits` 2 or 4.
            "quanto-int2" => Some(Precision::Quanto { bits: 2, group }),
            "quanto-int4" => Some(Precision::Quanto { bits: 4, group }),
            _ => None,
        }
    }

    /// Storage bytes per element, including block scales and zero points.
    pub fn bytes_per_element(self) -> Ratio {
        let bits = |num: i128, den: i128| Ratio::new(num, den * 8).unwrap_or(Ratio::ONE);
        match self {
            Precision::Fp32 => Ratio::int(4),
            Precision::Fp16 | Precision::Bf16 => Ratio::int(2),
            Precision::Fp8
            | Precision::Fp8Layerwise
            | Precision::Int8
            | Precision::Int8Bnb
            | Precision::Int8Token => Ratio::ONE,
            Precision::Lmdeploy { bits: b } => bits(i128::from(b), 1),
            // One fp32 scale per 128 × 128 block (DeepSeek-V3 README_WEIGHTS).
            Precision::Fp8Block => bits(8 * 16384 + 32, 16384),
            Precision::Int4 => bits(4, 1),
            // 4 bits + a 16-bit scale and a 16-bit zero per group: torchao's tinygemm layout
            // keeps them as bf16 pairs (`scale_and_zero`, zero point dtype bf16 outside the CPU
            // layout), quanto's `MaxOptimizer` returns scale and shift in the weight's dtype.
            Precision::Int4Grouped { group } => {
                let g = i128::from(group);
                bits(4 * g + 32, g)
            }
            // 4 bits + a 32-bit absmax per 64-element block (bitsandbytes `quantize_4bit`).
            Precision::Nf4 | Precision::Fp4 => bits(4 * 64 + 32, 64),
            // Double quantization: the absmax becomes an 8-bit code per block, plus one fp32
            // per 256 blocks: 4 + 8/64 + 32/(64·256) bits (bitsandbytes, QLoRA §3).
            Precision::Nf4Dq | Precision::Fp4Dq => bits(4 * 16384 + 8 * 256 + 32, 16384),
            // 32 × 4 bits + 8-bit shared exponent per block of 32 (OCP MX v1.0).
            Precision::Mxfp4 => bits(32 * 4 + 8, 32),
            // 16 × 4 bits + an 8-bit FP8 scale per 16 (aiconfigurator `nvfp4` = 9/16 byte).
            Precision::Nvfp4 => bits(16 * 4 + 8, 16),
            // bits + (16-bit scale + bits-bit zero) per group: DOMAIN.md §1.4. GPTQ's g_idx adds
            // 32/out_features bits (under 0.01 bit for real layers) and is left out.
            Precision::Gptq { bits: b, group } => {
                let (b, g) = (i128::from(b), i128::from(group));
                bits(b * g + 16 + b, g)
            }
            Precision::Awq { group } => {
                let g = i128::from(group);
                bits(4 * g + 16 + 4, g)
            }
            // bits packed (`pack_weights`: 8 / bits values per byte) + a 16-bit scale (the
            // tensor's dtype: `MaxOptimizer` asserts it) + an int8 zero point per group.
            Precision::Quanto { bits: b, group } => {
                let (b, g) = (i128::from(b), i128::from(group));
                bits(b * g + 16 + 8, g)
            }
            Precision::Ggml(t) => {
                let (elements, bytes) = t.block();
                Ratio::new(bytes, elements).unwrap_or(Ratio::ONE)
            }
        }
    }

    /// bitsandbytes' 4-bit formats (`Linear4bit`: NF4 and FP4, with or without double
    /// quantization).
    pub fn is_bitsandbytes_4bit(self) -> bool {
        matches!(self, Precision::Nf4 | Precision::Nf4Dq | Precision::Fp4 | Precision::Fp4Dq)
    }

    /// bitsandbytes' formats: its 4-bit ones and LLM.int8 (`int8-bnb`).
    pub fn is_bitsandbytes(self) -> bool {
        self == Precision::Int8Bnb || self.is_bitsandbytes_4bit()
    }

    /// Whether transformers keeps a model's `_keep_in_fp32_modules` in fp32 when it loads in
    /// this format: under an fp16 load, and through the bitsandbytes quantizers
    /// (`modeling_utils.py`: `use_keep_in_fp32_modules = ... and (torch_dtype == torch.float16
    /// or hasattr(hf_quantizer, "use_keep_in_fp32_modules"))`).
    pub fn keeps_fp32_modules(self) -> bool {
        self == Precision::Fp16 || self.is_bitsandbytes()
    }

    /// Whether tensors in this format are 16 or 32-bit floats that kernels compute in directly.
    pub fn is_float_compute(self) -> bool {
        matches!(self, Precision::Fp32 | Precision::Fp16 | Precision::Bf16)
    }

    /// The 16 or 32-bit precision that activations, norms and embeddings use next to weights in
    /// this format when the file does not say: the format itself when it is a float that kernels
    /// compute in, bf16 beside FP8 (FP8 checkpoints keep bf16 activations), fp16 beside the
    /// integer and 4-bit formats (GPTQ/AWQ kernels and vLLM default to fp16 for them).
    #[must_use]
    pub fn companion(self) -> Precision {
        match self {
            p if p.is_float_compute() => p,
            Precision::Fp8 | Precision::Fp8Block | Precision::Fp8Layerwise => Precision::Bf16,
            _ => Precision::Fp16,
        }
    }

    /// The device feature this precision needs to run at all, when used for weights or
    /// activations. Weight-only formats (int8, int4, nf4, GPTQ, AWQ, ggml, mxfp4) are dequantized
    /// to the activation precision by their kernels, so they need nothing of their own.
    pub fn required_feature(self) -> Option<Feature> {
        match self {
            Precision::Fp16 => Some(Feature::Fp16),
            Precision::Bf16 => Some(Feature::Bf16),
            Precision::Fp8 | Precision::Fp8Block => Some(Feature::Fp8),
            Precision::Nvfp4 => Some(Feature::Fp4),
            _ => None,
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(p: Precision) -> Ratio {
        p.bytes_per_element().checked_mul(Ratio::int(8)).unwrap()
    }

    #[test]
    fn block_scaled_formats_count_their_scales() {
        assert_eq!(bits(Precision::Nf4), Ratio::new(9, 2).unwrap());
        assert_eq!(bits(Precision::Mxfp4), Ratio::new(17, 4).unwrap());
        assert_eq!(bits(Precision::Nvfp4), Ratio::new(9, 2).unwrap());
        assert_eq!(bits(Precision::Int4), Ratio::int(4));
        assert_eq!(bits(Precision::Bf16), Ratio::int(16));
        // QLoRA §3: double quantization brings the constants from 0.5 to 0.127 bits.
        assert_eq!(bits(Precision::Nf4Dq), Ratio::new(4 * 16384 + 2048 + 32, 16384).unwrap());
        assert_eq!(
            bits(Precision::Nf4Dq).checked_sub(Ratio::int(4)).unwrap().to_string(),
            "0.126953125"
        );
    }

    #[test]
    fn gptq_and_awq_pay_for_scales_and_zeros_per_group() {
        // DOMAIN.md §1.4: 4-bit, g=128 → 4.15625; g=64 → 4.3125; g=32 → 4.625 bits per weight.
        assert_eq!(bits(Precision::from_name("gptq-int4").unwrap()).to_string(), "4.15625");
        assert_eq!(bits(Precision::from_name("gptq-int4-g64").unwrap()).to_string(), "4.3125");
        assert_eq!(bits(Precision::from_name("awq-int4-g32").unwrap()).to_string(), "4.625");
        assert_eq!(Precision::from_name("gptq-int4-g7"), None);
    }

    #[test]
    fn grouped_int4_pays_for_a_16_bit_scale_and_zero_per_group() {
        // torchao int4_weight_only / quanto qint4, group 128: 4 + (16 + 16)/128 = 4.25 bits.
        assert_eq!(bits(Precision::from_name("int4-g128").unwrap()).to_string(), "4.25");
        // group 64: 4 + 32/64 = 4.5 bits.
        assert_eq!(bits(Precision::from_name("int4-g64").unwrap()).to_string(), "4.5");
        assert_eq!(Precision::from_name("int4"), Some(Precision::Int4));
        assert_eq!(Precision::from_name("int4-g64").unwrap().name(), "int4-g64");
    }

    #[test]
    fn quanto_pays_for_a_16_bit_scale_and_an_int8_zero_per_group() {
        // quanto 0.2.0, transformers' defaults (nbits 4, q_group_size 64): 4 + 24/64 bits.
        assert_eq!(bits(Precision::from_name("quanto-int4").unwrap()).to_string(), "4.375");
        assert_eq!(bits(Precision::from_name("quanto-int2").unwrap()).to_string(), "2.375");
        assert_eq!(bits(Precision::from_name("quanto-int4-g32").unwrap()).to_string(), "4.75");
        assert_eq!(Precision::from_name("quanto-int4-g128").unwrap().name(), "quanto-int4-g128");
        assert_eq!(Precision::from_name("quanto-int8"), None);
    }

    #[test]
    fn ggml_types_follow_their_block_sizes() {
        // gguf-py GGML_QUANT_SIZES: Q4_K 144 bytes per 256, Q6_K 210, Q8_0 34 per 32.
        assert_eq!(bits(Precision::Ggml(GgmlType::Q4K)).to_string(), "4.5");
        assert_eq!(bits(Precision::Ggml(GgmlType::Q6K)).to_string(), "6.5625");
        assert_eq!(bits(Precision::Ggml(GgmlType::Q8_0)).to_string(), "8.5");
        assert_eq!(bits(Precision::Ggml(GgmlType::Q2K)).to_string(), "2.625");
        // DOMAIN.md §1.5: the i-quants' blocks (gguf-py GGML_QUANT_SIZES).
        for (kind, expected) in [
            (GgmlType::Iq1S, "1.5625"),
            (GgmlType::Iq1M, "1.75"),
            (GgmlType::Iq2Xxs, "2.0625"),
            (GgmlType::Iq2Xs, "2.3125"),
            (GgmlType::Iq2S, "2.5625"),
            (GgmlType::Iq3Xxs, "3.0625"),
            (GgmlType::Iq3S, "3.4375"),
            (GgmlType::Iq4Nl, "4.5"),
            (GgmlType::Iq4Xs, "4.25"),
        ] {
            assert_eq!(bits(Precision::Ggml(kind)).to_string(), expected, "{}", kind.name());
        }
    }

    #[test]
    fn names_round_trip() {
        for name in Precision::NAMES {
            let precision = Precision::from_name(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(precision.name(), name);
        }
        let grouped = Precision::from_name("gptq-int3-g64").unwrap();
        assert_eq!(grouped.name(), "gptq-int3-g64");
    }
}
