"""The sink seam: every sink's health follows one recent-problem rule (every window of a real
sampler reaching each sink: tests/live/test_sinks.py)."""

from __future__ import annotations


def test_every_sink_health_follows_one_recent_problem_rule() -> None:
    """The store's and the pusher's health are degraded while failing, and for RECENT seconds
    after their last problem of any kind, not after; their counters stay."""
    from sidecar.serve.push import PushHealth
    from sidecar.serve.sinks import RECENT
    from sidecar.serve.writer import WriterHealth

    now = 1_000_000.0
    store, push = WriterHealth(), PushHealth()
    assert not store.degraded(now) and not push.degraded(now)
    store.failing = push.failing = True
    assert store.degraded(now) and push.degraded(now)
    store.failing = push.failing = False
    for problem in ("disk_full_at", "dropped_at", "recreated_at"):
        store = WriterHealth(**{problem: now})
        assert store.degraded(now + RECENT - 1) and not store.degraded(now + RECENT), problem
    push.give_up("overflow")
    assert push.given_up["overflow"] == 1
    assert push.given_up_at is not None
    assert push.degraded(push.given_up_at + RECENT - 1)
    assert not push.degraded(push.given_up_at + RECENT)
    assert push.given_up["overflow"] == 1
