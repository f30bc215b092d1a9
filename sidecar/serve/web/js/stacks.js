// Folded stacks in the browser: parse, build the call tree, find blocking sites. The Top
// functions are not counted here: the API gives them (GET /api/functions, the core's analysis).
//
// Folded text is one line per unique stack, frames root first joined by ";", then a count
// (two counts, before and after, for a differential profile). Frames read
// "function (file:line)"; off-CPU samples end in a synthetic "[idle]", "[blocked]", "[gil]" or
// "[cpu_wait]" leaf, and task stacks in "[running]", "[ready]" or "[waiting]".

// How frames are read comes from the API (GET /api/rules), where the analysis defines it once:
// the synthetic leaves, the frame grammar, and the modules of each layer. Until it has come,
// no frame is a leaf and every frame's layer is "other".
let IDLE = null;
let BLOCKED = null;
let GIL = null;
let CPU_WAIT = null;
let GC = null;
let TASK_LEAVES = new Set();
let FRAME = /$^/;
let SITE = /$^/;
let LIBDIR = /$^/;
let FRAMEWORKS = new Set();
let LOOPS = new Set();
let STDLIB = new Set();

/** Reads frames by the rules the API serves. */
export function setRules(rules) {
  IDLE = rules.leaves.idle;
  BLOCKED = rules.leaves.blocked;
  GIL = rules.leaves.gil;
  CPU_WAIT = rules.leaves.cpu_wait;
  GC = rules.gc_frame;
  TASK_LEAVES = new Set(rules.tasks.leaves);
  FRAME = new RegExp(rules.frame);
  SITE = new RegExp(rules.module.site);
  LIBDIR = new RegExp(rules.module.libdir);
  FRAMEWORKS = new Set(rules.layers.framework);
  LOOPS = new Set(rules.layers.event_loop);
  STDLIB = new Set(rules.layers.stdlib);
  infos.clear();
}

export function rulesSet() {
  return IDLE !== null;
}

const infos = new Map();

/** What one frame text says: name, file, line, table key, layer; cached per distinct text. */
export function frameInfo(text) {
  let info = infos.get(text);
  if (info) return info;
  const m = FRAME.exec(text);
  const name = m ? m[1] : text;
  const file = m ? m[2] : "";
  const line = m ? Number(m[3]) : 0;
  info = {
    text,
    name,
    file,
    line,
    key: file ? `${name} (${file})` : name,
    layer: layerOf(name, file),
    lower: text.toLowerCase(),
  };
  if (infos.size > 200_000) infos.clear();
  infos.set(text, info);
  return info;
}

/** The top-level module of a frame's file, as the analysis finds it (analyze.module_of). */
function moduleOf(file) {
  const path = file.replace(/\\/g, "/").replace(SITE, "").replace(LIBDIR, "");
  if (path.startsWith("<")) return path;
  return path.replace(/^\/+/, "").split("/")[0].replace(/\.py$/, "");
}

function layerOf(name, file) {
  if (name === IDLE) return "idle";
  if (name === BLOCKED) return "blocked";
  if (name === GIL) return "gil";
  if (name === CPU_WAIT) return "cpu_wait";
  if (name === GC) return "gc";
  if (TASK_LEAVES.has(name)) return name.slice(1, -1); // running, ready, waiting
  if (!file) return "other";
  if (IDLE === null) return "other";
  const top = moduleOf(file);
  if (FRAMEWORKS.has(top)) return "framework";
  if (LOOPS.has(top) || STDLIB.has(top) || top.startsWith("<")) return "runtime";
  return "app";
}

export function isSynthetic(text) {
  return text === IDLE || text === BLOCKED || text === GIL || text === CPU_WAIT || TASK_LEAVES.has(text);
}

/** Folded text → rows of {frames, count, before}; `diff` reads two counts per line. */
export function parseFolded(text, diff = false) {
  const rows = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    let cut = line.lastIndexOf(" ");
    if (cut <= 0) continue;
    const count = Number(line.slice(cut + 1));
    let before = 0;
    let stack = line.slice(0, cut);
    if (diff) {
      cut = stack.lastIndexOf(" ");
      if (cut <= 0) continue;
      before = Number(stack.slice(cut + 1));
      stack = stack.slice(0, cut);
    }
    if (!Number.isFinite(count) || !Number.isFinite(before)) continue;
    rows.push({ frames: stack.split(";"), count, before });
  }
  return rows;
}

