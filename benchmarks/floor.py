"""The machine's floors: what any sampler pays here, with nothing of sidecar's in it.

``native_floor`` runs ``native/examples/floor.rs`` (built with cargo on first use) on a target:
the CPU per tick of a native thread that only wakes at 100 Hz, the same with one 64-byte
``process_vm_readv`` of the target per tick or one read shaped like sidecar's own, or replaying
recorded reads; and a ptrace stop and resume of its main thread with nothing read (the pause).

``python -m benchmarks.floor --rate HZ --seconds S`` ticks like sidecar's sampler (the same timer
slack and rules: *late* past a quarter period, *missed* a whole period behind) but reads nothing,
and prints its counts as JSON: what the scheduler and the timers allow any sampler.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.procs import Procs

NATIVE = Path(__file__).resolve().parents[1] / "native"

PR_SET_TIMERSLACK = 29


def tick(rate: float, seconds: float) -> dict[str, float]:
    ctypes.CDLL(None).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    period = 1.0 / rate
    samples = late = missed = 0
    began = time.monotonic()
    deadline = began + period
    while True:
        now = time.monotonic()
        if now - began >= seconds:
            break
        if now < deadline:
            time.sleep(deadline - now)
            continue
        lag = now - deadline
        if lag >= period:
            skipped = int(lag / period)
            missed += skipped
            deadline += skipped * period
        deadline += period
        samples += 1
        if lag > period / 4:
            late += 1
    return {"samples": samples, "late": late, "missed": missed, "errors": 0, "seconds": seconds}


def example(name: str) -> Path:
    """The release build of ``native/examples/NAME.rs``, built now if it is not up to date (in
    ``CARGO_TARGET_DIR`` where that is set, as cargo does)."""
    build = ["cargo", "build", "--release", "--quiet", "--example", name]
    subprocess.run(build, cwd=NATIVE, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR") or NATIVE / "target")
    return (NATIVE / target).resolve() / "release" / "examples" / name


def native_floor(procs: Procs, pid: int, *, rate: float, seconds: float, rt: int | None,
                 shape: tuple[int, int] | None = None, also: tuple[int, ...] = (),
                 replay: tuple[Path, int] | None = None, state_file: str = "stat",
                 ) -> dict[str, Any]:  # fmt: skip
    """The native floor program's figures for ``pid`` (each of its parts ``seconds``); with
    ``shape`` (pieces, bytes), also those of a read of that shape per tick, of ``pid`` and then
    of each of ``also`` (one wakeup for all, as a shared clock); with ``replay`` (a file of
    recorded reads, and the ticks they were made in; it needs ``shape``), also those of
    replaying them, each tick its share, and of that with a read of each target thread's
    ``state_file`` (``stat`` or ``syscall``, as the samplers read run states)."""
    argv = [
        str(example("floor")),
        ",".join(str(p) for p in (pid, *also)),
        f"{rate:g}",
        f"{seconds:g}",
    ]
    argv += [str(n) for n in shape] if shape else []
    argv += [str(replay[0]), str(replay[1]), state_file] if shape and replay else []
    from benchmarks.procs import finish

    figures: dict[str, Any] = json.loads(finish(procs, argv, 4 * seconds + 30, "floor", rt=rt))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    print(json.dumps(tick(args.rate, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
