//! Checking `scene` sections: a rendering workload declared by its assets.
//!
//! Textures with their mip chains and block compression, render targets at a resolution,
//! buffers, acceleration structures and the swap chain's frames in flight. Sizes are exact:
//! every mip level is rounded up to whole compression blocks (DOMAIN.md §7.2; BC1/BC4 are 8
//! bytes per 4×4 block and BC2/3/5/6H/7 16 (Microsoft Learn, Unity `GraphicsFormat`); ASTC
//! blocks are 128 bits whatever their footprint (Khronos ASTC specification)).

use std::fmt::Write as _;

use super::fields::{Fields, Repeat};
use super::quantity::{self, Dim};
use crate::ast::{Block, Field, Value};
use crate::budget::{Category, Provenance};
use crate::bytes::{Bytes, write_thousands};
use crate::diagnostic::Diagnostic;
use crate::hir::CustomComponent;

/// `(name, block width, block height, bytes per block)`.
const FORMATS: &[(&str, u64, u64, u64)] = &[
    ("r8", 1, 1, 1),
    ("rg8", 1, 1, 2),
    ("rgba8", 1, 1, 4),
    ("bgra8", 1, 1, 4),
    ("rgb10a2", 1, 1, 4),
    ("r11g11b10f", 1, 1, 4),
    ("r16f", 1, 1, 2),
    ("rg16f", 1, 1, 4),
    ("rgba16f", 1, 1, 8),
    ("r32f", 1, 1, 4),
    ("rg32f", 1, 1, 8),
    ("rgba32f", 1, 1, 16),
    ("d16", 1, 1, 2),
    ("d24s8", 1, 1, 4),
    ("d32", 1, 1, 4),
    ("bc1", 4, 4, 8),
    ("bc2", 4, 4, 16),
    ("bc3", 4, 4, 16),
    ("bc4", 4, 4, 8),
    ("bc5", 4, 4, 16),
    ("bc6h", 4, 4, 16),
    ("bc7", 4, 4, 16),
    ("astc4x4", 4, 4, 16),
    ("astc5x5", 5, 5, 16),
    ("astc6x6", 6, 6, 16),
    ("astc8x8", 8, 8, 16),
    ("astc10x10", 10, 10, 16),
    ("astc12x12", 12, 12, 16),
];

const MAX_SIDE: u64 = 1 << 16;

pub(super) fn scene(block: &Block, diagnostics: &mut Vec<Diagnostic>) -> Vec<CustomComponent> {
    const KNOWN: &[(&str, Repeat)] = &[
        ("texture", Repeat::Many),
        ("target", Repeat::Many),
        ("buffer", Repeat::Many),
        ("acceleration", Repeat::Many),
        ("swap_chain", Repeat::Once),
    ];
    let fields = Fields::new("a scene", block, KNOWN);
    let mut out = Vec::new();
    for field in fields.all("texture") {
        out.extend(image(field, &fields, Kind::Texture));
    }
    for field in fields.all("target") {
        out.extend(image(field, &fields, Kind::Target));
    }
    if let Some(field) = fields.get("swap_chain") {
        out.extend(image(field, &fields, Kind::SwapChain));
    }
    for (key, category) in [("buffer", "buffer"), ("acceleration", "acceleration structure")] {
        for field in fields.all(key) {
            out.extend(sized(field, &fields, category));
        }
    }
    diagnostics.extend(fields.finish());
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Texture,
    Target,
    SwapChain,
}

/// `buffer geometry 1.8 GiB`: a named size.
fn sized(field: &Field, fields: &Fields<'_>, what: &str) -> Option<CustomComponent> {
    let [Value::Word(name), Value::Expr(expr)] = field.values.as_slice() else {
        fields.push(Diagnostic::error(
            "E013",
            field.span,
            format!(
                "write `{} NAME SIZE`, e.g. `{} geometry 1.8 GiB`",
                field.key.name, field.key.name
            ),
        ));
        return None;
    };
    let quantity = match quantity::evaluate(expr) {
        Ok(q) if q.dim == Dim::Bytes => q,
        Ok(q) => {
            fields.push(Diagnostic::error(
                "E005",
                expr.span(),
                format!("a {what} size is bytes, not {}", q.dim),
            ));
            return None;
        }
        Err(diagnostic) => {
            fields.push(diagnostic);
            return None;
        }
    };
    let bytes = fields.check_bytes(&field.key.name, quantity.value, expr.span(), 0, 1 << 50)?;
    Some(CustomComponent {
        name: format!("{what}: {}", name.name),
        bytes,
        category: Category::Persistent,
        provenance: Provenance::Exact,
        formula: super::format_expr(expr),
    })
}

