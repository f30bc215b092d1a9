//! The sampling session: reads one target's Python stacks at a fixed rate, on a native thread
//! of its own or on the shared clock (`clock`), and aggregates them into windows of
//! unique stacks with counts.
//!
//! Nothing here touches Python objects: the thread runs without the GIL and the Python side
//! only ever sees the aggregated windows through `drain()`. The session attaches its readers
//! (`readers`) and hands them to a runner (`runner`) that ticks.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::readers::Readers;
use super::runner::{run_alone, Runner};
use super::windows::{End, Options, Shared, Stats, Window};
use crate::process::attach::InitError;
use crate::process::procfs::start_time;

/// How long stop() waits for the shared clock to let go of a session's runner.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Session {
    pub options: Options,
    pub python_version: String,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    /// Whether runnable threads are told waiting for a CPU (`set_cpu_wait`).
    cpu_wait: Arc<AtomicBool>,
    handle: Mutex<Option<JoinHandle<()>>>,
    /// Disconnected once the session's runner is dropped (wherever it ticked).
    done: Mutex<Option<mpsc::Receiver<()>>>,
}

impl Session {
    /// Attaches to `pid` on a new thread and starts sampling. Returns once the first read of
    /// the target's stacks succeeded, or with the reason it could not.
    pub fn start(options: Options) -> Result<Session, InitError> {
        let pid = options.pid;
        let Some(started) = start_time(pid) else {
            return Err(InitError::NoProcess(pid));
        };
        let shared = Arc::new(Mutex::new(Shared {
            pending: VecDeque::new(),
            current: None,
            stats: Stats::default(),
            end: End::Running,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let cpu_wait = Arc::new(AtomicBool::new(options.cpu_wait));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<String, InitError>>();
        let (done_tx, done_rx) = mpsc::channel::<()>();

        let thread_shared = shared.clone();
        let thread_stop = stop.clone();
        let thread_cpu_wait = cpu_wait.clone();
        let thread_options = options.clone();
        let handle = std::thread::Builder::new()
            .name(format!("sidecar-sampler-{pid}"))
            .spawn(move || {
                let (readers, reader) = match Readers::attach(pid, started, &thread_options) {
                    Ok(attached) => attached,
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                        return;
                    }
                };
                {
                    let mut state = thread_shared.lock().unwrap_or_else(|e| e.into_inner());
                    state.stats.reader = reader;
                    let clock = if thread_options.shared_clock {
                        "shared"
                    } else {
                        "own"
                    };
                    state.stats.clock = clock.into();
                }
                let _ = ready_tx.send(Ok(readers.version()));
                let shared_clock = thread_options.shared_clock;
                let runner = Runner::new(
                    readers,
                    thread_options,
                    started,
                    thread_shared,
                    thread_stop,
                    thread_cpu_wait,
                    done_tx,
                );
                if shared_clock {
                    // the clock thread takes it; should it be gone, the runner stays here
                    if let Err(runner) = super::clock::enqueue(Box::new(runner)) {
                        runner.note_clock("own (the shared clock is not running)");
                        run_alone(*runner);
                    }
                } else {
                    run_alone(runner);
                }
            })
            .map_err(|e| InitError::Other(format!("cannot start the sampling thread: {e}")))?;

        let python_version = match ready_rx.recv() {
            Ok(Ok(version)) => version,
            Ok(Err(err)) => {
                let _ = handle.join();
                return Err(err);
            }
            Err(_) => {
                let _ = handle.join();
                return Err(InitError::Other(
                    "the sampling thread died while attaching".into(),
                ));
            }
        };
        Ok(Session {
            options,
            python_version,
            shared,
            stop,
            cpu_wait,
            handle: Mutex::new(Some(handle)),
            done: Mutex::new(Some(done_rx)),
        })
    }

    /// Completed windows, oldest first; with `flush`, the window in progress too.
    pub fn drain(&self, flush: bool) -> Vec<Window> {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<Window> = shared.pending.drain(..).collect();
        if flush {
            if let Some(current) = shared.current.take() {
                if current.samples > 0 {
                    out.push(current);
                }
            }
        }
        out
    }

    /// How the session stands, without copying its counters.
    pub fn end(&self) -> End {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.end.clone()
    }

    /// Where the session ticks (`Stats::clock`), without copying the other counters.
    pub fn clock(&self) -> String {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.stats.clock.clone()
    }

    /// Where on-CPU states come from (`Stats::on_cpu`), without copying the other counters.
    pub fn on_cpu(&self) -> String {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.stats.on_cpu.clone()
    }

    pub fn gil(&self) -> String {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.stats.gil.clone()
    }

    pub fn stats(&self) -> (Stats, End) {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        (shared.stats.clone(), shared.end.clone())
    }

    /// Tells (or stops telling) the runnable threads that wait for a CPU from the next tick on,
    /// as `Options::cpu_wait` does from the start: the benchmarks turn one sampler's read on
    /// and off while another beside it does the opposite.
    pub fn set_cpu_wait(&self, on: bool) {
        self.cpu_wait.store(on, Ordering::Relaxed);
    }

    /// Stops the sampling thread and waits for it; the target is never left stopped because
    /// every ptrace lock is released before a tick ends.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let handle = self.handle.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        // on the shared clock, the runner outlives the thread that attached it
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(done) = done {
            let _ = done.recv_timeout(STOP_TIMEOUT);
        }
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if shared.end == End::Running {
            shared.end = End::Stopped;
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop();
    }
}
