"""One Python thread and N idle native threads: ``python -m targets.native_threads [--threads N]``.

The extra threads are made with ``pthread_create`` through ctypes and park in libc's ``pause()``
with every signal blocked: no Python code ever runs on them, like the worker threads of a C
library (a gRPC or BLAS pool, a database driver). The one Python thread works in short bursts
at the bottom of a recursion ``--depth`` frames deep (``--busy`` of each 10 ms on CPU, the rest
in ``time.sleep``). Prints "ready" when the threads exist; exits after ``--seconds``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import time

PERIOD = 0.01


def start_native_threads(count: int) -> None:
    """``count`` threads that run libc's ``pause()`` and nothing else, forever."""
    libc = ctypes.CDLL(None, use_errno=True)
    create = libc.pthread_create
    create.argtypes = [
        ctypes.POINTER(ctypes.c_ulong),
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    create.restype = ctypes.c_int
    # pause() takes no argument; the thread's void* argument is simply ignored by it.
    routine = ctypes.cast(libc.pause, ctypes.c_void_p)
    # New threads inherit the signal mask: with everything blocked, pause() never returns and
    # no signal meant for the process is ever handled on these threads.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        for _ in range(count):
            handle = ctypes.c_ulong()
            error = create(ctypes.byref(handle), None, routine, None)
            if error:
                raise OSError(error, f"pthread_create: {os.strerror(error)}")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def work(busy: float, seconds: float | None) -> None:
    end = None if seconds is None else time.monotonic() + seconds
    total = 0
    while end is None or time.monotonic() < end:
        until = time.perf_counter() + busy * PERIOD
        while time.perf_counter() < until:
            for i in range(200):
                total += i * i
        time.sleep((1.0 - busy) * PERIOD)


def descend(depth: int, busy: float, seconds: float | None) -> None:
    if depth > 1:
        descend(depth - 1, busy, seconds)
    else:
        print("ready", flush=True)
        work(busy, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="idle native threads to add")
    parser.add_argument("--depth", type=int, default=20, help="Python frames of the busy thread")
    parser.add_argument("--busy", type=float, default=0.2, help="share of time on CPU (0..1)")
    parser.add_argument("--seconds", type=float, default=None, help="exit after this long")
    args = parser.parse_args()
    start_native_threads(args.threads)
    descend(args.depth, min(1.0, max(0.0, args.busy)), args.seconds)


if __name__ == "__main__":
    main()
