// Where the first `evaluate` of a page load goes: run `node bench-first.mjs` in web/ after
// `cargo xtask web`. Each of N fresh pages (default 9) imports the calculator's module and
// times, in order: init (compile and instantiate); a tiny evaluation without the catalog (its
// first calls compile the parser, checker and evaluator: V8 compiles wasm functions lazily, on
// their first call); `catalog()` (builds the built-in catalog: parse and check of its text);
// the page's default workload evaluated, then evaluated again (warm). Prints medians and minima.
// `JSFLAGS=--no-wasm-lazy-compilation node bench-first.mjs` compiles every function at init
// instead, which separates compiling from running.
import { serve, browser } from "./tests/harness.js";

const N = Number(process.env.N ?? 9);
const server = await serve();
const context = await browser(process.env.JSFLAGS ? [`--js-flags=${process.env.JSFLAGS}`] : []);
const rows = [];
for (let i = 0; i < N; i++) {
  const page = await context.newPage();
  // A page of the origin that has not loaded the module yet.
  await page.goto(`${server.origin}/pkg/vram.d.ts`);
  rows.push(await page.evaluate(async () => {
    const m = await import("/pkg/vram.js");
    const source = "workload calc {\n  model llama3.1-8b\n  inference {\n    weights  bf16\n    context  8192 tokens\n    sessions 16\n  }\n}\ncheck calc on h100-sxm-80gb\n";
    const times = {};
    let t = performance.now();
    const step = (name) => { const now = performance.now(); times[name] = now - t; t = now; };
    await m.default();
    step("init");
    m.evaluate("device d { memory 1 GiB }\n", { without_catalog: true });
    step("tiny evaluate, no catalog");
    m.catalog();
    step("catalog()");
    m.evaluate(source);
    step("first evaluate");
    m.evaluate(source);
    step("second evaluate");
    return times;
  }));
  await page.close();
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
for (const key of Object.keys(rows[0])) {
  const xs = rows.map((r) => r[key]);
  console.log(`${key.padEnd(26)} median ${median(xs).toFixed(1).padStart(6)} ms, min ${Math.min(...xs).toFixed(1).padStart(6)} ms`);
}
await context.close();
await server.close();
