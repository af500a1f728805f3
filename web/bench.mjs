// Benchmark of the calculator in Debian's chromium: run `node bench.mjs` in web/ after
// `cargo xtask web`. Prints:
//   - the size of the wasm and its JS glue, raw and gzip -9 (target: <= 150 KB gzipped);
//   - the time from navigation to the first rendered result (target: <= 300 ms);
//   - a fit map of 30 GPUs x 60 contexts x 56 session counts = 100,800 cells, computed in the
//     page by the wasm `fitMap` (target: <= 16 ms), with the number of full evaluations taken.

import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { join } from "node:path";
import { serve, browser, DIST } from "./tests/harness.js";

const RUNS = Number(process.env.RUNS ?? 15);
const kb = (n) => `${(n / 1000).toFixed(1)} KB`;

const files = ["pkg/vram_bg.wasm", "pkg/vram.js"].map((f) => {
  const body = readFileSync(join(DIST, f));
  return { f, raw: body.length, gzip: gzipSync(body, { level: 9 }).length };
});
for (const { f, raw, gzip } of files) console.log(`${f.padEnd(20)} ${kb(raw).padStart(10)} raw ${kb(gzip).padStart(10)} gzip`);
const gzipTotal = files.reduce((a, b) => a + b.gzip, 0);
console.log(`${"wasm + JS glue".padEnd(20)} ${kb(files.reduce((a, b) => a + b.raw, 0)).padStart(10)} raw ${kb(gzipTotal).padStart(10)} gzip  (target <= 150 KB) ${gzipTotal <= 150_000 ? "ok" : "OVER"}`);

const lazy = ["pkg/vram_import_bg.wasm", "pkg/vram_import.js"].map((f) => gzipSync(readFileSync(join(DIST, f)), { level: 9 }).length);
console.log(`${"importers (lazy)".padEnd(20)} ${kb(lazy[0] + lazy[1]).padStart(25)} gzip, fetched on the first dropped model file`);

const server = await serve();
const context = await browser();
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// Where the time to the first result goes, per load: the wasm's download (resource timing),
// compile and instantiate (`init`), the catalog, the first evaluation, rendering, and the first
// frame that shows it.
const MARKS = ["vram:wasm-ready", "vram:catalog", "vram:first-evaluate", "vram:first-result", "vram:first-frame"];
const loads = [];
for (let i = 0; i < 7; i++) {
  const page = await context.newPage();
  await page.goto(`${server.origin}/`);
  await page.waitForSelector("body[data-ready='1']", { state: "attached" });
  await page.waitForFunction(() => performance.getEntriesByName("vram:first-frame").length > 0);
  loads.push(await page.evaluate((marks) => {
    const at = Object.fromEntries(marks.map((m) => [m, performance.getEntriesByName(m)[0].startTime]));
    const wasm = performance.getEntriesByType("resource").find((r) => r.name.endsWith("vram_bg.wasm"));
    const script = performance.getEntriesByType("resource").find((r) => r.name.endsWith("/app.js"));
    const paint = performance.getEntriesByName("first-contentful-paint")[0];
    return { ...at, "wasm fetched": wasm?.responseEnd, "app.js fetched": script?.responseEnd, "first paint": paint?.startTime };
  }, MARKS));
  await page.close();
}
const first = loads.map((l) => l["vram:first-result"]);
for (const key of ["app.js fetched", "wasm fetched", "first paint", ...MARKS]) {
  const xs = loads.map((l) => l[key]).filter((x) => x != null);
  if (xs.length) console.log(`  ${key.padEnd(22)} median ${median(xs).toFixed(1).padStart(7)} ms after navigation`);
}
console.log(`first result after navigation: median ${median(first).toFixed(1)} ms, min ${Math.min(...first).toFixed(1)} ms over ${first.length} loads (target <= 300 ms) ${median(first) <= 300 ? "ok" : "OVER"}`);


const page = await context.newPage();
await page.goto(`${server.origin}/`);
await page.waitForSelector("body[data-ready='1']", { state: "attached" });
const result = await page.evaluate(async (runs) => {
  const { fitMap, catalog } = await import("./pkg/vram.js");
  const { CONTEXTS, SESSIONS } = await import("./app.js");
  const source = document.querySelector("#source").value;
  const devices = catalog().devices.map((d) => d.name).slice(0, 30);
  const request = { check: "calc", devices, contexts: CONTEXTS, sessions: SESSIONS };
  const times = [];
  let last;
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    last = fitMap(source, request);
    times.push(performance.now() - t);
  }
  const crossing = last.maps.filter((m) => m.boundary.some((b) => b > 0 && b < SESSIONS.length)).length;
  return { times, devices: devices.length, rows: CONTEXTS.length, cols: SESSIONS.length, evaluations: last.evaluations, error: last.error, crossing, source };
}, RUNS);
if (result.error) throw new Error(result.error);
const cells = result.devices * result.rows * result.cols;
const fm = median(result.times);
console.log(`fit map ${result.devices} GPUs x ${result.rows} contexts x ${result.cols} sessions = ${cells.toLocaleString("en")} cells: median ${fm.toFixed(2)} ms, min ${Math.min(...result.times).toFixed(2)} ms over ${RUNS} runs, ${result.evaluations} full evaluations, ${result.crossing} GPUs with a boundary inside the grid (target <= 16 ms) ${fm <= 16 ? "ok" : "OVER"}`);
console.log("workload (the page's default form):");
console.log(result.source.split("\n").filter((l) => /model|weights|context|sessions|check/.test(l)).map((l) => `  ${l.trim()}`).join("\n"));
await context.close();
await server.close();
