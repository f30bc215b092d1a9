//! The clock the task scan times its reads by: the one the target's event loops keep their
//! timers on (`timers`), so that a read's instant and a timer's `_when` compare.

/// Now on `CLOCK_MONOTONIC`, in seconds: the clock of `loop.time()`, the same for every
/// process of the machine.
pub fn monotonic() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
