// The controller: reads the state from the URL, loads what the current view needs from the API,
// wires the controls, and follows the present in live mode.

import {
  adoptToken,
  ApiError,
  download,
  getJson,
  getProfile,
  getRequests,
  getStalls,
  getText,
  isAbort,
  setToken,
  Slot,
} from "./api.js";
import { renderChanges, renderStateChanges } from "./compare.js";
import { FlameGraph } from "./flame.js";
import * as fmt from "./format.js";
import { renderFrameworks, renderGilHolders, renderStatsTargets } from "./frameworks.js";
import { renderFunctions } from "./functions.js";
import { DEFAULTS, fromUrl, STATE_FILTERS, toUrl, VIEWS, wholeSeconds } from "./state.js";
import {
  blockingSites,
  buildTree,
  matchedShare,
  matcher,
  parseFolded,
  rulesSet,
  sandwich,
  setRules,
} from "./stacks.js";
import {
  markRequestRows,
  renderDelayed,
  renderRequestDetail,
  renderRequests,
  requestKey,
  requestSpan,
} from "./requests.js";
import { laneSummary, markStallRows, renderStalls } from "./stalls.js";
import { renderTargets, shortCommand } from "./targets.js";
import { TasksView } from "./tasks.js";
import { countName, renderThreadOptions, timelineCountName } from "./threads.js";
import { StallLane, Timeline } from "./timeline.js";

const $ = (selector) => document.querySelector(selector);
const $$ = (selector) => [...document.querySelectorAll(selector)];
const REFRESH_MS = 5000;
/** The shortest span a live timeline fitted to a short history shows, in seconds. */
const MIN_FIT = 30;
const now = () => Date.now() / 1000;

adoptToken();
let state = fromUrl(location.search, now());
let targets = [];
let timelineData = null;
let stallsDoc = null; // getStalls' answer for the timeline's range, or {error}
let requestsDoc = null; // getRequests' answer for the timeline's range, or {error}
let pickedRequest = null; // the slow request whose split is shown (its requestKey in `picked`)
let profile = null; // {rows, tree, functions} of the flamegraph view: functions from the API
let needsToken = false;

const slots = {
  targets: new Slot(),
  timeline: new Slot(),
  stalls: new Slot(),
  requests: new Slot(),
  requestStalls: new Slot(),
  delayed: new Slot(),
  flame: new Slot(),
  frameworks: new Slot(),
  compare: new Slot(),
};

// -- ranges ----------------------------------------------------------------------------------

/** The range picked: the last `range` seconds in live mode, else the fixed one. */
function pickedRange() {
  if (state.live) {
    const to = Math.ceil(now());
    return [to - state.range, to];
  }
  return [state.from, state.to];
}

/** When the shown targets were first seen, or null before the targets are known. */
function firstSeen() {
  const shown = state.target === null ? targets : targets.filter((t) => t.id === state.target);
  const seen = shown.map((t) => t.first_seen).filter(Number.isFinite);
  return seen.length ? Math.floor(Math.min(...seen)) : null;
}

/**
 * The range the views show: the picked one, except that in live mode a history shorter than
 * the range is shown whole rather than squeezed into the right end (at least MIN_FIT seconds).
 */
function windowRange() {
  const [from, to] = pickedRange();
  const first = state.live ? firstSeen() : null;
  if (first === null || first <= from) return [from, to];
  return [Math.min(first, to - MIN_FIT), to];
}

function profileRange() {
  return state.sel || windowRange();
}

/** Where the timeline has data, or the window: the default compare ranges are its halves. */
function dataExtent() {
  const buckets = timelineData ? timelineData.buckets : [];
  if (buckets.length >= 2) {
    return [buckets[0].t, buckets[buckets.length - 1].t + timelineData.step];
  }
  return windowRange();
}

function compareRanges() {
  const [from, to] = dataExtent();
  const mid = Math.round((from + to) / 2);
  return [state.a || [from, mid], state.b || [mid, to]];
}

function targetById(id) {
  return targets.find((t) => t.id === id) || null;
}

function targetName(id) {
  if (id === null) return "all targets";
  const t = targetById(id);
  return t ? `${t.framework} PID ${t.pid}` : `target ${id}`;
}

// -- URL -------------------------------------------------------------------------------------

function saveUrl(push = false) {
  const url = `${location.pathname}${toUrl(state)}`;
  if (url === `${location.pathname}${location.search}`) return;
  if (push) history.pushState(null, "", url);
  else history.replaceState(null, "", url);
}

window.addEventListener("popstate", () => {
  state = fromUrl(location.search, now());
  syncControls();
  loadAll();
});

// -- widgets ---------------------------------------------------------------------------------

