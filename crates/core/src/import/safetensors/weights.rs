//! The stored weights of a checkpoint's tensors, by role: quantized packs with their scales and
//! zeros, and plain tensors by dtype.

use std::collections::BTreeMap;

use super::{Dtype, Tensor};
use crate::diagnostic::Diagnostic;
use crate::import::model::{DtypeTotals, Quantization, Quantized, Weights};
use crate::span::Span;

/// How one tensor counts: a plain parameter tensor, packed quantized weights, or a
/// quantization's scales and zero points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Plain,
    /// Packed weights; the number of weights one stored element holds is `per_element`.
    Packed {
        method: &'static str,
        weights_per_element: u64,
        per_bits: u64,
    },
    Overhead {
        method: &'static str,
    },
}

/// Totals, parameter count and format of a checkpoint's tensors. `declared` is config.json's
/// `quantization_config`, which decides GPTQ/AWQ bit widths when given. Returns the weights and
/// notes on what was inferred.
pub fn weights(
    tensors: &[Tensor],
    declared: Option<&Quantization>,
) -> Result<(Weights, Vec<String>), Diagnostic> {
    let names: BTreeMap<&str, &Tensor> = tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut notes = Vec::new();
    let mut weights = Weights::default();
    let mut quantized: Option<Quantized> = None;
    let mut first_packed: Option<&Tensor> = None;
    let overflow =
        || Diagnostic::error("I110", Span::new(0, 0), "the checkpoint's totals overflow 64 bits");
    for tensor in tensors {
        let role = role(tensor, &names, declared);
        let params = match role {
            Role::Plain => tensor.elements,
            Role::Packed { weights_per_element, per_bits, .. } => {
                tensor.elements.checked_mul(weights_per_element).ok_or_else(overflow)? / per_bits
            }
            Role::Overhead { .. } => 0,
        };
        weights.params = weights.params.checked_add(params).ok_or_else(overflow)?;
        weights.bytes = weights.bytes.checked_add(tensor.bytes).ok_or_else(overflow)?;
        weights.tensors += 1;
        let totals = weights
            .by_dtype
            .entry(tensor.dtype.name().to_string())
            .or_insert_with(DtypeTotals::default);
        totals.tensors += 1;
        totals.elements = totals.elements.checked_add(tensor.elements).ok_or_else(overflow)?;
        totals.bytes = totals.bytes.checked_add(tensor.bytes).ok_or_else(overflow)?;
        if let Role::Packed { method, .. } | Role::Overhead { method } = role {
            let q = quantized.get_or_insert_with(|| Quantized {
                method: method.to_string(),
                ..Quantized::default()
            });
            if matches!(role, Role::Packed { .. }) {
                q.weight_tensors += 1;
                first_packed.get_or_insert(tensor);
            } else {
                q.overhead_tensors += 1;
            }
            q.bytes = q.bytes.checked_add(tensor.bytes).ok_or_else(overflow)?;
        }
    }
    weights.format = if let (Some(q), Some(first)) = (&quantized, first_packed) {
        packed_format(&q.method, first, &names, declared, &mut notes)
    } else {
        if let Some(declared) = declared {
            notes.push(format!(
                "config.json declares {} quantization, but no tensor is stored that way",
                declared.format_name()
            ));
        }
        dominant_dtype(tensors)
    };
    weights.quantized = quantized;
    Ok((weights, notes))
}

fn sibling<'a>(
    name: &str,
    suffix: &str,
    with: &str,
    names: &BTreeMap<&str, &'a Tensor>,
) -> Option<&'a Tensor> {
    let stem = name.strip_suffix(suffix)?;
    names.get(format!("{stem}{with}").as_str()).copied()
}

