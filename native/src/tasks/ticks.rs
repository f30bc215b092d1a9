//! The task scan on the sampler's schedule: a runner with tasks asked for scans them at their
//! own rate (a tick is due when the scan's period has passed), folds each scan into the
//! window's task stacks and keeps the counters. The scanner is made on the first due tick and
//! made again, at most once a second, while it cannot be (asyncio not imported yet).

use std::time::{Duration, Instant};

use super::{fold, Scan, TaskScanner};
use crate::readers::Readers;
use crate::windows::{Stats, Window};

/// How long a scanner that could not be made waits before the next try.
const RETRY: Duration = Duration::from_secs(1);

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
        Some(
            scanner
                .scan_with(false)
                .map(|scan| {
                    let folded = fold(&scan.tasks);
                    (scan, folded)
                })
                .map_err(|err| format!("{err:#}")),
        )
    }
}

/// Counts a scan into the window (one task-sample per task) and the session's counters.
pub(crate) fn count(result: ScanResult, window: &mut Window, stats: &mut Stats) {
    match result {
        Ok((scan, folded)) => {
            window.task_scans += 1;
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
