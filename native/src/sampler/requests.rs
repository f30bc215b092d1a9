//! Slow requests, as the task scans see them: each request in flight is followed from the scan
//! that first saw it to the first that did not, and one in flight for the threshold or longer
//! is a slow request, as a callback that held its loop that long is a stall.
//!
//! A request is told apart by its task (address and name: the next task made at a freed one's
//! address has another name) and, where its framework keeps it, its start. Its duration is
//! known within a scan period: at least from its start to the last scan that saw it, at most
//! to the first that did not. Where the framework keeps no start (aiohttp without its access
//! log), the start is the first scan that saw it, and the request began after the scan before.
//! Its task-samples are kept by folded stack (its route frame first), the split of its time.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use crate::tasks::{Request, Seen};

/// Slow requests kept per window at most: past them, the longest are kept and the rest
/// counted.
pub const MAX_SLOW: usize = 100;
/// Requests followed at once at most: past it, new ones are counted, not followed.
pub const MAX_TRACKED: usize = 10_000;
/// Distinct stacks kept per request: past them, its task-samples count in `other`.
pub const MAX_STACKS: usize = 32;

/// A request in flight for the threshold or longer.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowRequest {
    pub task: String,
    /// As last read (the route once the framework matched one).
    pub request: Request,
    /// Unix seconds: its framework's start, or the first scan that saw it (`from_scans`).
    pub start: f64,
    pub from_scans: bool,
    /// At least and at most (s): to the last scan that saw it, and to the first that did not
    /// (for one still in flight when sampling ended, `ongoing`, the last scan's).
    pub duration: f64,
    pub duration_max: f64,
    pub ongoing: bool,
    pub scans: u64,
    /// Its task-samples by folded stack, and those past `MAX_STACKS` stacks.
    pub stacks: Vec<(String, u64)>,
    pub other: u64,
}

struct Tracked {
    request: Request,
    started: Option<f64>,
    first: f64,
    /// The scan before the first that saw it (its start is after): 0 for none.
    before: f64,
    last: f64,
    scans: u64,
    stacks: Vec<(String, u64)>,
    other: u64,
}

impl Tracked {
    fn slow(self, task: String, gone: Option<f64>) -> SlowRequest {
        let (start, from_scans) = match self.started {
            Some(started) => (started, false),
            None => (self.first, true),
        };
        let earliest = if from_scans && self.before > 0.0 {
            self.before
        } else {
            start
        };
        SlowRequest {
            task,
            request: self.request,
            start,
            from_scans,
            duration: (self.last - start).max(0.0),
            duration_max: (gone.unwrap_or(self.last) - earliest).max(0.0),
            ongoing: gone.is_none(),
            scans: self.scans,
            stacks: self.stacks,
            other: self.other,
        }
    }
}

/// The requests in flight as the scans saw them, scan after scan.
pub struct SlowRequests {
    threshold: f64,
    tracked: HashMap<(usize, String), Tracked, FxBuildHasher>,
    /// The last scan's time (unix seconds): 0 before the first.
    last_scan: f64,
    /// Requests not followed: seen while `MAX_TRACKED` were.
    pub untracked: u64,
}

impl SlowRequests {
    /// Slow requests of `threshold_s` or longer; None for no threshold (0).
    pub fn new(threshold_s: f64) -> Option<SlowRequests> {
        (threshold_s > 0.0).then(|| SlowRequests {
            threshold: threshold_s,
            tracked: HashMap::default(),
            last_scan: 0.0,
            untracked: 0,
        })
    }

    /// One scan at `at` (unix seconds), which saw `seen` with its folded `stacks`: the
    /// requests it no longer saw that were slow go to `out`.
    pub fn scan(
        &mut self,
        at: f64,
        seen: Vec<Seen>,
        stacks: &[(String, u64)],
        out: &mut Vec<SlowRequest>,
    ) {
        let mut now: HashMap<(usize, String), Tracked, FxBuildHasher> = HashMap::default();
        for sight in seen {
            let Some(line) = stacks.get(sight.line) else {
                continue;
            };
            let mut tracked = match self.tracked.remove(&sight.task) {
                // the same task, serving the request it served (a connection's next request
                // may run in the same task: its start differs)
                Some(old) if old.started == sight.started => old,
                Some(old) => {
                    self.finish(sight.task.1.clone(), old, at, out);
                    self.start(at, &sight)
                }
                None if self.tracked.len() + now.len() >= MAX_TRACKED => {
                    self.untracked += 1;
                    continue;
                }
                None => self.start(at, &sight),
            };
            tracked.request = sight.request;
            tracked.last = at;
            tracked.scans += 1;
            match tracked
                .stacks
                .iter()
                .position(|(stack, _)| *stack == line.0)
            {
                Some(i) => tracked.stacks[i].1 += 1,
                None if tracked.stacks.len() < MAX_STACKS => {
                    tracked.stacks.push((line.0.clone(), 1));
                }
                None => tracked.other += 1,
            }
            now.insert(sight.task, tracked);
        }
        for (task, gone) in std::mem::replace(&mut self.tracked, now) {
            self.finish(task.1, gone, at, out);
        }
        self.last_scan = at;
    }

