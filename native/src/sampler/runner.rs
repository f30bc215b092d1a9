//! One target's sampling between ticks: a runner reads a sample through its readers, folds
//! and counts it into the session's window, and keeps the session's counters; it ticks on a
//! thread of its own (`run_alone`) or on the shared clock (`clock`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::readers::Readers;
use super::requests::SlowRequests;
use super::stalls::{keep_longest, Stall, Stalls};
use super::task_ticks::{ScanResult, TaskTicks};
use super::windows::{End, HolderKey, Options, Shared, StackKey, Stats, Window};
use crate::process::procfs::{process_alive, start_time, Liveness};
use crate::process::runstate::ThreadStates;
use crate::stack::{GilRole, RunState, Stack, Trace};

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
    /// Whether runnable threads are told waiting for a CPU, as asked now
    /// (`Session::set_cpu_wait`), and as the readers do.
    cpu_wait: Arc<AtomicBool>,
    cpu_wait_on: bool,
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
    /// The requests the task scans saw in flight, followed for the slow ones.
    slow: Option<SlowRequests>,
    _done: mpsc::Sender<()>,
}

impl Runner {
    pub(crate) fn new(
        readers: Readers,
        options: Options,
        started: u64,
        shared: Arc<Mutex<Shared>>,
        stop: Arc<AtomicBool>,
        cpu_wait: Arc<AtomicBool>,
        done: mpsc::Sender<()>,
    ) -> Runner {
        let pid = options.pid;
        let cpu_wait_on = options.cpu_wait;
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
            slow: SlowRequests::new(options.slow_s),
            started,
            shared,
            stop,
            cpu_wait,
            cpu_wait_on,
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
        self.shared_state().stats.clock = clock.to_string();
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
        let cpu_wait = self.cpu_wait.load(Ordering::Relaxed);
        if cpu_wait != self.cpu_wait_on {
            self.readers.set_cpu_waits(cpu_wait);
            self.cpu_wait_on = cpu_wait;
        }
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
        // A read without error proves nothing about whom it read: a new process on the same
        // PID (another start time) reads fine, even at the same addresses without ASLR. So
        // every read is checked, and a read of another process is never kept.
        if !same_process && !self.still_the_target() {
            self.shared_state().end = End::Exited;
            return None;
        }
        // Fold outside the lock, so drain() never waits on it.
        let mut fold = Fold::default();
        if let Ok(traces) = &read.result {
            fold.empty = self.fold_traces(traces);
            fold.stall_nanos = self.watch_stalls(traces, read.wall);
        }
        // what the clock counts against the quarter period: up to here (the task scans'
        // results handed over below, and the scan thread started now and then, are not)
        let took = began.elapsed();
        fold.seconds = took.as_secs_f64();
        let task_scans = self.collect_task_scans(read.result.is_ok());
        self.count_in_window(read, fold, task_scans).then_some(took)
    }

    /// Whether the target's PID still names the process the session attached to (its start
    /// time unchanged).
    fn still_the_target(&self) -> bool {
        start_time(self.options.pid) == Some(self.started)
    }

    /// The session's shared state, locked (a poisoned lock still holds it).
    fn shared_state(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Folds a sample's `traces` into `folded` (a key per thread with a stack) and `holders`
    /// (one per wait for the GIL, paired with who held it), looking up the names of threads
    /// met for the first time; returns how many threads had no Python stack.
    fn fold_traces(&mut self, traces: &[Trace]) -> u64 {
        self.folded.clear();
        self.holders.clear();
        self.readers.lookup_names(traces);
        let holder = traces.iter().find(|t| t.gil == GilRole::Holds);
        let mut empty = 0u64;
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
                cpu_wait: trace.cpu_wait,
                stack: stack.clone(),
            };
            self.folded.push((trace.tid, key));
            if waits {
                self.holders.push(held_by(trace.tid, stack, holder));
            }
        }
        empty
    }

    /// Follows the stalls of the target's event loops through a sample's `traces`, taken at
    /// `wall` (those it ends go to `ended`), when stalls are looked for; returns the time that
    /// took (ns).
    fn watch_stalls(&mut self, traces: &[Trace], wall: f64) -> u64 {
        if self.options.stall_s <= 0.0 {
            return 0;
        }
        let began = Instant::now();
        self.stalls.observe(traces, wall, &mut self.ended);
        began.elapsed().as_nanos() as u64
    }

    /// The task scans done since the last tick, after a sample that was read (`read_ok`); the
    /// task each found running is noted for the stalls it may have held.
    fn collect_task_scans(&mut self, read_ok: bool) -> Vec<ScanResult> {
        let task_scans = match (read_ok, self.tasks.as_mut()) {
            (true, Some(tasks)) => tasks.collect(&self.readers),
            _ => Vec::new(),
        };
        for scan in task_scans.iter().flatten() {
            self.stalls
                .note_tasks(&scan.running, scan.at, &mut self.ended);
        }
        task_scans
    }

    /// Under the session's lock: counts the read's figures into the stats, and a sample read
    /// into the window of its time (rotating windows as it starts a new one) with its folded
    /// stacks, waits for the GIL, task scans and ended stalls; a failed read as an error.
    /// False once the target is gone.
    fn count_in_window(&mut self, read: Read, fold: Fold, task_scans: Vec<ScanResult>) -> bool {
        let Runner {
            readers,
            options,
            started,
            shared,
            period,
            folded,
            holders,
            stalls,
            ended,
            slow,
            ..
        } = self;
        let mut guard = shared.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *guard;
        count_read(&mut state.stats, &read, readers, period.as_secs_f64());
        if let Err(err) = read.result {
            if !process_alive(options.pid, *started) {
                state.end = End::Exited;
                return false;
            }
            state.stats.errors += 1;
            state.stats.last_error = Some(format!("{err:#}"));
            return true;
        }
        rotate_windows(state, read.wall, options);
        let window = state.current.as_mut().expect("window was just set");
        let stats = &mut state.stats;
        window.samples += 1;
        stats.samples += 1;
        stats.empty += fold.empty;
        stats.traces += folded.len() as u64;
        stats.fold_sum += fold.seconds;
        stats.stall_nanos += fold.stall_nanos;
        stats.stalled_since = stalls.stalled_since(read.wall);
        for scan in task_scans {
            super::task_ticks::count(scan, window, stats, slow.as_mut());
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
        for stall in ended.drain(..) {
            keep_longest(&mut window.stalls, &mut window.stalls_dropped, stall);
        }
        true
    }
}