/// A texture, render target or swap chain: `texture albedo { count 400; size 2048 x 2048; ... }`.
fn image(field: &Field, fields: &Fields<'_>, kind: Kind) -> Option<CustomComponent> {
    const KNOWN: &[(&str, Repeat)] = &[
        ("size", Repeat::Once),
        ("format", Repeat::Once),
        ("count", Repeat::Once),
        ("mips", Repeat::Once),
        ("layers", Repeat::Once),
        ("cube", Repeat::Once),
        ("samples", Repeat::Once),
        ("images", Repeat::Once),
    ];
    let name = match (kind, field.values.as_slice()) {
        (Kind::SwapChain, []) => "swap chain".to_string(),
        (Kind::Texture | Kind::Target, [Value::Word(name)]) => name.name.clone(),
        _ => {
            let example = if kind == Kind::SwapChain {
                "swap_chain { size 3840 x 2160; format rgba8; images 3 }"
            } else {
                "texture albedo { size 2048 x 2048; format bc7; mips true }"
            };
            fields.push(Diagnostic::error("E013", field.span, format!("write `{example}`")));
            return None;
        }
    };
    let Some(block) = &field.block else {
        fields.push(Diagnostic::error(
            "E013",
            field.span,
            format!("`{}` needs a block with its size and format", field.key.name),
        ));
        return None;
    };
    let what = format!("{} `{name}`", field.key.name);
    let inner = Fields::new(&what, block, KNOWN);
    let size = inner.get("size").and_then(|f| inner.dimensions(f, 1, MAX_SIDE, "3840 x 2160"));
    if !inner.has("size") {
        inner.missing("size", "size 2048 x 2048");
    }
    let names: Vec<&str> = FORMATS.iter().map(|f| f.0).collect();
    let format =
        inner.choice("format", &names).and_then(|(n, _)| FORMATS.iter().find(|f| f.0 == n));
    if !inner.has("format") {
        inner.missing("format", "format bc7");
    }
    let count = inner.whole("count", Dim::Count, 1, 1 << 20, "400").unwrap_or(1);
    let mips = inner.boolean("mips").unwrap_or(false);
    let layers = inner.whole("layers", Dim::Count, 1, 2048, "6").unwrap_or(1);
    let faces = if inner.boolean("cube").unwrap_or(false) { 6 } else { 1 };
    let samples = inner.whole("samples", Dim::Count, 1, 64, "4").unwrap_or(1);
    let images = inner.whole("images", Dim::Count, 1, 16, "3").unwrap_or(1);
    let problems = inner.finish();
    let failed = !problems.is_empty();
    for problem in problems {
        fields.push(problem);
    }
    let ((width, height), &(format_name, bw, bh, block_bytes)) = (size?, format?);
    if failed {
        return None;
    }
    // Every mip level rounded up to whole blocks; a full chain runs down to 1 × 1.
    let mut per_image = 0u64;
    let mut levels = 0u64;
    let (mut w, mut h) = (width, height);
    loop {
        per_image += w.div_ceil(bw) * h.div_ceil(bh) * block_bytes;
        levels += 1;
        if !mips || (w == 1 && h == 1) {
            break;
        }
        w = (w / 2).max(1);
        h = (h / 2).max(1);
    }
    let copies = count * layers * faces * samples * images;
    let bytes = Bytes(per_image.checked_mul(copies)?);
    let mut formula = String::new();
    write_thousands(&mut formula, width);
    formula.push_str(" × ");
    write_thousands(&mut formula, height);
    let _ = write!(formula, " {format_name}");
    if mips {
        let _ = write!(formula, ", {levels} mip levels");
    }
    formula.push_str(" = ");
    write_thousands(&mut formula, per_image);
    formula.push_str(" B each");
    for (n, label) in [
        (count, "count"),
        (layers, "layers"),
        (faces, "cube faces"),
        (samples, "samples"),
        (images, "images"),
    ] {
        if n > 1 {
            let _ = write!(formula, " × {n} {label}");
        }
    }
    let _ = write!(formula, " = {bytes}");
    let category = match kind {
        Kind::Texture => Category::Persistent,
        Kind::Target => Category::Intermediate,
        Kind::SwapChain => Category::Cache,
    };
    let label = match kind {
        Kind::Texture => "textures",
        Kind::Target => "render target",
        Kind::SwapChain => "frames in flight",
    };
    Some(CustomComponent {
        name: format!("{label}: {name}"),
        bytes,
        category,
        provenance: Provenance::Formula,
        formula,
    })
}
