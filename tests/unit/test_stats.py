"""``sidecar stats``: the JSON contract of docs/cli.md#sidecar-stats is a strict schema
(tests/support/stats_schema.py), and usage and input errors are one line (the CLI on real
targets: tests/live/test_stats_live.py)."""

from __future__ import annotations

import jsonschema
import pytest

from tests.support.helpers import sidecar
from tests.support.stats_schema import SCHEMA


def test_the_schema_is_strict() -> None:
    good = {
        "targets": [
            {
                "pid": 1,
                "role": None,
                "framework": "aiohttp",
                "loop": "uvloop",
                "samples": 10,
                "busy_share": 0.1,
                "idle_share": 0.9,
                "blocked_share": 0.0,
                "gil_share": 0.0,
                "cpu_wait_share": 0.0,
                "untold_share": 0.0,
                "pruned_share": 0.0,
                "gil_holders": [],
                "gc_share": 0.0,
                "depth": {"mean": 3.0, "p50": 3, "p95": 3, "max": 3},
            }
        ],
        "frameworks": {},
    }
    jsonschema.validate(good, SCHEMA)
    for bad in (
        {**good, "extra": 1},
        {"targets": [{**good["targets"][0], "estimated": True}], "frameworks": {}},  # type: ignore[index]
        # a holder without its site
        {
            "targets": [{**good["targets"][0], "gil_holders": [{"thread": "t", "share": 1}]}],  # type: ignore[index]
            "frameworks": {},
        },
        {"targets": []},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, SCHEMA)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ((), 2, "either --pid PID or a PROFILE_FILE"),
        (("--pid", "1", "x.folded"), 2, "either --pid PID or a PROFILE_FILE"),
        (("x.folded", "--duration", "2"), 2, "--duration needs --pid"),
        (("/nonexistent/profile.folded",), 1, "cannot read /nonexistent/profile.folded"),
        (("--pid", "999999999"), 1, "PID 999999999"),
        (("x.folded", "--tasks"), 2, "--tasks needs --pid"),
        (("--pid", "1", "--tasks", "--task-rate", "0"), 2, "--task-rate must be positive"),
    ],
)
def test_usage_and_input_errors_are_one_line(
    args: tuple[str, ...], code: int, message: str
) -> None:
    result = sidecar("stats", *args)
    assert result.returncode == code
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