/// What folding a sample found, outside the lock: threads without a Python stack, the time
/// the stall detector took (ns), and the time folding took up to the task scans (seconds).
#[derive(Default)]
struct Fold {
    empty: u64,
    stall_nanos: u64,
    seconds: f64,
}

/// A wait for the GIL of the thread `waiter`, whose stack is `stack`, paired with the thread
/// that held the GIL in the same sample (none: it was being handed over).
fn held_by(waiter: u64, stack: &Stack, holder: Option<&Trace>) -> HolderKey {
    HolderKey {
        waiter,
        waiter_stack: stack.clone(),
        holder: holder.map_or(0, |h| h.tid),
        holder_stack: holder.and_then(|h| h.stack.clone()),
    }
}

/// Counts a tick's read into the stats, failed or not: its lag against the period of
/// `period_s`, the ticks it missed, the torn reads it read again, how long it took and
/// paused the target, the walker's reads so far, and where a read's on-CPU and GIL states
/// came from.
fn count_read(stats: &mut Stats, read: &Read, readers: &Readers, period_s: f64) {
    stats.missed += read.missed;
    stats.retried += read.retried;
    stats.lag_sum += read.lag;
    stats.lag_max = stats.lag_max.max(read.lag);
    if read.lag > period_s / 4.0 {
        stats.late += 1;
    }
    stats.read_sum += read.read;
    if let Some(reads) = readers.walker_reads() {
        stats.memory_reads = reads.memory;
        stats.state_reads = reads.states;
        stats.state_nanos = reads.state_nanos;
        stats.state_file = reads.state_file;
    }
    if read.result.is_ok() && stats.on_cpu != readers.on_cpu() {
        stats.on_cpu = readers.on_cpu().to_string();
    }
    if read.result.is_ok() && stats.gil != readers.gil() {
        stats.gil = readers.gil().to_string();
    }
    if read.result.is_ok() && stats.cpu_wait != readers.cpu_wait() {
        stats.cpu_wait = readers.cpu_wait().to_string();
    }
    stats.read_max = stats.read_max.max(read.read);
    if let Some(pause) = read.pause {
        stats.pauses.add(pause);
    }
}

/// Makes the window in progress the one of the time `wall` (windows aligned to multiples of
/// their length): a window that ends goes to the pending ones when it holds samples, and the
/// oldest pending past `max_pending` are dropped, counted.
fn rotate_windows(state: &mut Shared, wall: f64, options: &Options) {
    let window_start = (wall / options.window).floor() * options.window;
    if state
        .current
        .as_ref()
        .is_some_and(|w| w.start == window_start)
    {
        return;
    }
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

impl Drop for Runner {
    fn drop(&mut self) {
        let mut state = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        // the stalls still running go with the last window
        self.stalls.flush(&mut self.ended);
        let state = &mut *state;
        // and so do the requests still in flight that were slow
        let mut slow = Vec::new();
        if let Some(requests) = self.slow.as_mut() {
            requests.flush(&mut slow);
        }
        if let Some(window) = state.current.as_mut().or(state.pending.back_mut()) {
            for stall in self.ended.drain(..) {
                keep_longest(&mut window.stalls, &mut window.stalls_dropped, stall);
            }
            for request in slow {
                super::requests::keep_longest(
                    &mut window.slow_requests,
                    &mut window.slow_requests_dropped,
                    request,
                );
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