    /// The requests still in flight that were slow, as of the last scan (`ongoing`).
    pub fn flush(&mut self, out: &mut Vec<SlowRequest>) {
        for ((_, task), tracked) in self.tracked.drain() {
            let slow = tracked.slow(task, None);
            if slow.duration >= self.threshold {
                out.push(slow);
            }
        }
    }

    fn start(&self, at: f64, sight: &Seen) -> Tracked {
        Tracked {
            request: sight.request.clone(),
            started: sight.started,
            first: at,
            before: self.last_scan,
            last: at,
            scans: 0,
            stacks: Vec::new(),
            other: 0,
        }
    }

    fn finish(&self, task: String, tracked: Tracked, at: f64, out: &mut Vec<SlowRequest>) {
        let slow = tracked.slow(task, Some(at));
        if slow.duration >= self.threshold {
            out.push(slow);
        }
    }
}

/// Keeps `slow` among a window's `kept` (the longest `MAX_SLOW`), counting those left out.
pub fn keep_longest(kept: &mut Vec<SlowRequest>, dropped: &mut u64, slow: SlowRequest) {
    if kept.len() < MAX_SLOW {
        kept.push(slow);
        return;
    }
    *dropped += 1;
    if let Some((i, shortest)) = kept
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.duration.total_cmp(&b.1.duration))
    {
        if shortest.duration < slow.duration {
            kept[i] = slow;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(route: Option<&str>) -> Request {
        Request {
            framework: "tornado",
            method: "GET".into(),
            path: "/items/7".into(),
            route: route.map(str::to_string),
            handler: None,
            started: None,
            trace: None,
        }
    }

    fn seen(task: (usize, &str), route: Option<&str>, started: Option<f64>, line: usize) -> Seen {
        Seen {
            task: (task.0, task.1.to_string()),
            request: request(route),
            started,
            line,
        }
    }

    fn stacks() -> Vec<(String, u64)> {
        vec![
            ("[GET /items/{item}];get (a.py:1);[waiting]".into(), 1),
            ("b;[ready]".into(), 1),
        ]
    }

    #[test]
    fn a_request_seen_past_the_threshold_is_slow_once_gone() {
        let mut slow = SlowRequests::new(0.5).unwrap();
        let mut out = Vec::new();
        slow.scan(99.9, vec![], &stacks(), &mut out);
        for i in 0..8 {
            let route = if i == 0 { None } else { Some("/items/{item}") };
            slow.scan(
                100.0 + f64::from(i) * 0.1,
                vec![seen((1, "Task-3"), route, None, i as usize % 2)],
                &stacks(),
                &mut out,
            );
        }
        assert!(out.is_empty(), "in flight still: {out:?}");
        slow.scan(100.8, vec![], &stacks(), &mut out);
        assert_eq!(out.len(), 1);
        let got = &out[0];
        assert_eq!(
            got.request.route.as_deref(),
            Some("/items/{item}"),
            "the last read"
        );
        assert!(got.from_scans && !got.ongoing);
        assert_eq!(got.scans, 8);
        assert!((got.duration - 0.7).abs() < 1e-9, "{got:?}");
        assert!(
            (got.duration_max - 0.9).abs() < 1e-9,
            "from the scan before: {got:?}"
        );
        assert_eq!(got.stacks.iter().map(|s| s.1).sum::<u64>(), 8);
    }

    #[test]
    fn a_short_request_is_not_slow_and_a_new_start_is_another_request() {
        let mut slow = SlowRequests::new(0.5).unwrap();
        let mut out = Vec::new();
        // one task, its framework's start: 99.0, then a next request in it started at 100.2
        slow.scan(
            100.0,
            vec![seen((1, "Task-3"), None, Some(99.0), 0)],
            &stacks(),
            &mut out,
        );
        slow.scan(
            100.3,
            vec![seen((1, "Task-3"), None, Some(100.2), 0)],
            &stacks(),
            &mut out,
        );
        assert_eq!(out.len(), 1, "the first, 1 s in flight: {out:?}");
        assert!(!out[0].from_scans && (out[0].duration - 1.0).abs() < 1e-9);
        assert!((out[0].duration_max - 1.3).abs() < 1e-9);
        slow.scan(100.4, vec![], &stacks(), &mut out);
        assert_eq!(out.len(), 1, "the second, 0.1 s: not slow");
    }

    #[test]
    fn the_next_task_at_an_address_is_another_request_and_flush_gives_the_ongoing() {
        let mut slow = SlowRequests::new(0.5).unwrap();
        let mut out = Vec::new();
        slow.scan(
            100.0,
            vec![seen((1, "Task-3"), None, None, 0)],
            &stacks(),
            &mut out,
        );
        slow.scan(
            101.0,
            vec![seen((1, "Task-4"), None, None, 0)],
            &stacks(),
            &mut out,
        );
        assert!(out.is_empty(), "Task-3 seen once: 0 s at least");
        slow.scan(
            102.0,
            vec![seen((1, "Task-4"), None, None, 1)],
            &stacks(),
            &mut out,
        );
        slow.flush(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].task, "Task-4");
        assert!(out[0].ongoing && (out[0].duration - 1.0).abs() < 1e-9);
    }
}
