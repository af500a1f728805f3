//! Model files dropped on the page (or chosen with its file button), imported through the core's
//! importers, as plain Rust so that it is tested natively too.
//!
//! The page reads only the bytes a header needs: it hands [`Importer::read`] the start of a file
//! and its length, and the answer says how many bytes from the start to hand over next, if any
//! (the importers' `NeedMore`). A JSON file is read whole, up to one byte over the core's cap
//! (which the core then reports). Every file of one drop goes into one checkpoint, so a model's
//! `config.json` dropped with its safetensors file gives the shape and the stored weights
//! together. [`Importer::finish`] then renders the model as a `.vram` `model` block.
//!
//! Nothing in a file can make this trap or loop: lengths come from the file and are checked by
//! the core against its caps, the answer never asks for fewer bytes than it was given, and a
//! file the page does not recognise is an `X002` diagnostic.

use serde::Serialize;
use tsify::Tsify;
use vram_core::diagnostic::Diagnostic;
use vram_core::import::safetensors;
use vram_core::import::{Checkpoint, MAX_JSON_BYTES, Parsed, Problem, config_json, gguf, name_of};

use crate::api::{Position, Severity, position};

/// What the page should hand over next for one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct ReadStep {
    /// Bytes from the start of the file to pass in the next call; null when the file is read
    /// (taken, or refused with diagnostics).
    pub need: Option<u64>,
    /// What the file was read as: `config`, `index`, `safetensors` or `gguf` (null: unknown).
    pub kind: Option<String>,
    /// Problems with this file; the file is not part of the model when there are any.
    pub diagnostics: Vec<FileDiagnostic>,
}

/// A problem with a dropped file. JSON files give a line and column (in UTF-16 units); binary
/// headers give the byte range only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct FileDiagnostic {
    pub file: String,
    pub code: String,
    pub severity: Severity,
    pub message: String,
    /// Byte offsets into the file.
    pub start: u64,
    pub end: u64,
    pub at: Option<Position>,
    pub help: Vec<String>,
}

/// The model the dropped files describe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Tsify)]
#[tsify(missing_as_null)]
pub struct Imported {
    /// The model block's name, a valid `.vram` name; null when nothing could be imported.
    pub name: Option<String>,
    /// The `model` block, with what was read and assumed as comments above it.
    pub vram: Option<String>,
    pub diagnostics: Vec<FileDiagnostic>,
}

/// The kinds of file the importers read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Config,
    Index,
    Safetensors,
    Gguf,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Config => "config",
            Kind::Index => "index",
            Kind::Safetensors => "safetensors",
            Kind::Gguf => "gguf",
        }
    }

    /// By the file's name, or else by its first bytes (`GGUF`, `{`, or a safetensors length
    /// followed by `{`); `None` when neither says.
    fn of(name: &str, bytes: &[u8]) -> Option<Kind> {
        let extension = std::path::Path::new(name).extension().and_then(|e| e.to_str());
        let is = |wanted: &str| extension.is_some_and(|e| e.eq_ignore_ascii_case(wanted));
        if is("json") && name.to_ascii_lowercase().ends_with(".safetensors.index.json") {
            return Some(Kind::Index);
        }
        if is("json") {
            return Some(Kind::Config);
        }
        if is("gguf") {
            return Some(Kind::Gguf);
        }
        if is("safetensors") {
            return Some(Kind::Safetensors);
        }
        let text_start = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if bytes.starts_with(b"GGUF") {
            Some(Kind::Gguf)
        } else if text_start == Some(&b'{') {
            Some(Kind::Config)
        } else if bytes.len() > 8 && bytes[8] == b'{' {
            Some(Kind::Safetensors)
        } else {
            None
        }
    }
}

/// The first read of a GGUF file, doubled while its header continues (as `vram import` does).
const GGUF_DOUBLING: bool = true;

/// Collects the files of one drop into a checkpoint.
#[derive(Debug, Default)]
pub struct Importer {
    checkpoint: Checkpoint,
    /// The names of the files taken, in order.
    files: Vec<String>,
    problems: Vec<FileDiagnostic>,
}

impl Importer {
    pub fn new() -> Self {
        Importer::default()
    }

