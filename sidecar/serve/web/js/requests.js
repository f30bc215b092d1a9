// Slow requests (GET /api/requests): each request a task scan saw in flight for serve's
// --slow-ms or longer. The table of the range's longest, a request's split (its task-samples by
// state and await site) with the stalls it sat through, and the requests a stall delayed.
//
// Methods, paths, routes, trace ids and await sites are the target's data, untrusted: every one
// is set as textContent, never as markup.

import { breakable, count, pct, stamp } from "./format.js";
import { frameInfo } from "./stacks.js";
import { stallLength, stallWhen } from "./stalls.js";

/** The task states of a request's split, in the order they are shown. */
export const SHARES = ["running", "ready", "waiting"];

/** An element with attributes and children (strings become text nodes, never markup). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child !== null && child !== undefined && child !== "") node.append(child);
  }
  return node;
}

function seconds(ms) {
  const s = ms / 1000;
  return s < 10 ? s.toFixed(2) : s.toFixed(1);
}

/** A request's duration with its bounds: "≥0.61 s (≤0.82 s)"; "+" when still in flight. */
export function requestLength(r) {
  if (r.ongoing) return `≥${seconds(r.duration_ms)} s+`;
  return `≥${seconds(r.duration_ms)} s (≤${seconds(r.duration_max_ms)} s)`;
}

/** The interval a request may have been in flight: its start to start + its longest bound. */
export function requestSpan(r) {
  return [r.start, r.start + r.duration_max_ms / 1000];
}

/** What tells one request from another across answers. */
export function requestKey(r) {
  return `${r.target}:${r.pid}:${r.start}:${r.task}`;
}

/** "GET /items/a" */
function requestLine(r) {
  return `${r.method || "?"} ${r.path || ""}`.trim();
}

/** The threshold in words: "500 ms or longer". */
function threshold(doc) {
  return `${count(doc.slow_ms)} ms or longer`;
}

function topSite(r) {
  return r.await_sites && r.await_sites.length ? r.await_sites[0] : null;
}

/** "function (file:line)" as its name over its place, as text. */
/** An element of `text` that may break after its dots and slashes (format.js's breakable). */
function breaking(tag, attrs, text) {
  const node = el(tag, attrs);
  node.innerHTML = breakable(text);
  return node;
}

function frameCell(text) {
  const info = frameInfo(text);
  const place = info.file ? `${info.file}:${info.line}` : "";
  return el("span", {}, breaking("span", { class: "fn" }, info.name), place ? breaking("div", { class: "file" }, place) : null);
}

/** One table of requests (longest first), each row a button-like row picking it. */
function requestRows(table, requests, { picked, onPick }) {
  const head = el("tr");
  for (const [i, h] of ["Duration", "Start", "Request", "Route", "Trace", "Top await site"].entries()) {
    head.append(el("th", { scope: "col", class: i < 2 ? "num" : "" }, h));
  }
  const body = el("tbody");
  requests.forEach((r, i) => {
    const site = topSite(r);
    const row = el(
      "tr",
      {
        "data-i": i,
        "data-start": r.start,
        "data-duration-ms": r.duration_ms,
        "data-route": r.route || "",
        "data-trace": r.trace || "",
        "aria-selected": String(picked === requestKey(r)),
      },
      el("td", { class: "num" }, el("button", { class: "fn request-pick", title: "Show where its time went and the stalls it sat through" }, requestLength(r))),
      el(
        "td",
        { class: "num", title: `${stamp(r.start)} (${r.start_from === "framework" ? "the framework's start" : "first seen by a scan"})` },
        `${r.start_from === "framework" ? "" : "~"}${stallWhen(r.start)}`,
      ),
      el("td", { "data-request": "" }, breaking("code", {}, requestLine(r))),
      el("td", { "data-route": "" }, r.route ? breaking("code", {}, r.route) : el("span", { class: "muted" }, "no route")),
      el("td", { "data-trace": "" }, r.trace ? el("code", { class: "trace", title: r.trace }, r.trace) : el("span", { class: "muted" }, "none")),
      el(
        "td",
        { "data-site": site ? site.site : "" },
        site ? frameCell(site.site) : el("span", { class: "muted" }, "none"),
        site ? el("div", { class: "muted" }, `${pct(site.share, 0)} of its task-samples`) : null,
      ),
    );
    row.addEventListener("click", () => onPick(requests[i]));
    body.append(row);
  });
  table.replaceChildren(el("thead", {}, head), body);
}

