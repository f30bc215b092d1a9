//! Each request in flight, read from its task's root coroutine (`rules::REQUEST_ROOTS`): its
//! method, its path without the query, the route the framework matched, when it started and
//! its trace id. Nothing else of a request is read: no other header, no query string, no body.
//!
//! - **aiohttp** runs each request in a task of `RequestHandler._handle_request(self, request,
//!   start_time, request_handler)`. `request._message` is the parser's `RawRequestMessage`, a
//!   named tuple (method, path, version, headers, raw_headers, ...) whose `raw_headers` is a
//!   tuple of (name, value) bytes pairs, as they came; the route is
//!   `request._match_info._route._resource`, a resource's `_formatter` (`/users/{id}`),
//!   `_path` (a plain one) or `_prefix` (a static one), set once the application resolved it
//!   (before that, and for a request no route matched, there is none). `start_time` is
//!   `loop.time()` when the access log is on, else None.
//! - **Tornado** runs each in a task of `RequestHandler._execute(self, ...)` (`self` in a cell
//!   there): `self.request`'s `method`, `path` (the query split off), `_start_time`
//!   (`time.time()`) and `headers._as_list` (each name normalised, `Traceparent`, to the list
//!   of its lines). The route is the pattern of the rule of the application's
//!   `wildcard_router` whose target is the handler's class (read once a class), and the class
//!   is said beside it.
//!
//! A trace id comes from W3C `traceparent` (its 32 hex digits), else B3 (`x-b3-traceid`, or
//! the single `b3` header's first field), else `x-request-id` (up to 128 visible characters),
//! and the header it came from is said. Every read is typed and bounded; a request whose
//! task's slot of it changed while it was read, or whose reads do not check out, is left out
//! and counted. Each scan reads each request anew: a task and its request may be freed and
//! others made at the same addresses, so no address tells that a request is the one read
//! before (a connection's next request once read as its last one's route).

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use rustc_hash::FxBuildHasher as FxBuild;

use super::attributes::{Attributes, TUPLE_SUBCLASS};
use super::clock::monotonic;
use super::objects::Kind;
use super::Target;
use crate::process::memory::{read, usize_at};
use crate::rules::REQUEST_ROOTS;
use crate::walker::values::{local_names, slot_object};

/// The longest path read (characters); a longer one is cut and marked.
const MAX_PATH: usize = 4096;
const SHOWN_PATH: usize = 1024;
const MAX_METHOD: usize = 16;
/// The most header pairs looked through, and the most bytes of a name and of a value read.
const MAX_HEADERS: usize = 512;
const MAX_HEADER_NAME: usize = 64;
const MAX_HEADER_VALUE: usize = 512;
const MAX_REQUEST_ID: usize = 128;
/// The most rules of a Tornado application looked through, and routes and names kept.
const MAX_RULES: usize = 4096;
const MAX_KEPT: usize = 65_536;
const MAX_LOCALS: usize = 64;
/// aiohttp's C parser's `RawRequestMessage` (a Cython class, `aiohttp/_http_parser.pyx`): its
/// attributes are properties over fields kept in the order declared after the object's head,
/// and no table of the type tells where. They are read there only while the type's name and
/// instance size are this class's: method, path and raw_headers (1st, 2nd and 5th of 10).
const CYTHON_MESSAGE: (&str, usize) = ("aiohttp._http_parser.RawRequestMessage", 96);
const CYTHON_FIELDS: [usize; 3] = [16, 24, 48];

/// The trace headers, in the order one is preferred to another, by their lower-case names.
pub const TRACE_HEADERS: [&str; 4] = ["traceparent", "x-b3-traceid", "b3", "x-request-id"];

/// A request in flight.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The framework of its root (`rules::REQUEST_ROOTS`).
    pub framework: &'static str,
    pub method: String,
    /// Without its query string (or fragment), cut at `SHOWN_PATH` characters ("…").
    pub path: String,
    /// The pattern the framework matched: None before it matched one, or when none did.
    pub route: Option<String>,
    /// Tornado's handler class.
    pub handler: Option<String>,
    pub started: Option<Started>,
    pub trace: Option<Trace>,
}

/// When a request started, as its framework keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Started {
    /// `loop.time()` (aiohttp's, for its access log): the monotonic clock, in seconds.
    Loop(f64),
    /// `time.time()` (Tornado's).
    Wall(f64),
}

