//! The machine's floor for goals 3 and 4 of the benchmark: what any sampler pays on this
//! machine, with none of sidecar's work in it.
//!
//!     floor PID[,PID...] [RATE_HZ] [SECONDS] [PIECES BYTES [READS TICKS [STATE_FILE]]]
//!
//! Ticks on a sampler's schedule (timer slack 1 ns, a tick skipped when a whole period late)
//! in several ways (the CPU ones in turns of a second, then the pauses), and prints one JSON
//! object:
//! - `sleep`: CPU per tick of a thread that only wakes up to the schedule;
//! - `read`: the same plus one 64-byte `process_vm_readv` of the target's heap per tick, the
//!   least a sampler of that target reads;
//! - `shape` (with PIECES and BYTES): the same plus one `process_vm_readv` per tick of the
//!   shape a sampler's read has: PIECES remote pieces, BYTES in all, one contiguous piece (a
//!   data stack) and 72-byte ones (code headers) each on a page of its own of the target's heap;
//!   with several PIDs, one such read of each target per tick, one after another (a clock
//!   shared by several targets: one wakeup, then a read of each);
//! - `replay` (with READS and TICKS): the same plus the very reads a sampler made, as recorded
//!   (`sidecar._native.record_reads`) over TICKS ticks of its clock: READS is a file of one
//!   `process_vm_readv` per line (`PID ADDRESS:LENGTH ...`), and each tick replays its share
//!   of them in the order made. The kernel's part of a read depends on where its pieces lie
//!   (pages, mappings), which the synthetic shape only approximates;
//! - `states` (with READS and TICKS): the replay, plus per tick one read of the run state of
//!   each thread of the targets, as a sampler reads it (from a file kept open, the first 96
//!   bytes of the thread's `/proc/PID/task/TID/stat`, or with STATE_FILE `syscall` the first
//!   2 of its `syscall`, the file the sampler reports in `state_file`): what the kernel charges for
//!   the true on-CPU state, which sidecar's own work above the replay includes;
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

/// The target's heap: (start, end).
fn heap(pid: i32) -> Option<(usize, usize)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let line = maps.lines().find(|line| line.ends_with("[heap]"))?;
    let range = line.split_whitespace().next()?;
    let (start, end) = range.split_once('-')?;
    Some((
        usize::from_str_radix(start, 16).ok()?,
        usize::from_str_radix(end, 16).ok()?,
    ))
}

const PAGE: usize = 4096;
const SMALL: usize = 72;

/// Remote pieces of a sampler's read shape inside the heap: the contiguous one first, then
/// small ones on the pages after it, one page each; fewer when the heap is too small.
fn shape(heap: (usize, usize), pieces: usize, bytes: usize) -> Vec<(usize, usize)> {
    let big = bytes
        .saturating_sub(SMALL * pieces.saturating_sub(1))
        .max(SMALL);
    let mut out = vec![(heap.0, big)];
    let mut page = (heap.0 + big).div_ceil(PAGE) * PAGE;
    while out.len() < pieces && page + PAGE <= heap.1 {
        out.push((page, SMALL));
        page += PAGE;
    }
    out
}

/// One process_vm_readv of `pieces` into `buffer`: whether it read them all.
fn read(pid: i32, pieces: &[(usize, usize)], buffer: &mut [u8]) -> bool {
    let total: usize = pieces.iter().map(|p| p.1).sum();
    let local = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: total.min(buffer.len()),
    };
    let remote: Vec<libc::iovec> = pieces
        .iter()
        .map(|&(address, len)| libc::iovec {
            iov_base: address as *mut libc::c_void,
            iov_len: len,
        })
        .collect();
    // SAFETY: one local iovec inside `buffer`; the kernel checks the remote ones.
    let n =
        unsafe { libc::process_vm_readv(pid, &local, 1, remote.as_ptr(), remote.len() as _, 0) };
    n == total as isize
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

/// The `name` files (`stat`, `syscall`) of every thread of `pids`, kept open.
fn state_files(pids: &[i32], name: &str) -> Vec<std::fs::File> {
    let mut files = Vec::new();
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            if let Ok(file) = std::fs::File::open(task.path().join(name)) {
                files.push(file);
            }
        }
    }
    files
}

