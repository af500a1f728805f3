// Accessibility of the calculator and the product-page element in a real browser: axe-core's
// WCAG 2.1 A and AA rules (labels, names, roles, contrast, landmarks) and its best practices run
// inside the page in each state a user reaches, and the form is driven by the keyboard alone.
// Run with `node --test tests/` in web/ after `cargo xtask web`.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { serve, browser, openReady, WEB } from "./harness.js";

// Injected through the devtools protocol (no request, so the page's origin rule still holds).
const AXE = readFileSync(join(WEB, "node_modules/axe-core/axe.min.js"), "utf8");
const RULES = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"];

let server;
let context;

before(async () => {
  server = await serve();
  context = await browser();
});

after(async () => {
  await context?.close();
  await server?.close();
});

/** axe-core over the whole document, open shadow roots included; returns its results. */
async function audit(page) {
  if (!(await page.evaluate(() => "axe" in window))) await page.evaluate(AXE);
  return page.evaluate((values) => window.axe.run(document, { runOnly: { type: "tag", values } }), RULES);
}

/** Fails with every violation's rule, help text and first elements, so a failure says what to fix. */
function assertNoViolations(results, state) {
  const found = results.violations.map(
    (v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ")}`,
  );
  assert.deepEqual(found, [], `accessibility violations ${state}`);
  // The audit saw the page: contrast was measured on its text, and the form's labels were read.
  const passed = new Map(results.passes.map((p) => [p.id, p.nodes.length]));
  assert.ok((passed.get("color-contrast") ?? 0) > 20, `contrast checked ${state}`);
  return passed;
}

test("the calculator meets WCAG 2.1 AA in each state a user reaches", async () => {
  const { page, errors } = await openReady(context, server.origin, "/");
  await page.waitForSelector("#checks .gpu");
  const first = assertNoViolations(await audit(page), "on load");
  assert.ok((first.get("label") ?? 0) >= 5, "the form's inputs have labels");
  assert.ok((first.get("select-name") ?? 0) >= 5, "the form's lists have names");

  // A mistake in the text: the diagnostic list and the gutter's marks.
  const source = await page.inputValue("#source");
  await page.fill("#source", source.replace(/weights\s+bf16/, "weights bf17"));
  await page.waitForSelector("#diagnostics li.diag");
  assertNoViolations(await audit(page), "with a diagnostic shown");

  // A check that does not fit, with what would.
  await page.fill("#source", source.replace(/sessions\s+\d+/, "sessions 5000"));
  await page.waitForSelector("#checks .suggestions li");
  assertNoViolations(await audit(page), "with suggestions shown");

  // Training mode, whose fieldset replaces the inference one.
  await page.fill("#source", source);
  await page.waitForSelector("#diagnostics li.none");
  await page.check('input[name="mode"][value="training"]');
  await page.waitForFunction(() => document.querySelector("#source").value.includes("training {"));
  await page.waitForSelector('body[data-ready="1"]', { state: "attached" });
  assertNoViolations(await audit(page), "in training mode");
  assert.deepEqual(errors, []);
  await page.close();
});

test("the product page's elements meet WCAG 2.1 AA inside their shadow roots", async () => {
  const page = await context.newPage();
  await page.goto(`${server.origin}/examples/product.html`);
  await page.waitForFunction(
    () => [...document.querySelectorAll("vram-budget")].every((e) => e.dataset.status),
  );
  const results = await audit(page);
  assertNoViolations(results, "on the product page");
  // The contrast rule reached text inside the elements' shadow roots, not just the host page:
  // axe names such a node by a path of selectors, the host's first.
  const inside = results.passes
    .find((p) => p.id === "color-contrast")
    .nodes.filter((n) => Array.isArray(n.target[0]));
  assert.ok(inside.length > 0, "contrast checked inside the shadow roots");
  await page.close();
});

test("the form works from the keyboard alone", async () => {
  const { page } = await openReady(context, server.origin, "/");
  await page.waitForSelector("#checks .gpu");
  // The first Tab reaches the skip link, which moves focus to the results.
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.className), "skip");
  // Tab on until the sessions field has focus: every control before it takes focus in turn.
  const visited = [];
  for (let i = 0; i < 40 && visited.at(-1) !== "f-sessions"; i++) {
    await page.keyboard.press("Tab");
    visited.push(await page.evaluate(() => document.activeElement.id));
  }
  assert.equal(visited.at(-1), "f-sessions", `tab order: ${visited.join(" ")}`);
  for (const id of ["f-model", "f-runtime", "f-weights", "f-context"]) {
    assert.ok(visited.includes(id), `${id} is reachable by Tab (order: ${visited.join(" ")})`);
  }
  // Focus is visible: the focused field draws an outline.
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.notEqual(outline, "none");
  // Typing a new count changes the text and the budget.
  await page.keyboard.press("Control+A");
  await page.keyboard.type("2");
  await page.waitForFunction(() => /sessions 2\b/.test(document.querySelector("#source").value));
  await page.waitForSelector('body[data-ready="1"]', { state: "attached" });
  // A list changes with the arrow keys: the runtime, reached backwards with Shift+Tab.
  while ((await page.evaluate(() => document.activeElement.id)) !== "f-runtime") {
    await page.keyboard.press("Shift+Tab");
  }
  const before = await page.inputValue("#f-runtime");
  await page.keyboard.press("ArrowDown");
  await page.waitForFunction((old) => document.querySelector("#f-runtime").value !== old, before);
  const runtime = await page.inputValue("#f-runtime");
  await page.waitForFunction((r) => document.querySelector("#source").value.includes(`runtime ${r}`), runtime);
  await page.close();
});
