// The sidecar HTTP API: JSON errors, an optional bearer token, requests that can be superseded.

const TOKEN_KEY = "sidecar.token";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Moves `?token=` from the page address into sessionStorage, so shared links never carry it. */
export function adoptToken() {
  const url = new URL(location.href);
  const token = url.searchParams.get("token");
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    url.searchParams.delete("token");
    history.replaceState(history.state, "", url);
  }
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/** The address of an API route with its query (relative, so a path prefix in front works). */
export function apiUrl(path, params = {}) {
  const url = new URL(`api/${path}`, document.baseURI);
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") url.searchParams.set(key, value);
  }
  return url;
}

async function request(path, params, signal) {
  let response;
  try {
    response = await fetch(apiUrl(path, params), { headers: headers(), signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "unreachable", "the sidecar does not answer");
  }
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      // not the API's error shape
    }
    const error = body && body.error;
    throw new ApiError(
      response.status,
      error ? error.code : "http",
      error ? error.message : `${response.status} ${response.statusText}`,
    );
  }
  return response;
}

export async function getJson(path, params, signal) {
  return (await request(path, params, signal)).json();
}

export async function getText(path, params, signal) {
  return (await request(path, params, signal)).text();
}

/** Stalls longest first, then oldest first. */
function byLength(stalls) {
  return [...stalls].sort((a, b) => b.duration_s - a.duration_s || a.start - b.start);
}

/** How many stalls of the range are at least `ms` long (one asked for: its count is of all). */
async function stallsAtLeast(query, ms, signal) {
  return (await getJson("stalls", { ...query, min_ms: ms, limit: 1 }, signal)).total;
}

/**
 * Lengths (whole milliseconds) whose answers hold the range's `n` longest stalls, when more than
 * `limit` (an answer's worth) reach `low`: by counts, doubled then halved, a length that from `n`
 * to `limit` stalls reach; failing one (over `limit` stalls within one millisecond), the next
 * length up, that fewer than `n` reach, and `low`, whose answer's oldest fill the ties.
 */
async function longestLengths(query, low, n, limit, signal) {
  let high = 2 * low + 1;
  let c = await stallsAtLeast(query, high, signal);
  while (c > limit) {
    [low, high] = [high, 2 * high + 1];
    c = await stallsAtLeast(query, high, signal);
  }
  if (c >= n) return [high];
  while (high - low > 1) {
    const mid = Math.floor((low + high) / 2);
    c = await stallsAtLeast(query, mid, signal);
    if (c >= n && c <= limit) return [mid];
    if (c > limit) low = mid;
    else high = mid;
  }
  return [high, low];
}

/**
 * The stalls of a range (GET /api/stalls: oldest first, at most as many as one answer holds),
 * with `longest`, its `n` longest, longest first. When the range holds more stalls than the
 * answer lists, the longest may be among those left out. They are at least as long as the
 * n-th longest listed: the stalls that long are asked for, and when they are too many to list,
 * the length that picks them out is found by counts first.
 */
export async function getStalls({ target, from, to }, signal, n = 10) {
  const query = { target, from, to };
  const doc = await getJson("stalls", query, signal);
  let pool = doc.stalls;
  if (pool.length < doc.total && pool.length >= n) {
    // a millisecond under the n-th longest listed: n stalls reach it, whatever the rounding
    const low = Math.max(0, Math.floor(byLength(pool)[n - 1].duration_s * 1000) - 1);
    const ask = (ms) => getJson("stalls", { ...query, min_ms: ms }, signal);
    let answers = [await ask(low)];
    if (answers[0].stalls.length < answers[0].total) {
      answers = await Promise.all((await longestLengths(query, low, n, pool.length, signal)).map(ask));
    }
    // the answers of two lengths overlap: each stall once
    const stalls = answers.flatMap((answer) => answer.stalls);
    pool = [...new Map(stalls.map((s) => [`${s.target} ${s.thread_id} ${s.start}`, s])).values()];
  }
  return { ...doc, longest: byLength(pool).slice(0, n) };
}

/** Saves an API answer as a file (fetched with the token, so no token lands in a link). */
export async function download(path, params, filename) {
  const blob = await (await request(path, params)).blob();
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/**
 * One slot of in-flight requests: starting a new one aborts the previous, so a slow answer for
 * an old selection never overwrites a newer one.
 */
export class Slot {
  constructor() {
    this.controller = null;
  }

  next() {
    if (this.controller) this.controller.abort();
    this.controller = new AbortController();
    return this.controller.signal;
  }
}

export function isAbort(err) {
  return err && err.name === "AbortError";
}
