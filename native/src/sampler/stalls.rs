//! Stalls: each callback of an event loop that kept the loop from its poll for at least a
//! threshold, found in a loop thread's samples as they arrive, in time order.
//!
//! A stall is a run of one loop thread's samples in the same callback of its loop
//! (`crate::rules::LoopPlace::Callback`), busy, blocked or waiting for the GIL, ended by a
//! sample between callbacks (its poll) or in another callback: two requests handled back to
//! back are two stalls, as their callbacks are two: told apart by what the loop called and,
//! through the walker, by the thread's count of contexts entered (each callback runs in its
//! context: `crate::stack::Trace::contexts`). Through py-spy's reader, which does not read
//! that count, two runs of the same code back to back with no sample in the poll between them
//! read as one. Its length is
//! from the samples' own times: from its first sample to the sample that ended it, within a
//! sample period of the truth at either end. A loop that runs many short callbacks has no
//! stall: each is a run of a sample or two.
//!
//! A loop thread back from its poll that waits there for the GIL another thread holds is held
//! as surely as by a callback: such a run is a stall too, its callback the poll's frame.
//!
//! A sample of a loop thread whose stack shows no loop (a read that missed the stack's root)
//! neither ends nor extends a run.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use crate::rules::LoopPlace;
use crate::stack::{GilRole, Stack, Trace};

/// The most distinct (state, stack) pairs a stall counts apart; samples of others count in
/// `Stall::other`.
const MAX_STACKS: usize = 64;
/// Rooms of short runs kept for the next runs.
const SPARE: usize = 4;
/// The most stalls a window keeps: past it the longest are kept and the rest counted
/// (`Window::stalls_dropped`).
pub const MAX_STALLS: usize = 100;

/// What stands for the callback of a loop kept in its poll by the GIL (`Stall::callback`: the
/// poll's frame).
const POLL_KEY: u64 = u64::MAX;
/// The callback index of such a stall: the innermost frame (the poll's), found as it is handed
/// out, not on each sample.
const INNERMOST: u16 = u16::MAX;

/// What a loop thread did in one sample of a stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StallState {
    Busy,
    Blocked,
    Gil,
    /// Runnable, waiting for a CPU.
    CpuWait,
}

impl StallState {
    pub fn name(self) -> &'static str {
        match self {
            StallState::Busy => "busy",
            StallState::Blocked => "blocked",
            StallState::Gil => "gil",
            StallState::CpuWait => "cpu_wait",
        }
    }
}

/// One stall of one loop thread.
#[derive(Debug, Clone)]
pub struct Stall {
    pub thread_id: u64,
    /// Its first sample's time and the time of the sample that ended it (unix seconds); for a
    /// stall still running when sampling ended, its last sample's.
    pub start: f64,
    pub end: f64,
    pub ongoing: bool,
    pub samples: u64,
    /// Samples taken while the thread collected garbage.
    pub gc: u64,
    /// Samples by state and stack (a few, looked up in turn), and those past `MAX_STACKS`.
    pub stacks: Vec<((StallState, Stack), u64)>,
    pub other: u64,
    /// Samples waiting for the GIL by who held it: its thread (0: none) and stack.
    pub holders: HashMap<(u64, Option<Stack>), u64, FxBuildHasher>,
    /// The asyncio task a task scan found running in it, if one did: its name and folded
    /// stack (`crate::tasks::TaskSamples::running`).
    pub task: Option<(String, String)>,
    /// Its first sample's stack, and which of its frames is the callback's.
    first: Stack,
    callback_index: u16,
}

impl Stall {
    pub fn duration(&self) -> f64 {
        self.end - self.start
    }

    /// The callback's frame, as folded text writes it.
    pub fn callback(&self) -> &str {
        let mut frames = self.first.text().split(';');
        match self.callback_index {
            INNERMOST => frames.next_back(),
            index => frames.nth(index as usize),
        }
        .unwrap_or("")
    }
}

/// A run in progress: the callback it is in, and its stall so far.
struct Open {
    /// The thread's count of contexts when it began, and the key of its frames.
    callback: (u64, u64),
    stall: Stall,
    /// The tick that last saw its thread.
    tick: u64,
}

