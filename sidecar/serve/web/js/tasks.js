// The Tasks view: asyncio tasks in flight over time by state (running, ready, waiting) and,
// when some were past a scan's bound and not read, those on top (under All only: they are of
// no kind); the flamegraph of their await chains, requests apart from background tasks, and
// where requests wait. Everything comes from the API (kind=tasks); a target whose tasks were
// never scanned is told so in words, not shown as an empty chart.

import { ApiError, getJson, getText, isAbort, Slot } from "./api.js";
import { FlameGraph, TASK_COLOURS } from "./flame.js";
import { count, duration, esc, num, pct, span } from "./format.js";
import { buildTree, parseFolded } from "./stacks.js";
import { Timeline } from "./timeline.js";

const SERIES = [
  { key: "running", colour: TASK_COLOURS.running },
  { key: "ready", colour: TASK_COLOURS.ready, striped: true },
  { key: "waiting", colour: TASK_COLOURS.waiting },
];
/** Tasks in flight past a scan's bound, not read: of no state, hatched grey on top. */
const UNREAD = { key: "unread", colour: "#8a8f96", hatched: true };
const KINDS = { all: "tasks", requests: "requests' tasks", background: "background tasks" };

export class TasksView {
  /** `els`: the view's elements by role; `onSelect` gets a range dragged on its chart. */
  constructor(els, { onSelect = () => {}, showDetails = () => {} } = {}) {
    this.els = els;
    this.slot = new Slot();
    this.timeline = new Timeline(els.timeline, {
      onSelect,
      series: SERIES,
      label: "Tasks in flight",
      unit: "task scans",
      value: (v) => num(v, 1),
      totalLabel: "in flight",
    });
    this.flame = new FlameGraph(els.flame, {
      label: "Await chains",
      onFocus: (node) => showDetails(els.details, this.flame, node),
    });
    this.showDetails = showDetails;
  }

  /** Loads and draws what `query` ({target, from, to, sel, tasks}) asks for. */
  async load(query) {
    const signal = this.slot.next();
    const { target, from, to, sel, tasks } = query;
    const [pFrom, pTo] = sel || [from, to];
    this.timeline.setRange(from, to);
    this.timeline.setSelection(sel);
    this.els.root.dataset.loading = "1";
    let line;
    let folded;
    let stats;
    try {
      [line, folded, stats] = await Promise.all([
        getJson("timeline", { target, from, to, kind: "tasks", tasks }, signal),
        getText("profile", { target, from: pFrom, to: pTo, kind: "tasks", tasks }, signal).catch(
          (err) => (err instanceof ApiError && err.code === "no_samples" ? "" : Promise.reject(err)),
        ),
        getJson("stats", { target, from: pFrom, to: pTo }, signal),
      ]);
    } catch (err) {
      if (isAbort(err)) return;
      this.fail(err);
      return;
    }
    this.els.root.dataset.loading = "0";
    this.message("");
    this.drawTimeline(line, tasks);
    this.drawFlame(folded, tasks, pFrom, pTo);
    this.drawSites(stats);
  }

  /** The chart of `line`, with the unread band when some bucket has tasks past the bound. */
  drawTimeline(line, tasks) {
    const unread = line.buckets.some((b) => b.unread > 0);
    const shown = unread && tasks === "all";
    this.timeline.setSeries(shown ? [...SERIES, UNREAD] : SERIES);
    this.timeline.setData(line);
    this.els.unread.hidden = !shown;
    this.els.timeline.dataset.unread = shown ? "1" : "0";
    const scope = `mean ${KINDS[tasks]} in flight per ${duration(line.step)}`;
    this.els.scope.textContent =
      unread && !shown ? `${scope}, of the tasks read (those past a scan's bound are of no kind)` : scope;
  }

  drawFlame(folded, tasks, from, to) {
    const rows = parseFolded(folded);
    if (!rows.length) {
      this.flame.clear();
      this.els.flame.dataset.samples = "0";
      this.els.summary.textContent = `no ${KINDS[tasks]} in ${span(from, to)}`;
      return;
    }
    const tree = buildTree(rows);
    this.flame.setTree(tree, "profile");
    this.els.summary.textContent =
      `${count(tree.total)} task-samples · ${count(rows.length)} await chains · ${span(from, to)}`;
    this.showDetails(this.els.details, this.flame, null);
  }

  /** The top await sites of requests' tasks, summed over the targets of the stats. */
  drawSites(stats) {
    const sites = new Map();
    let requests = 0;
    let ready = 0;
    for (const target of stats.targets) {
      const block = target.tasks;
      if (!block) continue;
      requests += block.requests.task_samples;
      ready += block.requests.ready_share * block.requests.task_samples;
      for (const s of block.await_sites) {
        const key = `${s.site}\n${s.awaits}`;
        const seen = sites.get(key) || { site: s.site, awaits: s.awaits, n: 0 };
        seen.n += s.task_samples;
        sites.set(key, seen);
      }
    }
    const rows = [...sites.values()].sort((a, b) => b.n - a.n).slice(0, 10);
    const table = this.els.sites;
    this.els.sitesSummary.textContent = requests
      ? `${count(requests)} task-samples of requests · ready (queued behind other work) ${pct(ready / requests)} of their time`
      : "";
    if (!rows.length) {
      table.innerHTML = `<tbody><tr><td class="muted">No request task in this selection (aiohttp's or Tornado's request handlers).</td></tr></tbody>`;
      return;
    }
    const body = rows
      .map(
        (r) => `<tr><td><code>${esc(r.site)}</code>${r.awaits !== r.site ? `<div class="file">awaits ${esc(r.awaits)}</div>` : ""}</td>
        <td class="num">${count(r.n)} <span class="muted">${pct(r.n / requests)}</span></td></tr>`,
      )
      .join("");
    table.innerHTML = `<thead><tr><th scope="col">Await site</th><th scope="col" class="num">Task-samples</th></tr></thead><tbody>${body}</tbody>`;
  }

  fail(err) {
    this.els.root.dataset.loading = "0";
    this.timeline.setData(null);
    this.els.unread.hidden = true;
    this.flame.clear();
    this.els.flame.dataset.samples = "0";
    this.els.summary.textContent = "";
    this.els.sitesSummary.textContent = "";
    this.els.sites.innerHTML = "";
    const unscanned = err instanceof ApiError && err.code === "no_task_scans";
    this.message(unscanned ? err.message : `Could not load the tasks: ${err.message}`, !unscanned);
  }

  message(text, isError = false) {
    const el = this.els.message;
    el.hidden = !text;
    el.textContent = text || "";
    el.classList.toggle("error", isError);
    this.els.root.dataset.unscanned = text && !isError ? "1" : "0";
  }
}