impl Started {
    /// Unix seconds, and how long ago (s), as of the scan at `wall` and `mono` (its clocks).
    pub fn at(self, wall: f64, mono: f64) -> (f64, f64) {
        match self {
            Started::Loop(t) => (wall - (mono - t), mono - t),
            Started::Wall(t) => (t, wall - t),
        }
    }

    /// Which clock the framework kept it on.
    pub fn clock(self) -> &'static str {
        match self {
            Started::Loop(_) => "loop",
            Started::Wall(_) => "wall",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The header it came from (`TRACE_HEADERS`).
    pub header: &'static str,
    pub id: String,
}

/// The requests of a target's tasks, scan after scan.
#[derive(Default)]
pub struct Requests {
    attributes: Attributes,
    /// Each root code's local names, by its address.
    names: HashMap<usize, Vec<String>, FxBuild>,
    /// Tornado: each handler class's rule pattern (None: no rule of the application has it).
    rules: HashMap<usize, Option<String>, FxBuild>,
}

/// The framework whose request tasks begin with the frame `root` (`function (file:line)`).
pub fn framework_of(root: &str) -> Option<&'static str> {
    REQUEST_ROOTS
        .iter()
        .find(|(_, begins)| root.starts_with(begins))
        .map(|&(framework, _)| framework)
}

impl Requests {
    /// The request of the task whose outermost coroutine `coro` runs the code at `code` (its
    /// checked header `header`), a root of `framework`'s requests.
    pub fn read(
        &mut self,
        target: &Target,
        (coro, code, header): (usize, usize, &[u8]),
        framework: &'static str,
    ) -> Result<Request> {
        // the local that holds the request (aiohttp's) or its handler (Tornado's)
        let held = if framework == "aiohttp" {
            "request"
        } else {
            "self"
        };
        let frame = coro + target.tl.gen.iframe;
        let slot = self.slots(target, frame, code, header, held)?;
        let request = slot_object(&target.layout, slot).context("a request not bound yet")?;
        // a local an inner function refers to is kept in a cell (Tornado's `self`)
        let request = match self.attributes.kind(target.pid, request)? {
            Kind::Cell => self.attributes.cell(target.pid, request)?,
            _ => request,
        };
        let read = match framework {
            "aiohttp" => {
                let start = self.slots(target, frame, code, header, "start_time")?;
                self.aiohttp(target, request, slot_object(&target.layout, start))?
            }
            _ => self.tornado(target, request)?,
        };
        // the same request still: else the task moved on while it was read
        if self.slots(target, frame, code, header, held)? != slot {
            bail!("the request changed as it was read");
        }
        Ok(read)
    }

    /// The raw slot of the local `name` in the frame at `frame` running `code`.
    fn slots(
        &mut self,
        target: &Target,
        frame: usize,
        code: usize,
        header: &[u8],
        name: &str,
    ) -> Result<usize> {
        let layout = &target.layout;
        if !self.names.contains_key(&code) {
            let names: Vec<String> = local_names(target.pid, layout, header)?
                .into_iter()
                .map(|(name, _)| name)
                .take(MAX_LOCALS)
                .collect();
            if self.names.len() >= MAX_KEPT {
                self.names.clear();
            }
            self.names.insert(code, names);
        }
        let index = self.names[&code]
            .iter()
            .position(|n| n == name)
            .with_context(|| format!("no local {name:?} in the request's root"))?;
        let mut raw = [0u8; 8];
        read(
            target.pid,
            frame + layout.frame_localsplus + index * 8,
            &mut raw,
        )?;
        Ok(usize_at(&raw, 0))
    }

    fn aiohttp(
        &mut self,
        target: &Target,
        request: usize,
        start: Option<usize>,
    ) -> Result<Request> {
        let (pid, layout, a) = (target.pid, &target.layout, &mut self.attributes);
        let message = a
            .get(pid, layout, request, "_message")?
            .context("a request without its message")?;
        let [method_at, path_at, headers_at] = message_fields(a, target, message)?;
        let method = method(&a.text(pid, layout, method_at, MAX_METHOD)?)?;
        let path = path_only(&a.text(pid, layout, path_at, MAX_PATH)?);
        let mut found: [Option<String>; TRACE_HEADERS.len()] = Default::default();
        for pair in a.tuple(pid, layout, headers_at, MAX_HEADERS)? {
            let pair = a.tuple(pid, layout, pair, 2)?;
            let [name, value] = pair[..] else {
                bail!("a header of {} parts", pair.len());
            };
            let name = a.bytes(pid, layout, name, MAX_HEADER_NAME)?;
            let Some(at) = TRACE_HEADERS
                .iter()
                .position(|h| name.eq_ignore_ascii_case(h.as_bytes()))
            else {
                continue;
            };
            if found[at].is_none() {
                let value = a.bytes(pid, layout, value, MAX_HEADER_VALUE)?;
                found[at] = Some(String::from_utf8_lossy(&value).into_owned());
            }
        }
        let started = match start {
            None => None,
            Some(at) => match a.kind(pid, at)? {
                Kind::None => None,
                _ => Some(Started::Loop(a.float(pid, at)?)),
            },
        };
        Ok(Request {
            framework: "aiohttp",
            method,
            path,
            route: aiohttp_route(a, target, request)?,
            handler: None,
            started: started
                .filter(|s| matches!(s, Started::Loop(t) if t.is_finite() && *t >= 0.0)),
            trace: trace_of(&found),
        })
    }