    /// Reads `bytes`, the start of the file `name` of `file_len` bytes.
    pub fn read(&mut self, name: &str, bytes: &[u8], file_len: u64) -> ReadStep {
        let have = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        // The page never hands over more than the file holds; if it did, trust the bytes.
        let file_len = file_len.max(have);
        let Some(kind) = Kind::of(name, bytes) else {
            return self.refuse(name, None, &[unknown_kind(name)], None);
        };
        let done = |kind: Kind| ReadStep {
            need: None,
            kind: Some(kind.name().into()),
            diagnostics: Vec::new(),
        };
        let more = |need: u64| ReadStep {
            need: Some(need),
            kind: Some(kind.name().into()),
            diagnostics: Vec::new(),
        };
        match kind {
            Kind::Config | Kind::Index => {
                // Whole, or one byte over the cap, so that the core reports the size.
                let want = file_len.min(MAX_JSON_BYTES + 1);
                if have < want {
                    return more(want);
                }
                let parsed = if kind == Kind::Config {
                    config_json::parse(bytes).map(|model| self.checkpoint.config = Some(model))
                } else {
                    safetensors::parse_index(bytes)
                        .map(|index| self.checkpoint.index = Some((name.to_string(), index)))
                };
                match parsed {
                    Ok(()) => {
                        self.files.push(name.to_string());
                        done(kind)
                    }
                    Err(found) => self.refuse(name, Some(kind), &found, Some(bytes)),
                }
            }
            Kind::Safetensors => match safetensors::parse_header(bytes, Some(file_len)) {
                Parsed::Done(header) => {
                    self.checkpoint.safetensors.push((name.to_string(), header));
                    self.files.push(name.to_string());
                    done(kind)
                }
                Parsed::NeedMore(need) => self.ask(name, kind, need, have, file_len, false),
                Parsed::Failed(found) => self.refuse(name, Some(kind), &found, None),
            },
            Kind::Gguf => match gguf::parse(bytes, Some(file_len)) {
                Parsed::Done(header) => {
                    self.checkpoint.gguf.push((name.to_string(), header));
                    self.files.push(name.to_string());
                    done(kind)
                }
                Parsed::NeedMore(need) => self.ask(name, kind, need, have, file_len, GGUF_DOUBLING),
                Parsed::Failed(found) => self.refuse(name, Some(kind), &found, None),
            },
        }
    }

    /// The next read, checked: more than was given and within the file, else a refusal (the
    /// core promises this; the check keeps a broken promise from becoming an endless loop).
    fn ask(
        &mut self,
        name: &str,
        kind: Kind,
        need: u64,
        have: u64,
        len: u64,
        double: bool,
    ) -> ReadStep {
        if need <= have || need > len {
            let message = format!("the reader asked for {need} bytes with {have} read of {len}");
            return self.refuse(name, Some(kind), &[internal(&message)], None);
        }
        let need = if double { need.max(have.saturating_mul(2)).min(len) } else { need };
        ReadStep { need: Some(need), kind: Some(kind.name().into()), diagnostics: Vec::new() }
    }

    fn refuse(
        &mut self,
        name: &str,
        kind: Option<Kind>,
        found: &[Diagnostic],
        text: Option<&[u8]>,
    ) -> ReadStep {
        let text = text.and_then(|bytes| std::str::from_utf8(bytes).ok());
        let diagnostics: Vec<FileDiagnostic> =
            found.iter().map(|d| file_diagnostic(name, d, text)).collect();
        self.problems.extend(diagnostics.iter().cloned());
        ReadStep { need: None, kind: kind.map(|k| k.name().into()), diagnostics }
    }

    /// The model of the files taken, as a `model` block. `taken_names` are model names the
    /// source or the catalog already uses; the block gets a name that is not one of them.
    pub fn finish(&self, taken_names: &[String]) -> Imported {
        let mut diagnostics = self.problems.clone();
        if self.files.is_empty() {
            return Imported { name: None, vram: None, diagnostics };
        }
        match self.checkpoint.import() {
            Ok(mut model) => {
                let stem = self.files.iter().find_map(|f| specific_stem(f));
                let base = stem
                    .or_else(|| model.title.clone())
                    .map_or_else(|| "imported".to_string(), |s| name_of(&s));
                if model.title.is_none() {
                    model.title = Some(base.clone());
                }
                let name = fresh_name(&base, taken_names);
                let vram = model.to_vram(&name);
                Imported { name: Some(name), vram: Some(vram), diagnostics }
            }
            Err(problems) => {
                diagnostics.extend(
                    problems
                        .iter()
                        .map(|p: &Problem| file_diagnostic(&p.file, &p.diagnostic, None)),
                );
                Imported { name: None, vram: None, diagnostics }
            }
        }
    }
}

