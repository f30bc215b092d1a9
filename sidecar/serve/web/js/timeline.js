// The timeline: busy / cpu_wait / blocked / gil / idle samples of the event loop per bucket,
// stacked, with a
// drag-to-select range (or arrow keys), hover details and marked bands for the compare view; over
// the event loop's chart, a lane of its stalls (StallLane).
// Other series stack the same way (the Tasks view's tasks in flight by state): `series` names
// them, bottom first, each filled plain, striped, hatched (crossed both ways) or ruled (lines
// across).

import { createCanvas, fitCanvas, startPaint, stripes } from "./canvas.js";
import { clock, count, duration, esc, pct, span } from "./format.js";
import { isPicked, stallLabel, stallTip } from "./stalls.js";

const PAD = { left: 48, right: 10, top: 10, bottom: 22 };
const HEIGHT = 150;
export const STATE_COLOURS = {
  busy: "#e69f00",
  cpu_wait: "#7e57c2",
  blocked: "#c84f00",
  gil: "#009e73",
  idle: "#56b4e9",
};
/**
 * The event loop's states, bottom first: busy (on a CPU), then cpu_wait (runnable, waiting for
 * a CPU) ruled across, blocked striped, gil (waiting for the GIL) hatched, idle.
 */
const LOOP_SERIES = [
  { key: "busy", colour: STATE_COLOURS.busy },
  { key: "cpu_wait", colour: STATE_COLOURS.cpu_wait, ruled: true },
  { key: "blocked", colour: STATE_COLOURS.blocked, striped: true },
  { key: "gil", colour: STATE_COLOURS.gil, hatched: true },
  { key: "idle", colour: STATE_COLOURS.idle },
];
/** Crossing diagonals of a 6-pixel tile: a hatched fill. */
const HATCH = [
  [-1, 7, 7, -1],
  [-1, -1, 7, 7],
];
/** A line across a 6-pixel tile: a ruled fill. */
const RULE = [[-1, 4.5, 7, 4.5]];
const TICKS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

/** A round number at or above `value` whose half is round too: the chart's top. */
function niceCeil(value) {
  const power = 10 ** Math.floor(Math.log10(value));
  for (const m of [1, 1.2, 1.6, 2, 3, 4, 5, 6, 8, 10]) if (m * power >= value) return m * power;
  return 10 * power;
}

/** The canvas fill of one series: its colour, striped, hatched or ruled when it says so. */
function fillOf(ctx, { colour, striped, hatched, ruled }) {
  if (hatched) return stripes(ctx, colour, { lines: HATCH });
  if (ruled) return stripes(ctx, colour, { lines: RULE, lineWidth: 1 });
  return striped ? stripes(ctx, colour) : colour;
}

export class Timeline {
  constructor(
    host,
    {
      onSelect = () => {},
      series = LOOP_SERIES,
      label = "Event-loop timeline",
      unit = "samples",
      value = count,
      totalLabel = "",
    } = {},
  ) {
    this.host = host;
    this.onSelect = onSelect;
    this.label = label;
    this.unit = unit;
    this.value = value;
    this.totalLabel = totalLabel;
    this.data = null;
    this.from = 0;
    this.to = 1;
    this.selection = null;
    this.marks = [];
    this.drag = null;
    this.hoverBucket = null;
    Object.assign(this, createCanvas(host, "timeline-canvas"));
    this.setSeries(series);
    this.canvas.addEventListener("pointerdown", (e) => this.onDown(e));
    this.canvas.addEventListener("pointermove", (e) => this.onMove(e));
    this.canvas.addEventListener("pointerup", (e) => this.onUp(e));
    this.canvas.addEventListener("pointerleave", () => {
      this.hoverBucket = null;
      this.tip.hidden = true;
    });
    this.canvas.addEventListener("keydown", (e) => this.onKey(e));
    this.canvas.addEventListener("focus", () => this.render());
    this.canvas.addEventListener("blur", () => this.render());
    new ResizeObserver(() => requestAnimationFrame(() => this.render())).observe(host);
  }