/// One recorded `process_vm_readv`: the target's PID and the remote pieces, (address, length).
type Call = (i32, Vec<(usize, usize)>);

/// The reads of a recording, from `PID ADDRESS:LENGTH ...` lines.
fn recorded(path: &str) -> Result<Vec<Call>, String> {
    let text = std::fs::read_to_string(path).map_err(|err| format!("{path}: {err}"))?;
    let piece = |word: &str| -> Option<(usize, usize)> {
        let (address, len) = word.split_once(':')?;
        Some((address.parse().ok()?, len.parse().ok()?))
    };
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let mut words = line.split_whitespace();
            let pid = words.next().and_then(|w| w.parse().ok());
            let pieces: Option<Vec<_>> = words.map(piece).collect();
            match (pid, pieces) {
                (Some(pid), Some(pieces)) if !pieces.is_empty() => Ok((pid, pieces)),
                _ => Err(format!("{path}: not a recorded read: {line:.80}")),
            }
        })
        .collect()
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
    let pids: Vec<i32> = args
        .get(1)
        .map(|a| a.split(',').filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default();
    let Some(&pid) = pids.first() else {
        eprintln!("usage: floor PID[,PID...] [RATE_HZ] [SECONDS] [PIECES BYTES [READS TICKS]]");
        std::process::exit(2);
    };
    let rate: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(100.0);
    let seconds: f64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(5.0);
    let pieces: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(0);
    let bytes: usize = args.get(5).and_then(|a| a.parse().ok()).unwrap_or(0);
    let replay = match args.get(6).map(|path| recorded(path)) {
        Some(Ok(calls)) => calls,
        Some(Err(err)) => {
            eprintln!("floor: {err}");
            std::process::exit(1);
        }
        None => Vec::new(),
    };
    let recorded_ticks: usize = args.get(7).and_then(|a| a.parse().ok()).unwrap_or(1).max(1);
    // what the sampler reads of each file: the head of stat holds the state, "running" or a
    // call's number tells syscall's
    let (state_file, state_head) = match args.get(8).map(String::as_str) {
        None | Some("stat") => ("stat", 96),
        Some("syscall") => ("syscall", 2),
        Some(other) => {
            eprintln!("floor: STATE_FILE must be stat or syscall, not {other:?}");
            std::process::exit(2);
        }
    };
    // each target's heap, the first's for the 64-byte read, and the shape read from it
    let mut heaps: Vec<(usize, usize)> = Vec::new();
    for &each in &pids {
        let Some(heap) = heap(each) else {
            eprintln!("floor: no heap mapping for PID {each}");
            std::process::exit(1);
        };
        heaps.push(heap);
    }
    let heap = heaps[0];
    let shapes: Vec<(i32, Vec<(usize, usize)>)> = pids
        .iter()
        .zip(&heaps)
        .map(|(&each, &heap)| (each, shape(heap, pieces, bytes)))
        .collect();
    // SAFETY: PR_SET_TIMERSLACK takes a number of nanoseconds and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };

    // The three CPU legs take turns in slices of a second, so that the machine's own load,
    // which moves from one second to the next, weighs on each alike.
    let mut buffer = vec![0u8; bytes.max(64)];
    let shaped = &shapes[0].1;
    let shaped_bytes: usize = shaped.iter().map(|p| p.1).sum();
    let largest = shapes
        .iter()
        .chain(&replay)
        .map(|(_, s)| s.iter().map(|p| p.1).sum::<usize>())
        .max();
    buffer.resize(largest.unwrap_or(0).max(64), 0);
    let (mut failed, mut shape_failed) = (0u64, 0u64);
    let (mut sleep_ticks, mut sleep_cpu) = (0u64, 0u64);
    let (mut read_ticks, mut read_cpu) = (0u64, 0u64);
    let (mut shape_ticks, mut shape_cpu) = (0u64, 0u64);
    let (mut replay_ticks, mut replay_cpu, mut replay_failed) = (0u64, 0u64, 0u64);
    let (mut states_ticks, mut states_cpu, mut states_failed) = (0u64, 0u64, 0u64);
    let stats = state_files(&pids, state_file);
    // the recorded reads by tick: tick k replays those from k*calls/ticks on, in turn
    let mut replayed = 0usize;
    let mut replay_tick = |buffer: &mut [u8], failed: &mut u64| {
        let tick = replayed % recorded_ticks;
        let (from, to) = (
            tick * replay.len() / recorded_ticks,
            (tick + 1) * replay.len() / recorded_ticks,
        );
        for (each, pieces) in &replay[from..to] {
            if !read(*each, pieces, buffer) {
                *failed += 1;
            }
        }
        replayed += 1;
    };
    let slices = seconds.ceil().max(1.0) as u64;
    let slice = seconds / slices as f64;
    for _ in 0..slices {
        let (ticks, cpu) = tick(rate, slice, || {});
        (sleep_ticks, sleep_cpu) = (sleep_ticks + ticks, sleep_cpu + cpu);
        let (ticks, cpu) = tick(rate, slice, || {
            if !read(pid, &[(heap.0, 64)], &mut buffer) {
                failed += 1;
            }
        });
        (read_ticks, read_cpu) = (read_ticks + ticks, read_cpu + cpu);
        if pieces > 0 {
            let (ticks, cpu) = tick(rate, slice, || {
                for (each, shaped) in &shapes {
                    if !read(*each, shaped, &mut buffer) {
                        shape_failed += 1;
                    }
                }
            });
            (shape_ticks, shape_cpu) = (shape_ticks + ticks, shape_cpu + cpu);
        }
        if !replay.is_empty() {
            let (ticks, cpu) = tick(rate, slice, || replay_tick(&mut buffer, &mut replay_failed));
            (replay_ticks, replay_cpu) = (replay_ticks + ticks, replay_cpu + cpu);
            let (ticks, cpu) = tick(rate, slice, || {
                replay_tick(&mut buffer, &mut replay_failed);
                let mut head = [0u8; 96];
                for file in &stats {
                    use std::os::unix::fs::FileExt;
                    if !file
                        .read_at(&mut head[..state_head], 0)
                        .is_ok_and(|n| n > 0)
                    {
                        states_failed += 1;
                    }
                }
            });
            (states_ticks, states_cpu) = (states_ticks + ticks, states_cpu + cpu);
        }
    }

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
         \"shape\": {{\"ticks\": {shape_ticks}, \"cpu_per_tick_us\": {:.3}, \"failed\": {shape_failed}, \
         \"pieces\": {}, \"bytes\": {shaped_bytes}, \"targets\": {}}}, \
         \"replay\": {{\"ticks\": {replay_ticks}, \"cpu_per_tick_us\": {:.3}, \"failed\": {replay_failed}, \
         \"reads\": {}, \"recorded_ticks\": {recorded_ticks}, \"pieces\": {}, \"bytes\": {}}}, \
         \"states\": {{\"ticks\": {states_ticks}, \"cpu_per_tick_us\": {:.3}, \"failed\": {states_failed}, \
         \"threads\": {}, \"file\": \"{state_file}\"}}, \
         \"pause\": {{\"ticks\": {pause_ticks}, \"cpu_per_tick_us\": {:.3}, \"errors\": {lock_errors}, \
         \"p50_us\": {:.2}, \"p99_us\": {:.2}, \"max_us\": {:.2}, \"mean_us\": {:.2}}}}}",
        per(sleep_cpu, sleep_ticks),
        per(read_cpu, read_ticks),
        per(shape_cpu, shape_ticks),
        shaped.len(),
        shapes.len(),
        per(replay_cpu, replay_ticks),
        replay.len(),
        replay.iter().map(|(_, p)| p.len()).sum::<usize>(),
        replay.iter().flat_map(|(_, p)| p).map(|p| p.1).sum::<usize>(),
        per(states_cpu, states_ticks),
        stats.len(),
        per(pause_cpu, pause_ticks),
        percentile(&pauses, 50.0),
        percentile(&pauses, 99.0),
        pauses.last().copied().unwrap_or(0.0),
        pauses.iter().sum::<f64>() / pauses.len().max(1) as f64,
    );
}
