"""A Python process that ends its life in a chosen way, for fault tests:
``python -m targets.lifecycle MODE [--after S] [--workers N] [-- ARGV...]``.

Every mode spins in ``lifecycle_work`` (its own frame, so a profile tells this program apart
from any other) and prints "ready" first. Then, after ``--after`` seconds:

- ``run``: keeps spinning until killed;
- ``exit``: returns from main (exit status 0);
- ``segv``: dies of SIGSEGV (a real invalid read through ctypes);
- ``abort``: calls abort() (SIGABRT);
- ``fork``: forks ``--workers`` children at once (``--after`` is ignored), which spin beside
  the parent in ``lifecycle_worker`` until killed (their PIDs are in
  /proc/PID/task/PID/children);
- ``exec``: replaces itself with ARGV (same PID, same start time, another program).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1


def lifecycle_work(seconds: float | None) -> None:
    end = None if seconds is None else time.monotonic() + seconds
    total = 0
    while end is None or time.monotonic() < end:
        for i in range(1000):
            total += i * i


def lifecycle_worker() -> None:
    lifecycle_work(None)


def crash_segv() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV, no Python exception


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("run", "exit", "segv", "abort", "fork", "exec"))
    parser.add_argument("--after", type=float, default=2.0, help="seconds before the event")
    parser.add_argument("--workers", type=int, default=2, help="children to fork (fork mode)")
    argv = sys.argv[1:]
    program = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(program) - (1 if program else 0)])
    if args.mode == "fork":
        children = []
        for _ in range(args.workers):
            child = os.fork()
            if child == 0:
                # a worker never outlives its parent, however the parent ends
                ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                lifecycle_worker()
                os._exit(0)
            children.append(child)

        def stop(signum: int, frame: object) -> None:
            for child in children:
                os.kill(child, signal.SIGKILL)
            os._exit(0)

        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        lifecycle_work(None)
        return
    print("ready", flush=True)
    lifecycle_work(None if args.mode == "run" else args.after)
    if args.mode == "segv":
        crash_segv()
    elif args.mode == "abort":
        os.abort()
    elif args.mode == "exec":
        sys.stdout.flush()
        os.execv(program[0], program)


if __name__ == "__main__":
    main()
