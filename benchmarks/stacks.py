"""Large profiles of a service's shape, generated: folded text of N unique stacks, the same for
the same seed, and the flamegraph SVG ``sidecar render`` makes of it.

A stack is a walk down one call tree: an aiohttp service's event loop (asyncio's frames, then
the framework's), one of its handlers, then application and standard-library calls, each
frame ``function (path/module.py:LINE)`` (of a few thousand functions), picked among few
callees near the root and more deeper, so that stacks share their first frames as those of a
real service do. Depths are drawn from a range (10–60 by default, Python frames); the leaf
says the state as sidecar's recordings do: ``[idle]`` in the selector's poll, ``[blocked]``
below a synchronous call, ``[gil]``, ``[gc]`` on top of busy code, or nothing (busy). A share
of the stacks are a thread pool's (no event loop: ``[idle]`` in the pool's wait, or busy).
Counts are skewed as sampled counts are: most stacks seen once, a few thousands of times.
``--short`` stacks have no event loop and short frames (``fN (mK.py:LINE)``, ``[idle]`` or
``[blocked]`` on a fifth): a million of one or two frames fit in 38 MB.

    python -m benchmarks.stacks OUT.folded [--stacks 100000] [--seed 1] [--depth 10-60]
        [--fanout 12] [--short] [--svg OUT.svg]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LOOP = ("<module> (srv/main.py:41)", "run_app (aiohttp/web.py:530)",
        "run_until_complete (asyncio/base_events.py:640)",
        "run_forever (asyncio/base_events.py:607)")  # fmt: skip
POLL = ("_run_once (asyncio/base_events.py:1922)", "select (selectors.py:468)", "[idle]")
STEP = ("_run_once (asyncio/base_events.py:1936)", "_run (asyncio/events.py:84)",
        "RequestHandler.start (aiohttp/web_protocol.py:512)",
        "RequestHandler._handle_request (aiohttp/web_protocol.py:452)",
        "Application._handle (aiohttp/web_app.py:543)")  # fmt: skip
POOL = ("_bootstrap (threading.py:995)", "_bootstrap_inner (threading.py:1038)",
        "run (threading.py:975)", "_worker (concurrent/futures/thread.py:83)")  # fmt: skip
POOL_WAIT = ("get (queue.py:171)", "wait (threading.py:320)", "[idle]")
VERBS = ("get", "load", "parse", "render", "check", "fetch", "build", "encode", "decode",
         "merge", "score", "apply", "resolve", "update", "handle", "format", "validate",
         "sort")  # fmt: skip
NOUNS = ("user", "order", "cart", "price", "token", "row", "page", "item", "query", "event",
         "session", "report", "rule", "feed", "batch", "index", "frame", "record")  # fmt: skip
PACKAGES = ("orders", "users", "billing", "search", "catalog", "auth", "feeds", "reports",
            "storage", "util")  # fmt: skip
STDLIB = ("json/decoder.py", "json/encoder.py", "re/__init__.py", "logging/__init__.py",
          "datetime.py", "decimal.py", "collections/__init__.py", "functools.py")  # fmt: skip


MASK = 2**61 - 1


def _frame(node: int, short: bool = False) -> str:
    """The frame of a call tree's node: one of a few thousand functions (each in one module,
    called from one of a dozen lines of it), from the node's id; ``short``: ``fN (mK.py:L)``."""
    h = (node * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFF
    function = h % (8_000 if short else 4_000)
    g = (function * 0x2545F4914F6CDD1D) & 0xFFFFFFFF
    line = 1 + g % 880 + (h >> 40) % 12
    if short:
        return f"f{function} (m{(g >> 10) % 97}.py:{line})"
    verb, noun = VERBS[(g >> 10) % len(VERBS)], NOUNS[(g >> 15) % len(NOUNS)]
    if (g >> 20) % 11 == 0:  # now and then the standard library
        return f"{verb}_{noun} ({STDLIB[(g >> 24) % len(STDLIB)]}:{line})"
    package, module = PACKAGES[(g >> 24) % len(PACKAGES)], (g >> 28) % 16
    return f"{verb}_{noun} (app/{package}/mod{module}.py:{line})"


def _count(rng: random.Random) -> int:
    return min(10_000, int(rng.paretovariate(1.1)))


def folded_lines(
    stacks: int,
    seed: int = 1,
    depth: tuple[int, int] = (10, 60),
    fanout: int = 12,
    short: bool = False,
) -> Iterator[str]:
    """``stacks`` unique folded lines, ``STACK COUNT``, in the order they were drawn;
    ``short``: no event loop, short frames (``_frame``), ``fanout`` callees at every depth: a
    million stacks in 35 MB."""
    rng = random.Random(seed)
    low, high = depth
    seen: set[str] = set()
    for idle in range(0 if short else min(stacks, 3)):  # the poll: most of the loop's samples
        line = ";".join((*LOOP, *POLL[: 1 + idle % 2], POLL[-1]))
        if line not in seen:
            seen.add(line)
            yield f"{line} {rng.randint(20_000, 90_000)}"
    while len(seen) < stacks:
        pool = not short and rng.random() < 0.05
        head = () if short else POOL if pool else (*LOOP, *STEP)
        # Python frames below the handler's first call: what is left of the depth drawn
        calls = max(1, rng.randint(low, high) - len(head))
        node = 1 + rng.randrange(6 if pool else 40)
        chain = []
        for level in range(calls):
            # few callees near the root, more deeper
            width = fanout if short else 2 + min(fanout, level * 2)
            node = (node * 131 + 1 + int(width * rng.random() ** 2)) % MASK
            chain.append(_frame(node + level * 1_000_003, short))
        leaf = rng.random()
        tail: tuple[str, ...] = ()
        if pool:
            tail = POOL_WAIT if leaf < 0.3 else ()
            chain = chain[:3] if tail else chain
        elif leaf < 0.08:
            tail = ("[blocked]",)
        elif short and leaf < 0.2:
            tail = ("[idle]",)
        elif leaf < 0.10:
            tail = ("[gil]",)
        elif leaf < 0.11:
            tail = ("[gc]",)
        else:
            tail = ()
        stack = ";".join((*head, *chain, *tail))
        if stack not in seen:
            seen.add(stack)
            yield f"{stack} {_count(rng)}"


def write_folded(
    path: Path,
    stacks: int,
    seed: int = 1,
    depth: tuple[int, int] = (10, 60),
    fanout: int = 12,
    short: bool = False,
) -> int:
    """Writes ``folded_lines`` to ``path``; its size in bytes."""
    with path.open("w", encoding="utf-8") as out:
        for line in folded_lines(stacks, seed, depth, fanout, short):
            out.write(line + "\n")
    return path.stat().st_size


def render(folded: Path, svg: Path, min_width: float = 0.0) -> int:
    """The SVG ``sidecar render`` makes of ``folded`` (every frame drawn by default); its
    size in bytes."""
    argv = [sys.executable, "-m", "sidecar", "render", str(folded), "-o", str(svg), "--force",
            "--min-width", f"{min_width:g}"]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return svg.stat().st_size


def _depth(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folded file to write")
    parser.add_argument("--stacks", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--depth", type=_depth, default=(10, 60), help="LOW-HIGH frames")
    parser.add_argument("--fanout", type=int, default=12, help="most callees of a deep frame")
    parser.add_argument("--short", action="store_true", help="no event loop, short frames")
    parser.add_argument("--svg", type=Path, help="also the SVG sidecar render makes of it")
    args = parser.parse_args()
    size = write_folded(args.out, args.stacks, args.seed, args.depth, args.fanout, args.short)
    print(f"wrote {args.out} ({args.stacks:,} stacks, {size / 2**20:.1f} MB)")
    if args.svg:
        print(f"wrote {args.svg} ({render(args.out, args.svg) / 2**20:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
