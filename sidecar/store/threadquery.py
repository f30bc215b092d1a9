"""Reading which threads a range holds from the store: per thread of each process, its samples
and those of them on an event-loop stack, so that a thread filter can list the threads that
exist and say which of them run an event loop.

A thread counts as an event-loop thread in a range when some of its samples there are on a stack
the writer flagged as running an event loop (``stacks.loop``, set by
``sidecar.classify.threads.is_loop_stack``): the same rule as every loop-thread count.
"""

from __future__ import annotations

from typing import Any

from sidecar.store import counts
from sidecar.store.query import Range, Reader, StoreUnavailable


class ThreadReader:
    """The threads' side of a ``Reader``: same database, same connections."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def threads(self, target: int | None, span: Range) -> list[dict[str, Any]]:
        """Each thread of one target (or all) with samples in ``span``: its target, PID, thread
        id and name ("" when the sampler had none), its samples, its samples on an event-loop
        stack and whether it runs an event loop; event-loop threads first, then by samples."""
        if target is not None:
            self.reader.target(target)  # an unknown target is an error, not "no threads"
        # (process id, thread id) → {stack id: samples}
        found: dict[tuple[int, int], dict[int, int]] = {}
        try:
            for process_id, blob in self.reader.blobs(target, span):
                for stack, thread_id, _, count in counts.unpack(blob):
                    stacks = found.setdefault((process_id, thread_id), {})
                    stacks[stack] = stacks.get(stack, 0) + count
        except counts.CountsError as err:
            raise StoreUnavailable(f"the database is damaged: {err}") from err
        if not found:
            return []
        loop = self.reader.loop_stacks({stack for stacks in found.values() for stack in stacks})
        processes = {process for process, _ in found}
        marks = ", ".join("?" * len(processes))
        owners = {
            int(process): (int(target_id), int(pid))
            for process, target_id, pid in self.reader.rows(
                f"SELECT id, target_id, pid FROM processes WHERE id IN ({marks})",
                tuple(processes),
            )
        }
        names = {
            (int(process), int(thread)): str(name)
            for process, thread, name in self.reader.rows(
                f"SELECT process_id, thread_id, name FROM threads WHERE process_id IN ({marks})",
                tuple(processes),
            )
        }
        out: list[dict[str, Any]] = []
        for (process, thread), stacks in found.items():
            target_id, pid = owners.get(process, (0, 0))
            on_loop = sum(count for stack, count in stacks.items() if stack in loop)
            out.append(
                {
                    "target": target_id,
                    "pid": pid,
                    "thread_id": thread,
                    "name": names.get((process, thread), ""),
                    "samples": sum(stacks.values()),
                    "loop_samples": on_loop,
                    "loop": on_loop > 0,
                }
            )
        out.sort(key=lambda t: (not t["loop"], -t["samples"], t["target"], t["thread_id"]))
        return out