export class Node {
  constructor(name, parent) {
    this.name = name;
    this.parent = parent;
    this.depth = parent ? parent.depth + 1 : 0;
    this.value = 0; // samples (after, in a differential tree)
    this.before = 0; // differential trees: samples before
    this.self = 0;
    this.children = [];
    this.index = null;
  }

  child(name) {
    if (!this.index) this.index = new Map();
    let node = this.index.get(name);
    if (!node) {
      node = new Node(name, this);
      this.index.set(name, node);
      this.children.push(node);
    }
    return node;
  }

  get info() {
    return frameInfo(this.name);
  }

  /** Frame names from the root's child down to this node. */
  path() {
    const names = [];
    for (let node = this; node && node.parent; node = node.parent) names.push(node.name);
    return names.reverse();
  }

  find(path) {
    let node = this;
    for (const name of path) {
      node = node.index && node.index.get(name);
      if (!node) return null;
    }
    return node;
  }
}

/** The call tree of folded rows, children in name order (the classic flamegraph layout). */
export function buildTree(rows) {
  const root = new Node("all", null);
  let maxDepth = 0;
  let nodes = 1;
  for (const { frames, count, before } of rows) {
    let node = root;
    root.value += count;
    root.before += before;
    for (const frame of frames) {
      const had = node.index && node.index.has(frame);
      node = node.child(frame);
      if (!had) nodes += 1;
      node.value += count;
      node.before += before;
    }
    node.self += count;
    if (frames.length > maxDepth) maxDepth = frames.length;
  }
  const sort = (node) => {
    node.children.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const child of node.children) sort(child);
  };
  sort(root);
  return { root, maxDepth, nodes, total: root.value };
}

/** Where the loop waits: the frame right below each [blocked] leaf, with its samples. */
export function blockingSites(rows) {
  const sites = new Map();
  for (const { frames, count } of rows) {
    if (frames[frames.length - 1] !== BLOCKED) continue;
    let i = frames.length - 2;
    while (i >= 0 && isSynthetic(frames[i])) i -= 1;
    const site = i >= 0 ? frames[i] : "(no frame)";
    sites.set(site, (sites.get(site) || 0) + count);
  }
  return sites;
}

/** A search: plain text matches case-insensitively; /regex/ is a regular expression. */
export function matcher(query) {
  const q = (query || "").trim();
  if (!q) return null;
  if (q.length > 2 && q.startsWith("/") && q.endsWith("/")) {
    try {
      const re = new RegExp(q.slice(1, -1), "i");
      return (info) => re.test(info.text);
    } catch {
      // not a valid expression: search for the text itself
    }
  }
  const lower = q.toLowerCase();
  return (info) => info.lower.includes(lower);
}

/** Samples under frames that match (nested matches count once) and how many frames match. */
export function matchedShare(root, match) {
  let samples = 0;
  let frames = 0;
  const walk = (node, inside) => {
    const hit = node.parent !== null && match(node.info);
    if (hit) frames += 1;
    if (hit && !inside) samples += node.value;
    for (const child of node.children) walk(child, inside || hit);
  };
  walk(root, false);
  return { samples, frames };
}

/**
 * The sandwich of one function (a table key): its callers (stacks from each innermost call up to
 * the root, the function first) and its callees (stacks from each outermost call down), so
 * recursion counts once.
 */
export function sandwich(rows, key) {
  const callers = [];
  const callees = [];
  for (const { frames, count } of rows) {
    let first = -1;
    let last = -1;
    for (let i = 0; i < frames.length; i += 1) {
      if (frameInfo(frames[i]).key !== key) continue;
      if (first < 0) first = i;
      last = i;
    }
    if (first < 0) continue;
    callees.push({ frames: frames.slice(first), count, before: 0 });
    callers.push({ frames: frames.slice(0, last + 1).reverse(), count, before: 0 });
  }
  return { callers: buildTree(callers), callees: buildTree(callees) };
}