    fn tornado(&mut self, target: &Target, handler: usize) -> Result<Request> {
        let (pid, layout) = (target.pid, &target.layout);
        let a = &mut self.attributes;
        let request = a
            .get(pid, layout, handler, "request")?
            .context("a handler without its request")?;
        let text = |a: &mut Attributes, name: &str, max: usize| -> Result<String> {
            let at = a
                .get(pid, layout, request, name)?
                .with_context(|| format!("a request without its {name}"))?;
            a.text(pid, layout, at, max)
        };
        let method = method(&text(a, "method", MAX_METHOD)?)?;
        let path = path_only(&text(a, "path", MAX_PATH)?);
        let started = match a.get(pid, layout, request, "_start_time")? {
            Some(at) => Some(a.float(pid, at)?).filter(|t| t.is_finite() && *t > 0.0),
            None => None,
        };
        let mut found: [Option<String>; TRACE_HEADERS.len()] = Default::default();
        if let Some(headers) = a.get(pid, layout, request, "headers")? {
            if let Some(dict) = a.get(pid, layout, headers, "_as_list")? {
                for (slot, name) in found.iter_mut().zip(TRACE_HEADERS) {
                    let Some(lines) = a.dict_item(pid, layout, dict, &tornado_header(name))? else {
                        continue;
                    };
                    if let Some(&first) = a.list(pid, lines, MAX_HEADERS)?.first() {
                        *slot = Some(a.text(pid, layout, first, MAX_HEADER_VALUE)?);
                    }
                }
            }
        }
        let (class, name) = a.type_of(pid, handler)?;
        if !self.rules.contains_key(&class) {
            let pattern = tornado_rule(a, target, handler, class)?;
            if self.rules.len() >= MAX_KEPT {
                self.rules.clear();
            }
            self.rules.insert(class, pattern);
        }
        Ok(Request {
            framework: "tornado",
            method,
            path,
            route: self.rules[&class].clone(),
            handler: Some(name),
            started: started.map(Started::Wall),
            trace: trace_of(&found),
        })
    }
}

/// Now on the two clocks a request's start may be kept on: (unix seconds, monotonic seconds).
pub fn clocks() -> (f64, f64) {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    (wall, monotonic())
}

/// Where aiohttp's request message at `message` keeps its method, path and raw headers: the
/// Python parser's named tuple's items, or the C parser's fields (`CYTHON_MESSAGE`).
fn message_fields(a: &mut Attributes, target: &Target, message: usize) -> Result<[usize; 3]> {
    let (pid, layout) = (target.pid, &target.layout);
    let info = a.type_info(pid, message)?;
    if info.flags & TUPLE_SUBCLASS == 0 {
        let (_, name) = a.type_of(pid, message)?;
        if (name.as_str(), info.basicsize) != CYTHON_MESSAGE {
            bail!("a request message of type {name}, not read");
        }
        let mut raw = [0u8; 40];
        read(pid, message + CYTHON_FIELDS[0], &mut raw)?;
        return Ok(CYTHON_FIELDS.map(|at| usize_at(&raw, at - CYTHON_FIELDS[0])));
    }
    let items = a.tuple(pid, layout, message, 16)?;
    if items.len() < 5 {
        bail!("a request message of {} fields", items.len());
    }
    Ok([items[0], items[1], items[4]])
}

