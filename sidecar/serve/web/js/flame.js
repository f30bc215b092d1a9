// A canvas flamegraph: click to zoom, search and function highlights, hover and keyboard details,
// flame (root at the bottom) or icicle (root at the top), and differential colouring.
//
// Frames narrower than MIN_WIDTH pixels are not drawn, and neither is anything above them, so a
// profile with many thousands of frames lays out and paints in a few milliseconds.

import { createCanvas, fitCanvas, startPaint, stripes } from "./canvas.js";
import { count, esc, pct, signedPct } from "./format.js";

const ROW = 18;
const MIN_WIDTH = 1;
const MARKS = 7; // the strip under the graph that shows where search matches are
const FONT = '12px "DejaVu Sans", system-ui, -apple-system, "Segoe UI", sans-serif';
const FOCUS = "#1746c6";
/** The [gil] leaf: the loop waited for the GIL (hatched, as the timeline draws it). */
const GIL_COLOUR = "#009e73";
/** The [cpu_wait] leaf: runnable, waiting for a CPU (ruled across, as the timeline draws it). */
const CPU_WAIT_COLOUR = "#7e57c2";
/** The garbage collector's frame: busy time, in a purple apart from the layers' hues. */
const GC_COLOUR = "#cc79a7";
/** The leaves of task stacks, as the Tasks view's chart draws their states. */
export const TASK_COLOURS = { running: "#e69f00", ready: "#d55e00", waiting: "#56b4e9" };

function hash(text) {
  let h = 2166136261;
  for (let i = 0; i < text.length; i += 1) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  return (h >>> 0) / 4294967296;
}

/** Fill colours per layer: a hue band each, varied per function so neighbours stay distinct. */
function layerColour(info) {
  const v = hash(info.key);
  switch (info.layer) {
    case "app":
      return `hsl(${12 + v * 16}, 78%, ${60 + v * 8}%)`;
    case "framework":
      return `hsl(${38 + v * 12}, 88%, ${58 + v * 9}%)`;
    case "runtime":
      return `hsl(${32 + v * 14}, 22%, ${70 + v * 8}%)`;
    case "idle":
      return "#56b4e9";
    case "blocked":
      return "#c84f00";
    case "gil":
      return GIL_COLOUR;
    case "cpu_wait":
      return CPU_WAIT_COLOUR;
    case "gc":
      return GC_COLOUR;
    case "running":
      return TASK_COLOURS.running;
    case "ready":
      return TASK_COLOURS.ready;
    case "waiting":
      return TASK_COLOURS.waiting;
    default:
      return `hsl(210, 8%, ${76 + v * 6}%)`;
  }
}

/** Differential colours: red grew, blue shrank (a diverging scale readable with colour blindness). */
function diffColour(t) {
  // t in [-1, 1]; 0 is neutral grey.
  const a = Math.min(1, Math.abs(t));
  const from = [226, 228, 232];
  const to = t >= 0 ? [190, 30, 45] : [33, 102, 172];
  const mix = from.map((c, i) => Math.round(c + (to[i] - c) * a));
  return { fill: `rgb(${mix.join(",")})`, dark: a > 0.55 };
}

