// Shared by the browser tests and the benchmark: a static server for web/dist on 127.0.0.1
// that logs every request, and Debian's chromium started through playwright-core with the
// closed-network flags and a fresh profile.

import { createServer } from "node:http";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, extname, normalize, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

export const WEB = join(dirname(fileURLToPath(import.meta.url)), "..");
export const DIST = join(WEB, "dist");
export const ROOT = join(WEB, "..");

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".wasm": "application/wasm",
  ".vram": "text/plain; charset=utf-8",
  ".ts": "text/plain; charset=utf-8",
};

/** Serves DIST; `requests` lists every path asked for. */
export async function serve() {
  const requests = [];
  const server = createServer((req, res) => {
    requests.push(req.url);
    const path = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname)).replace(/^(\.\.[/\\])+/, "");
    let file = join(DIST, path);
    try {
      if (statSync(file).isDirectory()) file = join(file, "index.html");
      const body = readFileSync(file);
      res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
      res.end(body);
    } catch {
      res.writeHead(404, { "content-type": "text/plain" });
      res.end("not found");
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${server.address().port}`;
  return { origin, requests, close: () => new Promise((r) => server.close(r)) };
}

export const CHROMIUM_ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
  "--disable-dev-shm-usage",
];

/** Debian's chromium with a fresh profile directory, removed when the context closes. */
export async function browser(extra = []) {
  const profile = mkdtempSync(join(tmpdir(), "vram-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [...CHROMIUM_ARGS, ...extra],
    viewport: { width: 1280, height: 900 },
  });
  const close = context.close.bind(context);
  context.close = async (...args) => {
    try {
      await close(...args);
    } finally {
      rmSync(profile, { recursive: true, force: true });
    }
  };
  return context;
}

/** Opens `path` of `origin` in a new page of `context` and waits until the calculator (or the
 * product page's elements) reports ready; `errors` collects the page's errors and console errors. */
export async function openReady(context, origin, path) {
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  await page.goto(origin + path);
  await page.waitForSelector('body[data-ready="1"], body[data-ready="error"]', { state: "attached" });
  assert.equal(await page.getAttribute("body", "data-ready"), "1");
  return { page, errors };
}