/// The stall detector of one target: the run in progress of each loop thread.
pub struct Stalls {
    threshold: f64,
    open: HashMap<u64, Open, FxBuildHasher>,
    tick: u64,
    /// The room of short runs' stacks, for the next runs.
    spare: Vec<Vec<((StallState, Stack), u64)>>,
}

impl Stalls {
    /// A detector of stalls of at least `threshold` seconds.
    pub fn new(threshold: f64) -> Stalls {
        Stalls {
            threshold,
            open: HashMap::default(),
            tick: 0,
            spare: Vec::new(),
        }
    }

    /// One tick's traces, read at `wall`: the stalls they end go onto `ended`.
    pub fn observe(&mut self, traces: &[Trace], wall: f64, ended: &mut Vec<Stall>) {
        self.tick += 1;
        let holder = traces.iter().find(|t| t.gil == GilRole::Holds);
        for trace in traces {
            let Some(stack) = &trace.stack else { continue };
            let (index, key) = match stack.place() {
                // back from its poll but kept there by another thread's hold on the GIL: as
                // good as a callback that holds the loop
                LoopPlace::Between if trace.gil == GilRole::Waits => (INNERMOST, POLL_KEY),
                LoopPlace::Outside => {
                    if let Some(open) = self.open.get_mut(&trace.tid) {
                        open.tick = self.tick;
                    }
                    continue;
                }
                LoopPlace::Between => {
                    if let Some(open) = self.open.remove(&trace.tid) {
                        self.close(open.stall, wall, ended);
                    }
                    continue;
                }
                LoopPlace::Callback { index, key } => (index, key),
            };
            let callback = (trace.contexts, key);
            if self.open.get(&trace.tid).map(|open| open.callback) != Some(callback) {
                // another callback: the run in progress ends here, a new one begins
                if let Some(open) = self.open.remove(&trace.tid) {
                    self.close(open.stall, wall, ended);
                }
                let stacks = self.spare.pop().unwrap_or_default();
                let stall = Stall {
                    thread_id: trace.tid,
                    start: wall,
                    end: wall,
                    ongoing: false,
                    samples: 0,
                    gc: 0,
                    stacks,
                    other: 0,
                    holders: HashMap::default(),
                    task: None,
                    first: stack.clone(),
                    callback_index: index,
                };
                let tick = self.tick;
                self.open.insert(
                    trace.tid,
                    Open {
                        callback,
                        stall,
                        tick,
                    },
                );
            }
            let Some(open) = self.open.get_mut(&trace.tid) else {
                continue;
            };
            open.tick = self.tick;
            let stall = &mut open.stall;
            stall.end = wall;
            stall.samples += 1;
            stall.gc += u64::from(trace.gc);
            let state = match (trace.gil, trace.active) {
                (GilRole::Waits, _) => StallState::Gil,
                (_, true) if trace.cpu_wait => StallState::CpuWait,
                (_, true) => StallState::Busy,
                (_, false) => StallState::Blocked,
            };
            let room = stall.stacks.len() < MAX_STACKS;
            match stall
                .stacks
                .iter_mut()
                .find(|((s, st), _)| *s == state && st == stack)
            {
                Some((_, count)) => *count += 1,
                None if room => stall.stacks.push(((state, stack.clone()), 1)),
                None => stall.other += 1,
            }
            if state == StallState::Gil && stall.holders.len() < MAX_STACKS {
                let by = holder.map_or((0, None), |h| (h.tid, h.stack.clone()));
                *stall.holders.entry(by).or_insert(0) += 1;
            }
        }
        // a thread gone (or without Python frames now) ended its run
        if self.open.values().any(|open| open.tick != self.tick) {
            let tick = self.tick;
            let gone: Vec<u64> = self
                .open
                .iter()
                .filter(|(_, open)| open.tick != tick)
                .map(|(&tid, _)| tid)
                .collect();
            for tid in gone {
                if let Some(open) = self.open.remove(&tid) {
                    self.close(open.stall, wall, ended);
                }
            }
        }
    }