/** A table of one row of muted words (an empty state, or an error). */
function emptyTable(table, text, attrs = { "data-empty": "" }) {
  table.replaceChildren(el("tbody", {}, el("tr", {}, el("td", { class: "muted", ...attrs }, text))));
}

/**
 * The range's slow requests (`doc`: getRequests' answer, or {error}), longest first. A row's
 * click picks the request (`onPick`); the picked one (`picked`, its requestKey) is marked.
 */
export function renderRequests(table, summary, doc, { picked, onPick }) {
  if (!doc || doc.error) {
    summary.textContent = "";
    emptyTable(table, doc ? `Could not load the slow requests: ${doc.error}` : "", {});
    return;
  }
  const dropped = doc.dropped ? ` (and ${count(doc.dropped)} past the sampler's bound, not kept)` : "";
  if (!doc.requests.length) {
    summary.textContent = dropped.trim();
    emptyTable(table, `No request in flight ${threshold(doc)} in this range.`);
    return;
  }
  const n = doc.requests.length;
  summary.textContent =
    `the ${n === 1 ? "longest" : `${count(n)} longest`} of ${count(doc.total)} request${doc.total === 1 ? "" : "s"} ` +
    `in flight ${threshold(doc)} in this range${dropped} · durations within a task scan's period ` +
    `(~: start first seen by a scan) · select a row for where its time went`;
  requestRows(table, doc.requests, { picked, onPick });
}

/** Marks the row of the picked request after a pick. */
export function markRequestRows(table, requests, picked) {
  for (const row of table.querySelectorAll("tbody tr[data-i]")) {
    const r = requests[Number(row.dataset.i)];
    row.setAttribute("aria-selected", String(Boolean(r) && requestKey(r) === picked));
  }
}

/** The split of a request's task-samples by state: a bar and its figures. */
function splitBar(r) {
  const shares = r.shares || {};
  const bar = el("div", { class: "split-bar", role: "img", "aria-label": SHARES.map((s) => `${s} ${pct(shares[s] || 0, 0)}`).join(", ") });
  const figures = el("ul", { class: "legend split-figures", "data-split": "" });
  for (const state of SHARES) {
    const share = shares[state] || 0;
    if (share > 0) bar.append(el("span", { class: `swatch ${state}`, style: `width:${(share * 100).toFixed(2)}%` }));
    figures.append(el("li", { "data-state": state, "data-share": share }, el("span", { class: `swatch ${state}` }), `${state} ${pct(share)}`));
  }
  return [bar, figures];
}

function awaitSites(r) {
  const sites = r.await_sites || [];
  if (!sites.length) return el("p", { class: "muted", "data-sites": "" }, "No await site: none of its samples waited.");
  const table = el("table", { class: "grid", "data-sites": "" });
  const body = el("tbody");
  for (const s of sites) {
    body.append(
      el(
        "tr",
        { "data-site": s.site },
        el("td", {}, frameCell(s.site)),
        el("td", {}, s.awaits && s.awaits !== s.site ? frameCell(s.awaits) : el("span", { class: "muted" }, "–")),
        el("td", { class: "num" }, pct(s.share)),
      ),
    );
  }
  table.append(
    el(
      "thead",
      {},
      el(
        "tr",
        {},
        el("th", { scope: "col" }, "Await site"),
        el("th", { scope: "col" }, "Awaiting"),
        el("th", { scope: "col", class: "num", title: "of its task-samples" }, "Share"),
      ),
    ),
    body,
  );
  return table;
}