  setRange(from, to) {
    this.from = from;
    this.to = to;
  }

  /** What the bars stack, bottom first; drawn from the next render on. */
  setSeries(series) {
    this.series = series;
    this.fills = Object.fromEntries(series.map((s) => [s.key, fillOf(this.ctx, s)]));
  }

  setData(data) {
    this.data = data;
    this.host.dataset.buckets = data ? String(data.buckets.length) : "0";
    this.render();
  }

  setSelection(selection) {
    this.selection = selection;
    this.render();
  }

  setMarks(marks) {
    this.marks = marks || [];
    this.render();
  }

  get plotWidth() {
    return this.width - PAD.left - PAD.right;
  }

  xOf(t) {
    return PAD.left + ((t - this.from) / (this.to - this.from)) * this.plotWidth;
  }

  tOf(x) {
    const f = Math.min(1, Math.max(0, (x - PAD.left) / this.plotWidth));
    return this.from + f * (this.to - this.from);
  }

  render() {
    const width = Math.max(200, Math.round(this.host.clientWidth));
    this.width = width;
    fitCanvas(this.canvas, width, HEIGHT);
    const ctx = this.ctx;
    startPaint(ctx, width, HEIGHT);
    ctx.font = '11px "DejaVu Sans", system-ui, sans-serif';
    const bottom = HEIGHT - PAD.bottom;
    const plotH = bottom - PAD.top;
    const buckets = this.data ? this.data.buckets : [];
    const step = this.data ? this.data.step : 1;
    let max = 0;
    for (const b of buckets) max = Math.max(max, this.total(b));
    const yMax = niceCeil(max || 1);

    // grid and y labels
    ctx.strokeStyle = "#e3e6ea";
    ctx.fillStyle = "#5b6673";
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const f of [0, 0.5, 1]) {
      const y = Math.round(bottom - f * plotH) + 0.5;
      ctx.beginPath();
      ctx.moveTo(PAD.left, y);
      ctx.lineTo(width - PAD.right, y);
      ctx.stroke();
      if (max) ctx.fillText(count(f * yMax), PAD.left - 6, y);
    }

    // bars: the first series at the bottom (busy, then cpu_wait, blocked, gil, idle), clipped to
    // the plot (a bucket that began before the range would cover the y labels)
    ctx.save();
    ctx.beginPath();
    ctx.rect(PAD.left, PAD.top, this.plotWidth, plotH);
    ctx.clip();
    for (const b of buckets) {
      const x0 = this.xOf(b.t);
      const x1 = this.xOf(b.t + step);
      if (x1 < PAD.left || x0 > width - PAD.right) continue;
      const w = Math.max(1, x1 - x0 - (x1 - x0 > 4 ? 1 : 0));
      let y = bottom;
      for (const { key } of this.series) {
        const h = (b[key] / yMax) * plotH;
        if (h <= 0) continue;
        ctx.fillStyle = this.fills[key];
        ctx.fillRect(x0, y - h, w, h);
        y -= h;
      }
    }
    ctx.restore();

    // x axis ticks
    const seconds = this.to - this.from;
    const tick = TICKS.find((s) => (s / seconds) * this.plotWidth >= 90) || 86400;
    ctx.fillStyle = "#5b6673";
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const offset = new Date(this.from * 1000).getTimezoneOffset() * 60;
    const first = Math.ceil((this.from - offset) / tick) * tick + offset;
    for (let t = first; t <= this.to; t += tick) {
      const x = Math.round(this.xOf(t)) + 0.5;
      ctx.strokeStyle = "#c9ced6";
      ctx.beginPath();
      ctx.moveTo(x, bottom);
      ctx.lineTo(x, bottom + 4);
      ctx.stroke();
      const label = clock(t, tick < 60);
      const half = ctx.measureText(label).width / 2;
      if (x - half >= 0 && x + half <= width) ctx.fillText(label, x, bottom + 6);
    }