/// The file's name without its extension, unless the name is generic (`config.json`,
/// `model.safetensors`, an index) and says nothing about the model; a GGUF split's part
/// suffix (`-00001-of-00003`) and a `.config` before `.json` are dropped.
fn specific_stem(file: &str) -> Option<String> {
    let lower = file.to_ascii_lowercase();
    if lower == "config.json"
        || lower == "model.safetensors"
        || lower.ends_with(".safetensors.index.json")
    {
        return None;
    }
    let stem = file.rsplit_once('.').map_or(file, |(stem, _)| stem);
    let stem = stem.strip_suffix(".config").unwrap_or(stem);
    let stem = match stem.rsplit_once("-of-").and_then(|(rest, _)| rest.rsplit_once('-')) {
        Some((prefix, part)) if part.len() == 5 && part.bytes().all(|b| b.is_ascii_digit()) => {
            prefix
        }
        _ => stem,
    };
    (!stem.is_empty()).then(|| stem.to_string())
}

/// `base`, or `base-2`, `base-3`, … : the first that `taken` does not hold.
fn fresh_name(base: &str, taken: &[String]) -> String {
    if !taken.iter().any(|t| t == base) {
        return base.to_string();
    }
    // Of taken.len() + 1 candidates, one at least is free.
    (2..=taken.len().saturating_add(2))
        .map(|n| format!("{base}-{n}"))
        .find(|name| !taken.iter().any(|t| t == name))
        .unwrap_or_else(|| base.to_string())
}

fn file_diagnostic(file: &str, d: &Diagnostic, text: Option<&str>) -> FileDiagnostic {
    FileDiagnostic {
        file: file.to_string(),
        code: d.code.to_string(),
        severity: match d.severity {
            vram_core::diagnostic::Severity::Error => Severity::Error,
            vram_core::diagnostic::Severity::Warning => Severity::Warning,
        },
        message: d.message.clone(),
        start: u64::from(d.primary.start),
        end: u64::from(d.primary.end),
        at: text.map(|text| position(text, d.primary.start)),
        help: d.help.clone(),
    }
}

fn unknown_kind(name: &str) -> Diagnostic {
    Diagnostic::error(
        "X002",
        vram_core::span::Span::default(),
        format!("{name} is not a file the calculator reads"),
    )
    .with_help(
        "drop a .vram file, a model's config.json, a .safetensors file or a .gguf file \
         (a checkpoint's config.json and safetensors file can be dropped together)",
    )
}

