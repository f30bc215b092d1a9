"""Tasks of a class with a hash of its own, for the task scan's tests (stdlib only, CPython
3.11+): ``--plain N`` tasks of asyncio's ``Task`` park in ``plain`` at once, then, after
``--after`` seconds, ``--hashed M`` tasks of a ``Task`` subclass whose hash is not derived from
its address park in ``hashed``. Prints ``ready`` once the plain ones stand.
"""

from __future__ import annotations

import argparse
import asyncio


class HashedTask(asyncio.Task):  # type: ignore[type-arg]
    """A task whose hash (and so its weak references' hashes) is its own, not its address's."""

    def __hash__(self) -> int:
        return 7


async def plain() -> None:
    await asyncio.sleep(3600)  # await: plain


async def hashed() -> None:
    await asyncio.sleep(3600)  # await: hashed


async def main(plains: int, hashes: int, after: float) -> None:
    loop = asyncio.get_running_loop()
    tasks = [asyncio.create_task(plain()) for _ in range(plains)]
    await asyncio.sleep(0.1)
    print("ready", flush=True)
    await asyncio.sleep(after)
    tasks += [HashedTask(hashed(), loop=loop) for _ in range(hashes)]
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plain", type=int, default=20)
    parser.add_argument("--hashed", type=int, default=10)
    parser.add_argument("--after", type=float, default=0.0)
    args = parser.parse_args()
    asyncio.run(main(args.plain, args.hashed, args.after))
