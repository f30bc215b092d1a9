// Number, share and time formatting shared by every panel.

const nf = new Intl.NumberFormat(undefined);

export function count(n) {
  return nf.format(Math.round(n));
}

export function pct(share, digits = 1) {
  if (share == null || !Number.isFinite(share)) return "–";
  return `${(share * 100).toFixed(digits)}%`;
}

export function signedPct(delta, digits = 2) {
  const text = `${(Math.abs(delta) * 100).toFixed(digits)}%`;
  if (delta > 0) return `+${text}`;
  if (delta < 0) return `−${text}`;
  return text;
}

export function num(value, digits = 1) {
  if (value == null || !Number.isFinite(value)) return "–";
  return Number.isInteger(value) ? String(value) : value.toFixed(digits);
}

function pad(n) {
  return String(n).padStart(2, "0");
}

export function clock(t, withSeconds = true) {
  const d = new Date(t * 1000);
  const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return withSeconds ? `${hm}:${pad(d.getSeconds())}` : hm;
}

export function day(t) {
  const d = new Date(t * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
}

export function stamp(t) {
  return `${day(t)} ${clock(t)}`;
}

export function duration(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) {
    const m = Math.floor(s / 60);
    const r = s % 60;
    return r ? `${m} min ${r} s` : `${m} min`;
  }
  if (s < 86400) {
    const h = Math.floor(s / 3600);
    const m = Math.round((s % 3600) / 60);
    return m ? `${h} h ${m} min` : `${h} h`;
  }
  const d = Math.floor(s / 86400);
  const h = Math.round((s % 86400) / 3600);
  return h ? `${d} d ${h} h` : `${d} d`;
}

export function span(from, to) {
  const sameDay = day(from) === day(to - 1);
  const start = sameDay ? clock(from) : stamp(from);
  return `${start} – ${clock(to)} (${duration(to - from)})`;
}

export function ago(t, now = Date.now() / 1000) {
  const s = Math.max(0, now - t);
  if (s < 5) return "just now";
  return `${duration(s)} ago`;
}

/** Text safe to put into innerHTML. */
export function esc(text) {
  return String(text).replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c],
  );
}

/**
 * `text` escaped as HTML that may break after each "." and "/" (a qualified name, a path, a
 * route): a table of long names fits its panel without breaking a word in two.
 */
export function breakable(text) {
  return esc(text).replace(/([./])(?=.)/g, "$1<wbr>");
}
