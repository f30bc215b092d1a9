//! A thread's stack as every reader gives it, and the rules all readers share: how a frame is
//! written in folded text, and which frames are known waits.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A folded stack as a reader's cache holds it: its text, outermost frame first, and an id
/// no other stack of this process has. Stacks are equal when they are the same cache entry,
/// so a window counts a sample by hashing a number instead of the whole text; the same text
/// cached again (after a cache was cleared) is another stack, and windows merge such twins by
/// text when they are handed out (`crate::sampler::windows::Window::rows`).
#[derive(Debug, Clone)]
pub struct Stack {
    id: u64,
    text: Arc<str>,
}

impl Stack {
    pub fn new(text: Arc<str>) -> Stack {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Stack {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            text,
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

impl PartialEq for Stack {
    fn eq(&self, other: &Stack) -> bool {
        self.id == other.id
    }
}

impl Eq for Stack {}

impl Hash for Stack {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

/// One Python thread's stack in one sample.
#[derive(Debug, Clone)]
pub struct Trace {
    /// OS thread id as the interpreter knows it.
    pub tid: u64,
    /// On CPU: the OS says running and the innermost frame is not a known wait.
    pub active: bool,
    /// Folded, outermost frame first; None when the thread runs no Python code.
    pub stack: Option<Stack>,
}

/// The run state a sample uses for each thread.
pub enum RunState<'a> {
    /// Read now from /proc (the threads run).
    Read,
    /// Read before the threads were stopped.
    Known(&'a HashMap<i32, bool>),
}

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

/// The waits py-spy recognises by name to call a running thread idle. Names are qualified
/// (`Condition.wait`, `EpollSelector.select`): the rule looks at the last part.
pub(crate) fn is_wait(name: &str, file: &str) -> bool {
    let bare = name.rsplit('.').next().unwrap_or(name);
    (bare == "wait" && file.ends_with("threading.py"))
        || (bare == "select" && file.ends_with("selectors.py"))
        || (bare == "poll"
            && (file.ends_with("asyncore.py")
                || file.contains("zmq")
                || file.contains("gevent")
                || file.contains("tornado")))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
