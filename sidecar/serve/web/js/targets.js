// The targets list: framework and loop badges, PID, command, alive or gone, samples, problems,
// and a note where on-CPU states are estimated rather than read from the OS. The processes of
// a pre-fork server (one group) are listed together, the master first with its role badge.

import { ago, count, esc } from "./format.js";

export function shortCommand(cmdline) {
  // ".venv/bin/python -m targets.aiohttp_app --uvloop" reads best without the interpreter path
  return String(cmdline || "").replace(/^\S*\/(python[\d.]*)\b/, "$1");
}

export function targetTitle(t) {
  return `${t.framework || "unknown"} · PID ${t.pid ?? "?"}`;
}

export function badges(framework, loop) {
  const fw = framework || "unknown";
  let html = `<span class="badge fw-${esc(fw)}">${esc(fw)}</span>`;
  if (loop) html += ` <span class="badge loop-${esc(loop)}">${esc(loop)}</span>`;
  return html;
}

export function roleBadge(role) {
  return role ? ` <span class="badge role-${esc(role)}" data-role="${esc(role)}">${esc(role)}</span>` : "";
}

// Targets in order of first appearance of their group; within a group the master first.
export function grouped(targets) {
  const order = new Map();
  targets.forEach((t, i) => {
    if (!order.has(t.group)) order.set(t.group, i);
  });
  const rank = (t) => (t.role === "master" ? 0 : 1);
  return targets
    .map((t, i) => [t, i])
    .sort(([a, i], [b, j]) => order.get(a.group) - order.get(b.group) || rank(a) - rank(b) || i - j)
    .map(([t]) => t);
}

export function renderTargets(list, targets, selected, onPick) {
  const items = [];
  const total = targets.reduce((n, t) => n + (t.samples || 0), 0);
  items.push(`
    <li><button class="target" data-id="" aria-pressed="${selected === null}">
      <div class="t-top"><span class="badge fw-all">all</span><span class="t-title">All targets</span></div>
      <div class="t-meta">${targets.length} target${targets.length === 1 ? "" : "s"} · ${count(total)} ticks</div>
    </button></li>`);
  if (!targets.length) {
    items.push(`<li class="empty">No Python process sampled yet. sidecar scans every few seconds;
      a process it cannot trace shows here with the reason.</li>`);
  }
  for (const t of grouped(targets)) {
    const alive = t.alive;
    const problem = t.problem || (t.error && !alive ? t.error : null);
    // on-CPU states that could not come from the OS are a guess: say so beside the shares
    const estimated = t.on_cpu && t.on_cpu.startsWith("estimated") ? t.on_cpu : null;
    // a tick reads every thread of the process once (the CLI's word)
    const meta = [`PID ${t.pid ?? "?"}`, `${count(t.samples || 0)} ticks`];
    if (t.python_version) meta.push(`Python ${esc(t.python_version)}`);
    if (t.processes > 1) meta.push(`${t.processes} processes`);
    if (t.role === "master") meta.push("serves no requests: in no framework's shares");
    const status = alive
      ? `<span class="status alive">alive</span>`
      : `<span class="status gone" title="last seen ${esc(new Date(t.last_seen * 1000).toLocaleString())}">gone ${esc(ago(t.last_seen))}</span>`;
    items.push(`
    <li${t.role === "worker" ? ' class="in-group"' : ""}><button class="target${alive ? "" : " gone"}" data-id="${t.id}" data-framework="${esc(t.framework || "unknown")}"
        data-role="${esc(t.role || "")}" aria-pressed="${selected === t.id}" title="${esc(t.cmdline || "")}">
      <div class="t-top">${badges(t.framework, t.loop)}${roleBadge(t.role)}${status}</div>
      <div class="t-cmd">${esc(shortCommand(t.cmdline))}</div>
      <div class="t-meta">${meta.join(" · ")}</div>
      ${problem ? `<div class="t-problem" role="note"><strong>Cannot trace:</strong> ${esc(problem)}</div>` : ""}
      ${estimated ? `<div class="t-problem" role="note"><strong>Busy and idle are estimated:</strong> ${esc(estimated.replace(/^estimated \((.*)\)$/, "$1"))}</div>` : ""}
      ${alive && t.torn ? `<div class="t-problem t-torn" role="note"><strong>Samples missing:</strong> ${esc(t.torn)}</div>` : ""}
    </button></li>`);
  }
  const focused = document.activeElement && document.activeElement.closest("#targets .target");
  const focusId = focused ? focused.dataset.id : null;
  list.innerHTML = items.join("");
  for (const button of list.querySelectorAll(".target")) {
    button.addEventListener("click", () => onPick(button.dataset.id === "" ? null : Number(button.dataset.id)));
  }
  if (focusId !== null) {
    const again = list.querySelector(`.target[data-id="${focusId}"]`);
    if (again) again.focus();
  }
}
