// The calculator page: form and text kept in sync, budgets as bars and tables, a verdict on
// every catalog GPU, a fit map, and the state in the URL fragment. Everything runs here, in the
// browser, on vram-core compiled to WebAssembly; the page requests nothing but its own files.

import init, { evaluate, catalog, verdicts, fitMap, version } from "./pkg/vram.js";
import { bar, bytes, h, legend, table, verdictText } from "./render.js";

const $ = (id) => document.getElementById(id);
const EXAMPLES = [
  "llama3.1-8b-chat.vram", "llama3.1-70b-fp8-tp2.vram", "llama3.1-405b-meta-fp8.vram",
  "mistral-7b-fleet.vram", "serving-engines.vram", "what-would-fit.vram",
  "one-card-three-workloads.vram",
  "mixed-gpus-and-host.vram",
  "moe-and-latent-attention.vram", "sliding-window.vram", "flan-t5-xl-summarise-and-tune.vram",
  "gguf-on-a-desktop-gpu.vram", "partial-offload.vram",
  "bnb-4bit-on-a-t4.vram", "long-generation-quantized-kv.vram", "qwen2-then-and-now.vram",
  "qlora-on-24gb.vram",
  "qwen2.5-7b-lora.vram", "full-finetune-7b-24gb.vram",
  "freeze-prefix-and-prompt-tuning.vram",
  "torchtune-memory-levers.vram",
  "dgx-405b.vram",
  "diffusion-flux.vram", "sdxl-inference.vram", "sd15-on-a-laptop.vram", "cogvideox-video.vram",
  "wan-video.vram",
  "controlnet.vram", "controlnet-training.vram",
  "ltx-video.vram",
  "sana.vram",
  "mochi-video.vram",
  "hunyuan-video.vram",
  "video-transformer-alone.vram",
  "diffusion-training.vram", "video-training.vram",
  "sdxl-lora.vram", "render-scene.vram", "qlora-then-and-now.vram", "training-across-gpus.vram",
];
/** The fit map's axes: 60 context lengths (512 to 128 Ki tokens, geometric) by 1–56 sessions. */
export const CONTEXTS = Array.from({ length: 60 }, (_, i) =>
  Math.round((512 * Math.pow(256, i / 59)) / 64) * 64,
);
export const SESSIONS = Array.from({ length: 56 }, (_, i) => i + 1);

const state = { source: "", check: "", mapDevice: "" };
/** Models imported from dropped files this session: name -> `model` block. */
const imported = new Map();
let lastEvaluation = null;
let catalogData = null;

// ---------------------------------------------------------------------------------------------
// Form <-> text

function formValues() {
  const f = $("form");
  const get = (name) => f.elements[name].value;
  return {
    model: get("model"), mode: f.elements.mode.value, runtime: get("runtime"),
    weights: get("weights"), kv_cache: get("kv_cache"),
    context: Number(get("context")) || 1, sessions: Number(get("sessions")) || 1,
    gpu_layers: get("gpu_layers"), cpu_moe_layers: get("cpu_moe_layers"),
    method: get("method"), tweights: get("tweights"),
    micro_batch: Number(get("micro_batch")) || 1, sequence: Number(get("sequence")) || 1,
    device: get("device"), count: Number(get("count")) || 1,
    shape: ["layers", "hidden", "ffn", "heads", "kv_heads", "vocab"].map((k) => [k, Number(get(k)) || 1]),
  };
}