export class FlameGraph {
  constructor(host, { onZoom = () => {}, onFocus = () => {}, label = "Flamegraph" } = {}) {
    this.host = host;
    this.rootLabel = "all";
    this.onZoom = onZoom;
    this.onFocus = onFocus;
    this.label = label;
    this.tree = null;
    this.kind = "profile";
    this.icicle = false;
    this.match = null;
    this.highlight = null;
    this.zoom = null;
    this.hover = null;
    this.focus = null;
    this.rows = new Map();
    this.marks = [];
    this.shown = 0;
    this.hidden = 0;
    this.diffScale = 1;

    Object.assign(this, createCanvas(host, "flame-canvas"));
    this.stripes = stripes(this.ctx, "#c84f00", {
      size: 8,
      alpha: 0.28,
      lineWidth: 2,
      lines: [
        [-2, 10, 10, -2],
        [-2, 2, 2, -2],
        [6, 10, 10, 6],
      ],
    });

    this.hatched = stripes(this.ctx, GIL_COLOUR, {
      size: 8,
      alpha: 0.3,
      lineWidth: 1.5,
      lines: [
        [-1, 9, 9, -1],
        [-1, -1, 9, 9],
      ],
    });

    this.ruled = stripes(this.ctx, CPU_WAIT_COLOUR, {
      size: 6,
      alpha: 0.35,
      lineWidth: 1,
      lines: [[-1, 4.5, 7, 4.5]],
    });

    this.canvas.addEventListener("mousemove", (e) => this.onMove(e));
    this.canvas.addEventListener("mouseleave", () => this.setHover(null));
    this.canvas.addEventListener("click", (e) => this.onClick(e));
    this.canvas.addEventListener("keydown", (e) => this.onKey(e));
    this.canvas.addEventListener("focus", () => {
      if (!this.focus && this.tree) this.setFocus(this.zoom || this.tree.root);
    });
    this.canvas.addEventListener("blur", () => this.paint());
    let pending = false;
    new ResizeObserver(() => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        if (this.tree && Math.round(this.host.clientWidth) !== this.width) this.render();
      });
    }).observe(host);
  }

  /** New data: a tree from stacks.buildTree; `kind` is "profile" or "diff". */
  setTree(tree, kind = "profile", zoomPath = null) {
    const focusPath = this.focus && this.focus.parent ? this.focus.path() : null;
    this.tree = tree;
    this.kind = kind;
    this.hover = null;
    this.focus = focusPath ? tree.root.find(focusPath) : null;
    this.zoom = zoomPath && zoomPath.length ? tree.root.find(zoomPath) : null;
    if (kind === "diff") this.diffScale = this.maxDelta(tree.root);
    this.render();
  }

  clear() {
    this.tree = null;
    this.zoom = null;
    this.hover = null;
    this.focus = null;
    this.rows = new Map();
    this.canvas.width = 0;
    this.canvas.height = 0;
    this.canvas.style.height = "0px";
    this.tip.hidden = true;
    this.host.dataset.frames = "0";
  }

  maxDelta(root) {
    let max = 0;
    const total = root.value || 1;
    const walk = (node) => {
      for (const child of node.children) {
        const d = Math.abs(child.value - child.before) / total;
        if (d > max) max = d;
        walk(child);
      }
    };
    walk(root);
    return Math.max(max, 0.01);
  }

  setOptions({ icicle, match, highlight }) {
    if (icicle !== undefined) this.icicle = icicle;
    if (match !== undefined) this.match = match;
    if (highlight !== undefined) this.highlight = highlight;
    if (this.tree) this.render();
  }

  zoomTo(node, notify = true) {
    if (!this.tree) return;
    this.zoom = node && node.parent ? node : null;
    this.setFocus(node || this.tree.root, false);
    this.render();
    if (notify) this.onZoom(this.zoom ? this.zoom.path() : []);
  }

  reset() {
    this.zoomTo(null);
  }

  isMatch(node) {
    if (!node.parent) return false;
    const info = node.info;
    return (this.match && this.match(info)) || (this.highlight && info.key === this.highlight);
  }

  // -- layout ---------------------------------------------------------------------------------

  layout() {
    const width = Math.max(100, Math.round(this.host.clientWidth));
    this.width = width;
    const rows = new Map();
    let deepest = 0;
    let shown = 0;
    let hidden = 0;
    const put = (node, x, w, faded) => {
      let row = rows.get(node.depth);
      if (!row) rows.set(node.depth, (row = []));
      row.push({ x, w, node, faded });
      if (node.depth > deepest) deepest = node.depth;
      shown += 1;
    };
    // where the matches are, pruned ones included, for the strip under the graph
    const searching = Boolean(this.match || this.highlight);
    const marks = [];
    const contains = (node) => this.isMatch(node) || node.children.some(contains);
    const zoom = this.zoom || this.tree.root;
    for (let a = zoom.parent; a; a = a.parent) put(a, 0, width, true);
    const scale = width / (zoom.value || 1);
    const stack = [[zoom, 0]];
    while (stack.length) {
      const [node, x] = stack.pop();
      const w = node.value * scale;
      put(node, x, w, false);
      if (searching && this.isMatch(node)) marks.push([x, w]);
      let cx = x;
      for (const child of node.children) {
        const cw = child.value * scale;
        if (cw >= MIN_WIDTH) stack.push([child, cx]);
        else if (cw > 0) {
          hidden += 1;
          if (searching && contains(child)) marks.push([cx, cw]);
        }
        cx += cw;
      }
    }
    for (const row of rows.values()) row.sort((p, q) => p.x - q.x);
    this.marks = marks;
    this.rows = rows;
    this.depth = deepest;
    this.shown = shown;
    this.hidden = hidden;
  }

  yOf(depth) {
    return this.icicle ? depth * ROW : (this.depth - depth) * ROW;
  }

  render() {
    if (!this.tree) return;
    const t0 = performance.now();
    this.layout();
    const height = (this.depth + 1) * ROW + MARKS;
    fitCanvas(this.canvas, this.width, height);
    this.height = height;
    this.paint();
    const d = this.host.dataset;
    d.frames = String(this.shown);
    d.hidden = String(this.hidden);
    d.samples = String(this.tree.total);
    d.kind = this.kind;
    d.zoom = this.zoom ? this.zoom.name : "";
    d.renderMs = (performance.now() - t0).toFixed(1);
    this.canvas.setAttribute(
      "aria-label",
      `${this.label}: ${count(this.tree.total)} samples, ${count(this.shown)} frames shown. ` +
        "Arrow keys move between frames, Enter zooms, Escape resets.",
    );
  }

  paint() {
    const ctx = this.ctx;
    startPaint(ctx, this.width, this.height);
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    if (!this.charWidth) {
      const sample = "abcdefghijklmnopqrstuvwxyz_.() ABCDEFGHIJ0123456789";
      this.charWidth = ctx.measureText(sample).width / sample.length;
    }
    const searching = Boolean(this.match || this.highlight);
    const total = this.tree.root.value || 1;
    for (const row of this.rows.values()) {
      for (const r of row) this.paintFrame(ctx, r, searching, total);
    }
    ctx.globalAlpha = 1;
    ctx.fillStyle = "#8e1b8c";
    const strip = (this.depth + 1) * ROW + 2;
    for (const [x, w] of this.marks) {
      const cw = Math.max(3, w);
      ctx.fillRect(Math.min(this.width - cw, Math.max(0, x + w / 2 - cw / 2)), strip, cw, MARKS - 3);
    }
    const mark = (node, colour, width) => {
      const r = node && this.rectOf(node);
      if (!r) return;
      ctx.globalAlpha = 1;
      ctx.strokeStyle = colour;
      ctx.lineWidth = width;
      ctx.strokeRect(r.x + width / 2, this.yOf(node.depth) + width / 2, Math.max(1, r.w - width), ROW - 1 - width);
    };
    mark(this.hover, "#111827", 1);
    if (document.activeElement === this.canvas) mark(this.focus, FOCUS, 2);
  }

  paintFrame(ctx, r, searching, total) {
    const { node, x, w, faded } = r;
    const y = this.yOf(node.depth);
    const info = node.info;
    let fill;
    let darkText = false;
    let prefix = "";
    if (!node.parent) {
      fill = "#c9ced6";
    } else if (this.kind === "diff") {
      const d = (node.value - node.before) / total;
      const c = diffColour(d / this.diffScale);
      fill = c.fill;
      darkText = c.dark;
      if (Math.abs(d) >= 0.001) prefix = d > 0 ? "▲ " : "▼ ";
    } else if (info.layer === "blocked") {
      fill = this.stripes;
      darkText = true;
    } else if (info.layer === "gil") {
      fill = this.hatched;
      darkText = true;
    } else if (info.layer === "cpu_wait") {
      fill = this.ruled;
      darkText = true;
    } else {
      fill = layerColour(info);
    }
    const hit = searching && this.isMatch(node);
    if (hit) {
      fill = "#8e1b8c";
      darkText = true;
    }
    ctx.globalAlpha = faded ? 0.55 : searching && !hit ? 0.38 : 1;
    ctx.fillStyle = fill;
    ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), ROW - 1);
    if (w < 22) return;
    const label = this.labelFor(node, info, w - 8, prefix);
    if (!label) return;
    ctx.fillStyle = darkText ? "#ffffff" : "#1b1f24";
    ctx.fillText(label, x + 4, y + ROW / 2);
  }

  labelFor(node, info, room, prefix) {
    const fit = Math.floor(room / (this.charWidth * 1.04));
    if (fit < 3) return "";
    const name = node.parent ? info.name : `${this.rootLabel} (${count(node.value)} samples)`;
    const full = prefix + (info.file ? `${name} (${info.file}:${info.line})` : name);
    if (full.length <= fit) return full;
    const short = prefix + name;
    if (short.length <= fit) return short;
    return `${short.slice(0, fit - 1)}…`;
  }

  rectOf(node) {
    const row = this.rows.get(node.depth);
    return row ? row.find((r) => r.node === node) : null;
  }

  // -- interaction ----------------------------------------------------------------------------

  nodeAt(clientX, clientY) {
    const box = this.canvas.getBoundingClientRect();
    const x = clientX - box.left;
    const y = clientY - box.top;
    const depth = this.icicle ? Math.floor(y / ROW) : this.depth - Math.floor(y / ROW);
    const row = this.rows.get(depth);
    if (!row) return null;
    let lo = 0;
    let hi = row.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const r = row[mid];
      if (x < r.x) hi = mid - 1;
      else if (x >= r.x + r.w) lo = mid + 1;
      else return { node: r.node, x, y };
    }
    return null;
  }

  onMove(e) {
    if (!this.tree) return;
    const hit = this.nodeAt(e.clientX, e.clientY);
    this.setHover(hit ? hit.node : null);
    if (hit) this.showTip(hit.node, e.clientX, e.clientY);
  }

  onClick(e) {
    const hit = this.nodeAt(e.clientX, e.clientY);
    if (!hit) return;
    this.zoomTo(hit.node === this.zoom ? hit.node.parent : hit.node);
  }

  setHover(node) {
    if (node === this.hover) return;
    this.hover = node;
    this.canvas.style.cursor = node ? "pointer" : "default";
    if (!node) this.tip.hidden = true;
    this.paint();
    this.onFocus(node || this.focus);
  }

  setFocus(node, announce = true) {
    this.focus = node;
    this.paint();
    if (announce) this.onFocus(node);
  }

  onKey(e) {
    if (!this.tree) return;
    const node = this.focus || this.zoom || this.tree.root;
    const up = this.icicle ? "ArrowDown" : "ArrowUp";
    const down = this.icicle ? "ArrowUp" : "ArrowDown";
    let next = null;
    if (e.key === up) {
      const visible = node.children.filter((c) => this.rectOf(c));
      next = visible.sort((a, b) => b.value - a.value)[0] || null;
    } else if (e.key === down) {
      next = node.parent;
    } else if (e.key === "ArrowLeft" || e.key === "ArrowRight") {
      const row = this.rows.get(node.depth) || [];
      const i = row.findIndex((r) => r.node === node);
      const j = e.key === "ArrowLeft" ? i - 1 : i + 1;
      next = row[j] ? row[j].node : null;
    } else if (e.key === "Enter" || e.key === " ") {
      this.zoomTo(node);
    } else if (e.key === "Escape") {
      this.reset();
    } else if (e.key === "Home") {
      next = this.tree.root;
    } else {
      return;
    }
    e.preventDefault();
    if (next) {
      this.setFocus(next);
      const r = this.rectOf(next);
      if (r) {
        const box = this.canvas.getBoundingClientRect();
        this.showTip(next, box.left + r.x + Math.min(r.w / 2, 120), box.top + this.yOf(next.depth));
      }
    }
  }

  /** What a person wants to know about a frame, as lines of HTML. */
  describe(node) {
    const total = this.tree.root.value || 1;
    const info = node.info;
    const parent = node.parent;
    const lines = [];
    const rootName = this.rootLabel === "all" ? "all samples" : `${this.rootLabel}, every call`;
    const name = node.parent ? info.name : rootName;
    lines.push(`<strong>${esc(name)}</strong>`);
    if (info.file) lines.push(`<span class="muted">${esc(info.file)}:${info.line}</span>`);
    if (this.kind === "diff") {
      const d = (node.value - node.before) / total;
      lines.push(
        `before ${count(node.before)} → after ${count(node.value)} samples ` +
          `<span class="${d > 0 ? "grew" : d < 0 ? "shrank" : ""}">(${signedPct(d)} of all)</span>`,
      );
    } else {
      lines.push(`${count(node.value)} samples · ${pct(node.value / total, 2)} of total`);
      if (parent && parent.parent) {
        lines.push(`${pct(node.value / parent.value, 1)} of parent <span class="muted">${esc(parent.info.name)}</span>`);
      }
      if (node.self) lines.push(`self ${count(node.self)} (${pct(node.self / total, 2)})`);
    }
    return lines;
  }

  showTip(node, clientX, clientY) {
    this.tip.innerHTML = this.describe(node).map((l) => `<div>${l}</div>`).join("");
    this.tip.hidden = false;
    const host = this.host.getBoundingClientRect();
    const tw = this.tip.offsetWidth;
    const th = this.tip.offsetHeight;
    let left = clientX - host.left + 14;
    let top = clientY - host.top + 16;
    if (left + tw > host.width) left = Math.max(0, clientX - host.left - tw - 14);
    if (top + th > host.height) top = Math.max(0, clientY - host.top - th - 10);
    this.tip.style.left = `${left}px`;
    this.tip.style.top = `${top}px`;
  }
}