/// The route aiohttp matched for the request at `request`: its resource's pattern.
fn aiohttp_route(a: &mut Attributes, target: &Target, request: usize) -> Result<Option<String>> {
    let (pid, layout) = (target.pid, &target.layout);
    let mut at = request;
    for name in ["_match_info", "_route", "_resource"] {
        match a.get(pid, layout, at, name)? {
            Some(next) if a.kind(pid, next)? != Kind::None => at = next,
            _ => return Ok(None), // not resolved yet, or a system route (404, 405)
        }
    }
    for name in ["_formatter", "_path", "_prefix"] {
        if let Some(pattern) = a.get(pid, layout, at, name)? {
            if a.kind(pid, pattern)? == Kind::Str {
                return Ok(Some(shown_path(a.text(pid, layout, pattern, MAX_PATH)?)));
            }
        }
    }
    Ok(None)
}

/// The pattern of the rule of the Tornado application of `handler` whose target is `class`.
fn tornado_rule(
    a: &mut Attributes,
    target: &Target,
    handler: usize,
    class: usize,
) -> Result<Option<String>> {
    let (pid, layout) = (target.pid, &target.layout);
    let mut at = handler;
    for name in ["application", "wildcard_router", "rules"] {
        match a.get(pid, layout, at, name)? {
            Some(next) => at = next,
            None => return Ok(None),
        }
    }
    for rule in a.list(pid, at, MAX_RULES)? {
        if a.get(pid, layout, rule, "target")? != Some(class) {
            continue;
        }
        let mut at = rule;
        for name in ["matcher", "regex", "pattern"] {
            match a.get(pid, layout, at, name)? {
                Some(next) => at = next,
                None => return Ok(None),
            }
        }
        if a.kind(pid, at)? != Kind::Str {
            return Ok(None); // a bytes pattern
        }
        let pattern = a.text(pid, layout, at, MAX_PATH)?;
        return Ok(Some(shown_path(
            pattern.strip_suffix('$').unwrap_or(&pattern).to_string(),
        )));
    }
    Ok(None)
}

