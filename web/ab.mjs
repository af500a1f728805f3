// Two (or more) builds of the page compared load by load, for a noisy machine: run
// `node ab.mjs A B` in web/ after `cargo xtask web`. Each argument is a folder holding the
// files that differ, laid out as in dist/ (`pkg/vram_bg.wasm`, `pkg/vram.js`, `app.js`...).
// The loads alternate between the variants (N each, default 9), and each variant's files are
// copied into dist/ before its load, so whatever else the machine does hits all of them alike.
// dist/ is left holding the last variant: run `cargo xtask web` again afterwards.
// Prints, per variant, medians after navigation, and the time from the first `evaluate`'s
// return to the first result in the page (rendering).

import { copyFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { serve, browser, DIST } from "./tests/harness.js";

const variants = process.argv.slice(2);
const N = Number(process.env.N ?? 9);
const MARKS = ["vram:wasm-ready", "vram:first-evaluate", "vram:first-result"];
const server = await serve();
const context = await browser();
const loads = Object.fromEntries(variants.map((v) => [v, []]));
for (let i = 0; i < N; i++) {
  for (const variant of variants) {
    for (const file of readdirSync(variant, { recursive: true })) {
      if (/\.(js|wasm|html|css)$/.test(file)) copyFileSync(join(variant, file), join(DIST, file));
    }
    const page = await context.newPage();
    await page.goto(`${server.origin}/`);
    await page.waitForSelector("body[data-ready='1']", { state: "attached" });
    loads[variant].push(await page.evaluate((marks) => Object.fromEntries(
      marks.map((m) => [m, performance.getEntriesByName(m)[0].startTime])), MARKS));
    await page.close();
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const figure = (xs) => `median ${median(xs).toFixed(1)} ms, min ${Math.min(...xs).toFixed(1)} ms`;
for (const variant of variants) {
  const r = loads[variant];
  console.log(`${variant} (${r.length} loads)`);
  for (const mark of MARKS) console.log(`  ${mark.padEnd(22)} ${figure(r.map((x) => x[mark]))}`);
  console.log(`  ${"evaluate after ready".padEnd(22)} ${figure(r.map((x) => x["vram:first-evaluate"] - x["vram:wasm-ready"]))}`);
  console.log(`  ${"render after evaluate".padEnd(22)} ${figure(r.map((x) => x["vram:first-result"] - x["vram:first-evaluate"]))}`);
}
await context.close();
await server.close();
