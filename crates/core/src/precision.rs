//! Numeric formats: their storage cost per element and the hardware support they need.
//!
//! Bytes per element are exact rationals (`nf4` is 4.5 bits = 9/16 byte, with its block scales).
//! Sources are in DOMAIN.md §1 and repeated on each variant.

use std::fmt;

use serde::Serialize;

use crate::ratio::Ratio;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Fp32,
    Fp16,
    Bf16,
    /// FP8 (E4M3 or E5M2), one byte per element.
    Fp8,
    Int8,
    /// Packed 4-bit integers without scales (ggml/aiconfigurator `int4_wo`).
    Int4,
    /// bitsandbytes NF4, block 64 with an fp32 absmax per block: 4.5 bits.
    Nf4,
    /// bitsandbytes FP4, same layout as NF4: 4.5 bits.
    Fp4,
    /// OCP MXFP4: 32 E2M1 values + one E8M0 scale: 4.25 bits.
    Mxfp4,
    /// NVFP4: 4-bit values + one FP8 scale per 16: 4.5 bits.
    Nvfp4,
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

impl Precision {
    pub const ALL: [Precision; 10] = [
        Precision::Fp32,
        Precision::Fp16,
        Precision::Bf16,
        Precision::Fp8,
        Precision::Int8,
        Precision::Int4,
        Precision::Nf4,
        Precision::Fp4,
        Precision::Mxfp4,
        Precision::Nvfp4,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Fp8 => "fp8",
            Precision::Int8 => "int8",
            Precision::Int4 => "int4",
            Precision::Nf4 => "nf4",
            Precision::Fp4 => "fp4",
            Precision::Mxfp4 => "mxfp4",
            Precision::Nvfp4 => "nvfp4",
        }
    }

    pub fn from_name(name: &str) -> Option<Precision> {
        Some(match name {
            "fp32" | "float32" => Precision::Fp32,
            "fp16" | "float16" => Precision::Fp16,
            "bf16" | "bfloat16" => Precision::Bf16,
            "fp8" | "fp8_e4m3" | "fp8_e5m2" => Precision::Fp8,
            "int8" => Precision::Int8,
            "int4" => Precision::Int4,
            "nf4" => Precision::Nf4,
            "fp4" => Precision::Fp4,
            "mxfp4" => Precision::Mxfp4,
            "nvfp4" => Precision::Nvfp4,
            _ => return None,
        })
    }

    /// Storage bytes per element, including block scales.
    pub fn bytes_per_element(self) -> Ratio {
        let bits = |num: i128, den: i128| Ratio::new(num, den * 8).unwrap_or(Ratio::ONE);
        match self {
            Precision::Fp32 => Ratio::int(4),
            Precision::Fp16 | Precision::Bf16 => Ratio::int(2),
            Precision::Fp8 | Precision::Int8 => Ratio::ONE,
            Precision::Int4 => bits(4, 1),
            // 4 bits + a 32-bit absmax per 64-element block (bitsandbytes `quantize_4bit`).
            Precision::Nf4 | Precision::Fp4 => bits(4 * 64 + 32, 64),
            // 32 × 4 bits + 8-bit shared exponent per block of 32 (OCP MX v1.0).
            Precision::Mxfp4 => bits(32 * 4 + 8, 32),
            // 16 × 4 bits + an 8-bit FP8 scale per 16 (aiconfigurator `nvfp4` = 9/16 byte).
            Precision::Nvfp4 => bits(16 * 4 + 8, 16),
        }
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
            Precision::Fp8 => Precision::Bf16,
            _ => Precision::Fp16,
        }
    }

    /// The device feature this precision needs to run at all, when used for weights or
    /// activations. Weight-only integer formats (int8, int4, nf4, mxfp4) are dequantized to the
    /// activation precision by their kernels, so they need nothing of their own.
    pub fn required_feature(self) -> Option<Feature> {
        match self {
            Precision::Fp16 => Some(Feature::Fp16),
            Precision::Bf16 => Some(Feature::Bf16),
            Precision::Fp8 => Some(Feature::Fp8),
            Precision::Nvfp4 => Some(Feature::Fp4),
            Precision::Fp32
            | Precision::Int8
            | Precision::Int4
            | Precision::Nf4
            | Precision::Fp4
            | Precision::Mxfp4 => None,
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_scaled_formats_count_their_scales() {
        let bits = |p: Precision| p.bytes_per_element().checked_mul(Ratio::int(8)).unwrap();
        assert_eq!(bits(Precision::Nf4), Ratio::new(9, 2).unwrap());
        assert_eq!(bits(Precision::Mxfp4), Ratio::new(17, 4).unwrap());
        assert_eq!(bits(Precision::Nvfp4), Ratio::new(9, 2).unwrap());
        assert_eq!(bits(Precision::Int4), Ratio::int(4));
        assert_eq!(bits(Precision::Bf16), Ratio::int(16));
    }

    #[test]
    fn names_round_trip() {
        for precision in Precision::ALL {
            assert_eq!(Precision::from_name(precision.name()), Some(precision));
        }
    }
}