fn role(tensor: &Tensor, names: &BTreeMap<&str, &Tensor>, declared: Option<&Quantization>) -> Role {
    let name = tensor.name.as_str();
    // GPTQ and AWQ: int32 words of packed weights, with fp16 scales and packed zero points.
    if name.ends_with(".qweight") {
        let gptq = sibling(name, ".qweight", ".g_idx", names).is_some()
            || matches!(declared, Some(Quantization::Gptq { .. }));
        let bits = packed_bits(tensor, names, declared).unwrap_or(4);
        let word = tensor.dtype.bits();
        return Role::Packed {
            method: if gptq { "gptq" } else { "awq" },
            weights_per_element: word,
            per_bits: bits.max(1),
        };
    }
    for suffix in [".qzeros", ".scales", ".g_idx"] {
        if sibling(name, suffix, ".qweight", names).is_some() {
            let gptq = sibling(name, suffix, ".g_idx", names).is_some()
                || matches!(declared, Some(Quantization::Gptq { .. }));
            return Role::Overhead { method: if gptq { "gptq" } else { "awq" } };
        }
    }
    // gpt-oss MXFP4: bytes of two E2M1 values, with one E8M0 scale byte per 32.
    if name.ends_with("_blocks") && sibling(name, "_blocks", "_scales", names).is_some() {
        return Role::Packed { method: "mxfp4", weights_per_element: 2, per_bits: 1 };
    }
    if name.ends_with("_scales") && sibling(name, "_scales", "_blocks", names).is_some() {
        return Role::Overhead { method: "mxfp4" };
    }
    // FP8: one-byte weights with a scale per tensor or per block.
    for suffix in [".weight_scale_inv", ".weight_scale", ".input_scale"] {
        if sibling(name, suffix, ".weight", names).is_some() {
            return Role::Overhead { method: "fp8" };
        }
    }
    if tensor.dtype.bits() == 8
        && tensor.dtype != Dtype::U8
        && tensor.dtype != Dtype::I8
        && (sibling(name, ".weight", ".weight_scale_inv", names).is_some()
            || sibling(name, ".weight", ".weight_scale", names).is_some())
    {
        return Role::Packed { method: "fp8", weights_per_element: 1, per_bits: 1 };
    }
    // bitsandbytes: 4-bit weights packed two per byte, with absmax and quant-state tensors.
    let bnb_state = |stem_suffix: &str| {
        ["nf4", "fp4"].iter().any(|kind| {
            sibling(name, stem_suffix, &format!(".weight.quant_state.bitsandbytes__{kind}"), names)
                .is_some()
        })
    };
    if name.ends_with(".weight") && tensor.dtype == Dtype::U8 && bnb_state(".weight") {
        return Role::Packed { method: "bitsandbytes", weights_per_element: 2, per_bits: 1 };
    }
    let bnb_overhead = [".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map"];
    let of_weight = |suffix: &str| {
        name.strip_suffix(suffix)
            .is_some_and(|stem| stem.ends_with(".weight") && names.contains_key(stem))
    };
    if name.contains(".weight.quant_state.bitsandbytes__")
        || bnb_overhead.iter().any(|suffix| of_weight(suffix))
        || sibling(name, ".SCB", ".weight", names).is_some()
        || sibling(name, ".weight_format", ".weight", names).is_some()
    {
        return Role::Overhead { method: "bitsandbytes" };
    }
    Role::Plain
}

/// The bit width of a `qweight`: config.json's, else inferred from the shapes (GPTQ: `g_idx`
/// has one entry per input row; AWQ: `scales` has one column per output).
fn packed_bits(
    qweight: &Tensor,
    names: &BTreeMap<&str, &Tensor>,
    declared: Option<&Quantization>,
) -> Option<u64> {
    if let Some(Quantization::Gptq { bits, .. } | Quantization::Awq { bits, .. }) = declared {
        return Some(*bits);
    }
    let word = qweight.dtype.bits();
    let rows = qweight.shape.first()?.checked_mul(word)?;
    let columns = qweight.shape.get(1)?.checked_mul(word)?;
    if let Some(g_idx) = sibling(&qweight.name, ".qweight", ".g_idx", names) {
        let inputs = g_idx.elements;
        return (inputs > 0 && rows.is_multiple_of(inputs)).then(|| rows / inputs);
    }
    let scales = sibling(&qweight.name, ".qweight", ".scales", names)?;
    let outputs = *scales.shape.get(1)?;
    (outputs > 0 && columns.is_multiple_of(outputs)).then(|| columns / outputs)
}

