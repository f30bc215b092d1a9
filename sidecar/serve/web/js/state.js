// The view's state and its address: everything a shared link must restore lives in the URL.
//
//   view       flame | tasks | frameworks | compare
//   target     target id (absent: all targets)
//   range      live window in seconds (live mode follows the present)
//   from, to   a fixed window in unix seconds (live mode off)
//   sel        the selected sub-range "from~to" the flamegraph and frameworks use
//   state      all | busy | offcpu | blocked | gil | cpu_wait;  thread: name or id
//   threads    loop | all: the event-loop threads (default) or every thread
//   q          search;  fn: highlighted function;  zoom: frame path joined by ";"
//   icicle     1 for root at the top;  sort: column-direction of the functions table
//   cmp        ranges | targets;  a, b: compare ranges "from~to";  ta, tb: compare targets
//   tasks      all | requests | background: the tasks the Tasks view shows

export const VIEWS = ["flame", "tasks", "frameworks", "compare"];
export const TASK_FILTERS = ["all", "requests", "background"];
export const STATE_FILTERS = {
  all: null,
  busy: "busy",
  offcpu: "idle,blocked,gil,cpu_wait",
  blocked: "blocked",
  gil: "gil",
  cpu_wait: "cpu_wait",
};

export const DEFAULTS = Object.freeze({
  view: "flame",
  target: null,
  range: 900,
  from: null,
  to: null,
  live: true,
  sel: null,
  state: "all",
  thread: "",
  threads: "loop",
  q: "",
  fn: "",
  zoom: [],
  icicle: false,
  sort: "self",
  dir: "desc",
  cmp: "ranges",
  a: null,
  b: null,
  ta: null,
  tb: null,
  tasks: "all",
});

/** A selected range as the view keeps it: whole seconds, widened to hold what was picked. */
export function wholeSeconds(range) {
  return range ? [Math.floor(range[0]), Math.ceil(range[1])] : null;
}

function pair(text) {
  const m = /^(\d+(?:\.\d+)?)~(\d+(?:\.\d+)?)$/.exec(text || "");
  if (!m) return null;
  const a = Number(m[1]);
  const b = Number(m[2]);
  return a < b ? [a, b] : null;
}

function id(text) {
  return text && /^\d+$/.test(text) ? Number(text) : null;
}

export function fromUrl(search, nowSeconds) {
  const p = new URLSearchParams(search);
  const s = { ...DEFAULTS, zoom: [] };
  if (VIEWS.includes(p.get("view"))) s.view = p.get("view");
  s.target = id(p.get("target"));
  const from = Number(p.get("from"));
  const to = Number(p.get("to"));
  if (p.has("from") && p.has("to") && from > 0 && from < to) {
    s.live = false;
    s.range = null;
    s.from = from;
    s.to = to;
  } else {
    const range = Number(p.get("range"));
    if (range > 0) s.range = range;
    if (p.get("live") === "0") {
      s.live = false;
      s.to = Math.ceil(nowSeconds);
      s.from = s.to - s.range;
      s.range = null;
    }
  }
  s.sel = pair(p.get("sel"));
  if (Object.hasOwn(STATE_FILTERS, p.get("state"))) s.state = p.get("state");
  s.thread = p.get("thread") || "";
  if (p.get("threads") === "all") s.threads = "all";
  s.q = p.get("q") || "";
  s.fn = p.get("fn") || "";
  s.zoom = p.get("zoom") ? p.get("zoom").split(";") : [];
  s.icicle = p.get("icicle") === "1";
  const sort = /^(name|self|total)-(asc|desc)$/.exec(p.get("sort") || "");
  if (sort) [, s.sort, s.dir] = sort;
  if (p.get("cmp") === "targets") s.cmp = "targets";
  s.a = pair(p.get("a"));
  s.b = pair(p.get("b"));
  s.ta = id(p.get("ta"));
  s.tb = id(p.get("tb"));
  if (TASK_FILTERS.includes(p.get("tasks"))) s.tasks = p.get("tasks");
  return s;
}

export function toUrl(s) {
  const p = new URLSearchParams();
  const put = (key, value) => p.set(key, value);
  if (s.view !== DEFAULTS.view) put("view", s.view);
  if (s.target !== null) put("target", s.target);
  if (s.live) {
    if (s.range !== DEFAULTS.range) put("range", s.range);
  } else {
    put("from", s.from);
    put("to", s.to);
  }
  if (s.sel) put("sel", `${s.sel[0]}~${s.sel[1]}`);
  if (s.state !== DEFAULTS.state) put("state", s.state);
  if (s.thread) put("thread", s.thread);
  if (s.threads !== DEFAULTS.threads) put("threads", s.threads);
  if (s.q) put("q", s.q);
  if (s.fn) put("fn", s.fn);
  if (s.zoom.length) put("zoom", s.zoom.join(";"));
  if (s.icicle) put("icicle", "1");
  if (s.sort !== DEFAULTS.sort || s.dir !== DEFAULTS.dir) put("sort", `${s.sort}-${s.dir}`);
  if (s.view === "tasks" && s.tasks !== DEFAULTS.tasks) put("tasks", s.tasks);
  if (s.view === "compare") {
    if (s.cmp !== DEFAULTS.cmp) put("cmp", s.cmp);
    if (s.a) put("a", `${s.a[0]}~${s.a[1]}`);
    if (s.b) put("b", `${s.b[0]}~${s.b[1]}`);
    if (s.ta !== null) put("ta", s.ta);
    if (s.tb !== null) put("tb", s.tb);
  }
  const query = p.toString();
  return query ? `?${query}` : "";
}
