//! The machine's floor for goals 3 and 4 of the benchmark: what any sampler pays on this
//! machine, with none of sidecar's work in it.
//!
//!     floor PID [RATE_HZ] [SECONDS]
//!
//! Ticks on a sampler's schedule (timer slack 1 ns, a tick skipped when a whole period late)
//! three ways, one after the other, and prints one JSON object:
//! - `sleep`: CPU per tick of a thread that only wakes up to the schedule;
//! - `read`: the same plus one 64-byte `process_vm_readv` of the target's heap per tick, the
//!   least a sampler of that target reads;
//! - `pause`: per tick, the ptrace stop and resume of the target's main thread as blocking mode
//!   does it (remoteprocess: seize, interrupt, wait, detach), with nothing read; the pause's
//!   percentiles in microseconds.

use std::time::{Duration, Instant};

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which lives on this stack.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn heap_address(pid: i32) -> Option<usize> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let line = maps.lines().find(|line| line.ends_with("[heap]"))?;
    usize::from_str_radix(line.split('-').next()?, 16).ok()
}

/// Ticks `work` on the schedule for `seconds`; returns (ticks, CPU ns of this thread).
fn tick(rate: f64, seconds: f64, mut work: impl FnMut()) -> (u64, u64) {
    let period = Duration::from_secs_f64(1.0 / rate);
    let began = Instant::now();
    let end = began + Duration::from_secs_f64(seconds);
    let mut next = began + period;
    let cpu0 = thread_cpu_ns();
    let mut ticks = 0;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if now < next {
            std::thread::sleep(next - now);
            continue;
        }
        while next <= now {
            next += period;
        }
        work();
        ticks += 1;
    }
    (ticks, thread_cpu_ns() - cpu0)
}

fn percentile(sorted: &[f64], pct: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((pct / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(pid) = args.get(1).and_then(|a| a.parse::<i32>().ok()) else {
        eprintln!("usage: floor PID [RATE_HZ] [SECONDS]");
        std::process::exit(2);
    };
    let rate: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(100.0);
    let seconds: f64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(5.0);
    let Some(heap) = heap_address(pid) else {
        eprintln!("floor: no heap mapping for PID {pid}");
        std::process::exit(1);
    };
    // SAFETY: PR_SET_TIMERSLACK takes a number of nanoseconds and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };

    let (sleep_ticks, sleep_cpu) = tick(rate, seconds, || {});

    let mut buffer = [0u8; 64];
    let mut failed = 0u64;
    let (read_ticks, read_cpu) = tick(rate, seconds, || {
        let local = libc::iovec {
            iov_base: buffer.as_mut_ptr().cast(),
            iov_len: buffer.len(),
        };
        let remote = libc::iovec {
            iov_base: heap as *mut libc::c_void,
            iov_len: 64,
        };
        // SAFETY: one local iovec over `buffer`, one remote iovec; the kernel checks the rest.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n != 64 {
            failed += 1;
        }
    });

    let mut pauses: Vec<f64> = Vec::new();
    let mut lock_errors = 0u64;
    let (pause_ticks, pause_cpu) = tick(rate, seconds, || {
        let began = Instant::now();
        match remoteprocess::Thread::new(pid).and_then(|thread| thread.lock()) {
            Ok(lock) => {
                drop(lock);
                pauses.push(began.elapsed().as_secs_f64() * 1e6);
            }
            Err(_) => lock_errors += 1,
        }
    });
    pauses.sort_by(|a, b| a.total_cmp(b));
    let per = |cpu: u64, ticks: u64| cpu as f64 / ticks.max(1) as f64 / 1e3;
    println!(
        "{{\"rate_hz\": {rate}, \"seconds\": {seconds}, \
         \"sleep\": {{\"ticks\": {sleep_ticks}, \"cpu_per_tick_us\": {:.3}}}, \
         \"read\": {{\"ticks\": {read_ticks}, \"cpu_per_tick_us\": {:.3}, \"failed\": {failed}}}, \
         \"pause\": {{\"ticks\": {pause_ticks}, \"cpu_per_tick_us\": {:.3}, \"errors\": {lock_errors}, \
         \"p50_us\": {:.2}, \"p99_us\": {:.2}, \"max_us\": {:.2}, \"mean_us\": {:.2}}}}}",
        per(sleep_cpu, sleep_ticks),
        per(read_cpu, read_ticks),
        per(pause_cpu, pause_ticks),
        percentile(&pauses, 50.0),
        percentile(&pauses, 99.0),
        pauses.last().copied().unwrap_or(0.0),
        pauses.iter().sum::<f64>() / pauses.len().max(1) as f64,
    );
}
