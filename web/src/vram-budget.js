// <vram-budget>: the calculator as an element for product pages, loaded by one
// <script type="module" src=".../vram-budget.js">. Its styles live in its shadow root, so the
// host page's CSS neither leaks in nor is disturbed.
//
//   <vram-budget machine="h100-sxm-80gb" workload="llama3.1-70b"
//                precision="fp8" context="8192" sessions="16" gpus="2"></vram-budget>
//
// `machine` is a catalog GPU; `workload` a catalog model (or a whole `.vram` workload block);
// `precision`, `context`, `sessions`, `runtime` and `gpus` (tensor-parallel) are optional.

import init, { catalog, evaluate, fitMap } from "./pkg/vram.js";
import { bar, bytes, h, legend, verdictText } from "./render.js";

let ready = null;
const load = () => (ready ??= init());

const STYLE = `
:host { display: block; font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: #1a1a1a; background: #fff; border: 1px solid #c8c8c8; border-radius: 8px; padding: .8rem 1rem;
  line-height: 1.4; max-width: 40rem; }
h3 { margin: 0 0 .4rem; font-size: 1.05rem; }
p { margin: .3rem 0; }
.gpu-head .verdict { display: none; }
.sub { margin: 0 0 .3rem; color: #4a4a4a; }
.ok { color: #0a6b2f; } .over .verdict, .unsupported .verdict, .bad { color: #a4161a; }
.gpu-head { display: flex; justify-content: space-between; gap: .6rem; flex-wrap: wrap; font-size: .92em; }
.gpu-foot, .muted { color: #4a4a4a; font-size: .88em; }
.track { position: relative; display: flex; height: 1.3rem; background: #eef0f3; border: 1px solid #8a8f98; border-radius: 3px; margin: .2rem 0; }
.seg { height: 100%; display: block; }
.capacity { position: absolute; top: -3px; bottom: -3px; width: 3px; background: #000; }
.cat-persistent { background: #1f4e9c; } .cat-intermediate { background: #8a3ea8; } .cat-cache { background: #0f7c7c; }
.cat-workspace { background: #9a5b00; } .cat-training_state { background: #b0306a; }
.headroom { background: repeating-linear-gradient(45deg, #b9c0c9, #b9c0c9 4px, #dfe3e8 4px, #dfe3e8 8px); }
.legend { display: flex; flex-wrap: wrap; gap: .2rem .8rem; list-style: none; padding: 0; margin: .4rem 0; font-size: .85em; }
.swatch { display: inline-block; width: .8rem; height: .8rem; margin-right: .3rem; vertical-align: -1px; border: 1px solid #555; }
.capacity-mark { background: #000; width: 3px; }
a { color: #0b57d0; }
a:focus-visible { outline: 3px solid #0b57d0; outline-offset: 2px; }
`;

/** The `.vram` text an element's attributes describe. */
export function sourceFor(attrs) {
  const machine = attrs.machine || "h100-sxm-80gb";
  const gpus = Math.max(1, Number(attrs.gpus) || 1);
  const target = gpus > 1 ? `${gpus} x ${machine} split tensor ${gpus}` : machine;
  const workload = attrs.workload || "llama3.1-8b";
  if (workload.includes("{")) {
    const name = workload.match(/workload\s+([\w.-]+)/)?.[1] ?? "w";
    return `${workload}\n\ncheck ${name} on ${target}\n`;
  }
  return [
    `workload product "${workload} on ${machine}" {`,
    `  model   ${workload}`,
    `  runtime ${attrs.runtime || "vllm"}`,
    "  inference {",
    `    weights  ${attrs.precision || "bf16"}`,
    `    context  ${Number(attrs.context) || 8192} tokens`,
    `    sessions ${Number(attrs.sessions) || 1}`,
    "  }",
    "}",
    "",
    `check product on ${target}`,
    "",
  ].join("\n");
}

const ATTRIBUTES = ["machine", "workload", "precision", "context", "sessions", "runtime", "gpus"];

class VramBudget extends HTMLElement {
  static observedAttributes = ATTRIBUTES;

