// Which threads a view counts: the event-loop threads (the default), all threads, or one thread
// picked from those GET /api/threads lists for the range; and the words every count uses for
// it, as the CLI says them ("loop-thread samples", "all-thread samples").

import { count, esc } from "./format.js";

export const SCOPES = ["loop", "all"];

/**
 * The threads of the answer as the filter lists them: one option per name (the API's thread
 * filter takes a name, and MainThread of several targets is one choice), a thread without a name
 * by its id; event-loop threads first, then by samples.
 */
export function threadChoices(threads) {
  const byValue = new Map();
  for (const t of threads || []) {
    const value = t.name || String(t.thread_id);
    const seen = byValue.get(value) || { value, samples: 0, loop: false, threads: 0 };
    seen.samples += t.samples;
    seen.loop = seen.loop || t.loop;
    seen.threads += 1;
    byValue.set(value, seen);
  }
  return [...byValue.values()].sort((a, b) => b.loop - a.loop || b.samples - a.samples);
}

/** Fills the thread filter: "any thread", then each thread of the range with its samples. */
export function renderThreadOptions(select, threads, picked) {
  const choices = threadChoices(threads);
  const options = [`<option value="">any thread</option>`];
  for (const c of choices) {
    const what = [c.loop ? "event loop" : null, c.threads > 1 ? `${c.threads} threads` : null]
      .filter(Boolean)
      .join(", ");
    const label = `${c.value}${what ? ` (${what})` : ""} · ${count(c.samples)} samples`;
    options.push(
      `<option value="${esc(c.value)}" data-loop="${c.loop}" data-samples="${c.samples}">${esc(label)}</option>`,
    );
  }
  if (picked && !choices.some((c) => c.value === picked)) {
    options.push(`<option value="${esc(picked)}">${esc(picked)} (no samples in this range)</option>`);
  }
  if (document.activeElement === select) return;
  select.innerHTML = options.join("");
  select.value = picked || "";
}

/**
 * What a flamegraph's counts are: `threads` is the scope asked for, `answered` the one the API
 * says it counted (all threads when none ran an event loop in the range), `thread` a picked one.
 */
export function countName(threads, answered, thread) {
  if (thread) return `samples of thread ${thread}`;
  if (threads === "loop" && answered === "all") return "all-thread samples (no event-loop thread in this range)";
  return threads === "loop" ? "loop-thread samples" : "all-thread samples";
}

/** The same for the timeline, from its `loop_threads_only`. */
export function timelineCountName(threads, loopOnly) {
  if (loopOnly) return "loop-thread samples";
  return threads === "loop" ? "all-thread samples (no event-loop thread found)" : "all-thread samples";
}
