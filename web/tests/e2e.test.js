// The calculator and the product-page element in a real browser: Debian's chromium driven by
// playwright-core, served from web/dist by a local server. Run with `node --test tests/` in web/
// after `cargo xtask web`. Screenshots go to web/artifacts/ (or $SCREENSHOT_DIR).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { serve, browser, openReady, ROOT, WEB } from "./harness.js";

const SHOTS = process.env.SCREENSHOT_DIR ?? join(WEB, "artifacts");
let server;
let context;
const seen = [];

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  server = await serve();
  context = await browser();
  context.on("request", (request) => seen.push(request.url()));
});

after(async () => {
  await context?.close();
  await server?.close();
});

function open(path) {
  return openReady(context, server.origin, path);
}

/** Replaces the editor's text, typing its last line key by key as a person would. */
async function type(page, text) {
  const editor = page.locator("#source");
  const cut = text.trimEnd().lastIndexOf("\n") + 1;
  await editor.fill(text.slice(0, cut));
  await editor.press("End");
  await editor.evaluate((el) => el.setSelectionRange(el.value.length, el.value.length));
  await editor.pressSequentially(text.slice(cut), { delay: 0 });
  assert.equal(await editor.inputValue(), text);
}

const L4_CHAT = `workload chat "Llama 3.1 8B on an L4" {
  model llama3.1-8b
  runtime vllm
  inference {
    weights bf16
    context 8192 tokens
    sessions 3
  }
}
check chat on l4
`;

