"""The JSON contract of ``sidecar stats --json`` (docs/cli.md#sidecar-stats, the document of
``GET /api/stats`` in docs/http-api.md#get-apistats) as a strict JSON schema, which
tests/unit/test_stats.py checks is strict and the live and serve tests validate output with."""

from __future__ import annotations

from typing import Any

SHARE = {"type": "number", "minimum": 0, "maximum": 1}
DEPTH_VALUE = {"type": ["number", "null"], "minimum": 0}
DEPTH = {
    "type": "object",
    "additionalProperties": False,
    "required": ["mean", "p50", "p95", "max"],
    "properties": {
        "mean": DEPTH_VALUE,
        "p50": {"type": ["integer", "null"], "minimum": 0},
        "p95": {"type": ["integer", "null"], "minimum": 0},
        "max": {"type": ["integer", "null"], "minimum": 0},
    },
}
#: Who held the GIL while the loop waited for it: most first, at most 10, each a share of the
#: loop's gil samples.
GIL_HOLDERS = {
    "type": "array",
    "maxItems": 10,
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["thread", "site", "share"],
        "properties": {"thread": {"type": "string"}, "site": {"type": "string"}, "share": SHARE},
    },
}
SHARES = {
    "samples": {"type": "integer", "minimum": 0},
    # null: a state the profile does not tell (a profile file without [idle]/[blocked] leaves)
    "busy_share": {**SHARE, "type": ["number", "null"]},
    "idle_share": {**SHARE, "type": ["number", "null"]},
    "blocked_share": {**SHARE, "type": ["number", "null"]},
    "gil_share": {**SHARE, "type": ["number", "null"]},
    "cpu_wait_share": {**SHARE, "type": ["number", "null"]},
    "untold_share": SHARE,
    "pruned_share": SHARE,
    "gil_holders": GIL_HOLDERS,
    "gc_share": SHARE,
    "depth": DEPTH,
}
FRAMEWORK = {"enum": ["aiohttp", "tornado", "unknown"]}
IN_FLIGHT = {"type": "number", "minimum": 0}
STATE_NAMES = ["running", "ready", "waiting"]
#: A share per task state (of all tasks, of a route's, of one request's).
STATE_SHARES = {
    "type": "object",
    "additionalProperties": False,
    "required": STATE_NAMES,
    "properties": dict.fromkeys(STATE_NAMES, SHARE),
}
#: Where requests' tasks wait: of all requests, or of one route's.
AWAIT_SITES = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["site", "awaits", "task_samples", "share"],
        "properties": {
            "site": {"type": "string"},
            "awaits": {"type": "string"},
            "task_samples": {"type": "integer", "minimum": 1},
            "share": SHARE,
        },
    },
}
#: Where one slow request waited: the share of its task-samples at each site.
REQUEST_SITES = {
    "type": "array",
    "maxItems": 3,
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["site", "awaits", "share"],
        "properties": {"site": {"type": "string"}, "awaits": {"type": "string"}, "share": SHARE},
    },
}
TEXT_OR_NULL = {"type": ["string", "null"]}
MS = {"type": "number", "minimum": 0}
#: One slow request (``GET /api/requests`` lists them in this shape too).
SLOW_REQUEST: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "start", "start_from", "duration_ms", "duration_max_ms", "ongoing", "framework",
        "method", "path", "route", "handler", "trace", "trace_header", "task", "scans",
        "task_samples", "shares", "await_sites",
    ],
    "properties": {
        "start": {"type": "number", "minimum": 0},
        "start_from": {"enum": ["framework", "scans"]},
        "duration_ms": MS,
        "duration_max_ms": MS,
        "ongoing": {"type": "boolean"},
        "framework": {"enum": ["aiohttp", "tornado"]},
        "method": {"type": "string", "minLength": 1},
        "path": {"type": "string"},
        "route": {"type": "string", "minLength": 1},
        "handler": TEXT_OR_NULL,
        "trace": TEXT_OR_NULL,
        "trace_header": {"enum": ["traceparent", "x-b3-traceid", "b3", "x-request-id", None]},
        "task": {"type": "string"},
        "scans": {"type": "integer", "minimum": 1},
        "task_samples": {"type": "integer", "minimum": 1},
        "shares": STATE_SHARES,
        "await_sites": REQUEST_SITES,
    },
}  # fmt: skip
#: The slow requests of the span: how many, per route, and the longest listed.
SLOW_REQUESTS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["threshold_ms", "count", "dropped", "untracked", "routes", "requests"],
    "properties": {
        "threshold_ms": {"type": "number", "minimum": 1},
        "count": {"type": "integer", "minimum": 0},
        "dropped": {"type": "integer", "minimum": 0},
        "untracked": {"type": "integer", "minimum": 0},
        "routes": {
            "type": "array",
            "maxItems": 20,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["method", "route", "count", "longest_ms", "p50_ms"],
                "properties": {
                    "method": {"type": "string", "minLength": 1},
                    "route": {"type": "string", "minLength": 1},
                    "count": {"type": "integer", "minimum": 1},
                    "longest_ms": MS,
                    "p50_ms": MS,
                },
            },
        },
        "requests": {"type": "array", "maxItems": 20, "items": SLOW_REQUEST},
    },
}
#: The tasks block of a target (null when its tasks were not scanned).
TASKS: dict[str, Any] = {
    "type": ["object", "null"],
    "additionalProperties": False,
    "required": [
        "scans",
        "task_samples",
        "in_flight",
        "sampled",
        "shares",
        "requests",
        "await_sites",
        "slow_requests",
        "routes",
    ],
    "properties": {
        "scans": {"type": "integer", "minimum": 1},
        "task_samples": {"type": "integer", "minimum": 0},
        "in_flight": {
            "type": "object",
            "additionalProperties": False,
            "required": ["mean", "max", *STATE_NAMES, "requests", "background", "unread"],
            "properties": {
                name: IN_FLIGHT
                for name in ("mean", "max", *STATE_NAMES, "requests", "background", "unread")
            },
        },
        "sampled": SHARE,
        "shares": STATE_SHARES,
        "requests": {
            "type": "object",
            "additionalProperties": False,
            "required": ["task_samples", "ready_share"],
            "properties": {"task_samples": {"type": "integer", "minimum": 0}, "ready_share": SHARE},
        },
        "await_sites": AWAIT_SITES,
        "slow_requests": SLOW_REQUESTS,
        "routes": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["route", "task_samples", "share", "shares", "await_sites"],
                "properties": {
                    "route": {"type": "string", "minLength": 1},
                    "task_samples": {"type": "integer", "minimum": 1},
                    "share": SHARE,
                    "shares": STATE_SHARES,
                    "await_sites": AWAIT_SITES,
                },
            },
        },
    },
}
#: A stall of the event loop (null for a profile file: it keeps no time order).
STALLS: dict[str, Any] = {
    "type": ["array", "null"],
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": [
            "start", "duration_s", "ongoing", "thread", "thread_id", "samples", "state",
            "states", "site", "holder", "callback", "task", "tied", "throttling",
        ],
        "properties": {
            "start": {"type": "number"},
            "duration_s": {"type": "number", "minimum": 0},
            "ongoing": {"type": "boolean"},
            "thread": {"type": "string"},
            "thread_id": {"type": "integer"},
            "samples": {"type": "integer", "minimum": 1},
            "state": {"enum": ["busy", "blocked", "gil", "cpu_wait", "gc"]},
            "states": {
                "type": "object",
                "additionalProperties": False,
                "required": ["busy", "blocked", "gil", "cpu_wait", "gc"],
                "properties": {
                    name: {"type": "number", "minimum": 0}
                    for name in ("busy", "blocked", "gil", "cpu_wait", "gc")
                },
            },
            "site": {"type": "string"},
            "holder": {"type": ["string", "null"]},
            "callback": {"type": "string"},
            "task": {
                "type": ["object", "null"],
                "additionalProperties": False,
                "required": ["name", "request"],
                "properties": {"name": {"type": "string"}, "request": {"type": "boolean"}},
            },
            "tied": {
                "type": "array",
                "items": {"enum": ["busy", "blocked", "gil", "cpu_wait"]},
                "uniqueItems": True,
            },
            "throttling": {
                "type": ["object", "null"],
                "additionalProperties": False,
                "required": ["periods", "throttled_periods", "seconds_lost", "span_s"],
                "properties": {
                    "periods": {"type": "integer", "minimum": 0},
                    "throttled_periods": {"type": "integer", "minimum": 0},
                    "seconds_lost": {"type": "number", "minimum": 0},
                    "span_s": {"type": "number", "minimum": 0},
                },
            },
        },
    },
}  # fmt: skip
#: Seconds on a CPU and waiting for one of some threads, by the kernel's counters.
CPU_TIME: dict[str, Any] = {
    "type": ["object", "null"],
    "additionalProperties": False,
    "required": ["on_cpu_s", "waiting_s", "waiting_share"],
    "properties": {
        "on_cpu_s": {"type": "number", "minimum": 0},
        "waiting_s": {"type": "number", "minimum": 0},
        "waiting_share": SHARE,
    },
}
#: What the kernel counted over a live sampling (null for a profile file).
KERNEL: dict[str, Any] = {
    "type": ["object", "null"],
    "additionalProperties": False,
    "required": ["span_s", "all_threads", "loop_threads", "cgroup"],
    "properties": {
        "span_s": {"type": "number", "minimum": 0},
        "all_threads": CPU_TIME,
        "loop_threads": CPU_TIME,
        "cgroup": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["version", "path", "cpu_limit_cores", "periods", "throttled_periods",
                         "throttled_share", "throttled_s"],
            "properties": {
                "version": {"enum": [1, 2]},
                "path": {"type": "string"},
                "cpu_limit_cores": {"type": ["number", "null"], "minimum": 0},
                "periods": {"type": "integer", "minimum": 0},
                "throttled_periods": {"type": "integer", "minimum": 0},
                "throttled_share": SHARE,
                "throttled_s": {"type": "number", "minimum": 0},
            },
        },
    },
}  # fmt: skip
#: How the sampler kept its clock over a live sampling, beside the kernel's shares of the
#: same threads (null for a profile file); ``note`` is the line of ``stats``, null unless many
#: ticks were missed.
SAMPLING: dict[str, Any] = {
    "type": ["object", "null"],
    "additionalProperties": False,
    "required": ["rate_hz", "ticks", "missed", "late", "missed_share", "lag_max_s",
                 "kernel_on_cpu_share", "kernel_runnable_share", "note"],
    "properties": {
        "rate_hz": {"type": "number", "exclusiveMinimum": 0},
        "ticks": {"type": "integer", "minimum": 0},
        "missed": {"type": "integer", "minimum": 0},
        "late": {"type": "integer", "minimum": 0},
        "missed_share": SHARE,
        "lag_max_s": {"type": "number", "minimum": 0},
        "kernel_on_cpu_share": {**SHARE, "type": ["number", "null"]},
        "kernel_runnable_share": {**SHARE, "type": ["number", "null"]},
        "note": {"type": ["string", "null"]},
    },
}  # fmt: skip
#: The `stats --json` shape of docs/cli.md#sidecar-stats, nothing more.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["targets", "frameworks"],
    "properties": {
        "targets": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["pid", "role", "framework", "loop", *SHARES],
                "properties": {
                    "pid": {"type": ["integer", "null"]},
                    "role": {"enum": ["master", "worker", None]},
                    "framework": FRAMEWORK,
                    "loop": {"enum": ["asyncio", "uvloop", "unknown"]},
                    **SHARES,
                    "tasks": TASKS,
                    "stalls": STALLS,
                    "kernel": KERNEL,
                    "sampling": SAMPLING,
                },
            },
        },
        "frameworks": {
            "type": "object",
            "propertyNames": FRAMEWORK,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": list(SHARES),
                "properties": SHARES,
            },
        },
    },
}