    if (!buckets.length && this.data) {
      ctx.fillStyle = "#5b6673";
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.font = '13px "DejaVu Sans", system-ui, sans-serif';
      ctx.fillText(`No ${this.unit} in this range`, PAD.left + this.plotWidth / 2, PAD.top + plotH / 2);
    }

    // compare bands
    for (const mark of this.marks) {
      const x0 = Math.max(PAD.left, this.xOf(mark.from));
      const x1 = Math.min(width - PAD.right, this.xOf(mark.to));
      if (x1 <= x0) continue;
      ctx.fillStyle = mark.fill;
      ctx.fillRect(x0, PAD.top, x1 - x0, plotH);
      ctx.strokeStyle = mark.stroke;
      ctx.lineWidth = 2;
      ctx.strokeRect(x0 + 1, PAD.top + 1, x1 - x0 - 2, plotH - 2);
      ctx.fillStyle = mark.stroke;
      ctx.font = 'bold 12px "DejaVu Sans", system-ui, sans-serif';
      ctx.textAlign = "left";
      ctx.textBaseline = "top";
      ctx.fillText(mark.label, x0 + 5, PAD.top + 4);
      ctx.font = '11px "DejaVu Sans", system-ui, sans-serif';
    }

    // selection (or the range being dragged): dim what is outside
    const sel = this.drag ? this.dragRange() : this.selection;
    if (sel) {
      const x0 = Math.max(PAD.left, this.xOf(sel[0]));
      const x1 = Math.min(width - PAD.right, this.xOf(sel[1]));
      ctx.fillStyle = "rgba(246, 247, 249, 0.72)";
      ctx.fillRect(PAD.left, PAD.top, Math.max(0, x0 - PAD.left), plotH);
      ctx.fillRect(x1, PAD.top, Math.max(0, width - PAD.right - x1), plotH);
      ctx.strokeStyle = "#1746c6";
      ctx.lineWidth = 2;
      for (const x of [x0, x1]) {
        ctx.beginPath();
        ctx.moveTo(x, PAD.top);
        ctx.lineTo(x, bottom);
        ctx.stroke();
      }
      ctx.fillStyle = "rgba(23, 70, 198, 0.08)";
      ctx.fillRect(x0, PAD.top, x1 - x0, plotH);
    }
    if (document.activeElement === this.canvas) {
      ctx.strokeStyle = "#1746c6";
      ctx.lineWidth = 2;
      ctx.strokeRect(1, 1, width - 2, HEIGHT - 2);
    }
    this.describe(buckets, sel);
  }

  /** The tooltip's line of a bucket's height, when the chart names it (`totalLabel`). */
  totalRow(bucket) {
    if (!this.totalLabel) return "";
    return `<div data-total>${esc(this.totalLabel)} ${this.value(this.total(bucket))}</div>`;
  }

  /** A bucket's height: the sum of its series. */
  total(bucket) {
    return this.series.reduce((sum, { key }) => sum + bucket[key], 0);
  }

  describe(buckets, sel) {
    const sum = Object.fromEntries(this.series.map(({ key }) => [key, 0]));
    for (const b of buckets) for (const k in sum) sum[k] += b[k];
    const all = Object.values(sum).reduce((a, b) => a + b, 0);
    const shares = all
      ? this.series.map(({ key }) => `${key} ${pct(sum[key] / all)}`).join(", ")
      : `no ${this.unit}`;
    const selected = sel ? ` Selected ${span(sel[0], sel[1])}.` : "";
    this.canvas.setAttribute(
      "aria-label",
      `${this.label} ${span(this.from, this.to)}: ${shares}.${selected} ` +
        "Drag, or use the arrow keys, to select a range; Escape clears it.",
    );
  }

  dragRange() {
    const a = this.tOf(this.drag.x0);
    const b = this.tOf(this.drag.x1);
    return a < b ? [a, b] : [b, a];
  }

  localX(e) {
    return e.clientX - this.canvas.getBoundingClientRect().left;
  }

  onDown(e) {
    if (e.button !== 0) return;
    const x = this.localX(e);
    this.drag = { x0: x, x1: x };
    this.canvas.setPointerCapture(e.pointerId);
    this.tip.hidden = true;
  }

  onMove(e) {
    const x = this.localX(e);
    if (this.drag) {
      this.drag.x1 = x;
      this.render();
      return;
    }
    this.showBucket(x, e.clientY);
  }

  onUp(e) {
    if (!this.drag) return;
    this.drag.x1 = this.localX(e);
    const moved = Math.abs(this.drag.x1 - this.drag.x0) > 3;
    const range = this.dragRange();
    this.drag = null;
    if (moved) {
      this.selection = range;
      this.onSelect(range);
    } else if (this.selection) {
      this.selection = null;
      this.onSelect(null);
    }
    this.render();
  }

  onKey(e) {
    const width = this.to - this.from;
    const stepBy = width / 20;
    let sel = this.selection ? [...this.selection] : null;
    if (e.key === "Escape") {
      if (!sel) return;
      sel = null;
    } else if (e.key === "ArrowLeft" || e.key === "ArrowRight") {
      const dir = e.key === "ArrowLeft" ? -1 : 1;
      if (!sel) sel = [this.to - width / 5, this.to];
      else if (e.shiftKey) sel[1] = Math.max(sel[0] + stepBy / 2, sel[1] + dir * stepBy);
      else {
        const shift = Math.min(Math.max(dir * stepBy, this.from - sel[0]), this.to - sel[1]);
        sel = [sel[0] + shift, sel[1] + shift];
      }
    } else {
      return;
    }
    e.preventDefault();
    this.selection = sel;
    this.onSelect(sel);
    this.render();
  }

  showBucket(x, clientY) {
    if (!this.data || x < PAD.left || x > this.width - PAD.right) {
      this.tip.hidden = true;
      return;
    }
    const t = this.tOf(x);
    const step = this.data.step;
    const b = this.data.buckets.find((k) => k.t <= t && t < k.t + step);
    if (!b) {
      this.tip.hidden = true;
      return;
    }
    const all = this.total(b) || 1;
    const row = (state) =>
      `<div data-series="${state}"><span class="swatch ${state}"></span>${state} ${this.value(b[state])} <span class="muted">(${pct(b[state] / all)})</span></div>`;
    this.tip.innerHTML =
      `<div><strong>${esc(clock(b.t))}</strong> <span class="muted">· ${duration(step)}</span></div>` +
      this.totalRow(b) +
      this.series.map(({ key }) => row(key)).join("");
    this.tip.hidden = false;
    this.placeTip(x, Math.max(0, clientY - this.host.getBoundingClientRect().top - 20));
  }

  /** Puts the shown tooltip beside `x` (right of it when it fits), `top` down the host. */
  placeTip(x, top) {
    const tw = this.tip.offsetWidth;
    let left = x + 14;
    if (left + tw > this.host.clientWidth) left = Math.max(0, x - tw - 14);
    this.tip.style.left = `${left}px`;
    this.tip.style.top = `${top}px`;
  }
}

