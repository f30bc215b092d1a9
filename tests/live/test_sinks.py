"""The sink seam: every window a real sampler takes reaches each sink, and a sink that fails
costs only itself."""

from __future__ import annotations

from pathlib import Path

from sidecar.discover import Selection
from sidecar.sample.messages import Message
from sidecar.serve.sessions import Sessions
from sidecar.serve.sinks import Fanout
from sidecar.serve.writer import Writer
from sidecar.store import WindowBatch
from sidecar.store.query import Range, Reader
from tests.support.helpers import Spawner, wait_until


class Counting:
    """A sink that counts the samples of the windows it is given."""

    name = "counting"

    def __init__(self) -> None:
        self.samples = 0
        self.windows = 0

    def submit(self, message: Message) -> None:
        if isinstance(message, WindowBatch):
            self.windows += 1
            self.samples += sum(row[3] for row in message.window.rows)

    def start(self) -> None:
        pass

    def stop(self, timeout: float = 10.0) -> None:
        pass


class Broken:
    """A sink whose every submit fails."""

    name = "broken"

    def submit(self, message: Message) -> None:
        raise RuntimeError("this sink is broken")

    def start(self) -> None:
        pass

    def stop(self, timeout: float = 10.0) -> None:
        pass


def test_every_sink_gets_every_window_and_a_broken_one_costs_only_itself(
    spawn: Spawner, tmp_path: Path
) -> None:
    target = spawn.target("spin")
    db = tmp_path / "s.db"
    writer = Writer(db)
    counting, broken = Counting(), Broken()
    sinks = Fanout([broken, writer, counting])
    sessions = Sessions(sinks, Selection(frozenset({target.pid})), rate_hz=100, window=1)
    sinks.start()
    try:
        sessions.scan()
        assert len(sessions.sessions) == 1, sessions.problems

        def enough() -> bool:
            sessions.drain()
            return counting.windows >= 3

        assert wait_until(enough, timeout=20)
    finally:
        sessions.stop()
        sinks.stop()
    assert counting.samples > 0
    # the broken sink refused the process record, every window and the end of the process
    assert sinks.errors["broken"] == counting.windows + 2
    assert sinks.errors["store"] == 0 and sinks.errors["counting"] == 0
    assert writer.health.windows_written == counting.windows
    stored = Reader(db, 1).profile(None, Range.aligned(None, None, 1))
    assert stored.total == counting.samples
