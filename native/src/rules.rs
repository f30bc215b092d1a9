//! The rules the native side shares with the Python side, each defined once: here for the
//! native side, exported to Python as module attributes (`lib.rs`), and checked against the
//! Python definitions by `tests/test_native_rules.py`. The synthetic leaves of off-CPU samples
//! and of task stacks, what the SVG reader writes for pruned frames and for ';' in a name, how
//! a frame is written in folded text, and which frames are known waits.

/// The leaf of a sample off CPU in an idle wait (Python: `sidecar.profile.IDLE_LEAF`).
pub const IDLE_LEAF: &str = "[idle]";
/// The leaf of a loop thread's sample off CPU anywhere else (`sidecar.profile.BLOCKED_LEAF`).
pub const BLOCKED_LEAF: &str = "[blocked]";
/// The leaf of a thread waiting for the GIL another thread holds
/// (`sidecar.rules.frames.GIL_LEAF`).
pub const GIL_LEAF: &str = "[gil]";

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
    /// An event loop's poll: a thread back from it waits for the GIL in this frame, so it is
    /// asked whether it does.
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

#[cfg(test)]
mod tests {
    use super::*;

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
