//! The rules the native side shares with the Python side, each defined once: here for the
//! native side, exported to Python as module attributes (`lib.rs`), and checked against the
//! Python definitions by `tests/unit/test_native_rules.py`. The synthetic leaves of off-CPU
//! samples and of task stacks, what the SVG reader writes for pruned frames and for ';' in a
//! name, how a frame is written in folded text, and which frames are known waits.

/// The leaf of a sample off CPU in an idle wait (Python: `sidecar.rules.frames.IDLE_LEAF`).
pub const IDLE_LEAF: &str = "[idle]";
/// The leaf of a loop thread's sample off CPU anywhere else
/// (`sidecar.rules.frames.BLOCKED_LEAF`).
pub const BLOCKED_LEAF: &str = "[blocked]";
/// The leaf of a thread waiting for the GIL another thread holds
/// (`sidecar.rules.frames.GIL_LEAF`).
pub const GIL_LEAF: &str = "[gil]";
/// The leaf of a thread runnable but waiting for a CPU (`sidecar.rules.frames.CPU_WAIT_LEAF`).
pub const CPU_WAIT_LEAF: &str = "[cpu_wait]";

/// The leaves of task stacks, one per state (`sidecar.rules.tasks.TASK_LEAVES`, in this order).
pub const RUNNING_LEAF: &str = "[running]";
pub const READY_LEAF: &str = "[ready]";
pub const WAITING_LEAF: &str = "[waiting]";
pub const TASK_LEAVES: [&str; 3] = [RUNNING_LEAF, READY_LEAF, WAITING_LEAF];

/// The frame an SVG's top-level frames too narrow to draw become (`sidecar.formats.svg.PRUNED_FRAME`).
pub const PRUNED_FRAME: &str = "[pruned]";
/// What a ';' in a frame's name is written as in folded stacks read from an SVG
/// (`sidecar.formats.svg.SEMICOLON_STANDIN`).
pub const SEMICOLON_STANDIN: &str = "\u{ff1b}";

