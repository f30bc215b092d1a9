"""A thread blocked in a function whose locals hold one value of each kind `sidecar dump
--locals` shows, for its tests: ``python -m targets.locals``.

The thread named ``blocker`` calls ``blocked`` with a str, an int, a float, a bool, None, a
large and a negative int, bytes, a list, a tuple, a dict, a set and an object, makes a local
long str and a cell (a variable a nested function reads), and sleeps there for good. The main
thread waits in ``threading.Event.wait``. Runs on every CPython 3.8+. Prints "ready" once the
thread is in its sleep.
"""

from __future__ import annotations

import threading
import time
from typing import Any

#: What `sidecar dump --locals --locals-chars 20` reads of ``blocked``'s frame, as Python
#: writes the values (those it shows by type and address are matched by their type).
EXPECTED = {
    "text": "'it\\'s \"here\"'",
    "count": "42",
    "ratio": "2.5",
    "flag": "True",
    "nothing": "None",
    "big": str(2**100),
    "negative": "-12345678901",
    "blob": "b'\\x00ab'",
    "items": "<list of 3>",
    "pair": "<tuple of 2>",
    "mapping": "<dict of 1>",
    "members": "<set of 2>",
    "thing": "<Thing at 0x",
    "long": "'" + "x" * 20 + "'... (500 in all)",
    "kept": "'in a cell'",
}


class Thing:
    pass


def blocked(
    text: str,
    count: int,
    ratio: float,
    flag: bool,
    nothing: None,
    big: int,
    negative: int,
    blob: bytes,
    items: list[int],
    pair: tuple[int, int],
    mapping: dict[str, int],
    members: set[int],
    thing: Thing,
    ready: threading.Event,
) -> None:
    long = "x" * 500
    kept = "in a cell"

    def reads() -> Any:
        return kept

    ready.set()
    time.sleep(3600)
    print(reads(), len(long))


def main() -> None:
    ready = threading.Event()
    args = ("it's \"here\"", 42, 2.5, True, None, 2**100, -12345678901, b"\x00ab", [1, 2, 3],
            (1, 2), {"a": 1}, {1, 2}, Thing(), ready)  # fmt: skip
    threading.Thread(target=blocked, args=args, name="blocker", daemon=True).start()
    ready.wait()
    time.sleep(0.05)
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
