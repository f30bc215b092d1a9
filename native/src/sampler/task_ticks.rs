//! The task scan on a thread of its own: a runner with tasks asked for makes the target's
//! scanner (at most once a second while it cannot be, asyncio not imported yet) and hands it
//! to a scan thread, which scans at the rate asked; at each sample the runner counts the scans
//! done since into its window. The thread samples never wait for a scan, so their figures
//! stay those of a sampler without scans.
//!
//! Each scan falls at a random instant of its own period (stratified sampling): a request
//! cycle close to a multiple of the period would otherwise meet the scans at the same few
//! phases of it, run after run, and bias the shares of its awaits. Scans are held to `BUDGET`
//! of the time: a scan that took 25 ms (10,000 tasks) is followed by the next no sooner than
//! 500 ms later, whatever the rate asked. Each scan still reads every task (up to the
//! scanner's bound), so tasks in flight per scan stay exact; only the scans are fewer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::readers::Readers;
use super::requests::{keep_longest, SlowRequests};
use super::windows::{Stats, Window};
use crate::tasks::{ScanOptions, TaskSamples, TaskScanner};

/// How long a scanner that could not be made waits before the next try.
const RETRY: Duration = Duration::from_secs(1);
/// The share of the time task scans may take.
pub const BUDGET: f64 = 0.05;
/// Scans kept for the runner at most: past it (a runner that stopped counting), the oldest
/// go.
const MAX_KEPT: usize = 256;

/// When the next scan may start: at its period's tick, or later when the last scan, begun at
/// `began` and lasting `spent`, would otherwise take more than `BUDGET` of the time.
fn next_due(due: Instant, began: Instant, spent: Duration) -> Instant {
    due.max(began + spent.div_f64(BUDGET))
}

/// What a scan found, folded on the scan thread, to count into the window under the
/// session's lock.
pub(crate) type ScanResult = Result<TaskSamples, String>;

/// A runner's task scans: their period, the scan thread once its scanner was made, and the
/// scans it did that the runner has not counted yet.
pub(crate) struct TaskTicks {
    period: Duration,
    /// What the scanner it makes is asked to do.
    options: ScanOptions,
    retry_at: Instant,
    thread: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    done: Arc<Mutex<Vec<ScanResult>>>,
}

impl TaskTicks {
    /// Task scans at `rate_hz` by a scanner made as `options` ask, or None when they are not
    /// asked for (a rate of 0).
    pub(crate) fn new(rate_hz: f64, options: ScanOptions) -> Option<TaskTicks> {
        (rate_hz > 0.0).then(|| TaskTicks {
            period: Duration::from_secs_f64(1.0 / rate_hz),
            options,
            retry_at: Instant::now(),
            thread: None,
            done: Arc::default(),
        })
    }

    /// The scans done since the last call, and a failure to make the scanner when one was
    /// tried now (on the runner's thread: the scanner is made from its readers).
    pub(crate) fn collect(&mut self, readers: &Readers) -> Vec<ScanResult> {
        let mut out = Vec::new();
        let now = Instant::now();
        if self.thread.is_none() && now >= self.retry_at {
            self.retry_at = now + RETRY.max(self.period);
            match readers.task_scanner(self.options) {
                Ok(scanner) => match self.start(scanner) {
                    Ok(thread) => self.thread = Some(thread),
                    Err(err) => out.push(Err(format!("cannot start the task scans: {err}"))),
                },
                Err(err) => out.push(Err(format!("{err:#}"))),
            }
        }
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        out.append(&mut done);
        out
    }

    fn start(&self, scanner: TaskScanner) -> std::io::Result<(Arc<AtomicBool>, JoinHandle<()>)> {
        let stop = Arc::new(AtomicBool::new(false));
        let scans = Scans {
            scanner,
            period: self.period,
            done: Arc::clone(&self.done),
            stop: Arc::clone(&stop),
            random: fastrand::Rng::new(),
        };
        let handle = std::thread::Builder::new()
            .name("sidecar-tasks".into())
            .spawn(move || scans.run())?;
        Ok((stop, handle))
    }
}

impl Drop for TaskTicks {
    fn drop(&mut self) {
        if let Some((stop, handle)) = self.thread.take() {
            stop.store(true, Ordering::Relaxed);
            handle.thread().unpark();
            let _ = handle.join();
        }
    }
}

/// The scan thread's state.
struct Scans {
    scanner: TaskScanner,
    period: Duration,
    done: Arc<Mutex<Vec<ScanResult>>>,
    stop: Arc<AtomicBool>,
    random: fastrand::Rng,
}

/// A random instant of the period `period` that starts at `stratum`.
fn within(stratum: Instant, period: Duration, random: &mut fastrand::Rng) -> Instant {
    stratum + period.mul_f64(random.f64())
}

impl Scans {
    /// Scans until stopped: one at a random instant of each period, put off to keep the
    /// budget, each folded and handed to the runner. Between scans the thread is parked.
    fn run(mut self) {
        let mut stratum = Instant::now();
        let mut next = within(stratum, self.period, &mut self.random);
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now < next {
                // one wakeup per scan (on a virtual machine each costs tens of µs of CPU):
                // parked until the scan is due, or until stopped (`TaskTicks::drop` unparks)
                std::thread::park_timeout(next - now);
                continue;
            }
            stratum += self.period;
            if stratum < now {
                stratum = now; // behind by a whole period: missed scans are skipped
            }
            let began = Instant::now();
            let result = self
                .scanner
                .scan_samples()
                .map_err(|err| format!("{err:#}"));
            let spent = began.elapsed();
            {
                let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
                if done.len() >= MAX_KEPT {
                    done.drain(..1);
                }
                done.push(result);
            }
            next = within(stratum, self.period, &mut self.random);
            next = next_due(next, began, spent);
            if next >= stratum + self.period {
                stratum = next; // put off past its period: the periods start again there
            }
        }
    }
}

/// Counts a scan into the window (one task-sample per task) and the session's counters, and
/// follows its requests (`slow`, when slow requests are looked for): those that were slow and
/// ended go with the window.
pub(crate) fn count(
    result: ScanResult,
    window: &mut Window,
    stats: &mut Stats,
    slow: Option<&mut SlowRequests>,
) {
    match result {
        Ok(mut scan) => {
            if let Some(slow) = slow {
                let mut ended = Vec::new();
                let untracked = slow.untracked;
                slow.scan(
                    scan.at,
                    std::mem::take(&mut scan.seen),
                    &scan.stacks,
                    &mut ended,
                );
                stats.slow_requests_untracked += slow.untracked - untracked;
                for request in ended {
                    keep_longest(
                        &mut window.slow_requests,
                        &mut window.slow_requests_dropped,
                        request,
                    );
                }
            }
            window.task_scans += 1;
            window.task_unread += scan.unread;
            stats.task_scans += 1;
            stats.task_torn += scan.torn;
            stats.task_unread += scan.unread;
            stats.task_requests_torn += scan.requests_torn;
            for (stack, n) in scan.stacks {
                stats.task_samples += n;
                *window.tasks.entry(stack).or_insert(0) += n;
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
        let period = Duration::from_millis(100);
        let mut random = fastrand::Rng::new();
        let stratum = Instant::now();
        let mut tenths = [0u32; 10];
        for _ in 0..2000 {
            let at = within(stratum, period, &mut random) - stratum;
            assert!(at < period);
            tenths[(at.as_secs_f64() / period.as_secs_f64() * 10.0) as usize] += 1;
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