/// How a known wait's file is told: by how its path ends, or by a part of it.
#[derive(Debug, Clone, Copy)]
pub enum FileMatch {
    EndsWith(&'static str),
    Contains(&'static str),
}

impl FileMatch {
    fn matches(self, file: &str) -> bool {
        match self {
            FileMatch::EndsWith(suffix) => file.ends_with(suffix),
            FileMatch::Contains(part) => file.contains(part),
        }
    }
}

/// The waits py-spy recognises by name to call a running thread idle: the last part of the
/// function's qualified name, and its file.
pub const KNOWN_WAITS: [(&str, FileMatch); 6] = [
    ("wait", FileMatch::EndsWith("threading.py")),
    ("select", FileMatch::EndsWith("selectors.py")),
    ("poll", FileMatch::EndsWith("asyncore.py")),
    ("poll", FileMatch::Contains("zmq")),
    ("poll", FileMatch::Contains("gevent")),
    ("poll", FileMatch::Contains("tornado")),
];

/// Formats a frame like py-spy's raw output: `function (file:line)`. Semicolons separate
/// frames in folded text, so they cannot appear inside one.
///
/// A read torn by the target changing under it can yield control characters; they are never
/// in real names and would make folded text look binary and SVG invalid, so they become U+FFFD.
pub(crate) fn format_frame(name: &str, file: &str, line: i32) -> String {
    let text = format!("{name} ({file}:{line})");
    if !text
        .chars()
        .any(|c| c == ';' || (c.is_control() && c != '\t'))
    {
        return text;
    }
    text.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' => ' ',
            '\t' => c,
            c if c.is_control() => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// What a frame of `KNOWN_WAITS` waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Wait {
    /// Not a known wait.
    #[default]
    No,
    /// An event loop's poll: its state is read (a loop woken from it runs, or waits for a
    /// CPU), and a thread back from it waits for the GIL in this frame, so it is asked whether
    /// it does.
    Poll,
    /// A threading primitive's `wait` (a condition, an event, a queue's get): it stays idle,
    /// as it always read.
    Lock,
}

/// Which of `KNOWN_WAITS` a frame is, if any. Names are qualified (`Condition.wait`,
/// `EpollSelector.select`): the rule looks at the last part.
pub(crate) fn wait_of(name: &str, file: &str) -> Wait {
    let bare = name.rsplit('.').next().unwrap_or(name);
    match KNOWN_WAITS
        .iter()
        .find(|&&(wait, in_file)| bare == wait && in_file.matches(file))
    {
        None => Wait::No,
        Some(("wait", _)) => Wait::Lock,
        Some(_) => Wait::Poll,
    }
}

/// Frames that enter an event loop: (function, file suffix), "" matching any file; the
/// innermost such frame of a stack is the loop's. This table, `CALLBACK_RUNNERS` and
/// `LOOP_PASSES` are defined here only: `sidecar.rules.loops` reads them.
pub const LOOP_ENTRIES: [(&str, &str); 11] = [
    ("run_forever", "asyncio/base_events.py"),
    ("run_until_complete", "asyncio/base_events.py"),
    ("run", "asyncio/runners.py"),
    ("run", "uvloop/__init__.py"),
    ("run_app", "aiohttp/web.py"),
    // gunicorn's aiohttp workers; under uvloop no Python frame of the loop's own shows
    ("run", "aiohttp/worker.py"),
    ("start", "tornado/platform/asyncio.py"),
    ("start", "tornado/ioloop.py"),
    ("run_sync", "tornado/ioloop.py"),
    ("run_forever", ""),
    ("run_until_complete", ""),
];

/// The root coroutines of request tasks, as their frames begin (`function (file:`), with the
/// framework each is: aiohttp runs each request's handler in a task of
/// `RequestHandler._handle_request` (awaited by the connection's `RequestHandler.start` task),
/// Tornado each request in a task of `RequestHandler._execute`. Every other task is
/// background. Defined here only: `sidecar.rules.tasks` reads it, and the task scan reads each
/// such task's request (`crate::tasks::requests`).
pub const REQUEST_ROOTS: [(&str, &str); 2] = [
    (
        "aiohttp",
        "RequestHandler._handle_request (aiohttp/web_protocol.py:",
    ),
    ("tornado", "RequestHandler._execute (tornado/web.py:"),
];

/// The first frame of a request's task stacks: `[METHOD ROUTE]`, the route the framework
/// matched (`(no route)` before it matched one, or when none did), a ';' in it written as
/// `SEMICOLON_STANDIN` (`sidecar.rules.tasks.route_of` reads it).
pub fn route_frame(method: &str, route: Option<&str>) -> String {
    let route = route.unwrap_or(NO_ROUTE).replace(';', SEMICOLON_STANDIN);
    format!("[{method} {route}]")
}

/// The route of a request no route matched (yet) (`sidecar.rules.tasks.NO_ROUTE`).
pub const NO_ROUTE: &str = "(no route)";

/// The frame of asyncio's loop that runs one callback (one step of a task, or a plain
/// callback): the frame above it is the callback's.
/// uvloop runs its callbacks from C, so there the frame above the loop's entry is.
pub const CALLBACK_RUNNERS: [(&str, &str); 1] = [("_run", "asyncio/events.py")];

/// asyncio's pass of its loop: with no callback above it, the loop is between callbacks (in
/// its poll, or moving timers), not in one.
pub const LOOP_PASSES: [(&str, &str); 1] = [("_run_once", "asyncio/base_events.py")];

/// Where a thread's stack stands in its event loop, as one sample of it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoopPlace {
    /// No frame entered an event loop: not a loop's thread, as far as this stack tells.
    #[default]
    Outside,
    /// In the loop but in none of its callbacks: its poll, its own bookkeeping.
    Between,
    /// In one callback of the loop, whose frame is the `index`th from the root; `key` tells
    /// the stack's frames up to that one from others (a hash of their text).
    Callback { index: u16, key: u64 },
}

/// Splits a frame written by `format_frame` into its function and file; None for frames that
/// name no code (a synthetic leaf).
fn name_and_file(frame: &str) -> Option<(&str, &str)> {
    let inner = frame.strip_suffix(')')?;
    let open = inner.rfind(" (")?;
    let (name, rest) = (&inner[..open], &inner[open + 2..]);
    let file = &rest[..rest.rfind(':')?];
    (!file.is_empty()).then_some((name, file))
}

fn in_table(table: &[(&str, &str)], name: &str, file: &str) -> bool {
    let bare = name.rsplit('.').next().unwrap_or(name);
    table
        .iter()
        .any(|&(function, suffix)| bare == function && file.ends_with(suffix))
}

/// Where the folded stack `text` stands in its event loop: outside any, between callbacks,
/// or in one callback (the frame above asyncio's callback runner, or under a loop that runs
/// its callbacks from C, above the loop's entry). Run once per unique stack.
pub fn loop_place(text: &str) -> LoopPlace {
    let frames: Vec<(usize, Option<(&str, &str)>)> = text
        .split(';')
        .scan(0usize, |end, frame| {
            *end += frame.len() + 1;
            Some((*end - 1, name_and_file(frame)))
        })
        .collect();
    let innermost = |table: &[(&str, &str)], from: usize| {
        (from..frames.len()).rev().find(|&i| {
            frames[i]
                .1
                .is_some_and(|(name, file)| in_table(table, name, file))
        })
    };
    let Some(entry) = innermost(&LOOP_ENTRIES, 0) else {
        return LoopPlace::Outside;
    };
    let callback = match innermost(&CALLBACK_RUNNERS, entry + 1) {
        // a callback of C code (a future's callback written in C) is the runner's own frame
        Some(runner) => (runner + 1).min(frames.len() - 1),
        None if innermost(&LOOP_PASSES, entry + 1).is_some() => return LoopPlace::Between,
        None => entry + 1,
    };
    match frames.get(callback) {
        Some(&(end, _)) => LoopPlace::Callback {
            index: callback.min(u16::MAX as usize) as u16,
            key: {
                use std::hash::{Hash, Hasher};
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                text[..end].hash(&mut hasher);
                hasher.finish()
            },
        },
        None => LoopPlace::Between,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_is_placed_in_its_loop() {
        let base = "<module> (app.py:1);run (asyncio/runners.py:118);\
                    BaseEventLoop.run_forever (asyncio/base_events.py:608);\
                    BaseEventLoop._run_once (asyncio/base_events.py:1922)";
        assert_eq!(
            loop_place("main (app.py:3);work (app.py:9)"),
            LoopPlace::Outside
        );
        assert_eq!(loop_place(base), LoopPlace::Between);
        let poll = format!("{base};EpollSelector.select (selectors.py:468)");
        assert_eq!(loop_place(&poll), LoopPlace::Between);
        let handler = format!("{base};Handle._run (asyncio/events.py:84);handler (app.py:12)");
        let deeper = format!("{handler};time.sleep (app.py:13)");
        let (LoopPlace::Callback { index, key }, LoopPlace::Callback { index: i2, key: k2 }) =
            (loop_place(&handler), loop_place(&deeper))
        else {
            panic!("not in a callback: {:?}", loop_place(&handler));
        };
        assert_eq!((index, i2, key), (5, 5, k2));
        let other = format!("{base};Handle._run (asyncio/events.py:84);other (app.py:20)");
        assert!(matches!(loop_place(&other), LoopPlace::Callback { key, .. } if key != k2));
        // a C callback: the runner's frame is the callback's
        let c = format!("{base};Handle._run (asyncio/events.py:84)");
        assert!(matches!(
            loop_place(&c),
            LoopPlace::Callback { index: 4, .. }
        ));
        // uvloop: its callbacks run from C, above the loop's entry
        let uv = "<module> (app.py:1);run (uvloop/__init__.py:105);handler (app.py:12)";
        assert!(matches!(
            loop_place(uv),
            LoopPlace::Callback { index: 2, .. }
        ));
        assert_eq!(
            loop_place("<module> (app.py:1);run (uvloop/__init__.py:105)"),
            LoopPlace::Between
        );
    }

    fn is_wait(name: &str, file: &str) -> bool {
        wait_of(name, file) != Wait::No
    }

    #[test]
    fn waits_are_recognised_by_their_qualified_names() {
        assert!(is_wait("wait", "/usr/lib/python3.11/threading.py"));
        assert!(is_wait(
            "Condition.wait",
            "/usr/lib/python3.11/threading.py"
        ));
        assert!(is_wait(
            "EpollSelector.select",
            "/usr/lib/python3.12/selectors.py"
        ));
        assert!(is_wait(
            "PollIOLoop.poll",
            "/srv/site-packages/tornado/platform/asyncio.py"
        ));
        assert!(!is_wait(
            "Condition.notify",
            "/usr/lib/python3.11/threading.py"
        ));
        assert!(!is_wait("Server.wait", "/srv/app/server.py"));
        assert_eq!(
            wait_of("Condition.wait", "/usr/lib/python3.11/threading.py"),
            Wait::Lock
        );
        assert_eq!(
            wait_of("EpollSelector.select", "/usr/lib/python3.12/selectors.py"),
            Wait::Poll
        );
    }
}