/**
 * The stalls of a timeline's range as a lane over its plot: one mark per stall, from its start
 * to its end on the chart's time axis (at least a few pixels wide, so a 100 ms stall shows in a
 * day), coloured by its state as the chart colours the loop's states (gc in the flamegraph's
 * colour of the collector). Hovering or focusing a mark tells what held the loop in the chart's
 * tooltip; a click (or Enter) picks the stall (`onPick`). The arrow keys move between marks.
 */
export class StallLane {
  constructor(timeline, { onPick = () => {} } = {}) {
    this.timeline = timeline;
    this.onPick = onPick;
    this.stalls = [];
    this.el = document.createElement("div");
    this.el.className = "stall-lane";
    const label = document.createElement("span");
    label.className = "lane-label";
    label.textContent = "stalls";
    label.setAttribute("aria-hidden", "true");
    this.track = document.createElement("div");
    this.track.className = "stall-track";
    this.track.setAttribute("role", "group");
    this.track.style.left = `${PAD.left}px`;
    this.track.style.right = `${PAD.right}px`;
    this.el.append(label, this.track);
    timeline.host.prepend(this.el);
    this.track.addEventListener("pointerover", (e) => this.show(this.markOf(e.target)));
    this.track.addEventListener("pointerout", (e) => {
      if (!this.markOf(e.relatedTarget)) this.timeline.tip.hidden = true;
    });
    this.track.addEventListener("focusin", (e) => this.show(this.markOf(e.target)));
    this.track.addEventListener("focusout", () => {
      this.timeline.tip.hidden = true;
    });
    this.track.addEventListener("click", (e) => {
      const mark = this.markOf(e.target);
      if (mark) this.onPick(this.stalls[Number(mark.dataset.i)]);
    });
    this.track.addEventListener("keydown", (e) => this.onKey(e));
  }