const timeline = new Timeline($("#timeline"), { onSelect: onTimelineSelect });
const stallLane = new StallLane(timeline, { onPick: pickStall });
const flame = new FlameGraph($("#flame"), {
  label: "Flamegraph",
  onZoom: (path) => {
    state.zoom = path;
    saveUrl();
    renderCrumbs();
    updateSearchStatus();
    $("#reset-zoom").disabled = !path.length;
  },
  onFocus: (node) => showDetails($("#flame-details"), flame, node),
});
const tasksView = new TasksView(
  {
    root: $("#view-tasks"),
    timeline: $("#tasks-timeline"),
    unread: $("#tasks-unread"),
    scope: $("#tasks-scope"),
    message: $("#tasks-message"),
    flame: $("#tasks-flame"),
    details: $("#tasks-details"),
    summary: $("#tasks-summary"),
    sites: $("#await-sites"),
    sitesSummary: $("#sites-summary"),
  },
  { onSelect: onTimelineSelect, showDetails },
);
const callers = new FlameGraph($("#callers"), { label: "Callers" });
const callees = new FlameGraph($("#callees"), { label: "Callees" });
callers.icicle = false;
callees.icicle = true;

/** The picked function's callers and callees, under the table. */
function renderSandwich() {
  const box = $("#sandwich");
  if (!state.fn || !profile) {
    box.hidden = true;
    return;
  }
  const { callers: up, callees: down } = sandwich(profile.rows, state.fn);
  if (!up.total) {
    box.hidden = true;
    return;
  }
  box.hidden = false;
  $("#sandwich-name").textContent = state.fn;
  $("#sandwich-summary").textContent =
    `${fmt.count(up.total)} samples · ${fmt.pct(up.total / (profile.tree.total || 1))} of the profile`;
  const short = state.fn.replace(/ \([^()]*\)$/, "");
  callers.rootLabel = short;
  callees.rootLabel = short;
  callers.setTree(up, "profile");
  callees.setTree(down, "profile");
}

const diffFlame = new FlameGraph($("#diff-flame"), {
  label: "Differential flamegraph",
  onFocus: (node) => showDetails($("#diff-details"), diffFlame, node),
});

function showDetails(host, graph, node) {
  if (!node || !graph.tree) {
    host.innerHTML = `<span class="muted">Hover or focus a frame for details · click to zoom · arrow keys move · Enter zooms · Escape resets · / searches</span>`;
    return;
  }
  host.innerHTML = graph.describe(node).map((line) => `<span>${line}</span>`).join("");
}

// -- loading ---------------------------------------------------------------------------------

function showBanner(err) {
  const banner = $("#banner");
  if (err instanceof ApiError && err.status === 401) {
    if (needsToken) return;
    needsToken = true;
    banner.innerHTML = `<strong>This sidecar needs a token.</strong>
      <label>Token <input id="token-input" type="password" autocomplete="off"></label>
      <button id="token-save">Use token</button>
      <span class="muted">or open the UI with <code>?token=…</code> in its address</span>`;
    banner.hidden = false;
    $("#token-input").addEventListener("keydown", (e) => {
      if (e.key === "Enter") $("#token-save").click();
    });
    $("#token-input").focus();
    $("#token-save").addEventListener("click", () => {
      setToken($("#token-input").value.trim());
      needsToken = false;
      banner.hidden = true;
      loadAll();
    });
    return;
  }
  if (err instanceof ApiError && err.code === "unreachable") {
    banner.textContent = "The sidecar does not answer; retrying.";
    banner.hidden = false;
  }
}

function clearBanner() {
  if (!needsToken) $("#banner").hidden = true;
}

function message(el, text, isError = false) {
  el.hidden = !text;
  el.textContent = text || "";
  el.classList.toggle("error", isError);
}

async function loadTargets() {
  try {
    targets = await getJson("targets", {}, slots.targets.next());
    clearBanner();
  } catch (err) {
    if (!isAbort(err)) showBanner(err);
    return;
  }
  renderTargets($("#targets"), targets, state.target, pickTarget);
  const alive = targets.filter((t) => t.alive).length;
  $("#targets-count").textContent = `${alive} alive · ${targets.length} seen`;
  fillCompareTargets();
}

async function loadTimeline() {
  const [from, to] = windowRange();
  timeline.setRange(from, to);
  renderRangeLabels();
  const stalls = loadStalls(from, to);
  const requests = loadRequests(from, to);
  try {
    const query = { target: state.target, from, to, threads: state.threads };
    timelineData = await getJson("timeline", query, slots.timeline.next());
  } catch (err) {
    if (isAbort(err)) return;
    showBanner(err);
    timelineData = { from, to, step: 1, buckets: [], loop_threads_only: false };
  }
  const host = $("#timeline");
  host.dataset.from = String(from);
  host.dataset.to = String(to);
  timeline.setData(timelineData);
  $("#timeline-scope").textContent = timelineData.buckets.length
    ? `${timelineCountName(state.threads, timelineData.loop_threads_only)} per ${fmt.duration(timelineData.step)}`
    : "";
  if (state.view === "compare") updateCompareMarks();
  await stalls;
  await requests;
}