/// How Tornado's `HTTPHeaders` keeps a header's name: each dash-separated part capitalised.
fn tornado_header(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or(String::new(), |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// A method as read: an HTTP token, else the read is not trusted.
fn method(text: &str) -> Result<String> {
    if text.is_empty()
        || !text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
    {
        bail!("a request method that is not a token: a torn read");
    }
    Ok(text.to_string())
}

/// A request target's path: the scheme and authority of an absolute one, the query and the
/// fragment taken off.
pub fn path_only(target: &str) -> String {
    let mut path = target;
    for scheme in ["http://", "https://"] {
        if let Some(rest) = target.strip_prefix(scheme) {
            path = rest.find('/').map_or("/", |at| &rest[at..]);
        }
    }
    let end = path.find(['?', '#']).unwrap_or(path.len());
    shown_path(path[..end].to_string())
}

/// A path or pattern cut at `SHOWN_PATH` characters, control characters replaced.
fn shown_path(text: String) -> String {
    let mut shown: String = text
        .chars()
        .take(SHOWN_PATH)
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    if text.chars().count() > SHOWN_PATH {
        shown.push('…');
    }
    shown
}

/// The trace id the headers found (by `TRACE_HEADERS`' order) tell, and the header it came
/// from; a header whose value is not well formed tells none.
pub fn trace_of(found: &[Option<String>; TRACE_HEADERS.len()]) -> Option<Trace> {
    found.iter().zip(TRACE_HEADERS).find_map(|(value, header)| {
        let value = value.as_deref()?.trim();
        let id = match header {
            "traceparent" => traceparent(value),
            "x-b3-traceid" => hex_id(value, &[16, 32]),
            "b3" => hex_id(value.split('-').next()?, &[16, 32]),
            _ => request_id(value),
        }?;
        Some(Trace { header, id })
    })
}

/// W3C Trace Context: `VERSION-TRACEID-PARENTID-FLAGS`, the trace id 32 lower-case hex digits
/// not all zero; version `ff` is invalid, and a later version may add fields after the four.
fn traceparent(value: &str) -> Option<String> {
    let mut parts = value.split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let lower_hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if !lower_hex(version, 2) || version == "ff" || !lower_hex(parent, 16) || !lower_hex(flags, 2) {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    (lower_hex(trace, 32) && trace.bytes().any(|b| b != b'0')).then(|| trace.to_string())
}

/// A hex id of one of the lengths `lengths`, not all zero, in lower case.
fn hex_id(value: &str, lengths: &[usize]) -> Option<String> {
    (lengths.contains(&value.len())
        && value.bytes().all(|b| b.is_ascii_hexdigit())
        && value.bytes().any(|b| b != b'0'))
    .then(|| value.to_ascii_lowercase())
}

/// An `x-request-id`: 1 to `MAX_REQUEST_ID` visible ASCII characters, no quote or backslash.
fn request_id(value: &str) -> Option<String> {
    (!value.is_empty()
        && value.len() <= MAX_REQUEST_ID
        && value
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\'))
    .then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(pairs: &[(&str, &str)]) -> [Option<String>; TRACE_HEADERS.len()] {
        let mut found: [Option<String>; TRACE_HEADERS.len()] = Default::default();
        for (name, value) in pairs {
            let at = TRACE_HEADERS.iter().position(|h| h == name).unwrap();
            found[at] = Some(value.to_string());
        }
        found
    }

    #[test]
    fn a_traceparent_gives_its_trace_id_and_wins() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736";
        let tp = format!("00-{id}-00f067aa0ba902b7-01");
        let trace = trace_of(&found(&[("traceparent", &tp), ("x-request-id", "abc")])).unwrap();
        assert_eq!((trace.header, trace.id.as_str()), ("traceparent", id));
        // a later version may add fields; version ff, upper case, zeros and short ids do not
        assert!(traceparent(&format!("01-{id}-00f067aa0ba902b7-01-more")).is_some());
        for bad in [
            format!("ff-{id}-00f067aa0ba902b7-01"),
            format!("00-{}-00f067aa0ba902b7-01", id.to_uppercase()),
            format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32)),
            format!("00-{}-00f067aa0ba902b7-01", &id[..30]),
            format!("00-{id}-00f067aa0ba902b7-01-more"),
            format!("00-{id}-00f067aa0ba902b7"),
        ] {
            assert_eq!(traceparent(&bad), None, "{bad}");
        }
    }

    #[test]
    fn b3_and_request_ids_come_after_a_traceparent() {
        let bad_tp = ("traceparent", "garbage");
        let t = trace_of(&found(&[
            bad_tp,
            ("x-b3-traceid", "80F198EE56343BA864FE8B2A57D3EFF7"),
        ]));
        assert_eq!(
            t.map(|t| (t.header, t.id)),
            Some(("x-b3-traceid", "80f198ee56343ba864fe8b2a57d3eff7".into()))
        );
        let t = trace_of(&found(&[("b3", "a3ce929d0e0e4736-00f067aa0ba902b7-1")]));
        assert_eq!(t.map(|t| t.id), Some("a3ce929d0e0e4736".into()));
        let t = trace_of(&found(&[("x-request-id", " req-42/7 ")]));
        assert_eq!(
            t.map(|t| (t.header, t.id)),
            Some(("x-request-id", "req-42/7".into()))
        );
        for bad in ["", "a b", "\"q\"", &"x".repeat(MAX_REQUEST_ID + 1)] {
            assert_eq!(trace_of(&found(&[("x-request-id", bad)])), None, "{bad:?}");
        }
    }

    #[test]
    fn a_path_loses_its_query_and_its_authority() {
        assert_eq!(path_only("/users/2?token=s3cret#x"), "/users/2");
        assert_eq!(path_only("http://example.com/a/b?q"), "/a/b");
        assert_eq!(path_only("https://example.com"), "/");
        assert_eq!(path_only("*"), "*");
        assert_eq!(path_only("/a\u{7}b"), "/a\u{fffd}b");
        let long = path_only(&format!("/{}", "x".repeat(SHOWN_PATH + 10)));
        assert_eq!(long.chars().count(), SHOWN_PATH + 1);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn tornado_names_headers_as_its_headers_do() {
        assert_eq!(tornado_header("traceparent"), "Traceparent");
        assert_eq!(tornado_header("x-request-id"), "X-Request-Id");
        assert_eq!(tornado_header("x-b3-traceid"), "X-B3-Traceid");
        assert_eq!(tornado_header("b3"), "B3");
    }

    #[test]
    fn a_method_is_a_token() {
        assert_eq!(method("GET").unwrap(), "GET");
        assert!(method("").is_err());
        assert!(method("G T").is_err());
    }

    #[test]
    fn each_root_names_its_framework() {
        let aio = "RequestHandler._handle_request (aiohttp/web_protocol.py:577)";
        assert_eq!(framework_of(aio), Some("aiohttp"));
        assert_eq!(
            framework_of("RequestHandler._execute (tornado/web.py:1960)"),
            Some("tornado")
        );
        assert_eq!(
            framework_of("RequestHandler.start (aiohttp/web_protocol.py:610)"),
            None
        );
    }
}