fn internal(message: &str) -> Diagnostic {
    Diagnostic::error("X001", vram_core::span::Span::default(), message.to_string())
        .with_help("this is a bug in vram-wasm; please report it with the file")
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../core/tests/fixtures/import");

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
    }

    /// Reads `bytes` as the page does: a first slice, then what each answer asks for.
    fn drop_file(
        importer: &mut Importer,
        name: &str,
        bytes: &[u8],
        first: usize,
    ) -> (ReadStep, Vec<u64>) {
        let len = bytes.len() as u64;
        let mut want = first.min(bytes.len());
        let mut reads = Vec::new();
        loop {
            reads.push(want as u64);
            let step = importer.read(name, &bytes[..want], len);
            match step.need {
                None => return (step, reads),
                Some(need) => {
                    assert!(need > want as u64 && need <= len, "{name}: asked {need} after {want}");
                    want = usize::try_from(need).unwrap();
                }
            }
        }
    }

    #[test]
    fn a_config_and_its_safetensors_make_one_model() {
        let mut importer = Importer::new();
        let (step, _) = drop_file(
            &mut importer,
            "tiny-llama.config.json",
            &fixture("tiny-llama.config.json"),
            16,
        );
        assert_eq!((step.kind.as_deref(), step.diagnostics.len()), (Some("config"), 0));
        let bytes = fixture("tiny-llama.safetensors");
        let (step, reads) = drop_file(&mut importer, "tiny-llama.safetensors", &bytes, 8);
        assert_eq!(step.kind.as_deref(), Some("safetensors"));
        assert!(step.diagnostics.is_empty(), "{step:?}");
        // Only the header: the 8-byte length, then 8 + N bytes, never the tensors.
        let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        assert_eq!(reads, vec![8, 8 + header_len]);
        assert!(8 + header_len < bytes.len() as u64 / 10);
        let model = importer.finish(&["tiny-llama".to_string()]);
        assert_eq!(model.name.as_deref(), Some("tiny-llama-2"));
        let vram = model.vram.unwrap();
        assert!(vram.contains("model tiny-llama-2"), "{vram}");
        assert!(vram.contains("safetensors header"), "{vram}");
        assert!(vram.contains("layers"), "{vram}");
        // The block is valid language: a workload using it evaluates.
        let source = format!(
            "{vram}\nworkload w {{\n  model tiny-llama-2\n  inference {{ weights bf16\n context 512 tokens }}\n}}\ncheck w on l4\n"
        );
        let outcome = vram_core::evaluate(&source);
        assert!(outcome.diagnostics.iter().all(|d| !d.is_error()), "{:?}", outcome.diagnostics);
    }

    #[test]
    fn a_gguf_file_is_read_from_its_start_only() {
        let bytes = fixture("tiny-llama-q.gguf");
        let mut importer = Importer::new();
        let (step, reads) = drop_file(&mut importer, "tiny-llama-q.gguf", &bytes, 4096);
        assert!(step.diagnostics.is_empty(), "{step:?}");
        assert!(*reads.last().unwrap() < bytes.len() as u64, "{reads:?}");
        let model = importer.finish(&[]);
        assert_eq!(model.name.as_deref(), Some("tiny-llama-q"));
        assert!(model.vram.unwrap().contains("GGUF"));
    }

    #[test]
    fn hostile_files_are_diagnostics() {
        // Unknown kind, binary garbage.
        let garbage: Vec<u8> =
            (0..5000u32).map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[2]).collect();
        let mut importer = Importer::new();
        let (step, _) = drop_file(&mut importer, "photo.bin", &garbage, 65536);
        assert_eq!(step.diagnostics[0].code, "X002");
        // Garbage under a model file's name: the importer's own diagnostics.
        for name in ["x.safetensors", "x.gguf", "config.json"] {
            let (step, _) = drop_file(&mut importer, name, &garbage, 8);
            assert!(!step.diagnostics.is_empty(), "{name}");
            assert!(step.diagnostics.iter().all(|d| d.code.starts_with('I')), "{name}: {step:?}");
        }
        // A truncated safetensors file (its header cut short), and a huge header length.
        let bytes = fixture("tiny-llama.safetensors");
        let (step, _) = drop_file(&mut importer, "cut.safetensors", &bytes[..100], 8);
        assert!(!step.diagnostics.is_empty());
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        let (step, reads) = drop_file(&mut importer, "huge.safetensors", &huge, 8);
        assert!(!step.diagnostics.is_empty());
        assert_eq!(reads.len(), 1);
        // A JSON file over the core's cap is read only to one byte past it, then refused.
        let step = importer.read("big.json", b"{", u64::MAX);
        assert_eq!(step.need, Some(MAX_JSON_BYTES + 1));
        // A JSON diagnostic has a line and a column.
        let step = importer.read("config.json", b"{\n  \"a\": ,\n}", 12);
        assert!(step.diagnostics[0].at.is_some(), "{step:?}");
        // Nothing was taken: no model.
        let model = importer.finish(&[]);
        assert_eq!(model.vram, None);
        assert!(model.diagnostics.len() >= 6);
    }

    #[test]
    fn names_come_from_specific_file_names() {
        assert_eq!(specific_stem("config.json"), None);
        assert_eq!(specific_stem("model.safetensors"), None);
        assert_eq!(specific_stem("tiny-llama.config.json").as_deref(), Some("tiny-llama"));
        assert_eq!(specific_stem("big-00001-of-00003.gguf").as_deref(), Some("big"));
        assert_eq!(fresh_name("a", &["a".into(), "a-2".into()]), "a-3");
        assert_eq!(Kind::of("noext", b"GGUF...."), Some(Kind::Gguf));
        assert_eq!(Kind::of("noext", b"  {\"a\":1}"), Some(Kind::Config));
        assert_eq!(Kind::of("noext", b"\x02\0\0\0\0\0\0\0{}"), Some(Kind::Safetensors));
        assert_eq!(Kind::of("noext", b"\x89PNG\r\n\x1a\n...."), None);
    }
}