/** The stalls of the timeline's range: its lane's marks and the table of the longest. */
async function loadStalls(from, to) {
  const table = $("#stalls");
  table.dataset.loading = "1";
  try {
    stallsDoc = await getStalls({ target: state.target, from, to }, slots.stalls.next());
  } catch (err) {
    if (isAbort(err)) return;
    stallsDoc = { error: err.message, stalls: [] };
  }
  stallLane.setStalls(stallsDoc.stalls, from, to, { sel: state.sel, summary: laneSummary(stallsDoc) });
  $("#stall-count").textContent = laneSummary(stallsDoc);
  renderStalls(table, $("#stalls-summary"), stallsDoc, { sel: state.sel, onPick: pickStall });
  table.dataset.loading = "0";
}

/**
 * A stall picked on the lane, in the table or in a request's stalls: its range becomes the
 * selection, and the slow requests it delayed (those of its target in flight meanwhile) show
 * under the table of stalls.
 */
function pickStall(stall) {
  onTimelineSelect([stall.start, stall.start + stall.duration_s]);
  if (state.view !== "compare" || state.cmp !== "ranges") timeline.setSelection(state.sel);
  loadDelayed(stall);
}

/** The slow requests of the timeline's range, longest first. */
async function loadRequests(from, to) {
  const table = $("#requests");
  table.dataset.loading = "1";
  try {
    requestsDoc = await getRequests({ target: state.target, from, to }, slots.requests.next());
  } catch (err) {
    if (isAbort(err)) return;
    requestsDoc = { error: err.message, requests: [] };
  }
  renderRequests(table, $("#requests-summary"), requestsDoc, { picked: pickedKey(), onPick: pickRequest });
  table.dataset.loading = "0";
}

function pickedKey() {
  return pickedRequest ? requestKey(pickedRequest) : null;
}

/** A slow request picked: its split and the stalls of its target it sat through. */
async function pickRequest(request) {
  pickedRequest = request;
  markRequestRows($("#requests"), requestsDoc ? requestsDoc.requests : [], pickedKey());
  const host = $("#request-detail");
  host.dataset.loading = "1";
  renderRequestDetail(host, request, null, { onPickStall: pickStall });
  const [from, to] = requestSpan(request);
  let doc;
  try {
    doc = await getJson("stalls", { target: request.target, from, to }, slots.requestStalls.next());
  } catch (err) {
    if (isAbort(err)) return;
    doc = { error: err.message, stalls: [] };
  }
  renderRequestDetail(host, request, doc, { onPickStall: pickStall });
  host.dataset.loading = "0";
}

/** The slow requests a stall delayed: those of its target that overlap it. */
async function loadDelayed(stall) {
  const host = $("#stall-requests");
  host.dataset.loading = "1";
  const pick = (request) => {
    pickRequest(request);
    $("#request-detail").scrollIntoView({ block: "nearest" });
  };
  renderDelayed(host, stall, null, { picked: pickedKey(), onPick: pick });
  const query = { target: stall.target, from: stall.start, to: stall.start + stall.duration_s };
  let doc;
  try {
    doc = await getRequests(query, slots.delayed.next(), 100);
  } catch (err) {
    if (isAbort(err)) return;
    doc = { error: err.message, requests: [] };
  }
  renderDelayed(host, stall, doc, { picked: pickedKey(), onPick: pick });
  host.dataset.loading = "0";
}

/** Marks the stall whose range is the selection, on the lane and in the table. */
function markStall() {
  stallLane.setSelection(state.sel);
  markStallRows($("#stalls"), stallsDoc, state.sel);
}

function profileParams(format) {
  return { ...selectionParams(), format };
}

/** The flamegraph's selection, as /api/profile and /api/functions take it. */
function selectionParams() {
  const [from, to] = profileRange();
  return {
    target: state.target,
    from,
    to,
    state: STATE_FILTERS[state.state],
    thread: state.thread,
    threads: state.threads,
  };
}

/**
 * The Top functions of the selection: the core's analysis (GET /api/functions), {error}, or
 * null when superseded.
 */
async function loadFunctions(signal) {
  try {
    return await getJson("functions", selectionParams(), signal);
  } catch (err) {
    return isAbort(err) ? null : { error: err.message };
  }
}

/** The thread filter lists the threads with samples in the flamegraph's range. */
async function loadThreads({ target, from, to }, signal) {
  const select = $("#thread");
  select.dataset.loading = "1";
  let threads = [];
  try {
    threads = (await getJson("threads", { target, from, to }, signal)).threads;
  } catch (err) {
    if (isAbort(err)) return;
  }
  renderThreadOptions(select, threads, state.thread);
  select.dataset.loading = "0";
}