  constructor() {
    super();
    this.attachShadow({ mode: "open" });
    const style = document.createElement("style");
    style.textContent = STYLE;
    this.body = h("div", { part: "body", "aria-live": "polite" }, h("p", { class: "muted" }, "Computing the memory budget…"));
    this.shadowRoot.append(style, this.body);
  }

  connectedCallback() {
    this.render();
  }

  attributeChangedCallback() {
    if (this.isConnected) this.render();
  }

  async render() {
    try {
      await load();
    } catch (error) {
      this.body.replaceChildren(h("p", { class: "bad" }, `The calculator could not load: ${error}`));
      return;
    }
    const attrs = Object.fromEntries(ATTRIBUTES.map((a) => [a, this.getAttribute(a)]));
    const source = sourceFor(attrs);
    const evaluation = evaluate(source);
    const check = evaluation.budget.checks[0];
    const children = [];
    if (!check) {
      const first = evaluation.diagnostics[0];
      children.push(
        h("p", { class: "bad" }, first ? `${first.code}: ${first.message}` : "Nothing to show."),
      );
    } else {
      const { models, devices } = catalog();
      const model = models.find((m) => m.name === attrs.workload)?.title ?? check.workload;
      const device = devices.find((d) => d.name === check.devices[0].device)?.title ?? check.target;
      const context = Number(attrs.context) || 8192;
      const heading = attrs.workload?.includes("{")
        ? check.title ?? check.id
        : `${model}, ${attrs.precision || "bf16"}, ${context.toLocaleString("en")}-token context, ` +
          `${Number(attrs.sessions) || 1} sessions`;
      children.push(
        h("h3", {}, heading),
        h("p", { class: "sub" }, `on ${check.devices.length} × ${device}`),
        h("p", { class: check.verdict.status === "fits" ? "ok" : "bad" }, h("strong", {}, verdictText(check.verdict))),
        bar(check.devices[0]),
        check.devices.length > 1 ? h("p", { class: "muted" }, `Each of the ${check.devices.length} GPUs holds the same.`) : null,
        legend(),
      );
      const sessions = Array.from({ length: 256 }, (_, i) => i + 1);
      const map = fitMap(source, { check: check.id, devices: [check.devices[0].device], contexts: [context], sessions });
      if (!map.error && !map.maps[0].unsupported) {
        const most = map.maps[0].boundary[0];
        children.push(
          h(
            "p",
            { class: "fit-sessions" },
            most === 0
              ? `No session count fits at ${context.toLocaleString("en")} tokens.`
              : `Up to ${most === sessions.length ? "256 or more" : most} concurrent sessions of ${context.toLocaleString("en")} tokens fit.`,
          ),
        );
      }
      // When it does not fit, what would: the budget's own suggestions, the sessions one aside
      // (the line above says it), at most three.
      const changes = check.verdict.status === "fits" ? [] : check.suggestions.filter((s) => s.kind !== "sessions").slice(0, 3);
      if (changes.length) {
        children.push(
          h(
            "div",
            { class: "would-fit" },
            h("p", {}, "What would fit:"),
            h("ul", {}, changes.map((s) => h("li", { "data-kind": s.kind }, h("code", {}, s.change), s.warning ? h("span", { class: "muted" }, ` (${s.warning})`) : null))),
          ),
        );
      }
      const used = check.devices[0];
      children.push(h("p", { class: "muted" }, `${bytes(used.used)} used, ${bytes(used.headroom.bytes)} headroom kept, of ${bytes(used.capacity.bytes)}.`));
    }
    const link = new URL("./index.html", import.meta.url);
    const bin = Array.from(new TextEncoder().encode(source), (b) => String.fromCharCode(b)).join("");
    link.hash = `s=${btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")}`;
    children.push(h("p", {}, h("a", { href: link.href }, "Open in the calculator: formulas, every GPU, fit map")));
    this.body.replaceChildren(...children.filter(Boolean));
    this.dataset.status = evaluation.status;
    this.dispatchEvent(new CustomEvent("vram-budget-ready", { detail: { status: evaluation.status } }));
  }
}

if (!customElements.get("vram-budget")) customElements.define("vram-budget", VramBudget);
