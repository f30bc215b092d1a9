//! The task scan on the sampler's thread: a runner with tasks asked for scans them at their
//! own rate, folds each scan into the window's task stacks and keeps the counters. Each scan
//! falls at a random instant of its own period (stratified sampling), not on the sample
//! ticks' grid: a request cycle close to a multiple of the period would otherwise meet the
//! scans at the same few phases of it, run after run, and bias the shares of its awaits. The scanner is made on the first due tick and
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

/// A runner's task scans: the scanner, its period, the start of the next scan's period and
/// when in it the scan is due.
pub(crate) struct TaskTicks {
    scanner: Option<TaskScanner>,
    period: Duration,
    stratum: Instant,
    next: Instant,
    random: fastrand::Rng,
}

/// What a due tick's scan found, to count into the window under the session's lock.
pub(crate) type ScanResult = Result<(Scan, Vec<String>), String>;

impl TaskTicks {
    /// Task scans at `rate_hz`, or None when they are not asked for (a rate of 0).
    pub(crate) fn new(rate_hz: f64) -> Option<TaskTicks> {
        (rate_hz > 0.0).then(|| {
            let period = Duration::from_secs_f64(1.0 / rate_hz);
            let mut ticks = TaskTicks {
                scanner: None,
                period,
                stratum: Instant::now(),
                next: Instant::now(),
                random: fastrand::Rng::new(),
            };
            ticks.next = ticks.within(ticks.stratum);
            ticks
        })
    }

    /// When the next scan is due.
    pub(crate) fn due(&self) -> Instant {
        self.next
    }

    /// A random instant of the period that starts at `stratum`.
    fn within(&mut self, stratum: Instant) -> Instant {
        stratum + self.period.mul_f64(self.random.f64())
    }

    /// A scan when one is due now, folded; None otherwise.
    pub(crate) fn tick(&mut self, readers: &Readers) -> Option<ScanResult> {
        let now = Instant::now();
        if now < self.next {
            return None;
        }
        self.stratum += self.period;
        if self.stratum < now {
            self.stratum = now; // behind by a whole period: missed scans are skipped
        }
        self.next = self.within(self.stratum);
        if self.scanner.is_none() {
            match readers.task_scanner() {
                Ok(scanner) => self.scanner = Some(scanner),
                Err(err) => {
                    self.stratum = now + RETRY.max(self.period);
                    self.next = self.stratum;
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
        if self.next >= self.stratum + self.period {
            self.stratum = self.next; // put off past its period: the periods start again there
        }
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
    fn scans_fall_at_every_phase_of_their_periods() {
        let mut ticks = TaskTicks::new(10.0).expect("a rate");
        let stratum = Instant::now();
        let mut tenths = [0u32; 10];
        for _ in 0..2000 {
            let at = ticks.within(stratum) - stratum;
            assert!(at < ticks.period);
            tenths[(at.as_secs_f64() / ticks.period.as_secs_f64() * 10.0) as usize] += 1;
        }
        // uniform: about 200 in each tenth of the period (the odds of one under 100: < 1e-12)
        assert!(tenths.iter().all(|&n| n > 100), "{tenths:?}");
    }

    #[test]
    fn a_long_scan_puts_the_next_off_to_keep_the_budget() {
        let began = Instant::now();
        let due = began + Duration::from_millis(100);
        let next = next_due(due, began, Duration::from_millis(25));
        assert_eq!(next - began, Duration::from_millis(500)); // 25 ms is 5% of 500 ms
    }
}