/** The `.vram` text the form describes; `models` holds imported model blocks by name. */
export function sourceFromForm(v, models = new Map()) {
  const lines = ["# Written by the calculator's form; edit freely.", ""];
  let model = v.model;
  if (models.has(model)) {
    lines.push(models.get(model).trimEnd(), "");
  } else if (model === "custom") {
    model = "my-model";
    lines.push(`model my-model "My model" {`);
    for (const [k, n] of v.shape) lines.push(`  ${k.padEnd(8)} ${n}`);
    lines.push("}", "");
  }
  lines.push(`workload calc "Calculator workload" {`, `  model ${model}`);
  if (v.mode === "training") {
    lines.push("  training {");
    if (v.method === "full") {
      lines.push("    method        full", `    weights       ${v.tweights}`, "    optimizer     adamw");
    } else if (v.method === "freeze") {
      lines.push("    method freeze {", "      layers 2", "    }", `    weights       ${v.tweights}`);
    } else {
      lines.push("    method lora {", "      rank    16", "      targets all", "    }");
      lines.push(`    weights       ${v.method === "qlora" ? "nf4-dq" : v.tweights}`);
    }
    lines.push(`    micro_batch   ${v.micro_batch}`, `    sequence      ${v.sequence} tokens`, "    checkpointing full", "  }");
  } else {
    lines.push(`  runtime ${v.runtime}`, "  inference {", `    weights  ${v.weights}`);
    if (v.kv_cache) lines.push(`    kv_cache ${v.kv_cache}`);
    lines.push(`    context  ${v.context} tokens`, `    sessions ${v.sessions}`);
    // llama.cpp's partial offload; empty keeps every layer on the GPU.
    if (v.runtime === "llama.cpp" && /^\d+$/.test(v.gpu_layers ?? "")) lines.push(`    gpu_layers ${v.gpu_layers}`);
    if (v.runtime === "llama.cpp" && /^\d+$/.test(v.cpu_moe_layers ?? "")) lines.push(`    cpu_moe_layers ${v.cpu_moe_layers}`);
    lines.push("  }");
  }
  lines.push("}", "");
  const target = v.count > 1 ? `${v.count} x ${v.device} split tensor ${v.count}` : v.device;
  lines.push(`check calc on ${target}`, "");
  return lines.join("\n");
}