async function loadFlame() {
  const host = $("#flame");
  const params = profileParams("folded");
  host.dataset.loading = "1";
  const signal = slots.flame.next();
  const threadList = loadThreads(params, signal);
  const functions = loadFunctions(signal);
  let text = "";
  let answered = null;
  let error = null;
  try {
    ({ text, threads: answered } = await getProfile(params, signal));
  } catch (err) {
    if (isAbort(err)) return;
    error = err;
  }
  const table = await functions;
  await threadList;
  if (signal.aborted) return;
  const counted = countName(state.threads, answered, state.thread);
  host.dataset.counts = counted;
  host.dataset.loading = "0";
  host.dataset.from = String(params.from);
  host.dataset.to = String(params.to);
  host.dataset.target = state.target === null ? "" : String(state.target);
  if (error) {
    profile = null;
    flame.clear();
    host.dataset.samples = "0";
    renderFunctions($("#functions"), $("#functions-scope"), null, {});
    renderSandwich();
    const noSamples = error instanceof ApiError && error.code === "no_samples";
    const noToken = error instanceof ApiError && error.status === 401;
    message(
      $("#flame-message"),
      noSamples
        ? "No samples for this selection. Widen the range, pick another target or change the filters."
        : noToken
          ? "This sidecar needs a token: enter it above."
          : `Could not load the profile: ${error.message}`,
      !noSamples && !noToken,
    );
    if (!noSamples) showBanner(error);
    $("#flame-summary").textContent = "";
    updateSearchStatus();
    renderCrumbs();
    return;
  }
  clearBanner();
  message($("#flame-message"), "");
  const rows = parseFolded(text);
  const tree = buildTree(rows);
  profile = { rows, tree, functions: table };
  flame.icicle = state.icicle;
  flame.match = matcher(state.q);
  flame.highlight = state.fn || null;
  flame.setTree(tree, "profile", state.zoom);
  if (state.zoom.length && !flame.zoom) state.zoom = [];
  saveUrl();
  $("#reset-zoom").disabled = !flame.zoom;
  $("#flame-summary").textContent =
    `${fmt.count(tree.total)} ${counted} · ${fmt.count(rows.length)} stacks · ` +
    `${targetName(state.target)} · ${fmt.span(params.from, params.to)}`;
  renderCrumbs();
  renderTable();
  renderSandwich();
  updateSearchStatus();
  showDetails($("#flame-details"), flame, null);
}

function renderTable() {
  renderFunctions($("#functions"), $("#functions-scope"), profile && profile.functions, {
    sort: state.sort,
    dir: state.dir,
    picked: state.fn,
    thread: state.thread,
    onSort: (key) => {
      if (state.sort === key) state.dir = state.dir === "asc" ? "desc" : "asc";
      else {
        state.sort = key;
        state.dir = key === "name" ? "asc" : "desc";
      }
      saveUrl();
      renderTable();
      const again = $(`#functions th button[data-sort="${key}"]`);
      if (again) again.focus();
    },
    onPick: (key) => {
      state.fn = state.fn === key ? "" : key;
      saveUrl();
      flame.setOptions({ highlight: state.fn || null });
      renderTable();
      renderSandwich();
      updateSearchStatus();
      const again = $(`#functions button.fn[data-key="${CSS.escape(key)}"]`);
      if (again) again.focus();
    },
  });
}

function updateSearchStatus() {
  const status = $("#search-status");
  const match = flame.match;
  const parts = [];
  status.dataset.matches = "0";
  if (profile && (match || state.fn)) {
    const test = (info) => (match && match(info)) || (state.fn && info.key === state.fn);
    const base = flame.zoom || profile.tree.root;
    const hit = matchedShare(base, test);
    status.dataset.matches = String(hit.frames);
    status.dataset.share = String(hit.samples / (profile.tree.total || 1));
    if (!hit.frames) parts.push("no match");
    else {
      parts.push(`${fmt.count(hit.frames)} frame${hit.frames === 1 ? "" : "s"}`);
      parts.push(`${fmt.pct(hit.samples / (profile.tree.total || 1))} of samples`);
      if (flame.zoom) parts.push(`${fmt.pct(hit.samples / flame.zoom.value)} of zoom`);
    }
    if (state.fn) parts.unshift(`highlight: ${state.fn.replace(/ \(.*\)$/, "")}`);
  }
  status.textContent = parts.join(" · ");
}

function renderCrumbs() {
  const nav = $("#crumbs");
  const path = flame.zoom ? flame.zoom.path() : [];
  if (!path.length) {
    nav.innerHTML = "";
    return;
  }
  const items = [`<button data-depth="0">all</button>`];
  const start = Math.max(0, path.length - 6);
  if (start > 0) items.push(`<span class="sep">› …</span>`);
  for (let i = start; i < path.length; i += 1) {
    const name = path[i].replace(/ \([^()]*\)$/, "");
    const current = i === path.length - 1;
    items.push(
      `<span class="sep">›</span><button data-depth="${i + 1}" ${current ? 'aria-current="true"' : ""} title="${fmt.esc(path[i])}">${fmt.esc(name)}</button>`,
    );
  }
  nav.innerHTML = items.join("");
  for (const button of nav.querySelectorAll("button")) {
    button.addEventListener("click", () => {
      const depth = Number(button.dataset.depth);
      flame.zoomTo(depth ? flame.tree.root.find(path.slice(0, depth)) : null);
    });
  }
}

