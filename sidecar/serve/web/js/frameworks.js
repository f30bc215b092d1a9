// The frameworks panel: per framework, the event loop's idle / busy / cpu_wait / blocked / gil
// shares (and the share of garbage collection) and stack depth side by side, and where the loop
// blocks; and who held the GIL while a loop waited for it. Shares, depth and GIL holders come from
// /api/stats as they are; blocking sites are counted here from the [blocked] stacks of the same
// range.

import { badges, roleBadge } from "./targets.js";
import { count, esc, num, pct } from "./format.js";
import { frameInfo } from "./stacks.js";

/** The loop's states as the timeline stacks them, bottom (left) first. */
const STATES = ["busy", "cpu_wait", "blocked", "gil", "idle"];

function shareBar(s) {
  const parts = STATES.map((state) => {
    const v = s[`${state}_share`] || 0;
    const text = v >= 0.2 ? `${state} ${pct(v)}` : v >= 0.08 ? pct(v) : v >= 0.05 ? pct(v, 0) : "";
    return v > 0 ? `<span class="${state}" style="width:${(v * 100).toFixed(2)}%">${text}</span>` : "";
  });
  const label = STATES.map((state) => `${state} ${pct(s[`${state}_share`])}`).join(", ");
  return `<div class="sharebar" role="img" aria-label="${label}">${parts.join("")}</div>`;
}

function depthBlock(depth, scale) {
  const d = depth || {};
  const cell = (label, value, digits) =>
    `<div class="share"><div class="label">${label}</div><div class="value" data-depth="${label}">${num(value, digits)}</div></div>`;
  const mean = d.mean ? (d.mean / scale) * 100 : 0;
  const p95 = d.p95 ? (d.p95 / scale) * 100 : 0;
  return `
    <div class="depth">${cell("mean", d.mean, 1)}${cell("p50", d.p50)}${cell("p95", d.p95)}${cell("max", d.max)}</div>
    <div class="depth-bar" role="img" aria-label="mean depth ${num(d.mean)}, p95 ${num(d.p95)} frames">
      <span class="p95" style="left:0;width:${p95.toFixed(1)}%"></span>
      <span class="mean" style="left:0;width:${mean.toFixed(1)}%"></span>
    </div>
    <div class="depth-caption"><span>0</span><span>mean ■ · p95 ▬ on a common scale</span><span>${scale} frames</span></div>`;
}

function share(v) {
  return v > 0 && v < 0.001 ? "<0.1%" : pct(v);
}

/** Blocking sites with fewer samples than this are folded into one "other" row: noise. */
export const MIN_SITE_SAMPLES = 3;
/** The blocking sites listed by name, at most. */
const TOP_SITES = 5;

/**
 * The sites listed, most samples first: the TOP_SITES largest of at least `min` samples; and
 * the rest folded into one row, `{sites, samples}` (null when nothing is left over).
 */