  /** The stalls (oldest first) of `[from, to)` to mark; `summary` says what the marks count. */
  setStalls(stalls, from, to, { sel = null, summary = "" } = {}) {
    const focused = this.markOf(document.activeElement);
    const refocus = focused && this.track.contains(focused) ? focused.dataset.start : null;
    this.stalls = stalls;
    this.timeline.tip.hidden = true;
    const span = to - from || 1;
    const marks = stalls.map((stall, i) => {
      const f0 = Math.max(0, (stall.start - from) / span);
      const f1 = Math.min(1, (stall.start + stall.duration_s - from) / span);
      const mark = document.createElement("button");
      mark.className = "stall-mark";
      mark.dataset.i = String(i);
      mark.dataset.state = stall.state;
      mark.dataset.start = String(stall.start);
      mark.dataset.duration = String(stall.duration_s);
      mark.tabIndex = i === 0 ? 0 : -1;
      mark.style.left = `${(f0 * 100).toFixed(4)}%`;
      mark.style.width = `${(Math.max(0, f1 - f0) * 100).toFixed(4)}%`;
      mark.setAttribute("aria-label", stallLabel(stall));
      mark.setAttribute("aria-current", String(isPicked(stall, sel)));
      return mark;
    });
    this.track.replaceChildren(...marks);
    // a refresh keeps the keyboard on the stall it was on
    const again = refocus === null ? null : marks.find((mark) => mark.dataset.start === refocus);
    if (again) {
      marks[0].tabIndex = -1;
      again.tabIndex = 0;
      again.focus();
    }
    this.el.dataset.count = String(marks.length);
    this.track.setAttribute("aria-label", `Stalls of the event loop: ${summary || "none"}`);
  }

  /** Marks the picked stall: the one whose range the selection is. */
  setSelection(sel) {
    for (const mark of this.track.children) {
      mark.setAttribute("aria-current", String(isPicked(this.stalls[Number(mark.dataset.i)], sel)));
    }
  }

  markOf(node) {
    return node && node.closest ? node.closest(".stall-mark") : null;
  }

  /** The tooltip of a mark's stall, under the lane, at the mark. */
  show(mark) {
    if (!mark) return;
    const { tip, host } = this.timeline;
    tip.innerHTML = stallTip(this.stalls[Number(mark.dataset.i)]);
    tip.dataset.stall = mark.dataset.i;
    tip.hidden = false;
    const box = mark.getBoundingClientRect();
    const x = box.left + box.width / 2 - host.getBoundingClientRect().left;
    this.timeline.placeTip(x, this.el.offsetTop + this.el.offsetHeight + 4);
  }

  onKey(e) {
    const marks = [...this.track.children];
    const i = marks.indexOf(document.activeElement);
    if (i < 0) return;
    const last = marks.length - 1;
    const j = { ArrowLeft: i - 1, ArrowRight: i + 1, Home: 0, End: last }[e.key];
    if (j === undefined) return;
    e.preventDefault();
    const next = marks[Math.min(last, Math.max(0, j))];
    marks[i].tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  }
}
