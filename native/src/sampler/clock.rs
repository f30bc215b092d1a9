//! The shared clock: one native thread that ticks the runners of many sessions.
//!
//! A sampler wakes up once per tick, and on a virtual machine waking up (and the first read of
//! another process's memory after a sleep) costs more than the read itself. Sessions on the
//! clock tick on a common schedule, aligned to the clock's start, so one wakeup serves every
//! target due at that instant; they are ticked one after another, each against its own
//! deadline (lateness counts as for a session on its own thread), and one poll of their pidfds
//! after the reads tells which targets still run (a read is kept only if it was of the
//! target). A target whose ticks keep taking longer than a quarter period (hundreds of
//! threads, say) would make every other target late: it is moved to a thread of its own.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use super::runner::{precise_sleeps, run_alone, Runner, MAX_SLEEP};
use crate::process::procfs::Polls;

static CLOCK: OnceLock<Mutex<Sender<Box<Runner>>>> = OnceLock::new();

/// Consecutive ticks over a quarter period after which a runner leaves the clock.
const OVERRUNS: u32 = 3;

/// A runner on the clock, with its count of consecutive slow ticks.
struct Slot {
    runner: Box<Runner>,
    overruns: u32,
}

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

/// Moves a runner to a new thread of its own; gives it back if no thread can be started.
fn own_thread(runner: Box<Runner>) -> Result<(), Box<Runner>> {
    let (tx, rx) = mpsc::channel::<Box<Runner>>();
    let spawned = std::thread::Builder::new()
        .name(format!("sidecar-sampler-{}", runner.pid()))
        .spawn(move || {
            if let Ok(runner) = rx.recv() {
                run_alone(*runner);
            }
        });
    match spawned {
        Ok(_) => tx.send(runner).map_err(|err| err.0),
        Err(_) => Err(runner),
    }
}

fn tick_all(arrivals: Receiver<Box<Runner>>) {
    precise_sleeps();
    let epoch = Instant::now();
    let mut runners: Vec<Slot> = Vec::new();
    // a tick's reads, the targets' liveness and the runners gone, kept from tick to tick
    let mut reads = Vec::new();
    let mut polls = Polls::default();
    let mut gone = Vec::new();
    let join = |runners: &mut Vec<Slot>, mut runner: Box<Runner>| {
        runner.next = aligned(epoch, Instant::now(), runner.period());
        runners.push(Slot {
            runner,
            overruns: 0,
        });
    };
    loop {
        // dropping a runner ends its session (flushes its window, wakes its stop())
        runners.retain(|slot| !slot.runner.stopped());
        if runners.is_empty() {
            // nothing to tick: wait for a runner
            match arrivals.recv_timeout(MAX_SLEEP) {
                Ok(runner) => join(&mut runners, runner),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            continue;
        }
        let now = Instant::now();
        let wait = runners
            .iter()
            .map(|slot| slot.runner.next.saturating_duration_since(now))
            .min()
            .unwrap_or(MAX_SLEEP)
            .min(MAX_SLEEP);
        if !wait.is_zero() {
            // A plain sleep, as the machine's floor sleeps: waking from a channel's wait costs
            // more (its waker registered and taken back each tick). Runners that arrive
            // meanwhile join at the tick.
            std::thread::sleep(wait);
            continue;
        }
        while let Ok(runner) = arrivals.try_recv() {
            join(&mut runners, runner);
        }
        // The runners due read one after another; then one poll tells which targets still
        // run (a read is kept only if its target still runs after it); then each counts its
        // sample. A runner's tick is its read and its count.
        for (i, slot) in runners.iter_mut().enumerate() {
            let began = Instant::now();
            if slot.runner.next > began {
                continue;
            }
            let read = slot.runner.read(began);
            reads.push((i, read));
        }
        let alive = polls.same_processes(reads.iter().map(|r| runners[r.0].runner.liveness()));
        for ((i, read), &same) in reads.drain(..).zip(alive) {
            let slot = &mut runners[i];
            let spent = read.took();
            let Some(counting) = slot.runner.count(read, same) else {
                gone.push(i);
                continue;
            };
            if spent + counting > slot.runner.period() / 4 {
                slot.overruns += 1;
            } else {
                slot.overruns = 0;
            }
        }
        // dropping a runner ends its session
        for i in gone.drain(..).rev() {
            runners.remove(i);
        }
        while let Some(index) = runners.iter().position(|slot| slot.overruns >= OVERRUNS) {
            let slot = runners.swap_remove(index);
            slot.runner.note_clock(
                "own (moved off the shared clock: its ticks took over a quarter period)",
            );
            if let Err(runner) = own_thread(slot.runner) {
                runner.note_clock("shared (slow ticks, but no thread of its own could start)");
                runners.push(Slot {
                    runner,
                    overruns: 0,
                });
                break;
            }
        }
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
