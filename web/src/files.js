// Files dropped on the page or chosen with its file buttons. A `.vram` file is read as text;
// model files (a config.json, safetensors or GGUF files) go to the importers of vram-core, in
// a second wasm module loaded on the first drop, which ask for the bytes they need: the start
// of each file only, never its tensors. Every problem comes back as a diagnostic naming the
// file; nothing here throws, traps or loops on what a file holds.

/** The first slice of a model file; the importer asks for more when its header continues. */
const FIRST_READ = 64 << 10;
/** A `.vram` file is the editor's text: the core reads at most 1 MiB (limits::MAX_SOURCE_BYTES). */
export const MAX_VRAM_BYTES = 1 << 20;
/** Reads per file at most; the importer asks for strictly more each time, within the file. */
const MAX_READS = 64;

let importer = null;
/** Bumped when the importer module fails: the next file gets a fresh module and instance. */
let generation = 0;
/** The importer module, fetched and compiled once, on first use. */
function loadImporter() {
  const url = generation === 0 ? "./pkg/vram_import.js" : `./pkg/vram_import.js?instance=${generation}`;
  importer ??= import(url).then(async (module) => {
    await module.default();
    return module;
  });
  return importer.catch((error) => {
    importer = null;
    generation += 1;
    throw error;
  });
}

function problem(file, code, message, help = []) {
  return { file, code, severity: "error", message, start: 0, end: 0, at: null, help };
}

const isVram = (file) => /\.vram$/i.test(file.name);

/** A `.vram` file's text, or a diagnostic: too large, or not UTF-8 text. */
async function readVram(file) {
  if (file.size > MAX_VRAM_BYTES) {
    return {
      diagnostics: [problem(file.name, "X003", `${file.name} has ${file.size} bytes; a .vram file is at most ${MAX_VRAM_BYTES} bytes`)],
    };
  }
  try {
    const bytes = await file.arrayBuffer();
    return { text: new TextDecoder("utf-8", { fatal: true }).decode(bytes) };
  } catch (error) {
    const why = error instanceof TypeError ? "is not UTF-8 text" : `could not be read: ${error.message ?? error}`;
    return { diagnostics: [problem(file.name, "X003", `${file.name} ${why}`, ["a .vram file is plain text"])] };
  }
}

/**
 * Hands the file's start to the importer until it needs no more. The importer keeps the file's
 * diagnostics for `finish`; only problems of the reading itself are returned here.
 */
async function readModelFile(session, file) {
  let want = Math.min(file.size, FIRST_READ);
  for (let reads = 0; reads < MAX_READS; reads++) {
    const bytes = new Uint8Array(await file.slice(0, want).arrayBuffer());
    const step = session.read(file.name, bytes, file.size);
    if (step.need == null) return [];
    if (!(step.need > bytes.length && step.need <= file.size)) {
      return [problem(file.name, "X001", `the importer asked for ${step.need} bytes with ${bytes.length} of ${file.size} read`)];
    }
    want = step.need;
  }
  return [problem(file.name, "X001", `${file.name}: the header was not complete after ${MAX_READS} reads`)];
}

/**
 * Reads dropped or chosen files. `taken` lists the model names already in use. Returns
 * `{ text, model: { name, vram }, diagnostics, read }`: `text` is a `.vram` file's content (the
 * first one), `model` the imported model when model files were given, `read` the bytes read.
 */
export async function readFiles(fileList, taken) {
  const files = [...fileList];
  const result = { text: null, model: null, diagnostics: [], read: 0 };
  const vram = files.filter(isVram);
  const models = files.filter((f) => !isVram(f));
  if (vram.length > 0) {
    const { text, diagnostics } = await readVram(vram[0]);
    result.text = text ?? null;
    result.diagnostics.push(...(diagnostics ?? []));
    result.read += text == null ? 0 : vram[0].size;
    for (const other of vram.slice(1)) {
      result.diagnostics.push(problem(other.name, "X002", `${other.name} was not read: one .vram file at a time`));
    }
  }
  if (models.length === 0) return result;
  let module;
  try {
    module = await loadImporter();
  } catch (error) {
    result.diagnostics.push(problem(models[0].name, "X001", `the importer could not be loaded: ${error.message ?? error}`));
    return result;
  }
  const session = new module.Importer();
  try {
    for (const file of models) {
      try {
        result.diagnostics.push(...(await readModelFile(session, file)));
      } catch (error) {
        result.diagnostics.push(problem(file.name, "X001", `${file.name} could not be read: ${error.message ?? error}`));
      }
    }
    const imported = session.finish(taken);
    result.diagnostics.push(...imported.diagnostics);
    if (imported.vram) result.model = { name: imported.name, vram: imported.vram };
  } catch (error) {
    // A bug in the importer (a trap): report it, and start from a fresh instance next time
    // (a module imported under another URL is a new module, with its own wasm memory).
    importer = null;
    generation += 1;
    result.diagnostics.push(problem(models[0].name, "X001", `the importer failed: ${error.message ?? error}`, ["this is a bug in vram-wasm; please report it with the file"]));
  } finally {
    try {
      session.free();
    } catch {
      // A trapped module may refuse even this; it is dropped above.
    }
  }
  return result;
}

/**
 * `source` with the imported model block at the top and the first workload's `model` line
 * pointing at it. Returns null when no workload names a model (the caller then uses the form).
 */
export function withModel(source, name, block) {
  const line = /^([ \t]*model[ \t]+)([\w.-]+)([ \t]*(?:#.*)?)$/m;
  if (!line.test(source)) return null;
  return `${block}\n${source.replace(line, `$1${name}$3`)}`;
}