    /// A task scan that began at `at` (unix seconds) found the tasks `running` (name, folded
    /// stack): the one stall it fell in (in progress, or among those just `ended`), if there is
    /// one and one task ran, ran that task. Several loops (threads) at once are not told apart:
    /// then none is named.
    pub fn note_tasks(&mut self, running: &[(String, String)], at: f64, ended: &mut [Stall]) {
        let [task] = running else { return };
        let open = self.open.values_mut().map(|open| &mut open.stall);
        let mut within = open
            .filter(|stall| stall.start <= at)
            .chain(ended.iter_mut().filter(|s| s.start <= at && at <= s.end));
        if let (Some(stall), None) = (within.next(), within.next()) {
            stall.task.get_or_insert_with(|| task.clone());
        }
    }

    /// When the oldest stall in progress began (unix seconds): the first sample of a run that
    /// has lasted the threshold by `wall`; None while no loop is held that long.
    pub fn stalled_since(&self, wall: f64) -> Option<f64> {
        self.open
            .values()
            .map(|open| open.stall.start)
            .filter(|&start| wall - start >= self.threshold)
            .min_by(f64::total_cmp)
    }

    /// The runs in progress when sampling ends, as stalls still running (those long enough).
    pub fn flush(&mut self, ended: &mut Vec<Stall>) {
        for (_, open) in self.open.drain() {
            let end = open.stall.end;
            if end - open.stall.start >= self.threshold {
                ended.push(Stall {
                    ongoing: true,
                    ..open.stall
                });
            }
        }
    }

    fn close(&mut self, mut stall: Stall, wall: f64, ended: &mut Vec<Stall>) {
        stall.end = wall;
        if stall.duration() >= self.threshold {
            ended.push(stall);
        } else if self.spare.len() < SPARE {
            // most runs are short: their room serves the next ones, not the allocator
            let mut stacks = std::mem::take(&mut stall.stacks);
            stacks.clear();
            self.spare.push(stacks);
        }
    }
}