async function loadFrameworks() {
  const [from, to] = profileRange();
  const signal = slots.frameworks.next();
  const host = $("#frameworks");
  host.dataset.loading = "1";
  let stats;
  try {
    stats = await getJson("stats", { from, to }, signal);
  } catch (err) {
    if (isAbort(err)) return;
    host.dataset.loading = "0";
    host.innerHTML = "";
    renderStatsTargets($("#fw-targets"), {});
    $("#gil-holders").innerHTML = "";
    $("#gil-summary").textContent = "";
    const missing = err instanceof ApiError && err.code === "not_found";
    message(
      $("#frameworks-message"),
      missing ? "This sidecar does not serve /api/stats." : `Could not load the statistics: ${err.message}`,
      true,
    );
    return;
  }
  // where each framework's loop blocks: the frame under [blocked] of its event-loop threads,
  // from the same range, asked only of the targets whose loop /api/stats says blocked (and not
  // of a pre-fork master, left out of its framework's shares): the API answers a selection
  // without samples with a 404, which the UI does not ask for
  const sites = new Map();
  const blocked = new Set(
    (stats.targets || []).filter((s) => s.blocked_share > 0 && s.role !== "master").map((s) => s.pid),
  );
  const relevant = targets.filter((t) => t.last_seen >= from && t.first_seen <= to && blocked.has(t.pid));
  try {
    await Promise.all(
      relevant.map(async (t) => {
        let text = "";
        try {
          const query = { target: t.id, from, to, state: "blocked", threads: "loop" };
          text = await getText("profile", query, signal);
        } catch (err) {
          if (isAbort(err) || !(err instanceof ApiError && err.code === "no_samples")) throw err;
        }
        const name = t.framework || "unknown";
        const found = blockingSites(parseFolded(text));
        const into = sites.get(name) || new Map();
        for (const [site, n] of found) into.set(site, (into.get(site) || 0) + n);
        sites.set(name, into);
      }),
    );
  } catch (err) {
    if (isAbort(err)) return;
  }
  const current = state.target === null ? null : (targetById(state.target) || {}).framework;
  const any = renderFrameworks(host, stats, { targets, sites, current });
  renderStatsTargets($("#fw-targets"), stats);
  const picked = state.target === null ? null : targetById(state.target);
  renderGilHolders($("#gil-holders"), $("#gil-summary"), stats, picked);
  message($("#frameworks-message"), any ? "" : "No event-loop samples in this range.");
  host.dataset.from = String(from);
  host.dataset.to = String(to);
  host.dataset.loading = "0";
}

function compareParams(format) {
  if (state.cmp === "targets") {
    const [from, to] = profileRange();
    const [ta, tb] = compareTargets();
    return { target: ta, from, to, target_b: tb, from_b: from, to_b: to, format, threads: state.threads };
  }
  const [a, b] = compareRanges();
  return { target: state.target, from: a[0], to: a[1], from_b: b[0], to_b: b[1], format, threads: state.threads };
}

function compareTargets() {
  const ta = state.ta ?? state.target ?? (targets[0] ? targets[0].id : null);
  let tb = state.tb;
  if (tb === null) {
    const other = targets.find((t) => t.id !== ta);
    tb = other ? other.id : ta;
  }
  return [ta, tb];
}

async function loadCompare() {
  const host = $("#diff-flame");
  renderCompareControls();
  if (state.cmp === "targets" && !targets.length) await loadTargets();
  if (state.cmp === "ranges" && (!state.a || !state.b)) {
    // fix the default halves, so live mode does not slide them and a link restores them
    [state.a, state.b] = compareRanges();
    saveUrl();
    updateCompareMarks();
    renderCompareControls();
  }
  const signal = slots.compare.next();
  host.dataset.loading = "1";
  let folded;
  let summary;
  try {
    [folded, summary] = await Promise.all([
      getText("diff", compareParams("folded"), signal),
      getJson("diff", compareParams("json"), signal),
    ]);
  } catch (err) {
    if (isAbort(err)) return;
    host.dataset.loading = "0";
    diffFlame.clear();
    $("#verdict").textContent = "";
    $("#compare-counts").textContent = "";
    renderStateChanges($("#state-changes"), []);
    renderChanges($("#self-changes"), []);
    renderChanges($("#total-changes"), []);
    const noSamples = err instanceof ApiError && err.code === "no_samples";
    message(
      $("#diff-message"),
      noSamples
        ? "One of the two sides has no samples. Drag on the timeline to pick ranges with data."
        : `Could not compare: ${err.message}`,
      !noSamples,
    );
    return;
  }
  message($("#diff-message"), "");
  const tree = buildTree(parseFolded(folded, true));
  diffFlame.icicle = state.icicle;
  diffFlame.setTree(tree, "diff");
  host.dataset.loading = "0";
  $("#verdict").textContent = summary.verdict;
  const counted = countName(state.threads, summary.threads, "");
  $("#compare-counts").textContent = `· ${counted}`;
  $("#frames-of").textContent = counted;
  // whose states the diff compares, as `sidecar diff` says it
  const loop = !summary.states_of || summary.states_of === "event loop";
  $("#states-of").textContent = loop ? "the event loop's threads" : summary.states_of;
  renderStateChanges($("#state-changes"), summary.state_changes);
  renderChanges($("#self-changes"), summary.self_changes);
  renderChanges($("#total-changes"), summary.total_changes);
  showDetails($("#diff-details"), diffFlame, null);
}

