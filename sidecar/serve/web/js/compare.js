// The compare view's tables: loop states before and after, and the largest changes by function.

import { esc, pct, signedPct } from "./format.js";

/** A change's frame is a function key: "name (file)", without the line. */
const KEY = /^(.*) \(([^()]*)\)$/;

function deltaCell(delta) {
  const cls = delta > 0 ? "grew" : delta < 0 ? "shrank" : "";
  const arrow = delta > 0 ? "▲ " : delta < 0 ? "▼ " : "";
  return `<td class="num"><span class="delta ${cls}">${arrow}${signedPct(delta)}</span></td>`;
}

export function renderChanges(table, changes) {
  if (!changes || !changes.length) {
    table.innerHTML = `<tbody><tr><td class="muted">No changes.</td></tr></tbody>`;
    return;
  }
  table.innerHTML = `<thead><tr><th scope="col">Function</th><th scope="col" class="num">Before</th>
      <th scope="col" class="num">After</th><th scope="col" class="num">Change</th></tr></thead>
    <tbody>${changes
      .slice(0, 25)
      .map((c) => {
        const m = KEY.exec(c.frame);
        const name = m ? m[1] : c.frame;
        return `<tr><td><span class="fn">${esc(name)}</span>${m ? `<div class="file">${esc(m[2])}</div>` : ""}</td>
          <td class="num">${pct(c.before, 2)}</td><td class="num">${pct(c.after, 2)}</td>${deltaCell(c.delta)}</tr>`;
      })
      .join("")}</tbody>`;
}

export function renderStateChanges(host, changes) {
  host.innerHTML = (changes || [])
    .map((c) => {
      const cls = c.delta > 0 ? "grew" : c.delta < 0 ? "shrank" : "";
      return `<div class="state-change"><span class="swatch ${esc(c.frame)}"></span><strong>${esc(c.frame)}</strong>
        ${pct(c.before)} → ${pct(c.after)} <span class="delta ${cls}">${signedPct(c.delta, 1)}</span></div>`;
    })
    .join("");
}