export function foldSites(sites, min = MIN_SITE_SAMPLES, top = TOP_SITES) {
  const ranked = [...(sites || new Map()).entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  const listed = ranked.filter(([, n]) => n >= min).slice(0, top);
  const rest = ranked.slice(listed.length);
  const other = rest.length ? { sites: rest.length, samples: rest.reduce((sum, [, n]) => sum + n, 0) } : null;
  return { listed, other };
}

function sitesBlock(sites, loopSamples) {
  if (!sites || !sites.size) return `<p class="muted">The loop never blocked in this range.</p>`;
  const { listed, other } = foldSites(sites);
  const ofLoop = (n) => `${count(n)} · ${share(n / (loopSamples || 1))} of loop time`;
  const rows = listed.map(([frame, n]) => {
    const info = frameInfo(frame);
    const where = info.file ? `${info.name} (${info.file}:${info.line})` : info.name;
    return `<li><span class="site" title="${esc(where)}">${esc(where)}</span>
        <span class="num">${ofLoop(n)}</span></li>`;
  });
  if (other) {
    const what = `other: ${count(other.sites)} site${other.sites === 1 ? "" : "s"}`;
    rows.push(`<li class="other" data-sites="${other.sites}" data-samples="${other.samples}"><span class="site muted"
        title="sites with fewer than ${MIN_SITE_SAMPLES} samples, and those past the top ${TOP_SITES}">${what}</span>
        <span class="num">${ofLoop(other.samples)}</span></li>`);
  }
  return `<ol class="sites">${rows.join("")}</ol>`;
}

export function renderFrameworks(host, stats, { targets, sites, current }) {
  const frameworks = Object.entries(stats.frameworks || {});
  if (!frameworks.length) {
    host.innerHTML = "";
    return false;
  }
  const scale = Math.max(
    10,
    ...frameworks.map(([, s]) => (s.depth && (s.depth.p95 || s.depth.max)) || 0),
  );
  const nice = Math.ceil(scale / 5) * 5;
  host.innerHTML = frameworks
    .map(([name, s]) => {
      const mine = targets.filter((t) => (t.framework || "unknown") === name);
      const loops = [...new Set((stats.targets || []).filter((t) => t.framework === name).map((t) => t.loop))];
      const loopBadges = loops.map((l) => `<span class="badge loop-${esc(l)}">${esc(l)}</span>`).join(" ");
      // a pre-fork master serves no requests: its loop is not in these shares
      const ofFramework = (stats.targets || []).filter((t) => t.framework === name);
      const masters = ofFramework.filter((t) => t.role === "master").length;
      const n = ofFramework.length - masters || mine.length;
      const left = masters ? ` · ${masters} master${masters === 1 ? "" : "s"} left out` : "";
      return `
      <article class="fw-card${name === current ? " current" : ""}" data-framework="${esc(name)}"
          data-idle-share="${s.idle_share}" data-busy-share="${s.busy_share}" data-blocked-share="${s.blocked_share}"
          data-gil-share="${s.gil_share}" data-cpu-wait-share="${s.cpu_wait_share}" data-gc-share="${s.gc_share}">
        <div class="fw-head">${badges(name, null).replace("badge", "badge fw-name")} ${loopBadges}
          <span class="muted">${n} target${n === 1 ? "" : "s"} · ${count(s.samples)} loop-thread samples${left}</span></div>
        ${shareBar(s)}
        <div class="shares">
          <div class="share idle-share"><div class="label"><span class="swatch idle"></span>idle</div><div class="value" data-share="idle">${pct(s.idle_share)}</div></div>
          <div class="share"><div class="label"><span class="swatch busy"></span>busy</div><div class="value" data-share="busy">${pct(s.busy_share)}</div></div>
          <div class="share" title="runnable, waiting for a CPU: a CPU limit (CFS throttling) or more runnable threads than cores"><div class="label"><span class="swatch cpu_wait"></span>cpu_wait</div><div class="value" data-share="cpu_wait">${pct(s.cpu_wait_share)}</div></div>
          <div class="share"><div class="label"><span class="swatch blocked"></span>blocked</div><div class="value" data-share="blocked">${pct(s.blocked_share)}</div></div>
          <div class="share" title="ready to run Python, waiting for the GIL another thread held"><div class="label"><span class="swatch gil"></span>gil</div><div class="value" data-share="gil">${pct(s.gil_share)}</div></div>
        </div>
        <p class="gc-line" title="busy samples taken while the loop's thread collected garbage (a [gc] frame on top)">busy collecting garbage: <strong data-share="gc">${pct(s.gc_share)}</strong> of loop-thread samples</p>
        <div><h3>Stack depth</h3>${depthBlock(s.depth, nice)}</div>
        <div><h3>Top blocking call sites <span class="muted sites-note">sites under ${MIN_SITE_SAMPLES} samples folded into "other"</span></h3>${sitesBlock(sites.get(name), s.samples)}</div>
      </article>`;
    })
    .join("");
  return true;
}

export function renderStatsTargets(table, stats) {
  const rows = stats.targets || [];
  if (!rows.length) {
    table.innerHTML = `<tbody><tr><td class="muted">No targets sampled in this range.</td></tr></tbody>`;
    return;
  }
  const head = ["PID", "Framework", "Loop-thread samples", "Busy", "CPU wait", "Idle", "Blocked", "GIL", "GC", "Depth mean", "p95", "max"];
  table.innerHTML = `<thead><tr>${head
    .map((h, i) => `<th scope="col" class="${i >= 2 ? "num" : ""}">${h}</th>`)
    .join("")}</tr></thead><tbody>${rows
    .map((t) => {
      const d = t.depth || {};
      return `<tr data-role="${esc(t.role || "")}"><td class="num" style="text-align:left">${t.pid ?? "–"}</td><td>${badges(t.framework, t.loop)}${roleBadge(t.role)}</td>
        <td class="num">${count(t.samples)}</td><td class="num">${pct(t.busy_share)}</td><td class="num">${pct(t.cpu_wait_share)}</td>
        <td class="num">${pct(t.idle_share)}</td><td class="num">${pct(t.blocked_share)}</td>
        <td class="num">${pct(t.gil_share)}</td><td class="num">${pct(t.gc_share)}</td>
        <td class="num">${num(d.mean)}</td><td class="num">${num(d.p95)}</td><td class="num">${num(d.max)}</td></tr>`;
    })
    .join("")}</tbody>`;
}

/**
 * Who held the GIL while the loop waited for it: per target of the range (only the picked one,
 * when one is), the threads that held it and where, as shares of that loop's waits. Holders
 * whose share rounds to 0.0% are not listed: a last row says how many there were.
 */
export function renderGilHolders(table, summary, stats, picked) {
  const rows = (stats.targets || []).filter((t) => !picked || t.pid === picked.pid);
  const all = rows.flatMap((t) => (t.gil_holders || []).map((h) => ({ t, h })));
  const held = all.filter(({ h }) => pct(h.share) !== pct(0));
  const hidden = all.length - held.length;
  const waited = rows.filter((t) => t.gil_share > 0);
  summary.textContent = waited.length
    ? waited.map((t) => `PID ${t.pid ?? "–"}: the loop waited for the GIL in ${pct(t.gil_share)} of its samples`).join(" · ")
    : "";
  if (!all.length) {
    const text = waited.length
      ? "The loop waited for the GIL, but no thread was seen holding it."
      : "The loop never waited for the GIL in this range.";
    table.innerHTML = `<tbody><tr><td class="muted">${text}</td></tr></tbody>`;
    return;
  }
  const head = ["Target", "Thread", "Where it was", "Share of the loop's waits"];
  table.innerHTML = `<thead><tr>${head
    .map((h, i) => `<th scope="col" class="${i === 3 ? "num" : ""}">${h}</th>`)
    .join("")}</tr></thead><tbody>${held
    .map(({ t, h }) => {
      const info = h.site ? frameInfo(h.site) : null;
      const where = info
        ? `<span class="fn">${esc(info.name)}</span><div class="file">${esc(info.file ? `${info.file}:${info.line}` : "")}</div>`
        : `<span class="muted">no Python frame</span>`;
      const width = Math.round(h.share * 60);
      return `<tr data-pid="${t.pid ?? ""}" data-thread="${esc(h.thread)}" data-site="${esc(h.site)}" data-share="${h.share}">
        <td>${badges(t.framework, t.loop)} <span class="num">PID ${t.pid ?? "–"}</span></td>
        <td><code>${esc(h.thread)}</code></td><td>${where}</td>
        <td class="num">${pct(h.share)}<span class="bar gil" style="width:${width}px"></span></td></tr>`;
    })
    .join("")}${hiddenRow(hidden)}</tbody>`;
}

function hiddenRow(hidden) {
  if (!hidden) return "";
  const what = hidden === 1 ? "1 more holder" : `${count(hidden)} more holders`;
  return `<tr data-hidden="${hidden}"><td colspan="4" class="muted">${what} under 0.05% of the loop's waits each, not listed</td></tr>`;
}
