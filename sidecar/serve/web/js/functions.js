// The top functions table: self and total samples, sortable; a click anywhere on a row (or Enter
// on its name) selects its function: highlighted in the flamegraph, callers and callees shown.

import { count, esc, pct } from "./format.js";

const COLUMNS = [
  { key: "name", label: "Function" },
  { key: "self", label: "Self", num: true },
  { key: "total", label: "Total", num: true },
];
const LIMIT = 300;

export function renderFunctions(table, data, { sort, dir, picked, onSort, onPick }) {
  if (!data || !data.rows.length) {
    table.innerHTML = `<tbody><tr><td class="muted">No functions in this selection.</td></tr></tbody>`;
    return;
  }
  const sign = dir === "asc" ? 1 : -1;
  const rows = [...data.rows].sort((a, b) => {
    if (sort === "name") return sign * a.name.localeCompare(b.name);
    return sign * (a[sort] - b[sort]) || b.total - a.total;
  });
  const shown = rows.slice(0, LIMIT);
  const total = data.total || 1;
  const maxSelf = Math.max(...rows.map((r) => r.self), 1);
  const maxTotal = Math.max(...rows.map((r) => r.total), 1);
  const head = COLUMNS.map((c) => {
    const state = c.key === sort ? (dir === "asc" ? "ascending" : "descending") : "none";
    return `<th scope="col" class="${c.num ? "num" : ""}" aria-sort="${state}"><button data-sort="${c.key}">${c.label}</button></th>`;
  }).join("");
  const body = shown
    .map((r) => {
      const selfW = Math.round((r.self / maxSelf) * 60);
      const totalW = Math.round((r.total / maxTotal) * 60);
      return `<tr data-key="${esc(r.key)}" aria-selected="${r.key === picked}">
        <td><button class="fn" data-key="${esc(r.key)}" title="Highlight in the flamegraph (again: clear)"><span class="swatch ${esc(r.layer)}"></span>${esc(r.name)}</button>
          <div class="file">${esc(r.file)}</div></td>
        <td class="num">${count(r.self)} <span class="muted">${pct(r.self / total)}</span><span class="bar self" style="width:${selfW}px"></span></td>
        <td class="num">${count(r.total)} <span class="muted">${pct(r.total / total)}</span><span class="bar" style="width:${totalW}px"></span></td>
      </tr>`;
    })
    .join("");
  const more = rows.length > LIMIT ? `<caption class="muted">top ${LIMIT} of ${count(rows.length)} functions</caption>` : "";
  table.innerHTML = `${more}<thead><tr>${head}</tr></thead><tbody>${body}</tbody>`;
  for (const button of table.querySelectorAll("th button")) {
    button.addEventListener("click", () => onSort(button.dataset.sort));
  }
  // the row, not only its name: a click on its counts selects it too (the name's button, for
  // the keyboard, clicks through to its row)
  for (const row of table.querySelectorAll("tbody tr[data-key]")) {
    row.addEventListener("click", () => onPick(row.dataset.key));
  }
}
