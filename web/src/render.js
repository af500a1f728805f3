// Rendering shared by the calculator page and the <vram-budget> element: byte formatting,
// per-GPU stacked bars and the component table, all from the typed Evaluation of vram-wasm.
// Plain DOM, no framework; text is always set with textContent, never parsed as HTML.

export const CATEGORIES = [
  ["persistent", "Weights and assets"],
  ["intermediate", "Activations"],
  ["cache", "KV cache"],
  ["workspace", "Runtime and workspace"],
  ["training_state", "Training state"],
];

const GIB = 2 ** 30;
const UNITS = [["TiB", 2 ** 40], ["GiB", GIB], ["MiB", 2 ** 20], ["KiB", 2 ** 10]];

/** A byte count in binary units with two decimals, as the CLI prints it. */
export function bytes(n) {
  for (const [name, size] of UNITS) {
    if (n >= size) return `${(n / size).toFixed(2)} ${name}`;
  }
  return `${n} B`;
}

/** Creates an element with attributes and children (strings become text nodes). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === false || v == null) continue;
    if (k === "class") el.className = v;
    // Through the CSSOM: the page's Content-Security-Policy forbids style attributes.
    else if (k === "style") el.style.cssText = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function verdictText(verdict) {
  switch (verdict.status) {
    case "fits": return `fits, ${bytes(verdict.free)} free beyond headroom`;
    case "over": return `does not fit: over by ${bytes(verdict.over)}`;
    default: return `cannot run: ${verdict.reason}`;
  }
}

/** Bytes per category for one device budget. */
export function byCategory(device) {
  const sums = Object.fromEntries(CATEGORIES.map(([c]) => [c, 0]));
  for (const c of device.components) sums[c.category] += c.bytes;
  return sums;
}

/**
 * One stacked bar for a device budget: a segment per category, then the headroom, against
 * the device's capacity (or the required total when that is larger).
 */
export function bar(device) {
  const sums = byCategory(device);
  // The marker stands where allocations stop: the total less what the driver keeps.
  const usable = device.capacity.usable ?? device.capacity.bytes;
  const reserved = device.capacity.reserved ?? 0;
  const scale = Math.max(device.capacity.bytes, device.required);
  const pct = (n) => `${((100 * n) / scale).toFixed(3)}%`;
  const segments = CATEGORIES.filter(([c]) => sums[c] > 0).map(([c, label]) =>
    h("span", {
      class: `seg cat-${c}`,
      style: `width:${pct(sums[c])}`,
      title: `${label}: ${bytes(sums[c])}`,
    }),
  );
  segments.push(
    h("span", {
      class: "seg headroom",
      style: `width:${pct(device.headroom.bytes)}`,
      title: `Headroom: ${bytes(device.headroom.bytes)}`,
    }),
  );
  // Cache the allocator returns before it runs out of memory: in `used`, not in `required`.
  const releasable = device.releasable ?? 0;
  const returned =
    releasable > 0 ? ` (${bytes(releasable)} of it releasable cache, returned when memory runs short)` : "";
  const summary =
    `${device.device_title}: ${bytes(device.used)} used${returned} + ${bytes(device.headroom.bytes)} ` +
    `headroom of ${bytes(usable)} usable; ${verdictText(device.verdict)}`;
  return h(
    "div",
    { class: `gpu ${device.verdict.status}`, "data-device": device.device },
    h(
      "div",
      { class: "gpu-head" },
      h("strong", {}, `GPU ${device.index} · ${device.device_title}`),
      h("span", { class: "verdict" }, verdictText(device.verdict)),
    ),
    h(
      "div",
      { class: "track", role: "img", "aria-label": summary },
      segments,
      h("span", { class: "capacity", style: `left:${pct(usable)}` }),
    ),
    h(
      "div",
      { class: "gpu-foot" },
      (reserved > 0
        ? `${bytes(device.required)} required of ${bytes(usable)} usable (${bytes(device.capacity.bytes)}, ${device.capacity.provenance}; the driver keeps ${bytes(reserved)})`
        : `${bytes(device.required)} required of ${bytes(device.capacity.bytes)} (${device.capacity.provenance})`) +
        (releasable > 0 ? `; ${bytes(releasable)} of releasable cache not required` : ""),
    ),
  );
}

export function legend() {
  return h(
    "ul",
    { class: "legend" },
    CATEGORIES.map(([c, label]) => h("li", {}, h("span", { class: `swatch cat-${c}` }), label)),
    h("li", {}, h("span", { class: "swatch headroom" }), "Headroom"),
    h("li", {}, h("span", { class: "swatch capacity-mark" }), "Capacity"),
  );
}

/** The components of one device with their formulas and provenance. */
export function table(device) {
  return h(
    "table",
    { class: "components" },
    h("caption", {}, `GPU ${device.index} · ${device.device_title} · ${device.role}`),
    h(
      "thead",
      {},
      h("tr", {}, ["Component", "Category", "Bytes", "Provenance", "Formula"].map((t) => h("th", { scope: "col" }, t))),
    ),
    h(
      "tbody",
      {},
      device.components.map((c) =>
        h(
          "tr",
          {},
          h("th", { scope: "row" }, c.name),
          h("td", {}, c.category.replace("_", " ")),
          h("td", { class: "num" }, bytes(c.bytes)),
          h("td", {}, h("span", { class: `prov prov-${c.provenance}` }, c.provenance)),
          h("td", { class: "formula" }, c.formula, c.source ? h("div", { class: "source" }, `Source: ${c.source}`) : null),
        ),
      ),
      h(
        "tr",
        { class: "total" },
        h("th", { scope: "row" }, "Headroom"),
        h("td", {}, ""),
        h("td", { class: "num" }, bytes(device.headroom.bytes)),
        h("td", {}, "rule"),
        h("td", { class: "formula" }, device.headroom.rule),
      ),
    ),
  );
}
