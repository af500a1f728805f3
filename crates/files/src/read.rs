//! Finding a checkpoint's files and reading only their headers (`vram import`, and the model
//! files a workload's `from "path"`s name).
//!
//! A safetensors file is read in two reads: its 8-byte length, then exactly the JSON header.
//! A GGUF file is read from a 16 KiB prefix that doubles until the metadata and tensor infos
//! parse (the core says how many bytes it needs, within its caps). JSON files are read whole,
//! up to one byte over the core's cap. Every read is counted, so the output can say how many
//! bytes were read out of how many the files hold.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use vram_core::diagnostic::Diagnostic;
use vram_core::import::{Checkpoint, MAX_JSON_BYTES, Parsed, config_json, gguf, safetensors};

/// The first read of a GGUF file; it doubles while the header continues.
const GGUF_FIRST_READ: u64 = 16 << 10;

/// One file that was read: how many of its bytes.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FileRead {
    pub path: PathBuf,
    /// The name the checkpoint uses for it (an index names its shards by file name).
    pub name: String,
    pub bytes_read: u64,
    pub file_size: u64,
    /// The file's text, for JSON files, so diagnostics can show the line.
    #[serde(skip)]
    pub text: Option<String>,
}

/// A checkpoint's parsed files.
#[derive(Debug)]
pub struct Loaded {
    pub checkpoint: Checkpoint,
    pub files: Vec<FileRead>,
}

/// Why a checkpoint could not be read.
#[derive(Debug)]
pub enum LoadError {
    /// The file system said no, or the path holds no checkpoint.
    Io(String),
    /// A file's header is malformed; spans are byte ranges into that file.
    Invalid { file: FileRead, diagnostics: Vec<Diagnostic> },
}

/// Reads the checkpoint at `path`: a config.json, a `.safetensors` or `.gguf` file, a
/// `model.safetensors.index.json`, or a folder holding some of them.
pub fn load(path: &Path) -> Result<Loaded, LoadError> {
    let mut loaded = Loaded { checkpoint: Checkpoint::default(), files: Vec::new() };
    if path.is_dir() {
        load_folder(path, &mut loaded)?;
    } else {
        load_file(path, &mut loaded)?;
    }
    Ok(loaded)
}

fn load_folder(dir: &Path, loaded: &mut Loaded) -> Result<(), LoadError> {
    let config = dir.join("config.json");
    if config.is_file() {
        read_config(&config, loaded)?;
    }
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        return read_sharded(&index, loaded);
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return read_safetensors(&single, loaded);
    }
    let mut safetensors = files_with(dir, "safetensors")?;
    let ggufs = files_with(dir, "gguf")?;
    if !safetensors.is_empty() {
        safetensors.sort();
        for file in &safetensors {
            read_safetensors(file, loaded)?;
        }
        return Ok(());
    }
    match ggufs.as_slice() {
        [] if loaded.checkpoint.config.is_some() => Ok(()),
        [] => Err(LoadError::Io(format!(
            "{} has no config.json, safetensors or GGUF file",
            dir.display()
        ))),
        [one] => read_gguf_set(one, loaded),
        many => {
            let firsts: Vec<&PathBuf> = many.iter().filter(|p| split_part(p) == Some(1)).collect();
            match firsts.as_slice() {
                [first] => read_gguf_set(first, loaded),
                _ => Err(LoadError::Io(format!(
                    "{} holds {} GGUF files; name the one to import",
                    dir.display(),
                    many.len()
                ))),
            }
        }
    }
}

fn load_file(path: &Path, loaded: &mut Loaded) -> Result<(), LoadError> {
    let name = file_name(path);
    let sibling_config =
        || path.parent().map(|dir| dir.join("config.json")).filter(|c| c.is_file());
    if name.ends_with(".safetensors.index.json") {
        if let Some(config) = sibling_config() {
            read_config(&config, loaded)?;
        }
        return read_sharded(path, loaded);
    }
    if has_extension(path, "json") {
        return read_config(path, loaded);
    }
    if has_extension(path, "gguf") {
        return read_gguf_set(path, loaded);
    }
    if has_extension(path, "safetensors") {
        if let Some(config) = sibling_config() {
            read_config(&config, loaded)?;
        }
        return read_safetensors(path, loaded);
    }
    // No known extension: look at the first bytes.
    let mut magic = [0u8; 4];
    let found = File::open(path)
        .and_then(|mut f| f.read(&mut magic))
        .map_err(|e| LoadError::Io(format!("cannot read {}: {e}", path.display())))?;
    match &magic[..found] {
        b"GGUF" => read_gguf_set(path, loaded),
        [b'{', ..] => read_config(path, loaded),
        _ => read_safetensors(path, loaded),
    }
}

fn has_extension(path: &Path, extension: &str) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case(extension))
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn files_with(dir: &Path, extension: &str) -> Result<Vec<PathBuf>, LoadError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| LoadError::Io(format!("cannot list {}: {e}", dir.display())))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && has_extension(p, extension))
        .collect();
    found.sort();
    Ok(found)
}

fn open(path: &Path) -> Result<(File, u64), LoadError> {
    let file = File::open(path)
        .map_err(|e| LoadError::Io(format!("cannot read {}: {e}", path.display())))?;
    let size = file
        .metadata()
        .map_err(|e| LoadError::Io(format!("cannot read {}: {e}", path.display())))?
        .len();
    Ok((file, size))
}

