"""A process whose stacks never repeat: ``python -m targets.generated [--threads N] [--hostile]``.

Each thread compiles, again and again, a fresh chain of functions with names (and file
names) never used before, and spins for a few milliseconds at the bottom of the chain, so
nearly every sample sees a stack that no earlier sample saw: the worst case for a profiler's
stack interning. ``--hostile`` names the generated code like an attacker would: markup and
script, quotes, ``;`` (the folded-stack separator), newlines, control and bidi characters,
and very long names. Prints "ready" once the threads run.
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time
from collections.abc import Callable
from types import FunctionType

HOSTILE = (
    "</text><script>alert(document.domain)</script>",
    '"><img src=x onerror=alert(1)>',
    "a;b;c",
    "line\nbreak",
    "tab\there",
    "nul\x00byte",
    "bell\x07\x1b[31mred",
    "bidi\u202egnp.exe",
    "&amp;&lt;&#0;]]>",
    "x" * 5000,
)

_counter = itertools.count()


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    total = 0
    while time.monotonic() < end:
        for i in range(200):
            total += i


def make_chain(depth: int, hostile: bool) -> Callable[[float], None]:
    """``depth`` nested functions, each with a name (and file) never seen before."""
    call: Callable[[float], None] = _spin
    for level in range(depth):
        number = next(_counter)
        name = f"gen_{number}_{level}"
        filename = f"generated/mod_{number // 100}.py"
        source = f"def {name}(seconds):\n    return call(seconds)\n"
        code = compile(source, filename, "exec").co_consts[0]
        if hostile:
            bad = HOSTILE[number % len(HOSTILE)]
            code = code.replace(co_name=f"{bad}{number}", co_qualname=f"{bad}{number}")
            if level % 2:
                code = code.replace(co_filename=f"{bad}/{number}.py")
        call = FunctionType(code, {"call": call}, name)
    return call


def generate(hostile: bool, depth: int, stop: threading.Event) -> None:
    while not stop.is_set():
        make_chain(depth, hostile)(0.003)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--depth", type=int, default=6, help="generated frames per stack")
    parser.add_argument("--hostile", action="store_true")
    args = parser.parse_args()
    stop = threading.Event()
    for index in range(args.threads):
        threading.Thread(
            target=generate,
            args=(args.hostile, args.depth, stop),
            name=f"generator-{index}",
            daemon=True,
        ).start()
    print("ready", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