/// The group size of a GPTQ or AWQ layer: inputs per row of `scales`.
fn packed_group(qweight: &Tensor, bits: u64, names: &BTreeMap<&str, &Tensor>) -> Option<u64> {
    let scales = sibling(&qweight.name, ".qweight", ".scales", names)?;
    let groups = *scales.shape.first()?;
    let inputs = match sibling(&qweight.name, ".qweight", ".g_idx", names) {
        Some(g_idx) => g_idx.elements,
        None if bits == 0 => return None,
        // AWQ: qweight is [inputs, outputs × bits / 32].
        None => *qweight.shape.first()?,
    };
    (groups > 0 && inputs % groups == 0).then(|| inputs / groups)
}

fn packed_format(
    method: &str,
    first: &Tensor,
    names: &BTreeMap<&str, &Tensor>,
    declared: Option<&Quantization>,
    notes: &mut Vec<String>,
) -> String {
    let found = match method {
        "gptq" | "awq" => {
            let bits = packed_bits(first, names, declared).unwrap_or(4);
            let inferred_group = packed_group(first, bits, names);
            let group = match declared {
                Some(Quantization::Gptq { group, .. } | Quantization::Awq { group, .. }) => *group,
                _ => inferred_group,
            };
            if method == "gptq" {
                Quantization::Gptq { bits, group, desc_act: false }
            } else {
                Quantization::Awq { bits, group }
            }
        }
        "mxfp4" => Quantization::Mxfp4,
        "fp8" => {
            let block = match declared {
                Some(Quantization::Fp8 { block }) => *block,
                _ if sibling(&first.name, ".weight", ".weight_scale_inv", names).is_some() => {
                    Some([128, 128])
                }
                _ => None,
            };
            Quantization::Fp8 { block }
        }
        _ => {
            let kind =
                if names.keys().any(|n| n.ends_with("bitsandbytes__nf4")) { "nf4" } else { "fp4" };
            let double_quant = names.keys().any(|n| n.ends_with(".nested_absmax"));
            if names.keys().any(|n| n.rsplit('.').next() == Some("SCB"))
                && !names.keys().any(|n| n.contains("bitsandbytes__"))
            {
                Quantization::Bnb8
            } else {
                Quantization::Bnb4 { kind: kind.to_string(), double_quant }
            }
        }
    };
    if let Some(declared) = declared
        && declared.format_name() != found.format_name()
    {
        notes.push(format!(
            "config.json declares {} quantization; the tensors are stored as {}",
            declared.format_name(),
            found.format_name()
        ));
    }
    found.format_name()
}

/// The precision of the dtype holding the most bytes of weight matrices (tensors of two or
/// more dimensions), or of all tensors when there are none.
fn dominant_dtype(tensors: &[Tensor]) -> String {
    let mut by_dtype: BTreeMap<Dtype, u64> = BTreeMap::new();
    let matrices: Vec<&Tensor> = tensors.iter().filter(|t| t.shape.len() >= 2).collect();
    let pool: Vec<&Tensor> = if matrices.is_empty() { tensors.iter().collect() } else { matrices };
    for tensor in pool {
        let total = by_dtype.entry(tensor.dtype).or_insert(0);
        *total = total.saturating_add(tensor.bytes);
    }
    by_dtype
        .into_iter()
        .max_by_key(|(dtype, bytes)| (*bytes, std::cmp::Reverse(*dtype)))
        .map_or_else(|| "bf16".to_string(), |(dtype, _)| dtype.precision())
}