function loadView() {
  if (state.view === "flame") return loadFlame();
  if (state.view === "frameworks") return loadFrameworks();
  if (state.view === "tasks") return loadTasks();
  return loadCompare();
}

function loadTasks() {
  const [from, to] = windowRange();
  timeline.setSelection(state.sel);
  return tasksView.load({ target: state.target, from, to, sel: state.sel, tasks: state.tasks });
}

/** How frames are read (leaves, grammar, layers), from the API once. */
async function loadRules() {
  if (rulesSet()) return;
  try {
    setRules(await getJson("rules"));
  } catch {
    // the targets' request next meets the same problem and says what it is; the next load
    // asks again
  }
}

async function loadAll() {
  await loadRules();
  await loadTargets();
  if (state.view === "compare") {
    // the default compare ranges are the halves of where the timeline has data
    await loadTimeline();
    await loadView();
  } else {
    await Promise.all([loadTimeline(), loadView()]);
  }
}

// -- controls --------------------------------------------------------------------------------

function renderRangeLabels() {
  const [from, to] = windowRange();
  // a history shorter than the live range: the chart shows it whole, and says since when
  const fitted = state.live && to - from < state.range;
  $("#range-label").textContent = state.live
    ? `last ${fmt.duration(state.range)} · live${fitted ? ` · data since ${fmt.clock(firstSeen())}` : ""}`
    : fmt.span(from, to);
  const sel = state.sel;
  $("#selection-label").textContent = sel ? `Selected ${fmt.span(sel[0], sel[1])}` : "";
  $("#clear-selection").hidden = !sel;
  $("#timeline-hint").hidden = Boolean(sel) || state.view === "compare";
}

function syncControls() {
  for (const tab of $$(".tabs button")) {
    const on = tab.dataset.view === state.view;
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
  }
  for (const view of VIEWS) $(`#view-${view}`).hidden = state.view !== view;
  for (const button of $$("#tasks-filter button")) {
    const on = button.dataset.tasks === state.tasks;
    button.setAttribute("aria-checked", String(on));
    button.tabIndex = on ? 0 : -1;
  }
  const span = state.live ? state.range : state.to - state.from;
  for (const button of $$(".quick button")) {
    button.setAttribute("aria-pressed", String(Number(button.dataset.range) === span));
  }
  $("#live").setAttribute("aria-pressed", String(state.live));
  for (const button of $$("#state-filter button")) {
    const on = button.dataset.state === state.state;
    button.setAttribute("aria-checked", String(on));
    button.tabIndex = on ? 0 : -1;
  }
  for (const button of $$("#thread-scope button, #compare-scope button")) {
    const on = button.dataset.threads === state.threads;
    button.setAttribute("aria-checked", String(on));
    button.tabIndex = on ? 0 : -1;
  }
  if ([...$("#thread").options].some((o) => o.value === state.thread)) $("#thread").value = state.thread;
  $("#search").value = state.q;
  $("#icicle").setAttribute("aria-pressed", String(state.icicle));
  timeline.setSelection(state.view === "compare" && state.cmp === "ranges" ? null : state.sel);
  markStall();
  updateCompareMarks();
  renderRangeLabels();
  renderCompareControls();
}

function updateCompareMarks() {
  if (state.view !== "compare" || state.cmp !== "ranges") {
    timeline.setMarks([]);
    return;
  }
  const [a, b] = compareRanges();
  timeline.setMarks([
    { from: a[0], to: a[1], label: "A", fill: "rgba(33, 102, 172, 0.10)", stroke: "#2166ac" },
    { from: b[0], to: b[1], label: "B", fill: "rgba(123, 50, 148, 0.10)", stroke: "#7b3294" },
  ]);
}

let compareSlot = "a";

