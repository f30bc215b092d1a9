"""The machine's floor for goal 5: a loop that only sleeps to a fixed schedule.

``python -m benchmarks.floor --rate HZ --seconds S`` ticks like sidecar's sampler (the same
timer slack, the same rules: a tick is *late* when it starts more than a quarter period after
its deadline, *missed* when the loop fell a whole period behind and skipped it) but reads
nothing, and prints its counts as JSON. Whatever it loses, any sampler on this machine loses
too: it is what the scheduler and the timers allow.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    print(json.dumps(tick(args.rate, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
