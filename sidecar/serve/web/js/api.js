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

/** A profile's folded text, and which threads the API says it counts (`loop` or `all`). */
export async function getProfile(params, signal) {
  const response = await request("profile", params, signal);
  return { text: await response.text(), threads: response.headers.get("X-Sidecar-Threads") };
}

/**
 * The stalls of a range (GET /api/stalls: the oldest, as many as one answer holds), with
 * `longest`, the range's `n` longest, longest first (asked for with order=longest, so they are of
 * all its stalls, listed or not).
 */
export async function getStalls({ target, from, to }, signal, n = 10) {
  const query = { target, from, to };
  const [doc, longest] = await Promise.all([
    getJson("stalls", query, signal),
    getJson("stalls", { ...query, order: "longest", limit: n }, signal),
  ]);
  return { ...doc, longest: longest.stalls };
}

/** The range's `n` longest slow requests (GET /api/requests, order=longest), longest first. */
export async function getRequests({ target, from, to }, signal, n = 20) {
  return getJson("requests", { target, from, to, order: "longest", limit: n }, signal);
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
