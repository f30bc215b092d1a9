//! One target's sampling between ticks: a runner reads a sample through its readers, folds
//! and counts it into the session's window, and keeps the session's counters; it ticks on a
//! thread of its own (`run_alone`) or on the shared clock (`clock`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::readers::Readers;
use super::stalls::{keep_longest, Stall, Stalls};
use super::task_ticks::TaskTicks;
use super::windows::{End, HolderKey, Options, Shared, StackKey, Window};
use crate::process::procfs::{process_alive, start_time, Liveness};
use crate::process::runstate::ThreadStates;
use crate::stack::{GilRole, RunState, Trace};

/// How many times a torn read of a running target is read again within the same tick.
const TORN_READ_RETRIES: u64 = 2;
/// The longest a sampling thread sleeps at once, so that it sees stop() promptly.
pub(crate) const MAX_SLEEP: Duration = Duration::from_millis(50);

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Blocking mode: stops only the threads that ran Python in the previous sample (all threads
/// on the first one), reads the stacks, and lets them go; returns the pause length.
///
/// Each thread's on-CPU state is read before it is stopped (a stopped thread never reads as
/// running) and handed to `read`. A Python thread born since the previous sample is read
/// without being stopped once, and stopped from the next sample on. Stops are ptrace seize +
/// interrupt: if the sidecar dies meanwhile, the kernel detaches and the threads run on.
///
/// Thread ids come from the interpreter and are those of the target's PID namespace; when
/// they are not threads of the target as seen here (a target in another PID namespace), the
/// whole process is stopped instead, so no other thread is ever touched.
pub(crate) fn read_stopped(
    process: &remoteprocess::Process,
    python_threads: &mut Vec<i32>,
    states: &mut ThreadStates,
    read: impl FnOnce(&HashMap<i32, bool>) -> anyhow::Result<Vec<Trace>>,
) -> (anyhow::Result<Vec<Trace>>, Option<f64>) {
    let mut running: HashMap<i32, bool> = python_threads
        .iter()
        .filter_map(|&tid| states.running(tid).map(|r| (tid, r)))
        .collect();
    if running.len() != python_threads.len() {
        python_threads.clear();
    }
    if python_threads.is_empty() {
        // the whole process stops: every thread's state is read before, as it is not after
        for tid in process
            .threads()
            .iter()
            .flatten()
            .filter_map(|t| t.id().ok())
        {
            if let Some(r) = states.running(tid) {
                running.insert(tid, r);
            }
        }
    }
    let began = Instant::now();
    let mut thread_locks = Vec::with_capacity(python_threads.len());
    let mut process_lock = None;
    if python_threads.is_empty() {
        match process.lock() {
            Ok(lock) => process_lock = Some(lock),
            Err(err) => {
                return (
                    Err(anyhow::anyhow!("failed to suspend process: {err}")),
                    None,
                )
            }
        }
    } else {
        for &tid in python_threads.iter() {
            let lock = remoteprocess::Thread::new(tid).and_then(|thread| thread.lock());
            match lock {
                Ok(lock) => thread_locks.push(lock),
                Err(remoteprocess::Error::NixError(nix_err)) if nix_err as i32 == libc::ESRCH => {}
                Err(err) => {
                    drop(thread_locks);
                    return (
                        Err(anyhow::anyhow!("failed to suspend thread {tid}: {err}")),
                        None,
                    );
                }
            }
        }
    }
    let result = read(&running);
    drop(thread_locks);
    drop(process_lock);
    let pause = began.elapsed().as_secs_f64();
    if let Ok(traces) = &result {
        python_threads.clear();
        python_threads.extend(traces.iter().map(|t| t.tid as i32));
        states.keep(python_threads.iter().copied());
    }
    (result, Some(pause))
}

/// Sleeps of ordinary threads may end up to 50 µs late (the kernel's default timer slack,
/// which batches wakeups); a sampler's ticks should not.
pub(crate) fn precise_sleeps() {
    // SAFETY: PR_SET_TIMERSLACK takes a number of nanoseconds and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
}

/// A tick's sample as read, before it is counted (`Runner::read`, `Runner::count`).
pub(crate) struct Read {
    result: anyhow::Result<Vec<Trace>>,
    /// How long the threads were stopped (blocking mode).
    pause: Option<f64>,
    /// Seconds the read took, and when it ended (unix time).
    read: f64,
    wall: f64,
    /// How late the tick began (seconds), the ticks skipped before it, and the torn reads
    /// read again.
    lag: f64,
    missed: u64,
    retried: u64,
}

impl Read {
    /// How long the read took.
    pub(crate) fn took(&self) -> Duration {
        Duration::from_secs_f64(self.read)
    }
}

/// One target's sampling between ticks: its readers, schedule and the windows it fills. A
/// runner ticks on its own thread (`run_alone`) or beside others on the shared clock
/// (`clock`). Dropping it ends the session: the window in progress is flushed, and
/// `Session::stop` learns of it through `_done`.
pub(crate) struct Runner {
    readers: Readers,
    options: Options,
    started: u64,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    period: Duration,
    /// When the next tick is due.
    pub(crate) next: Instant,
    python_threads: Vec<i32>,
    /// A tick's stacks by thread, kept between ticks for its room.
    folded: Vec<(u64, StackKey)>,
    /// The sample's waits for the GIL, by who held it.
    holders: Vec<HolderKey>,
    states: ThreadStates,
    /// The stalls of the target's event loops in progress, and those a tick ended.
    stalls: Stalls,
    ended: Vec<Stall>,
    process: Result<remoteprocess::Process, remoteprocess::Error>,
    liveness: Liveness,
    tasks: Option<TaskTicks>,
    _done: mpsc::Sender<()>,
}

impl Runner {
    pub(crate) fn new(
        readers: Readers,
        options: Options,
        started: u64,
        shared: Arc<Mutex<Shared>>,
        stop: Arc<AtomicBool>,
        done: mpsc::Sender<()>,
    ) -> Runner {
        let pid = options.pid;
        Runner {
            readers,
            period: Duration::from_secs_f64(1.0 / options.rate_hz),
            next: Instant::now(),
            python_threads: Vec::new(),
            folded: Vec::new(),
            holders: Vec::new(),
            states: ThreadStates::new(pid),
            stalls: Stalls::new(options.stall_s),
            ended: Vec::new(),
            process: remoteprocess::Process::new(pid),
            liveness: Liveness::open(pid, started),
            tasks: TaskTicks::new(options.tasks_hz, options.task_scan),
            started,
            shared,
            stop,
            _done: done,
            options,
        }
    }

    pub(crate) fn period(&self) -> Duration {
        self.period
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub(crate) fn pid(&self) -> i32 {
        self.options.pid
    }

    /// Says in the stats where the runner ticks now.
    pub(crate) fn note_clock(&self, clock: &str) {
        let mut state = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        state.stats.clock = clock.to_string();
    }

    /// One tick, due at `now`: reads, folds and counts a sample, and the task scans done since
    /// the last. False once the target is gone.
    pub(crate) fn tick(&mut self, now: Instant) -> bool {
        let read = self.read(now);
        let same = self.liveness.same_process();
        self.count(read, same).is_some()
    }

    /// What the target's liveness is told by (`crate::process::procfs::Polls::same_processes`, which the
    /// shared clock asks once for all the targets it read in a tick).
    pub(crate) fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    /// The first half of a tick, due at `now` (the clock's reading that found it due, which
    /// also starts the read's time): reads a sample, to be counted by `count` once the target
    /// is known to still run.
    pub(crate) fn read(&mut self, now: Instant) -> Read {
        let options = &self.options;
        let period_s = self.period.as_secs_f64();
        let lag = now.saturating_duration_since(self.next).as_secs_f64();
        let mut missed = 0u64;
        if lag >= period_s {
            missed = (lag / period_s) as u64;
            self.next += self.period * missed as u32;
        }
        self.next += self.period;

        let readers = &mut self.readers;
        let mut retried = 0u64;
        let (result, pause) = match (&self.process, options.blocking) {
            (Ok(process), true) => read_stopped(
                process,
                &mut self.python_threads,
                &mut self.states,
                |running| readers.read(RunState::Known(running)),
            ),
            (Err(err), true) => (Err(anyhow::anyhow!("cannot stop the target: {err}")), None),
            (_, false) => {
                let mut result = readers.read(RunState::Read);
                // A running target can change its frames while they are read; such a torn
                // read fails more often for deep, busy stacks, so dropping it would bias the
                // profile toward idle. It is read again at once, a bounded number of times.
                while result.is_err() && retried < TORN_READ_RETRIES {
                    retried += 1;
                    result = readers.read(RunState::Read);
                }
                (result, None)
            }
        };
        Read {
            result,
            pause,
            read: now.elapsed().as_secs_f64(),
            wall: unix_now(),
            lag,
            missed,
            retried,
        }
    }

    /// The second half of a tick: counts the sample `read` into the window, with the task
    /// scans done since the last, given whether the target was found to still run after it
    /// (`same_process`). The time it took; None once the target is gone.
    pub(crate) fn count(&mut self, read: Read, same_process: bool) -> Option<Duration> {
        let began = Instant::now();
        let options = &self.options;
        let period_s = self.period.as_secs_f64();
        let readers = &mut self.readers;
        let Read {
            result,
            pause,
            read,
            wall,
            lag,
            missed,
            retried,
        } = read;
        // A read without error proves nothing about whom it read: a new process on the same
        // PID (another start time) reads fine, even at the same addresses without ASLR. So
        // every read is checked, and a read of another process is never kept.
        if !same_process && start_time(options.pid) != Some(self.started) {
            let mut state = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            state.end = End::Exited;
            return None;
        }

        // Fold outside the lock, so drain() never waits on it.
        let folded = &mut self.folded;
        folded.clear();
        let holders = &mut self.holders;
        holders.clear();
        let mut empty = 0u64;
        let mut stall_nanos = 0u64;
        if let Ok(traces) = &result {
            readers.lookup_names(traces);
            let holder = traces.iter().find(|t| t.gil == GilRole::Holds);
            for trace in traces {
                let Some(stack) = &trace.stack else {
                    empty += 1;
                    continue;
                };
                let waits = trace.gil == GilRole::Waits;
                let key = StackKey {
                    thread_id: trace.tid,
                    on_cpu: trace.active,
                    gil: waits,
                    gc: trace.gc,
                    stack: stack.clone(),
                };
                folded.push((trace.tid, key));
                if waits {
                    holders.push(HolderKey {
                        waiter: trace.tid,
                        waiter_stack: stack.clone(),
                        holder: holder.map_or(0, |h| h.tid),
                        holder_stack: holder.and_then(|h| h.stack.clone()),
                    });
                }
            }
            if options.stall_s > 0.0 {
                let began = Instant::now();
                self.stalls.observe(traces, wall, &mut self.ended);
                stall_nanos += began.elapsed().as_nanos() as u64;
            }
        }
        // what the clock counts against the quarter period: up to here (the task scans'
        // results handed over below, and the scan thread started now and then, are not)
        let took = began.elapsed();
        let fold = took.as_secs_f64();
        let task_scans = match (&result, self.tasks.as_mut()) {
            (Ok(_), Some(tasks)) => tasks.collect(readers),
            _ => Vec::new(),
        };
        for scan in task_scans.iter().flatten() {
            self.stalls
                .note_tasks(&scan.running, scan.at, &mut self.ended);
        }

        let mut guard = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *guard;
        state.stats.missed += missed;
        state.stats.retried += retried;
        state.stats.lag_sum += lag;
        state.stats.lag_max = state.stats.lag_max.max(lag);
        if lag > period_s / 4.0 {
            state.stats.late += 1;
        }
        state.stats.read_sum += read;
        if let Some(reads) = readers.walker_reads() {
            state.stats.memory_reads = reads.memory;
            state.stats.state_reads = reads.states;
            state.stats.state_nanos = reads.state_nanos;
            state.stats.state_file = reads.state_file;
        }
        if result.is_ok() && state.stats.on_cpu != readers.on_cpu() {
            state.stats.on_cpu = readers.on_cpu().to_string();
        }
        if result.is_ok() && state.stats.gil != readers.gil() {
            state.stats.gil = readers.gil().to_string();
        }
        state.stats.read_max = state.stats.read_max.max(read);
        if let Some(pause) = pause {
            state.stats.pauses.add(pause);
        }

        if let Err(err) = result {
            if !process_alive(options.pid, self.started) {
                state.end = End::Exited;
                return None;
            }
            state.stats.errors += 1;
            state.stats.last_error = Some(format!("{err:#}"));
            return Some(took);
        }

        let window_start = (wall / options.window).floor() * options.window;
        let rotate = match &state.current {
            Some(w) => w.start != window_start,
            None => true,
        };
        if rotate {
            if let Some(done) = state.current.take() {
                if done.samples > 0 {
                    state.pending.push_back(done);
                }
            }
            while state.pending.len() > options.max_pending {
                if let Some(old) = state.pending.pop_front() {
                    state.stats.dropped_windows += 1;
                    state.stats.dropped_samples += old.samples;
                }
            }
            state.current = Some(Window::new(window_start, options.window));
        }
        let window = state.current.as_mut().expect("window was just set");
        window.samples += 1;
        state.stats.samples += 1;
        state.stats.empty += empty;
        state.stats.traces += folded.len() as u64;
        state.stats.fold_sum += fold;
        state.stats.stall_nanos += stall_nanos;
        state.stats.stalled_since = self.stalls.stalled_since(wall);
        for scan in task_scans {
            super::task_ticks::count(scan, window, &mut state.stats);
        }
        for (thread_id, key) in folded.drain(..) {
            if let Some(name) = readers.names().get(&thread_id) {
                window
                    .thread_names
                    .entry(thread_id)
                    .or_insert_with(|| name.clone());
            }
            *window.stacks.entry(key).or_insert(0) += 1;
        }
        for key in holders.drain(..) {
            *window.gil_holders.entry(key).or_insert(0) += 1;
        }
        for stall in self.ended.drain(..) {
            keep_longest(&mut window.stalls, &mut window.stalls_dropped, stall);
        }
        Some(took)
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let mut state = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        // the stalls still running go with the last window
        self.stalls.flush(&mut self.ended);
        let state = &mut *state;
        if let Some(window) = state.current.as_mut().or(state.pending.back_mut()) {
            for stall in self.ended.drain(..) {
                keep_longest(&mut window.stalls, &mut window.stalls_dropped, stall);
            }
        }
        if let Some(done) = state.current.take() {
            if done.samples > 0 {
                state.pending.push_back(done);
            }
        }
        if state.end == End::Running {
            state.end = End::Stopped;
        }
    }
}

/// A runner on a thread of its own, until it is stopped or its target is gone.
pub(crate) fn run_alone(mut runner: Runner) {
    precise_sleeps();
    while !runner.stopped() {
        let now = Instant::now();
        if now < runner.next {
            // Sleep in short slices so stop() is answered promptly even at low rates.
            std::thread::sleep((runner.next - now).min(MAX_SLEEP));
            continue;
        }
        if !runner.tick(now) {
            break;
        }
    }
}
