// Parity: for every file in examples/, the wasm `evaluate` (the built web/dist/pkg, in Node)
// gives the same budget JSON, byte for byte, as `vram check --format json`, and the same
// diagnostics. The CLI binary is $VRAM_BIN, or target/debug/vram (built by .ci/run).

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { DIST, ROOT } from "./harness.js";
import init, { evaluate } from "../dist/pkg/vram.js";

const VRAM = process.env.VRAM_BIN ?? join(ROOT, "target", "debug", "vram");

function cli(file) {
  try {
    return execFileSync(VRAM, ["check", "--format", "json", file], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  } catch (error) {
    // Exit 1 (does not fit) and 2 (input errors) still print the JSON.
    if (error.stdout) return error.stdout;
    throw error;
  }
}

test("wasm evaluate matches `vram check --format json` on every example", async () => {
  assert.ok(existsSync(VRAM), `${VRAM} is missing: run \`cargo build -p vram\``);
  await init({ module_or_path: readFileSync(join(DIST, "pkg", "vram_bg.wasm")) });
  const dir = join(ROOT, "examples");
  const files = readdirSync(dir).filter((f) => f.endsWith(".vram")).sort();
  assert.ok(files.length >= 10, `${files.length} examples`);
  for (const name of files) {
    const path = join(dir, name);
    const source = readFileSync(path, "utf8");
    const native = JSON.parse(cli(path));
    const report = native.files[0];
    const wasm = evaluate(source, {});
    assert.equal(wasm.vram_version, native.vram_version, name);
    // The same JSON text, so the same fields in the same order with the same numbers.
    assert.equal(JSON.stringify(wasm.budget), JSON.stringify(report.budget), name);
    assert.ok(wasm.budget.checks.length > 0, name);
    const lines = source.split("\n");
    const essential = (d, column) => ({
      code: d.code, severity: d.severity, message: d.message, help: d.help,
      start: d.start.line, end: d.end.line,
      // Columns agree where the line is ASCII (the CLI counts characters, the page UTF-16).
      column: /^[\x00-\x7f]*$/.test(lines[d.start.line - 1] ?? "") ? column(d) : null,
      labels: d.labels.map((l) => [l.start.line, l.message]),
    });
    assert.deepEqual(
      wasm.diagnostics.map((d) => essential(d, (x) => x.start.column)),
      report.diagnostics.map((d) => essential(d, (x) => x.start.column)),
      name,
    );
  }
});

test("a file with mistakes gives the CLI's diagnostics too", async () => {
  await init({ module_or_path: readFileSync(join(DIST, "pkg", "vram_bg.wasm")) });
  const dir = join(ROOT, "tests", "errors");
  const files = readdirSync(dir).filter((f) => f.endsWith(".vram")).sort();
  assert.ok(files.length >= 5);
  for (const name of files) {
    const path = join(dir, name);
    const source = readFileSync(path, "utf8");
    const report = JSON.parse(cli(path)).files[0];
    const wasm = evaluate(source, {});
    assert.equal(JSON.stringify(wasm.budget), JSON.stringify(report.budget), name);
    assert.deepEqual(
      wasm.diagnostics.map((d) => [d.code, d.message, d.start.line, d.end.line]),
      report.diagnostics.map((d) => [d.code, d.message, d.start.line, d.end.line]),
      name,
    );
    assert.ok(wasm.diagnostics.length > 0, name);
  }
});
