// The top functions table: the rows GET /api/functions gives for the flamegraph's selection (the
// core's analysis: self and total of the busy samples of the event-loop threads, frames above
// the loop's entry, as `sidecar stats` counts them), sortable; a click anywhere on a row (or
// Enter on its name) selects its function: highlighted in the flamegraph, callers and callees
// shown.

import { count, esc, pct } from "./format.js";

const COLUMNS = [
  { key: "name", label: "Function" },
  { key: "self", label: "Self", num: true },
  { key: "total", label: "Total", num: true },
];

/** The swatch of each layer the API names (sidecar.rules.layers), in the flamegraph's colours. */
const SWATCH = { application: "app", framework: "framework", event_loop: "runtime", stdlib: "runtime", other: "other" };

/** Whose busy samples the shares are of, in the words every count uses. */
export function busyScope(doc, thread) {
  if (thread) return `busy samples of thread ${thread}`;
  if (doc.threads === "all") return "busy all-thread samples (no event-loop thread in this range)";
  return "busy loop-thread samples";
}

/**
 * Renders `doc`, the answer of /api/functions ({busy, threads, count, functions}), or a message
 * when there is none (`doc` null) or it failed (`{error}`).
 */
export function renderFunctions(table, scope, doc, { sort, dir, picked, thread, onSort, onPick }) {
  table.dataset.busy = doc && !doc.error ? String(doc.busy) : "";
  // the header says what the shares are of
  scope.textContent = doc && !doc.error && doc.busy ? `shares of ${count(doc.busy)} ${busyScope(doc, thread)} · ` : "";
  if (!doc || doc.error || !doc.busy || !doc.functions.length) {
    const text = !doc
      ? "No functions in this selection."
      : doc.error
        ? `Could not load the top functions: ${doc.error}`
        : !doc.busy
          ? "No busy samples in this selection: Top functions counts the code that ran on a CPU, and samples off a CPU ([idle], [blocked], [gil], [cpu_wait]) are nobody's self time."
          : "No function above the event loop's entry in this selection's busy samples.";
    table.innerHTML = `<tbody><tr><td class="muted">${esc(text)}</td></tr></tbody>`;
    return;
  }
  const sign = dir === "asc" ? 1 : -1;
  const rows = [...doc.functions].sort((a, b) => {
    if (sort === "name") return sign * a.name.localeCompare(b.name);
    return sign * (a[sort] - b[sort]) || b.total - a.total;
  });
  const busy = doc.busy;
  const maxSelf = Math.max(...rows.map((r) => r.self), 1);
  const maxTotal = Math.max(...rows.map((r) => r.total), 1);
  const head = COLUMNS.map((c) => {
    const state = c.key === sort ? (dir === "asc" ? "ascending" : "descending") : "none";
    return `<th scope="col" class="${c.num ? "num" : ""}" aria-sort="${state}"><button data-sort="${c.key}">${c.label}</button></th>`;
  }).join("");
  const body = rows
    .map((r) => {
      const selfW = Math.round((r.self / maxSelf) * 60);
      const totalW = Math.round((r.total / maxTotal) * 60);
      return `<tr data-key="${esc(r.key)}" data-self="${r.self}" data-total="${r.total}" aria-selected="${r.key === picked}">
        <td><button class="fn" data-key="${esc(r.key)}" title="Highlight in the flamegraph (again: clear)"><span class="swatch ${esc(SWATCH[r.layer] || "other")}" title="${esc(r.layer)}"></span>${esc(r.name)}</button>
          <div class="file">${esc(r.file)}</div></td>
        <td class="num">${count(r.self)} <span class="muted">${pct(r.self / busy)}</span><span class="bar self" style="width:${selfW}px"></span></td>
        <td class="num">${count(r.total)} <span class="muted">${pct(r.total / busy)}</span><span class="bar" style="width:${totalW}px"></span></td>
      </tr>`;
    })
    .join("");
  const caption =
    doc.count > rows.length
      ? `<caption class="muted">top ${count(rows.length)} of ${count(doc.count)} functions, by total</caption>`
      : "";
  table.innerHTML = `${caption}<thead><tr>${head}</tr></thead><tbody>${body}</tbody>`;
  for (const button of table.querySelectorAll("th button")) {
    button.addEventListener("click", () => onSort(button.dataset.sort));
  }
  // the row, not only its name: a click on its counts selects it too (the name's button, for
  // the keyboard, clicks through to its row)
  for (const row of table.querySelectorAll("tbody tr[data-key]")) {
    row.addEventListener("click", () => onPick(row.dataset.key));
  }
}