function renderCompareControls() {
  for (const button of $$("#compare-mode button")) {
    const on = button.dataset.mode === state.cmp;
    button.setAttribute("aria-checked", String(on));
    button.tabIndex = on ? 0 : -1;
  }
  $("#compare-ranges").hidden = state.cmp !== "ranges";
  $("#compare-targets").hidden = state.cmp !== "targets";
  for (const button of $$("#compare-ranges [data-slot]")) {
    button.setAttribute("aria-checked", String(button.dataset.slot === compareSlot));
  }
  const [a, b] = compareRanges();
  $("#compare-a").innerHTML = `<span class="slot a">A</span> ${fmt.span(a[0], a[1])}`;
  $("#compare-b").innerHTML = `<span class="slot b">B</span> ${fmt.span(b[0], b[1])}`;
  const [from, to] = profileRange();
  $("#compare-targets-range").textContent = `both over ${fmt.span(from, to)}`;
}

function fillCompareTargets() {
  const [ta, tb] = compareTargets();
  for (const [select, value] of [
    [$("#compare-ta"), ta],
    [$("#compare-tb"), tb],
  ]) {
    if (document.activeElement === select) continue;
    select.innerHTML = targets
      .map(
        (t) =>
          `<option value="${t.id}" ${t.id === value ? "selected" : ""}>${fmt.esc(t.framework)} · PID ${t.pid} · ${fmt.esc(shortCommand(t.cmdline)).slice(0, 48)}</option>`,
      )
      .join("");
  }
}

function onTimelineSelect(range) {
  const rounded = wholeSeconds(range);
  if (state.view === "compare" && state.cmp === "ranges") {
    if (!rounded) return;
    state[compareSlot] = rounded;
    if (compareSlot === "a" && !state.b) {
      const [, b] = compareRanges();
      state.b = b;
    }
    if (compareSlot === "b" && !state.a) state.a = compareRanges()[0];
    compareSlot = compareSlot === "a" ? "b" : "a";
    timeline.setSelection(null);
    saveUrl();
    updateCompareMarks();
    loadCompare();
    return;
  }
  state.sel = rounded;
  state.zoom = [];
  saveUrl();
  renderRangeLabels();
  markStall();
  loadView();
}

function pickTarget(id) {
  if (state.target === id) return;
  state.target = id;
  state.zoom = [];
  state.fn = "";
  pickedRequest = null;
  renderRequestDetail($("#request-detail"), null, null, { onPickStall: pickStall });
  renderDelayed($("#stall-requests"), null, null, {});
  saveUrl(true);
  renderTargets($("#targets"), targets, state.target, pickTarget);
  loadTimeline();
  loadView();
}

function setRange(seconds) {
  if (state.live) state.range = seconds;
  else {
    state.to = Math.ceil(now());
    state.from = state.to - seconds;
  }
  state.sel = null;
  state.a = null;
  state.b = null;
  saveUrl(true);
  syncControls();
  loadTimeline();
  loadView();
}

function setLive(on) {
  if (on === state.live) return;
  if (on) {
    state.range = Math.round(state.to - state.from) || DEFAULTS.range;
    state.from = null;
    state.to = null;
  } else {
    const [from, to] = pickedRange();
    state.from = from;
    state.to = to;
    state.range = null;
  }
  state.live = on;
  saveUrl();
  syncControls();
  if (on) tick();
}

function setView(view) {
  if (state.view === view) return;
  state.view = view;
  saveUrl(true);
  syncControls();
  if (view === "compare" && !timelineData) loadTimeline().then(loadView);
  else loadView();
}

function toast(text) {
  const el = $("#toast");
  el.textContent = text;
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => {
    el.hidden = true;
  }, 2200);
}

