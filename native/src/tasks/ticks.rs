//! The task scan on the sampler's schedule: a runner with tasks asked for scans them at their
//! own rate (a tick is due when the scan's period has passed), folds each scan into the
//! window's task stacks and keeps the counters. The scanner is made on the first due tick and
//! made again, at most once a second, while it cannot be (asyncio not imported yet).
//!
//! Scans share the sampler's thread with the thread samples of every target, so they are held
//! to `BUDGET` of its time: a scan that took 25 ms (10,000 tasks) is followed by the next no
//! sooner than 500 ms later, whatever the rate asked. Each scan still reads every task (up to
//! the scanner's bound), so tasks in flight per scan stay exact; only the scans are fewer.

use std::time::{Duration, Instant};

use super::{fold, Scan, TaskScanner};
use crate::readers::Readers;
use crate::windows::{Stats, Window};

/// How long a scanner that could not be made waits before the next try.
const RETRY: Duration = Duration::from_secs(1);
/// The share of the sampler thread's time task scans may take.
pub const BUDGET: f64 = 0.05;

/// When the next scan may start: at its period's tick, or later when the last scan, begun at
/// `began` and lasting `spent`, would otherwise take more than `BUDGET` of the time.
fn next_due(due: Instant, began: Instant, spent: Duration) -> Instant {
    due.max(began + spent.div_f64(BUDGET))
}

/// A runner's task scans: the scanner, its period and when the next scan is due.
pub(crate) struct TaskTicks {
    scanner: Option<TaskScanner>,
    period: Duration,
    next: Instant,
}

/// What a due tick's scan found, to count into the window under the session's lock.
pub(crate) type ScanResult = Result<(Scan, Vec<String>), String>;

impl TaskTicks {
    /// Task scans at `rate_hz`, or None when they are not asked for (a rate of 0).
    pub(crate) fn new(rate_hz: f64) -> Option<TaskTicks> {
        (rate_hz > 0.0).then(|| TaskTicks {
            scanner: None,
            period: Duration::from_secs_f64(1.0 / rate_hz),
            next: Instant::now(),
        })
    }

    /// A scan when one is due now, folded; None otherwise.
    pub(crate) fn tick(&mut self, readers: &Readers) -> Option<ScanResult> {
        let now = Instant::now();
        if now < self.next {
            return None;
        }
        self.next += self.period;
        if self.next < now {
            self.next = now + self.period; // behind by a whole period: missed scans are skipped
        }
        if self.scanner.is_none() {
            match readers.task_scanner() {
                Ok(scanner) => self.scanner = Some(scanner),
                Err(err) => {
                    self.next = now + RETRY.max(self.period);
                    return Some(Err(format!("{err:#}")));
                }
            }
        }
        let scanner = self.scanner.as_mut()?;
        let began = Instant::now();
        let result = scanner
            .scan_with(false)
            .map(|scan| {
                let folded = fold(&scan.tasks);
                (scan, folded)
            })
            .map_err(|err| format!("{err:#}"));
        self.next = next_due(self.next, began, began.elapsed());
        Some(result)
    }
}

/// Counts a scan into the window (one task-sample per task) and the session's counters.
pub(crate) fn count(result: ScanResult, window: &mut Window, stats: &mut Stats) {
    match result {
        Ok((scan, folded)) => {
            window.task_scans += 1;
            window.task_unread += scan.unread;
            stats.task_scans += 1;
            stats.task_torn += scan.torn;
            stats.task_unread += scan.unread;
            stats.task_samples += folded.len() as u64;
            for stack in folded {
                *window.tasks.entry(stack).or_insert(0) += 1;
            }
        }
        Err(err) => {
            stats.task_errors += 1;
            stats.task_last_error = Some(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_within_the_budget_keeps_the_rate_asked() {
        let began = Instant::now();
        let due = began + Duration::from_millis(100); // 10 Hz
        assert_eq!(next_due(due, began, Duration::from_millis(2)), due);
    }

    #[test]
    fn a_long_scan_puts_the_next_off_to_keep_the_budget() {
        let began = Instant::now();
        let due = began + Duration::from_millis(100);
        let next = next_due(due, began, Duration::from_millis(25));
        assert_eq!(next - began, Duration::from_millis(500)); // 25 ms is 5% of 500 ms
    }
}
