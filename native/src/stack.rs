//! A thread's stack as every reader gives it; how a frame is written in folded text, which
//! frames are known waits and where a stack stands in its event loop are `crate::rules`.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::rules::{loop_place, LoopPlace};

/// A folded stack as a reader's cache holds it: its text, outermost frame first, and an id
/// no other stack of this process has. Stacks are equal when they are the same cache entry,
/// so a window counts a sample by hashing a number instead of the whole text; the same text
/// cached again (after a cache was cleared) is another stack, and windows merge such twins by
/// text when they are handed out (`crate::sampler::windows::Window::rows`).
///
/// Where it stands in its event loop (`crate::rules::loop_place`) is found once, as it is made.
#[derive(Debug, Clone)]
pub struct Stack {
    id: u64,
    text: Arc<str>,
    place: LoopPlace,
}

impl Stack {
    pub fn new(text: Arc<str>) -> Stack {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Stack {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            place: loop_place(&text),
            text,
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn place(&self) -> LoopPlace {
        self.place
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

/// What a thread had to do with the GIL in one sample (`crate::walker::gil`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GilRole {
    /// Neither held nor waited for it, or not known.
    #[default]
    None,
    Holds,
    /// Ready to run Python, waiting for the GIL.
    Waits,
}

/// One Python thread's stack in one sample.
#[derive(Debug, Clone)]
pub struct Trace {
    /// OS thread id as the interpreter knows it.
    pub tid: u64,
    /// On CPU: the OS says running and the innermost frame is not a known wait.
    pub active: bool,
    /// Active, but waiting for a CPU: runnable while the kernel runs something else
    /// (`crate::process::cpuwait`).
    pub cpu_wait: bool,
    /// Folded, outermost frame first; None when the thread runs no Python code.
    pub stack: Option<Stack>,
    pub gil: GilRole,
    /// The interpreter was collecting garbage, on this thread (the GIL's holder).
    pub gc: bool,
    /// The thread's count of contexts entered and left (CPython's `context_ver`): an event
    /// loop runs each callback in its context, so two callbacks of the same code, one after
    /// the other, are told apart by it. 0 where it is not known (py-spy's reader).
    pub contexts: u64,
}

/// The run state a sample uses for each thread.
pub enum RunState<'a> {
    /// Read now from /proc (the threads run).
    Read,
    /// Read before the threads were stopped.
    Known(&'a HashMap<i32, bool>),
}
