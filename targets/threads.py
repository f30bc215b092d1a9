"""Many threads in one process: ``python -m targets.threads [--threads N] [--busy K]``.

N threads (default 1,000) wait on an event in ``parked`` (three frames under the thread's
entry); K of them (default 2) spin in ``churn`` instead. Prints "ready" once all run.
"""

from __future__ import annotations

import argparse
import threading


def churn(stop: threading.Event) -> None:
    total = 0
    while not stop.is_set():
        for i in range(1000):
            total += i * i


def parked(stop: threading.Event) -> None:
    stop.wait()


def waiter(stop: threading.Event, busy: bool) -> None:
    if busy:
        churn(stop)
    else:
        parked(stop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--busy", type=int, default=2, help="threads that spin on CPU")
    args = parser.parse_args()
    threading.stack_size(256 * 1024)  # 1,000 default 8 MB stacks would be 8 GB of address space
    stop = threading.Event()
    threads = [
        threading.Thread(target=waiter, args=(stop, i < args.busy), name=f"worker-{i}", daemon=True)
        for i in range(args.threads)
    ]
    # the spinning ones last: while they hold the GIL, every start waits its turn for it
    for thread in reversed(threads):
        thread.start()
    print("ready", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
