//! The shared clock: one native thread that ticks the runners of many sessions.
//!
//! A sampler wakes up once per tick, and on a virtual machine waking up (and the first read of
//! another process's memory after a sleep) costs more than the read itself. Sessions on the
//! clock tick on a common schedule, aligned to the clock's start, so one wakeup serves every
//! target due at that instant; they are ticked one after another, each against its own
//! deadline (lateness counts as for a session on its own thread).

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::sampler::{precise_sleeps, Runner, MAX_SLEEP};

static CLOCK: OnceLock<Mutex<Sender<Box<Runner>>>> = OnceLock::new();

/// Hands a runner to the clock thread (started on first use); gives it back if the thread
/// cannot be started or has died.
pub(crate) fn enqueue(runner: Box<Runner>) -> Result<(), Box<Runner>> {
    let sender = CLOCK.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        let started = std::thread::Builder::new()
            .name("sidecar-sampler".into())
            .spawn(move || tick_all(rx));
        if started.is_err() {
            // every send fails and gives the runner back: each session ticks on its own
            let (dead, _) = mpsc::channel();
            return Mutex::new(dead);
        }
        Mutex::new(tx)
    });
    let sender = sender.lock().unwrap_or_else(|e| e.into_inner());
    sender.send(runner).map_err(|err| err.0)
}

/// The first tick at or after `now` on the grid of `period` that starts at `epoch`.
fn aligned(epoch: Instant, now: Instant, period: std::time::Duration) -> Instant {
    let period_ns = period.as_nanos().max(1);
    let since = now.saturating_duration_since(epoch).as_nanos();
    let ticks = since.div_ceil(period_ns);
    epoch + std::time::Duration::from_nanos((ticks * period_ns) as u64)
}

fn tick_all(arrivals: Receiver<Box<Runner>>) {
    precise_sleeps();
    let epoch = Instant::now();
    let mut runners: Vec<Box<Runner>> = Vec::new();
    let join = |runners: &mut Vec<Box<Runner>>, mut runner: Box<Runner>| {
        runner.next = aligned(epoch, Instant::now(), runner.period());
        runners.push(runner);
    };
    loop {
        // dropping a runner ends its session (flushes its window, wakes its stop())
        runners.retain(|runner| !runner.stopped());
        let now = Instant::now();
        let wait = runners
            .iter()
            .map(|runner| runner.next.saturating_duration_since(now))
            .min()
            .unwrap_or(MAX_SLEEP)
            .min(MAX_SLEEP);
        if !wait.is_zero() {
            match arrivals.recv_timeout(wait) {
                Ok(runner) => join(&mut runners, runner),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) if runners.is_empty() => return,
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
            }
            continue;
        }
        while let Ok(runner) = arrivals.try_recv() {
            join(&mut runners, runner);
        }
        runners.retain_mut(|runner| runner.next > Instant::now() || runner.tick());
    }
}

#[cfg(test)]
mod tests {
    use super::aligned;
    use std::time::{Duration, Instant};

    #[test]
    fn ticks_fall_on_one_grid() {
        let epoch = Instant::now();
        let period = Duration::from_millis(10);
        let at = |us: u64| aligned(epoch, epoch + Duration::from_micros(us), period) - epoch;
        assert_eq!(at(0), Duration::ZERO);
        assert_eq!(at(1), period);
        assert_eq!(at(10_000), period);
        assert_eq!(at(10_001), 2 * period);
        assert_eq!(at(95_500), 10 * period);
    }
}
