//! ggml's element types and llama.cpp's file types, as gguf-py names them.

use serde::Serialize;

/// A ggml element type: `block` elements take `type_size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block: u64,
    pub type_size: u64,
}

/// gguf-py `GGMLQuantizationType` and `GGML_QUANT_SIZES` (llama.cpp `gguf-py/gguf/constants.py`).
pub(super) const GGML_TYPES: [GgmlType; 34] = {
    const fn t(id: u32, name: &'static str, block: u64, type_size: u64) -> GgmlType {
        GgmlType { id, name, block, type_size }
    }
    [
        t(0, "F32", 1, 4),
        t(1, "F16", 1, 2),
        t(2, "Q4_0", 32, 18),
        t(3, "Q4_1", 32, 20),
        t(6, "Q5_0", 32, 22),
        t(7, "Q5_1", 32, 24),
        t(8, "Q8_0", 32, 34),
        t(9, "Q8_1", 32, 40),
        t(10, "Q2_K", 256, 84),
        t(11, "Q3_K", 256, 110),
        t(12, "Q4_K", 256, 144),
        t(13, "Q5_K", 256, 176),
        t(14, "Q6_K", 256, 210),
        t(15, "Q8_K", 256, 292),
        t(16, "IQ2_XXS", 256, 66),
        t(17, "IQ2_XS", 256, 74),
        t(18, "IQ3_XXS", 256, 98),
        t(19, "IQ1_S", 256, 50),
        t(20, "IQ4_NL", 32, 18),
        t(21, "IQ3_S", 256, 110),
        t(22, "IQ2_S", 256, 82),
        t(23, "IQ4_XS", 256, 136),
        t(24, "I8", 1, 1),
        t(25, "I16", 1, 2),
        t(26, "I32", 1, 4),
        t(27, "I64", 1, 8),
        t(28, "F64", 1, 8),
        t(29, "IQ1_M", 256, 56),
        t(30, "BF16", 1, 2),
        t(34, "TQ1_0", 256, 54),
        t(35, "TQ2_0", 256, 66),
        t(39, "MXFP4", 32, 17),
        t(40, "NVFP4", 64, 36),
        t(41, "Q1_0", 128, 18),
    ]
};

impl GgmlType {
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GGML_TYPES.iter().copied().find(|t| t.id == id)
    }

    pub(super) fn from_name(name: &str) -> Option<GgmlType> {
        GGML_TYPES.iter().copied().find(|t| t.name == name)
    }
}

/// `llama_ftype` values of `general.file_type` (gguf-py `LlamaFileType`).
pub(super) const FILE_TYPES: [(u64, &str); 37] = [
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (4, "Q4_1_SOME_F16"),
    (7, "Q8_0"),
    (8, "Q5_0"),
    (9, "Q5_1"),
    (10, "Q2_K"),
    (11, "Q3_K_S"),
    (12, "Q3_K_M"),
    (13, "Q3_K_L"),
    (14, "Q4_K_S"),
    (15, "Q4_K_M"),
    (16, "Q5_K_S"),
    (17, "Q5_K_M"),
    (18, "Q6_K"),
    (19, "IQ2_XXS"),
    (20, "IQ2_XS"),
    (21, "Q2_K_S"),
    (22, "IQ3_XS"),
    (23, "IQ3_XXS"),
    (24, "IQ1_S"),
    (25, "IQ4_NL"),
    (26, "IQ3_S"),
    (27, "IQ3_M"),
    (28, "IQ2_S"),
    (29, "IQ2_M"),
    (30, "IQ4_XS"),
    (31, "IQ1_M"),
    (32, "BF16"),
    (33, "Q4_0_4_4"),
    (34, "Q4_0_4_8"),
    (35, "Q4_0_8_8"),
    (36, "TQ1_0"),
    (37, "TQ2_0"),
    (38, "MXFP4_MOE"),
];

/// File types after the table above (gguf-py at llama.cpp `0024aa7`).
pub(super) const FILE_TYPES_LATER: [(u64, &str); 2] = [(39, "NVFP4"), (40, "Q1_0")];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_sizes_follow_gguf_py() {
        let size = |name: &str| GgmlType::from_name(name).map(|t| (t.block, t.type_size));
        assert_eq!(size("Q4_K"), Some((256, 144)));
        assert_eq!(size("Q6_K"), Some((256, 210)));
        assert_eq!(size("MXFP4"), Some((32, 17)));
        assert_eq!(size("IQ4_XS"), Some((256, 136)));
        assert_eq!(GgmlType::from_id(39).map(|t| t.name), Some("MXFP4"));
        assert_eq!(GgmlType::from_id(4), None, "Q4_2 was removed");
    }
}