/** The stalls a request sat through, each a button picking the stall (`onPickStall`). */
function stallList(stalls, onPickStall) {
  if (stalls.error) return el("p", { class: "muted", "data-stalls": "" }, `Could not load the stalls: ${stalls.error}`);
  if (!stalls.stalls.length) {
    return el("p", { class: "muted", "data-stalls": "", "data-empty": "" }, `No stall of ≥ ${count(stalls.stall_ms)} ms while it was in flight.`);
  }
  const list = el("ul", { class: "overlaps", "data-stalls": "" });
  for (const s of stalls.stalls) {
    const button = el("button", { class: "link", title: "Select the stall's range and show the requests it delayed" }, `${stallLength(s)} ${s.state}`);
    button.addEventListener("click", () => onPickStall(s));
    list.append(
      el(
        "li",
        { "data-start": s.start, "data-duration": s.duration_s, "data-state": s.state },
        button,
        " at ",
        el("span", { class: "fn" }, s.site || "no Python frame"),
        el("span", { class: "muted" }, ` · from ${stallWhen(s.start)}`),
      ),
    );
  }
  return list;
}

/**
 * A picked request (`r`) in `host`: what it was, its split by state, its await sites, and the
 * stalls of its target that overlap it (`stalls`: /api/stalls' answer over requestSpan, or
 * {error}; null while loading).
 */
export function renderRequestDetail(host, r, stalls, { onPickStall }) {
  if (!r) {
    host.hidden = true;
    host.replaceChildren();
    return;
  }
  host.hidden = false;
  const [bar, figures] = splitBar(r);
  const title = el("div", { class: "request-title", "data-title": "" }, `${requestLine(r)} · ${requestLength(r)}`);
  const meta = el(
    "div",
    { class: "muted" },
    r.route ? `route ${r.route}` : "no route",
    r.handler ? ` · handler ${r.handler}` : "",
    r.trace ? ` · trace ${r.trace}` : "",
    r.trace_header ? ` (${r.trace_header})` : "",
    ` · task ${r.task} · PID ${r.pid} · ${count(r.task_samples)} task-samples over ${count(r.scans)} scans`,
  );
  host.replaceChildren(
    title,
    meta,
    el("h3", {}, "Where its time went"),
    bar,
    figures,
    awaitSites(r),
    el("h3", {}, "Stalls it sat through"),
    stalls ? stallList(stalls, onPickStall) : el("p", { class: "muted", "data-stalls": "" }, "Loading…"),
  );
}

/**
 * The slow requests a picked stall delayed (`doc`: /api/requests over the stall, or {error};
 * null while loading), in `host`, under the table of stalls. A row picks the request.
 */
export function renderDelayed(host, stall, doc, { picked, onPick }) {
  if (!stall) {
    host.hidden = true;
    host.replaceChildren();
    return;
  }
  host.hidden = false;
  const title = el("h3", {}, `Slow requests in flight during the ${stallLength(stall)} stall from ${stallWhen(stall.start)}`);
  if (!doc) {
    host.replaceChildren(title, el("p", { class: "muted" }, "Loading…"));
    return;
  }
  if (doc.error) {
    host.replaceChildren(title, el("p", { class: "muted" }, `Could not load the slow requests: ${doc.error}`));
    return;
  }
  if (!doc.requests.length) {
    host.replaceChildren(title, el("p", { class: "muted", "data-empty": "" }, `No request in flight ${threshold(doc)} during this stall.`));
    return;
  }
  const table = el("table", { class: "grid requests", "data-delayed": "" });
  requestRows(table, doc.requests, { picked, onPick });
  host.replaceChildren(title, el("div", { class: "table-wrap" }, table));
}