/// Keeps `stall` among a window's `stalls`, at most `MAX_STALLS` of them, the longest; the
/// count of those left out goes up by one when one is.
pub fn keep_longest(stalls: &mut Vec<Stall>, dropped: &mut u64, stall: Stall) {
    if stalls.len() < MAX_STALLS {
        stalls.push(stall);
        return;
    }
    *dropped += 1;
    let shortest = stalls
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.duration().total_cmp(&b.1.duration()))
        .map(|(i, _)| i);
    if let Some(i) = shortest {
        if stalls[i].duration() < stall.duration() {
            stalls[i] = stall;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const LOOP: &str = "<module> (app.py:1);run (asyncio/runners.py:118);\
                        BaseEventLoop.run_forever (asyncio/base_events.py:608);\
                        BaseEventLoop._run_once (asyncio/base_events.py:1922)";

    fn stack(text: &str) -> Stack {
        Stack::new(Arc::from(text))
    }

    fn trace(stack: &Stack, contexts: u64, active: bool) -> Trace {
        Trace {
            tid: 1,
            active,
            cpu_wait: false,
            stack: Some(stack.clone()),
            gil: GilRole::None,
            gc: false,
            contexts,
        }
    }

    #[test]
    fn runs_in_one_callback_are_stalls_and_a_new_callback_ends_one() {
        let poll = stack(&format!("{LOOP};EpollSelector.select (selectors.py:468)"));
        let handler = stack(&format!(
            "{LOOP};Handle._run (asyncio/events.py:84);handler (app.py:12);sleep (app.py:13)"
        ));
        let mut stalls = Stalls::new(0.1);
        let mut ended = Vec::new();
        let mut at = 0.0;
        let mut tick = |stalls: &mut Stalls, t: Trace, ended: &mut Vec<Stall>| {
            at += 0.01;
            stalls.observe(&[t], at, ended);
        };
        // 15 samples of one request, then 15 of another of the same handler, then the poll
        for _ in 0..15 {
            tick(&mut stalls, trace(&handler, 0xa0, false), &mut ended);
        }
        for _ in 0..15 {
            tick(&mut stalls, trace(&handler, 0xb0, true), &mut ended);
        }
        tick(&mut stalls, trace(&poll, 0, false), &mut ended);
        // a short one: not a stall
        for _ in 0..5 {
            tick(&mut stalls, trace(&handler, 0xc0, true), &mut ended);
        }
        tick(&mut stalls, trace(&poll, 0, false), &mut ended);
        assert_eq!(ended.len(), 2);
        let (first, second) = (&ended[0], &ended[1]);
        assert!(
            (first.duration() - 0.15).abs() < 1e-9,
            "{}",
            first.duration()
        );
        assert!((second.duration() - 0.15).abs() < 1e-9);
        assert_eq!((first.samples, second.samples), (15, 15));
        assert_eq!(first.callback(), "handler (app.py:12)");
        assert_eq!(first.stacks[0].0 .0, StallState::Blocked);
        assert_eq!(second.stacks[0].0 .0, StallState::Busy);
        // one still running when sampling ends
        for _ in 0..20 {
            tick(&mut stalls, trace(&handler, 0xd0, true), &mut ended);
        }
        let mut flushed = Vec::new();
        stalls.flush(&mut flushed);
        assert_eq!(flushed.len(), 1);
        assert!(flushed[0].ongoing);
        assert!((flushed[0].duration() - 0.19).abs() < 1e-9);
    }

    #[test]
    fn a_loop_kept_in_its_poll_by_the_gil_is_a_stall_there() {
        let poll = stack(&format!("{LOOP};EpollSelector.select (selectors.py:468)"));
        let mut stalls = Stalls::new(0.1);
        let mut ended = Vec::new();
        for i in 0..15 {
            let waits = Trace {
                gil: GilRole::Waits,
                ..trace(&poll, 7, false)
            };
            stalls.observe(&[waits], f64::from(i) * 0.01, &mut ended);
        }
        stalls.observe(&[trace(&poll, 7, false)], 0.15, &mut ended);
        assert_eq!(ended.len(), 1);
        assert_eq!(
            ended[0].callback(),
            "EpollSelector.select (selectors.py:468)"
        );
        assert_eq!(ended[0].stacks[0].0 .0, StallState::Gil);
        assert!((ended[0].duration() - 0.15).abs() < 1e-9);
    }

    #[test]
    fn a_task_scan_names_the_one_stall_it_fell_in() {
        let handler = stack(&format!(
            "{LOOP};Handle._run (asyncio/events.py:84);handler (app.py:12)"
        ));
        let poll = stack(&format!("{LOOP};EpollSelector.select (selectors.py:468)"));
        let mut stalls = Stalls::new(0.1);
        let mut ended = Vec::new();
        let task = vec![(
            "Task-7".to_string(),
            "handler (app.py:12);[running]".to_string(),
        )];
        for i in 0..20 {
            stalls.observe(
                &[trace(&handler, 3, true)],
                1.0 + f64::from(i) * 0.01,
                &mut ended,
            );
        }
        // a scan from before the stall began names nothing; two running tasks name nothing
        stalls.note_tasks(&task, 0.5, &mut ended);
        stalls.note_tasks(&[task[0].clone(), task[0].clone()], 1.05, &mut ended);
        stalls.observe(&[trace(&poll, 4, false)], 1.2, &mut ended);
        // a scan counted only after the stall ended (in the same tick) still names it
        stalls.note_tasks(&task, 1.1, &mut ended);
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].task, Some(task[0].clone()));
    }

    #[test]
    fn a_window_keeps_the_longest() {
        let first = stack(&format!(
            "{LOOP};Handle._run (asyncio/events.py:84);h (app.py:2)"
        ));
        let make = |length: f64| Stall {
            thread_id: 1,
            start: 0.0,
            end: length,
            ongoing: false,
            samples: 1,
            gc: 0,
            stacks: Vec::new(),
            other: 0,
            holders: HashMap::default(),
            task: None,
            first: first.clone(),
            callback_index: 5,
        };
        let (mut kept, mut dropped) = (Vec::new(), 0);
        for i in 0..MAX_STALLS + 10 {
            keep_longest(&mut kept, &mut dropped, make(i as f64));
        }
        assert_eq!((kept.len(), dropped), (MAX_STALLS, 10));
        let shortest = kept.iter().map(Stall::duration).fold(f64::MAX, f64::min);
        assert_eq!(shortest, 10.0);
    }
}