test("typing a workload shows its bars, table, verdicts and fit map", async () => {
  const { page, errors } = await open("/");
  // The form's default workload is already evaluated.
  assert.ok((await page.locator("#checks .gpu").count()) >= 1);
  await type(page, L4_CHAT);
  await page.waitForSelector('#checks .gpu[data-device="l4"]');
  await page.waitForSelector('body[data-ready="1"]', { state: "attached" });
  assert.match(await page.textContent("#status"), /^Fits/);
  const segments = await page.locator('#checks .gpu[data-device="l4"] .seg').count();
  assert.ok(segments >= 3, `${segments} bar segments`);
  // The bar's room is what CUDA can allocate: the L4's total less what its driver keeps.
  const foot = await page.textContent('#checks .gpu[data-device="l4"] .gpu-foot');
  assert.match(foot, /of 21\.95 GiB usable \(22\.49 GiB, exact; the driver keeps 555\.69 MiB\)/);
  const table = await page.textContent("#checks table.components");
  assert.match(table, /KV cache/);
  assert.match(table, /formula/);
  // The form follows the text.
  assert.equal(await page.inputValue("#f-device"), "l4");
  assert.equal(await page.inputValue("#f-sessions"), "3");
  // A verdict for every catalog GPU; the map has both fitting and failing cells.
  assert.ok((await page.locator("#verdicts tbody tr").count()) >= 30);
  const fitting = Number(await page.getAttribute("#fitmap", "data-fitting"));
  assert.ok(fitting > 0 && fitting < 60 * 56, `${fitting} cells fit`);
  await page.screenshot({ path: join(SHOTS, "calculator.png"), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

test("the form writes the text", async () => {
  const { page } = await open("/");
  await page.selectOption("#f-device", "rtx-4090");
  await page.fill("#f-sessions", "3");
  await page.waitForFunction(() => document.querySelector("#source").value.includes("sessions 3"));
  assert.match(await page.inputValue("#source"), /check calc on rtx-4090/);
  await page.waitForSelector('#checks .gpu[data-device="rtx-4090"]');
  await page.close();
});

test("a mistake shows its diagnostic at its line", async () => {
  const { page } = await open("/");
  await type(page, L4_CHAT.replace("weights bf16", "weights bf17"));
  await page.waitForSelector('#diagnostics li.diag[data-line="5"]');
  const text = await page.textContent('#diagnostics li.diag[data-line="5"]');
  assert.match(text, /line 5, column \d+/);
  assert.match(text, /bf17/);
  assert.equal(await page.locator('#gutter span.err[data-line="5"]').count(), 1);
  assert.match(await page.textContent("#status"), /errors/);
  // Fixing it clears the diagnostic.
  await type(page, L4_CHAT);
  await page.waitForSelector("#diagnostics li.none");
  await page.close();
});

test("user text is shown as text, and the page's policy forbids inline script", async () => {
  const { page, errors } = await open("/");
  const hostile = '<img src=x onerror="window.__pwned=1">';
  await type(page, L4_CHAT.replace("check chat on l4", `check ${JSON.stringify(hostile)} chat on l4`));
  await page.waitForSelector("#diagnostics li.none");
  await page.waitForFunction((t) => document.body.textContent.includes(t), hostile);
  assert.equal(await page.locator("img[src='x']").count(), 0, "no element made from user text");
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  const policy = await page.getAttribute('meta[http-equiv="Content-Security-Policy"]', "content");
  assert.match(policy, /script-src 'self' 'wasm-unsafe-eval'/);
  assert.doesNotMatch(policy, /unsafe-inline/);
  // The policy holds: an inline script added now does not run.
  await page.evaluate(() => {
    const script = document.createElement("script");
    script.textContent = "window.__inline = 1";
    document.body.append(script);
  });
  assert.equal(await page.evaluate(() => window.__inline), undefined);
  assert.deepEqual(errors.filter((e) => !/inline script/.test(e)), []);
  await page.close();
});

test("a permalink restores the state", async () => {
  const { page } = await open("/");
  await type(page, L4_CHAT.replace("sessions 3", "sessions 2"));
  await page.waitForSelector('#checks .gpu[data-device="l4"]');
  await page.selectOption("#f-mapdevice", "a10");
  await page.waitForFunction(() => location.hash.includes("gpu=a10"));
  const url = page.url();
  await page.close();
  const again = await open(url.slice(server.origin.length));
  assert.equal(await again.page.inputValue("#source"), L4_CHAT.replace("sessions 3", "sessions 2"));
  assert.equal(await again.page.inputValue("#f-sessions"), "2");
  assert.equal(await again.page.inputValue("#f-mapdevice"), "a10");
  await again.page.waitForSelector('#checks .gpu[data-device="l4"]');
  await again.page.close();
});

test("the product page's element renders in its shadow DOM", async () => {
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${server.origin}/examples/product.html`);
  await page.waitForFunction(
    () => [...document.querySelectorAll("vram-budget")].every((e) => e.dataset.status),
  );
  for (const id of ["chat-8b", "chat-70b"]) {
    const status = await page.getAttribute(`#${id}`, "data-status");
    assert.equal(status, "fits", id);
    // Playwright's CSS locators pierce open shadow roots.
    assert.ok((await page.locator(`#${id} .gpu .seg`).count()) >= 3, id);
    assert.match(await page.locator(`#${id} .fit-sessions`).textContent(), /Up to \d+ concurrent sessions/);
    assert.equal(await page.locator(`#${id} .would-fit`).count(), 0, id);
  }
  // 70B in bf16 on one H100 does not fit, and the element says what would: more GPUs with
  // their split, a smaller precision with its warning, a machine.
  assert.equal(await page.getAttribute("#chat-70b-bf16", "data-status"), "does_not_fit");
  assert.match(await page.locator("#chat-70b-bf16 .fit-sessions").textContent(), /No session count fits/);
  const devices = await page.locator('#chat-70b-bf16 .would-fit li[data-kind="devices"] code').textContent();
  assert.match(devices, /^check \S+ on \d+ x h100-sxm-80gb split tensor \d+/);
  assert.match(await page.locator('#chat-70b-bf16 .would-fit li[data-kind="precision"]').textContent(), /weights \S+.*validate quality/);
  // The host page's styles do not reach inside: the element keeps its own font.
  const font = await page.evaluate(() => {
    const el = document.querySelector("vram-budget").shadowRoot.querySelector("h3");
    return getComputedStyle(el).fontFamily;
  });
  assert.doesNotMatch(font, /Georgia/);
  // Its link opens the calculator with the same workload.
  const href = await page.locator("#chat-8b a").getAttribute("href");
  assert.match(href, /index\.html#s=/);
  await page.locator("vram-budget").first().scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, "product-embed.png"), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

test("training mode in the form gives a training budget", async () => {
  const { page } = await open("/");
  await page.check('input[name="mode"][value="training"]');
  await page.selectOption("#f-method", "qlora");
  await page.selectOption("#f-device", "rtx-4090");
  await page.waitForFunction(() => document.querySelector("#source").value.includes("nf4-dq"));
  await page.waitForSelector('#checks .gpu[data-device="rtx-4090"]');
  await page.waitForSelector('body[data-ready="1"]', { state: "attached" });
  assert.notEqual(await page.getAttribute("body", "data-status"), "input_errors");
  assert.match(await page.textContent("#checks table.components"), /training_state|training state/);
  // A fit map varies context and sessions, which a training workload does not have.
  assert.match(await page.textContent("#fitmap-summary"), /no inference block/);
  // Freeze tuning trains the last two layers: their states are named as such.
  await page.selectOption("#f-method", "freeze");
  await page.waitForFunction(() => document.querySelector("#source").value.includes("method freeze"));
  await page.waitForFunction(() => document.querySelector("#checks table.components")?.textContent.includes("trained layers (2 of"));
  await page.close();
});

test("llama.cpp's layers on the GPU: the form's field, the suggestion, the fit", async () => {
  const { page, errors } = await open("/");
  // Only llama.cpp keeps layers in host memory: the field shows for it alone.
  await page.selectOption("#f-runtime", "vllm");
  assert.equal(await page.isVisible("#f-gpulayers"), false);
  await page.selectOption("#f-runtime", "llama.cpp");
  assert.equal(await page.isVisible("#f-gpulayers"), true);
  await page.selectOption("#f-model", "llama3.1-70b");
  await page.selectOption("#f-weights", "q4_k_m");
  await page.selectOption("#f-device", "rtx-4090");
  await page.fill("#f-sessions", "1");
  // Every layer of a 70B model in Q4_K_M is over a 24 GB card; the planner says how many fit.
  await page.waitForSelector('#checks .suggestions li[data-kind="gpu_layers"]');
  const change = await page.textContent('#checks .suggestions li[data-kind="gpu_layers"] code');
  assert.match(change, /^gpu_layers \d+$/);
  const layers = Number(change.split(" ")[1]);
  assert.ok(layers > 1 && layers < 81, change);
  await page.fill("#f-gpulayers", String(layers));
  await page.waitForFunction((n) => document.querySelector("#source").value.includes(`gpu_layers ${n}`), layers);
  await page.waitForFunction(() => /^Fits/.test(document.querySelector("#status").textContent));
  // The text sets the field back, typed key by key: leaving the field for the text (its
  // `change` on blur) must not rewrite the text under the keys.
  await type(page, (await page.inputValue("#source")).replace(/gpu_layers \d+/, "gpu_layers 12"));
  await page.waitForFunction(() => document.querySelector("#f-gpulayers").value === "12");
  assert.deepEqual(errors, []);
  await page.close();
});

test("a mixture of experts' experts in host memory, from the planner to the form", async () => {
  const { page, errors } = await open("/");
  await page.selectOption("#f-runtime", "llama.cpp");
  await page.selectOption("#f-model", "qwen3-30b-a3b");
  await page.selectOption("#f-weights", "q8_0");
  await page.selectOption("#f-device", "rtx-4090");
  await page.fill("#f-context", "32768");
  await page.fill("#f-sessions", "1");
  await page.waitForSelector('#checks .suggestions li[data-kind="experts"]');
  const change = await page.textContent('#checks .suggestions li[data-kind="experts"] code');
  assert.match(change, /^cpu_moe_layers \d+$/);
  await page.fill("#f-cpumoe", change.split(" ")[1]);
  await page.waitForFunction((c) => document.querySelector("#source").value.includes(c), change);
  await page.waitForFunction(() => /^Fits/.test(document.querySelector("#status").textContent));
  assert.deepEqual(errors, []);
  await page.close();
});

test("a check that does not fit says what would", async () => {
  const { page, errors } = await open("/");
  await type(page, L4_CHAT.replace("sessions 3", "sessions 200"));
  await page.waitForSelector('#checks .suggestions li[data-kind="sessions"]');
  assert.match(await page.textContent("#status"), /Does not fit/);
  const sessions = await page.textContent('#checks .suggestions li[data-kind="sessions"] code');
  assert.match(sessions, /^sessions \d+$/);
  assert.ok(Number(sessions.split(" ")[1]) < 200);
  // Every suggestion is a change written as the file would say it, with its evidence.
  const items = await page.$$eval("#checks .suggestions li", (ls) => ls.map((l) => [l.dataset.kind, l.querySelector("code").textContent]));
  assert.ok(items.some(([kind]) => kind === "machine"), JSON.stringify(items));
  assert.ok(items.every(([, change]) => change.length > 0));
  // A fitting check has none.
  await type(page, L4_CHAT);
  await page.waitForSelector('body[data-status="fits"]', { state: "attached" });
  assert.equal(await page.locator("#checks .suggestions").count(), 0);
  assert.deepEqual(errors, []);
  await page.close();
});

test("the example list offers every example, and a chosen one is evaluated", async () => {
  const { page, errors } = await open("/");
  const offered = await page.$$eval("#f-example option", (os) => os.map((o) => o.value).filter(Boolean));
  const files = readdirSync(join(ROOT, "examples")).filter((f) => f.endsWith(".vram"));
  assert.deepEqual([...offered].sort(), files.sort());
  await page.selectOption("#f-example", "cogvideox-video.vram");
  await page.waitForFunction(() => document.querySelector("#source").value.includes("video_frames"));
  await page.waitForSelector('body[data-ready="1"]', { state: "attached" });
  await page.waitForSelector("#checks .gpu");
  assert.notEqual(await page.getAttribute("body", "data-status"), "input_errors");
  assert.deepEqual(errors, []);
  await page.close();
});

test("no request leaves the page's origin", () => {
  assert.ok(seen.length >= 5, `${seen.length} requests`);
  const outside = seen.filter((url) => !url.startsWith(server.origin) && !url.startsWith("data:"));
  assert.deepEqual(outside, []);
});

// ---------------------------------------------------------------------------------------------
// Dropped and chosen files (the fixtures of the core's importers).

const FIXTURES = join(ROOT, "crates", "core", "tests", "fixtures", "import");

/** Drops `files` ({ name, bytes }) on `selector` as a person dragging them from a file manager. */
async function drop(page, selector, files) {
  const payload = files.map((f) => ({ name: f.name, data: Buffer.from(f.bytes).toString("base64") }));
  const transfer = await page.evaluateHandle((payload) => {
    const dt = new DataTransfer();
    for (const f of payload) {
      const bytes = Uint8Array.from(atob(f.data), (c) => c.charCodeAt(0));
      dt.items.add(new File([bytes], f.name));
    }
    return dt;
  }, payload);
  await page.evaluate(() => delete document.body.dataset.files);
  await page.dispatchEvent(selector, "dragover", { dataTransfer: transfer });
  await page.dispatchEvent(selector, "drop", { dataTransfer: transfer });
  await page.waitForSelector('body[data-files="read"], body[data-files="problems"]', { state: "attached" });
  await page.waitForSelector('body[data-ready="1"]', { state: "attached" });
}

const fixture = (name) => ({ name, bytes: readFileSync(join(FIXTURES, name)) });

test("a config.json and its safetensors dropped on the text become a model block", async () => {
  const { page, errors } = await open("/");
  await type(page, L4_CHAT);
  await page.waitForSelector('#checks .gpu[data-device="l4"]');
  await drop(page, "#source", [fixture("tiny-llama.config.json"), fixture("tiny-llama.safetensors")]);
  assert.equal(await page.getAttribute("body", "data-files"), "read", await page.textContent("#file-diagnostics"));
  const text = await page.inputValue("#source");
  assert.match(text, /^model tiny-llama\b.*\{$/m);
  assert.match(text, /safetensors header/);
  // The workload now uses the imported model, and the page evaluated it.
  assert.match(text, /^ {2}model tiny-llama$/m);
  assert.doesNotMatch(text, /model llama3\.1-8b/);
  assert.notEqual(await page.getAttribute("body", "data-status"), "input_errors", await page.textContent("#diagnostics"));
  await page.waitForSelector('#checks .gpu[data-device="l4"]');
  assert.match(await page.textContent("#import-status"), /Imported model tiny-llama/);
  assert.equal(await page.locator("#file-diagnostics li").count(), 0);
  assert.deepEqual(errors, []);
  await page.close();
});

test("a GGUF file dropped on the form becomes the form's model", async () => {
  const { page, errors } = await open("/");
  await drop(page, "#form", [fixture("tiny-llama-q.gguf")]);
  assert.equal(await page.getAttribute("body", "data-files"), "read", await page.textContent("#file-diagnostics"));
  assert.equal(await page.inputValue("#f-model"), "tiny-llama-q");
  const text = await page.inputValue("#source");
  assert.match(text, /^model tiny-llama-q\b/m);
  assert.match(text, /GGUF/);
  assert.match(text, /^ {2}model tiny-llama-q$/m);
  assert.notEqual(await page.getAttribute("body", "data-status"), "input_errors", await page.textContent("#diagnostics"));
  // The form keeps the imported model when another field changes.
  await page.fill("#f-sessions", "2");
  await page.waitForFunction(() => document.querySelector("#source").value.includes("sessions 2"));
  assert.match(await page.inputValue("#source"), /^model tiny-llama-q\b/m);
  await page.screenshot({ path: join(SHOTS, "imported-model.png"), fullPage: false });
  assert.deepEqual(errors, []);
  await page.close();
});

test("garbage, truncated and wrongly named files give diagnostics and leave the text alone", async () => {
  const { page, errors } = await open("/");
  const before = await page.inputValue("#source");
  const garbage = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 2654435761) >>> 24));
  await drop(page, "#source", [{ name: "holiday.png", bytes: garbage }]);
  assert.equal(await page.getAttribute("body", "data-files"), "problems");
  assert.match(await page.textContent('#file-diagnostics li[data-code="X002"]'), /holiday\.png is not a file the calculator reads/);
  const tensors = readFileSync(join(FIXTURES, "tiny-llama.safetensors"));
  await drop(page, "#source", [
    { name: "garbage.safetensors", bytes: garbage },
    { name: "cut.safetensors", bytes: tensors.subarray(0, 100) },
    { name: "garbage.gguf", bytes: Buffer.concat([Buffer.from("GGUF"), garbage]) },
    { name: "config.json", bytes: Buffer.from('{\n  "num_hidden_layers": ,\n}') },
  ]);
  for (const file of ["garbage.safetensors", "cut.safetensors", "garbage.gguf", "config.json"]) {
    const item = page.locator(`#file-diagnostics li[data-file="${file}"]`).first();
    assert.match(await item.getAttribute("data-code"), /^I1\d\d$/, file);
  }
  // A JSON file's problem has its line.
  assert.match(await page.textContent('#file-diagnostics li[data-file="config.json"]'), /line 2, column \d+/);
  // A .vram file that is not text.
  await drop(page, "#source", [{ name: "binary.vram", bytes: Buffer.from([0xff, 0xfe, 0x00, 0xc3]) }]);
  assert.match(await page.textContent('#file-diagnostics li[data-code="X003"]'), /not UTF-8 text/);
  assert.equal(await page.inputValue("#source"), before);
  assert.deepEqual(errors, []);
  await page.close();
});

test("a .vram file chosen with the button replaces the text", async () => {
  const { page } = await open("/");
  const path = join(ROOT, "examples", "mistral-7b-fleet.vram");
  await page.evaluate(() => delete document.body.dataset.files);
  await page.setInputFiles("#f-open", path);
  await page.waitForSelector('body[data-files="read"]', { state: "attached" });
  assert.equal(await page.inputValue("#source"), readFileSync(path, "utf8"));
  await page.waitForSelector('body[data-ready="1"]', { state: "attached" });
  assert.ok((await page.locator("#checks article.check").count()) >= 1);
  await page.close();
});
