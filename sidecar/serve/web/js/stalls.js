// Stalls of the event loop (GET /api/stalls): each callback that kept a loop from its poll for at
// least serve's --stall-ms. How one reads (its length, when it began, what held the loop), for
// the timeline's stall lane and its tooltip, and the table of the range's longest.

import { breakable, clock, count, esc, stamp } from "./format.js";
import { frameInfo } from "./stacks.js";
import { wholeSeconds } from "./state.js";

/** What each state of a stall says the loop did meanwhile. */
const STATE_WORDS = {
  busy: "on a CPU",
  blocked: "off CPU outside its poll",
  gil: "waiting for the GIL",
  cpu_wait: "runnable, waiting for a CPU",
  gc: "collecting garbage",
};

/** A stall's length, "0.30 s"; "+" after it when it still ran as sampling ended (so far). */
export function stallLength(stall) {
  const s = stall.duration_s;
  return `${s < 10 ? s.toFixed(2) : s.toFixed(1)} s${stall.ongoing ? "+" : ""}`;
}

/** When a stall began, to the millisecond. */
export function stallWhen(t) {
  return `${clock(t)}.${String(Math.floor(t * 1000) % 1000).padStart(3, "0")}`;
}

/** Whether the selection is this stall's range, as picking it selects it (whole seconds). */
export function isPicked(stall, sel) {
  if (!sel) return false;
  const [from, to] = wholeSeconds([stall.start, stall.start + stall.duration_s]);
  return sel[0] === from && sel[1] === to;
}

/** "function (file:line)" as a name over its place, or words for a stall without a frame. */
function frameCell(text) {
  if (!text) return `<span class="muted">no Python frame</span>`;
  const info = frameInfo(text);
  const place = info.file ? `${info.file}:${info.line}` : "";
  return `<span class="fn">${breakable(info.name)}</span><div class="file">${breakable(place)}</div>`;
}

function stateLabel(state) {
  return `<span class="swatch ${esc(state)}"></span>${esc(state)}`;
}

/** The seconds of each state a stall's samples were in, the nonzero ones ("gc" within them). */
function breakdown(stall) {
  return Object.entries(stall.states || {})
    .filter(([, seconds]) => seconds > 0)
    .map(([state, seconds]) => `${state} ${seconds.toFixed(2)} s`)
    .join(" · ");
}

/** A stall in plain words, for screen readers: length, state, what held the loop, when. */
export function stallLabel(stall) {
  const held = stall.holder ? `, the GIL held by thread ${stall.holder}` : "";
  return (
    `Stall of ${stallLength(stall)}, ${stall.state}, at ${stall.site || "no Python frame"}${held}, ` +
    `from ${stallWhen(stall.start)} in ${stall.thread}, PID ${stall.pid}`
  );
}

/** The asyncio task a task scan found running in a stall, in words ("" when none did). */
function taskWords(stall) {
  if (!stall.task) return "";
  return `task ${stall.task.name}${stall.task.request ? " (a request)" : ""}`;
}

/** The states with as many samples as the stall's own, in words ("" when none tie). */
function tiedWords(stall) {
  const tied = stall.tied || [];
  return tied.length ? `${tied.join(" and ")} as many samples` : "";
}

/** What the cgroup's CPU limit throttled around a stall, in words ("" without a reading). */
export function throttleWords(stall) {
  const t = stall.throttling;
  if (!t) return "";
  if (!t.throttled_periods) return `the cgroup was not throttled in ${count(t.periods)} periods around it`;
  return (
    `the cgroup throttled ${count(t.throttled_periods)} of ${count(t.periods)} periods, ` +
    `${t.seconds_lost.toFixed(2)} s lost, over ${t.span_s.toFixed(1)} s around it`
  );
}

/** The tooltip of one stall: what held the loop, in what callback, task and thread, and when. */
export function stallTip(stall) {
  const holder = stall.holder
    ? `<div data-holder>the GIL held by thread <strong>${esc(stall.holder)}</strong></div>`
    : "";
  const ongoing = stall.ongoing ? ` <span class="muted">(still running when sampling ended)</span>` : "";
  return (
    `<div><strong>${stallLength(stall)}</strong> stall · ${stateLabel(stall.state)} ` +
    `<span class="muted">${esc(STATE_WORDS[stall.state] || "")}</span></div>` +
    `<div data-site>at <strong>${esc(stall.site || "no Python frame")}</strong></div>` +
    (stall.tied && stall.tied.length ? `<div data-tied class="muted">${esc(tiedWords(stall))}</div>` : "") +
    holder +
    (stall.throttling ? `<div data-throttling>${esc(throttleWords(stall))}</div>` : "") +
    `<div data-callback><span class="muted">in</span> ${esc(stall.callback)}</div>` +
    (stall.task ? `<div data-task>${esc(taskWords(stall))}</div>` : "") +
    `<div>${esc(stall.thread)} · PID ${stall.pid} · from ${stallWhen(stall.start)}${ongoing}</div>` +
    `<div class="muted">${esc(breakdown(stall))} · click to select its range</div>`
  );
}