async function copyLink() {
  const link = location.href;
  try {
    await navigator.clipboard.writeText(link);
  } catch {
    const area = document.createElement("textarea");
    area.value = link;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  toast(state.live ? "Link copied (live: it shows the last minutes when opened)" : "Link copied");
}

/** Radio groups of buttons: arrow keys move the choice, as a radiogroup should. */
function radioKeys(group, choose) {
  group.addEventListener("keydown", (e) => {
    if (!["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown"].includes(e.key)) return;
    const buttons = [...group.querySelectorAll("button")];
    const i = buttons.indexOf(document.activeElement);
    if (i < 0) return;
    const j = (i + (e.key === "ArrowLeft" || e.key === "ArrowUp" ? -1 : 1) + buttons.length) % buttons.length;
    e.preventDefault();
    buttons[j].focus();
    choose(buttons[j]);
  });
}

function wire() {
  for (const tab of $$(".tabs button")) tab.addEventListener("click", () => setView(tab.dataset.view));
  radioKeys($(".tabs"), (tab) => setView(tab.dataset.view));
  for (const button of $$(".quick button")) {
    button.addEventListener("click", () => setRange(Number(button.dataset.range)));
  }
  $("#live").addEventListener("click", () => setLive(!state.live));
  $("#share").addEventListener("click", copyLink);
  $("#clear-selection").addEventListener("click", () => {
    timeline.setSelection(null);
    onTimelineSelect(null);
  });

  const chooseState = (button) => {
    state.state = button.dataset.state;
    state.zoom = [];
    saveUrl();
    syncControls();
    loadFlame();
  };
  for (const button of $$("#state-filter button")) button.addEventListener("click", () => chooseState(button));
  radioKeys($("#state-filter"), chooseState);

  const chooseTasks = (button) => {
    state.tasks = button.dataset.tasks;
    saveUrl();
    syncControls();
    loadTasks();
  };
  for (const button of $$("#tasks-filter button")) button.addEventListener("click", () => chooseTasks(button));
  radioKeys($("#tasks-filter"), chooseTasks);

  // the event-loop threads or all of them; picking one thread shows all its samples
  const chooseThreads = (button) => {
    if (state.threads === button.dataset.threads && !state.thread) return;
    state.threads = button.dataset.threads;
    state.thread = "";
    state.zoom = [];
    saveUrl();
    syncControls();
    loadTimeline();
    loadView();
  };
  for (const group of ["#thread-scope", "#compare-scope"]) {
    for (const button of $$(`${group} button`)) button.addEventListener("click", () => chooseThreads(button));
    radioKeys($(group), chooseThreads);
  }
  const thread = $("#thread");
  thread.addEventListener("change", () => {
    const value = thread.value;
    if (value === state.thread) return;
    const widened = value && state.threads !== "all";
    state.thread = value;
    if (widened) state.threads = "all";
    state.zoom = [];
    saveUrl();
    syncControls();
    if (widened) loadTimeline();
    loadFlame();
  });

  const search = $("#search");
  search.addEventListener("input", () => {
    state.q = search.value;
    flame.setOptions({ match: matcher(state.q) });
    updateSearchStatus();
    saveUrl();
  });
  search.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && search.value) {
      search.value = "";
      search.dispatchEvent(new Event("input"));
    }
  });
  document.addEventListener("keydown", (e) => {
    const typing = e.target.closest && e.target.closest("input, select, textarea");
    if (e.key === "/" && !typing && state.view === "flame") {
      e.preventDefault();
      search.focus();
      search.select();
    }
  });

  $("#icicle").addEventListener("click", () => {
    state.icicle = !state.icicle;
    saveUrl();
    syncControls();
    flame.setOptions({ icicle: state.icicle });
    diffFlame.setOptions({ icicle: state.icicle });
  });
  $("#reset-zoom").addEventListener("click", () => flame.reset());

  for (const button of $$(".downloads button")) {
    button.addEventListener("click", async () => {
      const format = button.dataset.format;
      button.closest("details").open = false;
      const params = profileParams(format);
      if (format === "svg" && state.icicle) params.inverted = "true";
      const ext = { svg: "svg", folded: "folded", speedscope: "speedscope.json" }[format];
      const who = state.target === null ? "all" : `target-${state.target}`;
      const when = fmt.stamp(params.from).replace(/[: ]/g, "-");
      try {
        await download("profile", params, `sidecar-${who}-${when}.${ext}`);
      } catch (err) {
        toast(`Download failed: ${err.message}`);
      }
    });
  }

  const chooseMode = (button) => {
    state.cmp = button.dataset.mode;
    saveUrl();
    syncControls();
    loadCompare();
  };
  for (const button of $$("#compare-mode button")) button.addEventListener("click", () => chooseMode(button));
  radioKeys($("#compare-mode"), chooseMode);
  const chooseSlot = (button) => {
    compareSlot = button.dataset.slot;
    renderCompareControls();
  };
  for (const button of $$("#compare-ranges [data-slot]")) button.addEventListener("click", () => chooseSlot(button));
  radioKeys($("#compare-ranges .seg"), chooseSlot);
  $("#compare-halves").addEventListener("click", () => {
    state.a = null;
    state.b = null;
    saveUrl();
    updateCompareMarks();
    loadCompare();
  });
  $("#compare-swap").addEventListener("click", () => {
    const [a, b] = compareRanges();
    state.a = b;
    state.b = a;
    saveUrl();
    updateCompareMarks();
    loadCompare();
  });
  for (const [select, key] of [
    [$("#compare-ta"), "ta"],
    [$("#compare-tb"), "tb"],
  ]) {
    select.addEventListener("change", () => {
      state[key] = Number(select.value);
      saveUrl();
      loadCompare();
    });
  }
}

// -- live ------------------------------------------------------------------------------------

let ticking = false;

async function tick() {
  if (!state.live || ticking || document.hidden) return;
  ticking = true;
  try {
    await loadTargets();
    await loadTimeline();
    if (!state.sel && state.view !== "compare") await loadView();
  } finally {
    ticking = false;
  }
}

wire();
syncControls();
showDetails($("#flame-details"), flame, null);
loadAll();
setInterval(tick, REFRESH_MS);
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) tick();
});