/** Sets the form fields the text states plainly; the rest of the text is left to the text. */
function formFromSource(source) {
  const f = $("form");
  const set = (name, value) => {
    const el = f.elements[name];
    if (value == null || !el) return;
    if (el.tagName === "SELECT" && ![...el.options].some((o) => o.value === value)) return;
    el.value = value;
  };
  const word = (key) => source.match(new RegExp(`^\\s*${key}\\s+([\\w.-]+)`, "m"))?.[1];
  const training = /^\s*training\s*\{/m.test(source);
  f.elements.mode.value = training ? "training" : "inference";
  set("model", word("model"));
  set("runtime", word("runtime"));
  if (training) set("tweights", word("weights"));
  else {
    set("weights", word("weights"));
    set("kv_cache", word("kv_cache") ?? "");
  }
  set("context", source.match(/^\s*context\s+(\d+)\s*tokens/m)?.[1]);
  set("sessions", source.match(/^\s*sessions\s+(\d+)/m)?.[1]);
  set("gpu_layers", source.match(/^\s*gpu_layers\s+(\d+)/m)?.[1] ?? "");
  set("cpu_moe_layers", source.match(/^\s*cpu_moe_layers\s+(\d+)/m)?.[1] ?? "");
  set("micro_batch", word("micro_batch"));
  set("sequence", source.match(/^\s*sequence\s+(\d+)/m)?.[1]);
  const check = source.match(/^\s*check\s+\S+\s+on\s+(?:(\d+)\s*x\s*)?([\w.-]+)/m);
  if (check) {
    set("device", check[2]);
    set("count", check[1] ?? "1");
  }
  showModeFields();
}

function showModeFields() {
  const training = $("form").elements.mode.value === "training";
  $("training-fields").hidden = !training;
  $("inference-fields").hidden = training;
  const llama = $("f-runtime").value === "llama.cpp";
  for (const el of document.querySelectorAll(".llama-only")) el.hidden = !llama;
  $("shape").hidden = $("f-model").value !== "custom";
}

// ---------------------------------------------------------------------------------------------
// State in the URL fragment: base64url of the UTF-8 source, plus the chosen check and map GPU.

function encode(text) {
  const bin = Array.from(new TextEncoder().encode(text), (b) => String.fromCharCode(b)).join("");
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function decode(b64) {
  const bin = atob(b64.replace(/-/g, "+").replace(/_/g, "/"));
  return new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
}

function readFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  try {
    if (params.has("s")) state.source = decode(params.get("s"));
  } catch {
    state.source = "";
  }
  state.check = params.get("check") ?? "";
  state.mapDevice = params.get("gpu") ?? "";
  return params.has("s");
}

function writeFragment() {
  const params = new URLSearchParams({ s: encode(state.source) });
  if (state.check) params.set("check", state.check);
  if (state.mapDevice) params.set("gpu", state.mapDevice);
  history.replaceState(null, "", `#${params}`);
}

// ---------------------------------------------------------------------------------------------
// Text mode: gutter with line numbers and diagnostic marks, the diagnostics list.

function renderGutter(source, diagnostics) {
  const marks = new Map();
  for (const d of diagnostics) {
    if (marks.get(d.start.line) !== "err") marks.set(d.start.line, d.severity === "error" ? "err" : "warn");
  }
  const count = source.split("\n").length;
  const gutter = $("gutter");
  gutter.replaceChildren();
  for (let line = 1; line <= count; line++) {
    const mark = marks.get(line);
    gutter.append(mark ? h("span", { class: mark, "data-line": line }, String(line)) : String(line), "\n");
  }
  // In the next frame: reading the text box's scroll position here would force a layout of
  // the whole page in the middle of rendering the result (on the first load, before anything
  // has been laid out), and the bars and table would then be laid out again.
  requestAnimationFrame(() => (gutter.scrollTop = $("source").scrollTop));
}

function renderDiagnostics(evaluation) {
  const list = $("diagnostics");
  list.replaceChildren();
  if (evaluation.diagnostics.length === 0) {
    list.append(h("li", { class: "none" }, "No problems found."));
    return;
  }
  for (const d of evaluation.diagnostics) {
    const jump = () => {
      const ta = $("source");
      ta.focus();
      ta.setSelectionRange(d.start.offset, Math.max(d.end.offset, d.start.offset + 1));
    };
    list.append(
      h(
        "li",
        { class: `diag ${d.severity}`, "data-line": d.start.line, "data-code": d.code },
        h("span", { class: "where" }, `line ${d.start.line}, column ${d.start.column}`),
        ` ${d.severity}[${d.code}]: ${d.message}`,
        h("button", { type: "button", onclick: jump, "aria-label": `Go to line ${d.start.line}` }, "Go to"),
        d.labels.map((l) => h("div", { class: "help" }, `line ${l.start.line}: ${l.message}`)),
        d.help.map((text) => h("div", { class: "help" }, `help: ${text}`)),
      ),
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Results

const STATUS_TEXT = {
  fits: "Fits: every check fits on every GPU.",
  does_not_fit: "Does not fit: at least one check needs more memory or a capability its GPU lacks.",
  input_errors: "The text has errors: see the diagnostics.",
};

/** What would fit, when the check does not: each change as the file would say it, with its
 * evidence and, for a precision change, the warning to validate quality. */
function renderSuggestions(check) {
  if (!check.suggestions?.length) return null;
  return h(
    "section",
    { class: "suggestions", "aria-label": `What would fit: ${check.id}` },
    h("h4", {}, "What would fit"),
    h(
      "ul",
      {},
      check.suggestions.map((s) =>
        h("li", { "data-kind": s.kind }, h("code", {}, s.change), h("span", { class: "hint" }, ` — ${s.detail}`),
          s.warning ? h("p", { class: "hint warning" }, s.warning) : null),
      ),
    ),
  );
}

function renderChecks(evaluation) {
  const status = $("status");
  status.className = `status ${evaluation.status}`;
  status.textContent = STATUS_TEXT[evaluation.status];
  const checks = $("checks");
  checks.replaceChildren();
  for (const check of evaluation.budget.checks) {
    const distinct = check.devices.filter(
      (d, i) => check.devices.findIndex((e) => JSON.stringify(e.components) === JSON.stringify(d.components)) === i,
    );
    checks.append(
      h(
        "article",
        { class: "check", "data-check": check.id },
        h("h3", {}, check.title ?? check.id, " ", h("span", { class: "verdict" }, `· ${check.target} · ${verdictText(check.verdict)}`)),
        check.notes.map((n) => h("p", { class: "hint" }, n)),
        check.devices.map(bar),
        renderSuggestions(check),
        distinct.map((d, i) =>
          h("details", { open: i === 0 }, h("summary", {}, `Components of GPU ${d.index} (${d.role})`), table(d)),
        ),
      ),
    );
  }
  const select = $("f-check");
  const ids = evaluation.budget.checks.map((c) => c.id);
  if (!ids.includes(state.check)) state.check = ids[0] ?? "";
  select.replaceChildren(...ids.map((id) => h("option", { value: id, selected: id === state.check }, id)));
}

function renderVerdicts(source) {
  const out = $("verdicts");
  out.replaceChildren();
  if (!state.check) return;
  const result = verdicts(source, state.check);
  if (result.error) {
    out.append(h("p", { class: "hint" }, result.error));
    return;
  }
  const rows = [...result.devices].sort((a, b) => a.capacity - b.capacity);
  out.append(
    h(
      "table",
      { class: "verdicts" },
      h("caption", {}, `${result.check} on each catalog GPU`),
      h("thead", {}, h("tr", {}, ["GPU", "Memory", "Required (worst GPU)", "Verdict"].map((t) => h("th", { scope: "col" }, t)))),
      h(
        "tbody",
        {},
        rows.map((d) =>
          h(
            "tr",
            { "data-device": d.device },
            h("th", { scope: "row" }, d.count > 1 ? `${d.count} × ${d.title}` : d.title),
            h("td", { class: "num" }, bytes(d.capacity)),
            h("td", { class: "num" }, bytes(d.required)),
            h("td", { class: d.verdict.status }, verdictText(d.verdict)),
          ),
        ),
      ),
    ),
  );
}

function renderFitMap(source) {
  const canvas = $("fitmap");
  const summary = $("fitmap-summary");
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  summary.replaceChildren();
  if (!state.check) return;
  const device = state.mapDevice || firstDevice(state.check);
  const result = fitMap(source, { check: state.check, devices: [device], contexts: CONTEXTS, sessions: SESSIONS });
  if (result.error) {
    summary.append(h("p", {}, result.error));
    canvas.setAttribute("aria-label", `No fit map: ${result.error}`);
    return;
  }
  const map = result.maps[0];
  const [left, bottom, right, top] = [60, 40, 10, 10];
  const cw = (canvas.width - left - right) / SESSIONS.length;
  const ch = (canvas.height - top - bottom) / CONTEXTS.length;
  for (let r = 0; r < CONTEXTS.length; r++) {
    for (let c = 0; c < SESSIONS.length; c++) {
      const fits = c < map.boundary[r];
      // Within the fitting region, darker green near the boundary: less room to spare.
      const margin = map.boundary[r] - c;
      ctx.fillStyle = fits ? (margin <= 2 ? "#5aa469" : "#1e7b3a") : "#e9c2c2";
      ctx.fillRect(left + c * cw, canvas.height - bottom - (r + 1) * ch, Math.ceil(cw), Math.ceil(ch));
    }
  }
  ctx.fillStyle = "#1a1a1a";
  ctx.font = "12px system-ui, sans-serif";
  ctx.fillText("sessions →", left + 4, canvas.height - 8);
  for (const s of [1, 8, 16, 32, 56]) ctx.fillText(String(s), left + (s - 0.5) * cw - 4, canvas.height - bottom + 14);
  for (const r of [0, 19, 39, 59]) ctx.fillText(`${Math.round(CONTEXTS[r] / 1024)}K`, 6, canvas.height - bottom - (r + 0.5) * ch + 4);
  ctx.save();
  ctx.translate(14, top + 60);
  ctx.restore();
  // The workload as written, as a ring.
  const written = writtenPoint(source);
  if (written) {
    const r = nearest(CONTEXTS, written.context);
    const c = nearest(SESSIONS, written.sessions);
    ctx.strokeStyle = "#000";
    ctx.lineWidth = 2;
    ctx.beginPath();
    ctx.arc(left + (c + 0.5) * cw, canvas.height - bottom - (r + 0.5) * ch, Math.max(cw, ch) * 1.2, 0, 2 * Math.PI);
    ctx.stroke();
  }
  const fitting = map.boundary.reduce((a, b) => a + b, 0);
  const title = catalogData?.devices.find((d) => d.name === device)?.title ?? device;
  canvas.setAttribute(
    "aria-label",
    `Fit map of ${result.check} on ${title}: ${fitting} of ${CONTEXTS.length * SESSIONS.length} ` +
      "combinations of context and sessions fit.",
  );
  canvas.dataset.fitting = String(fitting);
  const rows = [0, 19, 39, 59].map((r) => {
    const b = map.boundary[r];
    const text = b === 0 ? "no session count fits" : b === SESSIONS.length ? `all ${SESSIONS.length} session counts fit` : `up to ${SESSIONS[b - 1]} sessions fit`;
    return h("li", {}, `${CONTEXTS[r].toLocaleString("en")} tokens: ${text}`);
  });
  summary.append(
    h("p", {}, map.unsupported ? `${title} cannot run this workload: ${map.unsupported}` : `${title}: ${fitting} of ${CONTEXTS.length * SESSIONS.length} cells fit (${result.evaluations} evaluations).`),
    h("ul", {}, rows),
    h("p", { class: "legend" }, h("span", { class: "swatch", style: "background:#1e7b3a" }), "fits ", h("span", { class: "swatch", style: "background:#5aa469" }), "fits, near the limit ", h("span", { class: "swatch", style: "background:#e9c2c2" }), "does not fit"),
  );
}

function nearest(values, x) {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (Math.abs(values[i] - x) < Math.abs(values[best] - x)) best = i;
  return best;
}

function writtenPoint(source) {
  const context = Number(source.match(/^\s*context\s+(\d+)\s*tokens/m)?.[1]);
  const sessions = Number(source.match(/^\s*sessions\s+(\d+)/m)?.[1]);
  return context && sessions ? { context, sessions } : null;
}

function firstDevice(checkId) {
  const check = lastEvaluation?.budget.checks.find((c) => c.id === checkId);
  return check?.devices[0]?.device ?? "h100-sxm-80gb";
}

function renderMapDevices() {
  const select = $("f-mapdevice");
  const device = state.mapDevice || firstDevice(state.check);
  select.replaceChildren(
    ...catalogData.devices.map((d) => h("option", { value: d.name, selected: d.name === device }, `${d.title} (${bytes(d.memory)})`)),
  );
}

// ---------------------------------------------------------------------------------------------
// Dropped and chosen files: a `.vram` file replaces the text; model files become a `model`
// block, used by the form (dropped on the form) or by the text's first workload.

function modelNames() {
  const inSource = [...state.source.matchAll(/^[ \t]*model[ \t]+([\w.-]+)/gm)].map((m) => m[1]);
  return [...new Set([...(catalogData?.models.map((m) => m.name) ?? []), ...imported.keys(), ...inSource])];
}

function showFileDiagnostics(diagnostics) {
  const list = $("file-diagnostics");
  list.replaceChildren(
    ...diagnostics.map((d) =>
      h(
        "li",
        { class: `diag ${d.severity}`, "data-code": d.code, "data-file": d.file },
        h("span", { class: "file" }, d.file),
        d.at ? ` line ${d.at.line}, column ${d.at.column}` : d.end > d.start ? ` bytes ${d.start}–${d.end}` : "",
        `: ${d.severity}[${d.code}]: ${d.message}`,
        d.help.map((text) => h("div", { class: "help" }, `help: ${text}`)),
      ),
    ),
  );
}

async function takeFiles(files, { toForm }) {
  if (!files || files.length === 0) return;
  document.body.dataset.files = "reading";
  $("import-status").textContent = "Reading…";
  let result;
  let withModel;
  try {
    // Loaded on the first file: the first result does not wait for the file code.
    const code = await import("./files.js");
    withModel = code.withModel;
    result = await code.readFiles(files, modelNames());
  } catch (error) {
    const message = `the files could not be read: ${error?.message ?? error}`;
    result = { text: null, model: null, diagnostics: [{ file: files[0].name, code: "X001", severity: "error", message, start: 0, end: 0, at: null, help: [] }] };
  }
  showFileDiagnostics(result.diagnostics);
  const done = [];
  if (result.text != null) {
    state.source = result.text;
    state.check = "";
    state.mapDevice = "";
    done.push("Opened the .vram file.");
  }
  if (result.model) {
    const { name, vram } = result.model;
    imported.set(name, vram);
    const select = $("f-model");
    select.querySelector(`option[value="${CSS.escape(name)}"]`)?.remove();
    select.prepend(h("option", { value: name }, `${name} (imported)`));
    const placed = toForm || result.text != null ? null : withModel(state.source, name, vram);
    if (placed == null && result.text == null) {
      select.value = name;
      state.source = sourceFromForm(formValues(), imported);
    } else if (placed != null) {
      state.source = placed;
    } else {
      state.source = `${vram}\n${state.source}`;
    }
    done.push(`Imported model ${name}.`);
  }
  $("import-status").textContent = done.join(" ");
  if (result.text != null || result.model) {
    $("source").value = state.source;
    formFromSource(state.source);
    schedule();
  }
  document.body.dataset.files = result.diagnostics.some((d) => d.severity === "error") ? "problems" : "read";
}

function acceptDrops(zone, options) {
  zone.addEventListener("dragover", (e) => {
    if (![...(e.dataTransfer?.types ?? [])].includes("Files")) return;
    e.preventDefault();
    e.stopPropagation();
    e.dataTransfer.dropEffect = "copy";
    zone.classList.add("dropping");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("dropping"));
  zone.addEventListener("drop", (e) => {
    zone.classList.remove("dropping");
    if (!e.dataTransfer?.files?.length) return;
    e.preventDefault();
    e.stopPropagation();
    takeFiles(e.dataTransfer.files, options);
  });
}

// ---------------------------------------------------------------------------------------------

function update({ fromForm = false, first = false } = {}) {
  // The form's lists come from the catalog; the first result does not wait for them.
  if (!first) loadCatalog();
  if (fromForm) {
    state.source = sourceFromForm(formValues(), imported);
    $("source").value = state.source;
  }
  document.body.dataset.ready = "0";
  const evaluation = evaluate(state.source);
  if (!lastEvaluation) performance.mark("vram:first-evaluate");
  lastEvaluation = evaluation;
  renderGutter(state.source, evaluation.diagnostics);
  renderDiagnostics(evaluation);
  renderChecks(evaluation);
  writeFragment();
  document.body.dataset.status = evaluation.status;
  // The budget is on screen; the verdicts on every GPU and the fit map follow once the frame
  // that shows it is painted, so typing stays responsive and the first result is not held
  // back by them.
  const source = state.source;
  cancelAnimationFrame(later);
  clearTimeout(laterTask);
  later = requestAnimationFrame(() => {
    laterTask = setTimeout(() => {
      if (source !== state.source) return;
      loadCatalog();
      renderMapDevices();
      renderVerdicts(source);
      renderFitMap(source);
      document.body.dataset.ready = "1";
    }, 0);
  });
}

let laterTask = 0;
let later = 0;
let pending = null;
function schedule(options = {}) {
  if (pending) {
    // An edit of the text wins over a rewrite from the form queued before it in this frame:
    // the form has been set from the text since, and rewriting would drop the user's keys.
    if (!options.fromForm) pending = options;
    return;
  }
  pending = options;
  requestAnimationFrame(() => {
    const next = pending;
    pending = null;
    update(next);
  });
}

/** The workload the form shows before anything is chosen. */
const DEFAULT_MODEL = "llama3.1-8b";
const DEFAULT_DEVICE = "h100-sxm-80gb";

/**
 * The catalog's models and GPUs in the form's lists, once. The first result does not wait for
 * this: it is evaluated from the form's defaults, and the lists follow after the first paint.
 */
function loadCatalog() {
  if (catalogData) return;
  catalogData = catalog();
  performance.mark("vram:catalog");
  $("version").textContent = version();
  $("f-model").replaceChildren(
    ...[...imported.keys()].map((name) => h("option", { value: name }, `${name} (imported)`)),
    ...catalogData.models.map((m) => h("option", { value: m.name }, m.parameters ? `${m.title} (${(m.parameters / 1e9).toFixed(1)} B params)` : m.title)),
    h("option", { value: "custom" }, "Custom shape…"),
  );
  $("f-device").replaceChildren(
    ...catalogData.devices.map((d) => h("option", { value: d.name }, `${d.title} (${bytes(d.memory)})`)),
  );
  $("f-model").value = DEFAULT_MODEL;
  $("f-device").value = DEFAULT_DEVICE;
  $("f-example").append(...EXAMPLES.map((name) => h("option", { value: name }, name)));
  formFromSource(state.source);
}

async function main() {
  await init();
  performance.mark("vram:wasm-ready");
  $("legend").append(legend());
  if (readFragment()) {
    $("source").value = state.source;
  } else {
    showModeFields();
    state.source = sourceFromForm({ ...formValues(), model: DEFAULT_MODEL, device: DEFAULT_DEVICE }, imported);
    $("source").value = state.source;
  }
  // The first result: evaluated and rendered before the catalog fills the form's lists.
  // The first frame with the result in it: its task is queued before the verdicts' and the
  // fit map's (which `update` also defers to after that frame).
  requestAnimationFrame(() => setTimeout(() => performance.mark("vram:first-frame"), 0));
  update({ first: true });
  // The budget of the first workload is in the page now (the bars and the table).
  performance.mark("vram:first-result");

  $("form").addEventListener("input", () => {
    showModeFields();
    schedule({ fromForm: true });
  });
  $("form").addEventListener("change", (e) => {
    // A typed field rewrote the text on `input` already; its `change` comes when it loses
    // focus, often to the text, which must not be rewritten under the user's keys.
    if (e.target.matches?.('input[type="number"], input[type="text"]')) return;
    showModeFields();
    schedule({ fromForm: true });
  });
  $("source").addEventListener("input", () => {
    state.source = $("source").value;
    formFromSource(state.source);
    schedule();
  });
  $("source").addEventListener("scroll", () => {
    $("gutter").scrollTop = $("source").scrollTop;
  });
  $("f-check").addEventListener("change", (e) => {
    state.check = e.target.value;
    state.mapDevice = "";
    schedule();
  });
  $("f-mapdevice").addEventListener("change", (e) => {
    state.mapDevice = e.target.value;
    schedule();
  });
  $("f-example").addEventListener("change", async (e) => {
    if (!e.target.value) return;
    const response = await fetch(`examples/${e.target.value}`);
    state.source = await response.text();
    state.check = "";
    state.mapDevice = "";
    $("source").value = state.source;
    formFromSource(state.source);
    schedule();
  });
  acceptDrops($("form"), { toForm: true });
  acceptDrops(document.querySelector(".text-mode"), { toForm: false });
  // A file dropped anywhere else is not opened by the browser in place of the page.
  for (const type of ["dragover", "drop"]) window.addEventListener(type, (e) => e.preventDefault());
  $("f-import").addEventListener("change", (e) => takeFiles(e.target.files, { toForm: true }).then(() => (e.target.value = "")));
  $("f-open").addEventListener("change", (e) => takeFiles(e.target.files, { toForm: false }).then(() => (e.target.value = "")));
  $("copy-link").addEventListener("click", async () => {
    writeFragment();
    try {
      await navigator.clipboard.writeText(location.href);
      $("copied").textContent = "Link copied.";
    } catch {
      $("copied").textContent = "Copy the address bar: it holds the whole state.";
    }
  });
  window.addEventListener("hashchange", () => {
    if (readFragment()) {
      $("source").value = state.source;
      formFromSource(state.source);
      update();
    }
  });
}

main().catch((error) => {
  document.body.dataset.ready = "error";
  $("status").textContent = `The calculator could not start: ${error}`;
});