/** How many stalls of at least `ms`, in words. */
function stallsOf(n, ms) {
  return `${count(n)} stall${n === 1 ? "" : "s"} ≥ ${count(ms)} ms`;
}

/** What the timeline's lane marks, in words: all the range's stalls, or the oldest of them. */
export function laneSummary(doc) {
  if (!doc || doc.error) return "";
  const listed = doc.stalls.length;
  const what = listed < doc.total
    ? `${count(listed)} of ${stallsOf(doc.total, doc.stall_ms)} marked (the oldest)`
    : `${stallsOf(listed, doc.stall_ms)} marked`;
  return doc.dropped ? `${what} · ${count(doc.dropped)} more past the sampler's bound, not kept` : what;
}

/** What the table of the longest counts: the longest of all the range's stalls. */
function tableSummary(doc) {
  const n = doc.longest.length;
  const dropped = doc.dropped ? ` (and ${count(doc.dropped)} past the sampler's bound, not kept)` : "";
  return (
    `the ${n === 1 ? "longest" : `${count(n)} longest`} of ${stallsOf(doc.total, doc.stall_ms)} ` +
    `in this range${dropped} · lengths within a sampling period at either end · select a row to show its range`
  );
}

/**
 * The range's longest stalls (`doc`: getStalls' answer, or {error}), longest first: length,
 * when, state, what held the loop (and the thread that held the GIL), callback and thread. A
 * row's click (or its button's Enter) picks the stall (`onPick`); the picked one is marked.
 */
export function renderStalls(table, summary, doc, { sel, onPick }) {
  if (!doc || doc.error) {
    summary.textContent = "";
    const text = doc ? `Could not load the stalls: ${doc.error}` : "";
    table.innerHTML = `<tbody><tr><td class="muted">${esc(text)}</td></tr></tbody>`;
    return;
  }
  if (!doc.longest.length) {
    summary.textContent = doc.dropped
      ? `${count(doc.dropped)} past the sampler's bound, counted but not kept`
      : "";
    table.innerHTML = `<tbody><tr><td class="muted" data-empty>No stall of ≥ ${count(doc.stall_ms)} ms in this range.</td></tr></tbody>`;
    return;
  }
  summary.textContent = tableSummary(doc);
  const longest = doc.longest[0].duration_s || 1;
  const head = ["Length", "When", "State", "What held the loop", "Callback", "Thread"];
  const body = doc.longest
    .map((s, i) => {
      const width = Math.round((s.duration_s / longest) * 60);
      const holder = s.holder ? `<div class="holder">the GIL held by <code>${esc(s.holder)}</code></div>` : "";
      const tied = s.tied && s.tied.length ? `<div class="muted" data-tied>${esc(tiedWords(s))}</div>` : "";
      const throttled = s.throttling && (s.throttling.throttled_periods || s.state === "cpu_wait")
        ? `<div class="muted" data-throttling>${esc(throttleWords(s))}</div>`
        : "";
      return `<tr data-i="${i}" data-start="${s.start}" data-duration="${s.duration_s}" data-state="${esc(s.state)}"
          data-site="${esc(s.site)}" aria-selected="${isPicked(s, sel)}">
        <td class="num"><button class="fn stall-pick" title="Select its range: the flamegraph shows it">${stallLength(s)}</button><span class="bar stall ${esc(s.state)}" style="width:${width}px"></span></td>
        <td class="num" title="${esc(stamp(s.start))}">${stallWhen(s.start)}</td>
        <td>${stateLabel(s.state)}${tied}</td>
        <td>${frameCell(s.site)}${holder}${throttled}</td>
        <td>${frameCell(s.callback)}${s.task ? `<div class="muted" data-task>${esc(taskWords(s))}</div>` : ""}</td>
        <td><code>${esc(s.thread)}</code> <span class="muted">PID ${s.pid}</span></td>
      </tr>`;
    })
    .join("");
  table.innerHTML = `<thead><tr>${head
    .map((h, i) => `<th scope="col" class="${i < 2 ? "num" : ""}">${h}</th>`)
    .join("")}</tr></thead><tbody>${body}</tbody>`;
  for (const row of table.querySelectorAll("tbody tr")) {
    row.addEventListener("click", () => onPick(doc.longest[Number(row.dataset.i)]));
  }
}

/** Marks the rows of the picked stall (the selection is its range) after a new selection. */
export function markStallRows(table, doc, sel) {
  if (!doc || !doc.longest) return;
  for (const row of table.querySelectorAll("tbody tr[data-i]")) {
    row.setAttribute("aria-selected", String(isPicked(doc.longest[Number(row.dataset.i)], sel)));
  }
}