/// Reads a JSON file whole, or one byte more than the core accepts (which it then reports).
fn read_json(path: &Path) -> Result<(Vec<u8>, FileRead), LoadError> {
    let (file, size) = open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_JSON_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| LoadError::Io(format!("cannot read {}: {e}", path.display())))?;
    let read = FileRead {
        path: path.to_path_buf(),
        name: file_name(path),
        bytes_read: bytes.len() as u64,
        file_size: size,
        text: String::from_utf8(bytes.clone()).ok(),
    };
    Ok((bytes, read))
}

fn read_config(path: &Path, loaded: &mut Loaded) -> Result<(), LoadError> {
    let (bytes, read) = read_json(path)?;
    match config_json::parse(&bytes) {
        Ok(model) => {
            loaded.checkpoint.config = Some(model);
            loaded.files.push(read);
            Ok(())
        }
        Err(diagnostics) => Err(LoadError::Invalid { file: read, diagnostics }),
    }
}

fn read_sharded(index_path: &Path, loaded: &mut Loaded) -> Result<(), LoadError> {
    let (bytes, read) = read_json(index_path)?;
    let index = match safetensors::parse_index(&bytes) {
        Ok(index) => index,
        Err(diagnostics) => return Err(LoadError::Invalid { file: read, diagnostics }),
    };
    let dir = index_path.parent().unwrap_or(Path::new("."));
    let shards: Vec<String> = index.shards().into_iter().map(str::to_string).collect();
    loaded.checkpoint.index = Some((read.name.clone(), index));
    loaded.files.push(read);
    for shard in shards {
        let path = dir.join(&shard);
        // A shard named in the index but absent is reported by the core against the index.
        if path.is_file() {
            read_safetensors(&path, loaded)?;
        }
    }
    Ok(())
}

pub fn read_safetensors(path: &Path, loaded: &mut Loaded) -> Result<(), LoadError> {
    let (header, read) = read_header(path, 8, false, safetensors::parse_header)?;
    loaded.checkpoint.safetensors.push((read.name.clone(), header));
    loaded.files.push(read);
    Ok(())
}

/// A GGUF file, and the other shards of its split (`-00001-of-00003.gguf`) when it is one.
fn read_gguf_set(path: &Path, loaded: &mut Loaded) -> Result<(), LoadError> {
    let name = file_name(path);
    let shards = match split_count(&name) {
        Some((prefix, count)) if count > 1 => (1..=count)
            .map(|n| path.with_file_name(format!("{prefix}-{n:05}-of-{count:05}.gguf")))
            .collect(),
        _ => vec![path.to_path_buf()],
    };
    for shard in shards {
        let (header, read) = read_header(&shard, GGUF_FIRST_READ, true, gguf::parse)?;
        loaded.checkpoint.gguf.push((read.name.clone(), header));
        loaded.files.push(read);
    }
    Ok(())
}

/// `("model", 3)` for `model-00002-of-00003.gguf`.
fn split_count(name: &str) -> Option<(&str, u32)> {
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, part) = rest.rsplit_once('-')?;
    if part.len() != 5 || count.len() != 5 {
        return None;
    }
    part.parse::<u32>().ok()?;
    Some((prefix, count.parse().ok()?))
}

fn split_part(path: &Path) -> Option<u32> {
    let name = file_name(path);
    let stem = name.strip_suffix(".gguf")?;
    let (rest, _) = stem.rsplit_once("-of-")?;
    rest.rsplit_once('-')?.1.parse().ok()
}

/// Reads the start of `path`, first `first` bytes, then as many as `parse` asks for (doubling
/// at least, when `double`), until the header parses or fails.
pub fn read_header<T>(
    path: &Path,
    first: u64,
    double: bool,
    parse: fn(&[u8], Option<u64>) -> Parsed<T>,
) -> Result<(T, FileRead), LoadError> {
    let (mut file, size) = open(path)?;
    let mut buffer: Vec<u8> = Vec::new();
    let mut want = first.min(size);
    loop {
        let before = buffer.len() as u64;
        if want > before {
            let extra = want - before;
            let read = (&mut file)
                .take(extra)
                .read_to_end(&mut buffer)
                .map_err(|e| LoadError::Io(format!("cannot read {}: {e}", path.display())))?;
            if (read as u64) < extra {
                return Err(LoadError::Io(format!("{} changed while it was read", path.display())));
            }
        }
        let have = buffer.len() as u64;
        let read = FileRead {
            path: path.to_path_buf(),
            name: file_name(path),
            bytes_read: buffer.len() as u64,
            file_size: size,
            text: None,
        };
        match parse(&buffer, Some(size)) {
            Parsed::Done(header) => return Ok((header, read)),
            Parsed::NeedMore(needed) if needed > have && needed <= size => {
                want = if double { needed.max(have.saturating_mul(2)).min(size) } else { needed };
            }
            Parsed::NeedMore(needed) => {
                return Err(LoadError::Io(format!(
                    "{}: the reader asked for {needed} bytes with {have} read of {size}",
                    path.display()
                )));
            }
            Parsed::Failed(diagnostics) => {
                return Err(LoadError::Invalid { file: read, diagnostics });
            }
        }
    }
}
