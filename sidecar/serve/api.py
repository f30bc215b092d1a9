"""The HTTP API of ``sidecar serve`` (FastAPI): read-only translations of the core's answers.

Every 4xx/5xx carries one JSON shape: ``{"error": {"status": 404, "code": "...", "message":
"..."}}``. When a token is configured, the data routes (``/api/*``, ``/openapi.json``) require
it, as ``Authorization: Bearer TOKEN`` or ``?token=TOKEN``; /healthz, /metrics and the UI's own
static files (no data in them) do not, so the UI can load and ask for the token.
"""

from __future__ import annotations

import hmac
import logging
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint

from sidecar import __version__
from sidecar.analyze.diff import Change, diff_profiles, render_diff
from sidecar.analyze.requests import requests_block
from sidecar.analyze.stats import TargetStats, stats_document
from sidecar.analyze.tasks import task_block
from sidecar.analyze.threads import Analysis, analyze
from sidecar.classify.process import ProcessInfo
from sidecar.errors import NoSamples, SidecarError, UsageError
from sidecar.formats import NAMES
from sidecar.formats.export import FORMATS, export
from sidecar.formats.render import RenderOptions
from sidecar.profile import Profile
from sidecar.rules import document as rules_document
from sidecar.rules.frames import STATES
from sidecar.rules.layers import layer_of_file
from sidecar.rules.tasks import STATES as TASK_STATES
from sidecar.serve.metrics import registry_for
from sidecar.store.query import QueryError, Range, StoreUnavailable, UnknownTarget
from sidecar.store.requestquery import MAX_REQUESTS, RequestReader
from sidecar.store.stallquery import MAX_STALLS, StallReader
from sidecar.store.taskquery import WHICH, NoTaskScans, TaskReader
from sidecar.store.threadquery import ThreadReader

if TYPE_CHECKING:
    from sidecar.serve.service import Service

log = logging.getLogger("sidecar.api")

#: The browser UI, shipped inside the package as data.
WEB = resources.files("sidecar.serve").joinpath("web")
PROTECTED_PREFIXES = ("/api/", "/openapi.json")
#: Served SVGs run their own scripts only in a sandbox with an opaque origin.
SVG_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "sandbox allow-scripts"
)

From = Annotated[float | None, Query(alias="from", description="unix seconds; default: to - 1 h")]
To = Annotated[float | None, Query(alias="to", description="unix seconds; default: now")]
STATE_HELP = (
    f"comma-separated states: {', '.join(STATES)}; with kind=tasks {', '.join(TASK_STATES)}"
)
TargetId = Annotated[int | None, Query(description="target id; default: all targets")]
Kind = Annotated[
    str,
    Query(
        pattern="^(threads|tasks)$",
        description="threads: the thread samples; tasks: the asyncio tasks (task-samples)",
    ),
]
TasksOf = Annotated[
    str,
    Query(
        alias="tasks",
        pattern=f"^({'|'.join(WHICH)})$",
        description="with kind=tasks: all tasks, requests' tasks or background ones",
    ),
]
StateFilter = Annotated[str | None, Query(description=STATE_HELP)]
ThreadName = Annotated[str | None, Query(max_length=200)]
#: The response header of /api/profile and /api/diff that says which threads their samples are of.
THREADS_HEADER = "X-Sidecar-Threads"
#: The methods no route serves (each answers GET alone).
OTHER_METHODS = ["HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


#: The order of an events' list (stalls, slow requests).
Order = Annotated[
    str,
    Query(
        pattern="^(start|longest)$",
        description="start: the oldest, oldest first; longest: the longest first",
    ),
]


def threads_query(default: str) -> Any:
    return Query(
        pattern="^(loop|all)$",
        description="loop: the samples of the event-loop threads (of every thread when no "
        f"thread ran an event loop in the range); all: of every thread; default {default}",
    )


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"status": status, "code": code, "message": message}}, status_code=status
    )


class TokenMiddleware(BaseHTTPMiddleware):
    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token.encode()

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if not request.url.path.startswith(PROTECTED_PREFIXES):
            return await call_next(request)
        given = request.query_params.get("token", "")
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            given = header[7:].strip()
        if not hmac.compare_digest(given.encode(), self.token):
            return error_response(401, "unauthorized", "a valid token is required")
        return await call_next(request)


def create_app(service: Service) -> FastAPI:
    """The API over a running ``sidecar.serve.service.Service``."""
    app = FastAPI(
        title="sidecar",
        version=__version__,
        description="Profiles of asyncio services over time: targets, timelines, "
        "flamegraphs, event-loop statistics.",
        docs_url=None,
        redoc_url=None,
    )
    if service.config.token:
        app.add_middleware(TokenMiddleware, token=service.config.token)
    registry = registry_for(service)
    reader = service.reader
    tasks = TaskReader(reader)
    stall_reader = StallReader(reader)
    request_reader = RequestReader(reader)
    thread_reader = ThreadReader(reader)

    @app.exception_handler(SidecarError)
    async def domain_error(request: Request, err: SidecarError) -> JSONResponse:
        if isinstance(err, UnknownTarget):
            return error_response(404, "unknown_target", str(err))
        if isinstance(err, NoSamples):
            return error_response(404, "no_samples", str(err))
        if isinstance(err, NoTaskScans):
            return error_response(404, "no_task_scans", str(err))
        if isinstance(err, StoreUnavailable):
            return error_response(503, "store_unavailable", str(err))
        code = "bad_request" if isinstance(err, QueryError | UsageError) else "error"
        return error_response(400, code, str(err))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "query")
        return error_response(400, "invalid_parameter", f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code, "error")
        response = error_response(err.status_code, code, str(err.detail))
        response.headers.update(err.headers or {})  # a 405's Allow
        return response

    @app.exception_handler(Exception)
    async def crash(request: Request, err: Exception) -> JSONResponse:
        log.exception("error serving %s", request.url.path)
        return error_response(500, "internal", f"{type(err).__name__}: {err}")

    @app.get("/healthz", summary="Liveness and what needs attention")
    def healthz() -> dict[str, Any]:
        result: dict[str, Any] = service.health()
        return result

    @app.get("/metrics", summary="Prometheus exposition", response_class=PlainTextResponse)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/rules", summary="How frames are read: leaves, frame grammar, layer tables")
    def rules() -> dict[str, Any]:
        return rules_document()

    @app.get("/api/targets", summary="Every target with its framework, loop and state")
    def targets() -> list[dict[str, Any]]:
        rows = reader.targets()
        # by PID and start time: a PID reused by another process is not this target's
        live = dict(service.sessions.sessions)
        problems = dict(service.sessions.problems)
        for row in rows:
            key = (row["pid"], row["start_time"])
            row["alive"] = row["alive"] and key in live  # an exec'd-away program is gone
            problem = problems.get(key)
            row["problem"] = problem.error if problem else None
            # what reads the stacks of a process sampled now, and where on-CPU states come from
            session = live.get(key)
            row["reader"] = session.reader if session else None
            row["on_cpu"] = (session.sampler.on_cpu or None) if session else None
            row["gil"] = (session.sampler.gil or None) if session else None
            # too many of its recent ticks read no sample (serve's log says when, too)
            row["torn"] = session.torn if session else None
        return rows

    @app.get(
        "/api/timeline",
        summary="busy / idle / blocked / gil samples per time bucket, or with kind=tasks the "
        "mean tasks in flight by state (running, ready, waiting) and of requests and background",
    )
    def timeline(
        target: TargetId = None,
        start: From = None,
        end: To = None,
        step: Annotated[int | None, Query(ge=1, le=86_400)] = None,
        kind: Kind = "threads",
        tasks_of: TasksOf = "all",
        threads: Annotated[str, threads_query("loop")] = "loop",
    ) -> dict[str, Any]:
        if kind == "tasks":
            if threads != "loop":
                raise QueryError("'threads' picks thread samples: kind=tasks has no threads")
            return tasks.timeline(target, _span(start, end), step, tasks_of)
        if tasks_of != "all":
            raise QueryError("'tasks' picks tasks of kind=tasks")
        span = _span(start, end)
        result: dict[str, Any] = reader.timeline(target, span, step, loop=threads == "loop")
        return result

    @app.get(
        "/api/threads",
        summary="The threads with samples in a range: per thread its samples, its samples on "
        "an event-loop stack and whether it runs an event loop",
    )
    def threads(target: TargetId = None, start: From = None, end: To = None) -> dict[str, Any]:
        span = _span(start, end)
        return {
            "from": span.start,
            "to": span.end,
            "threads": thread_reader.threads(target, span),
        }

    @app.get(
        "/api/profile",
        summary="Folded stacks of a target and range as SVG, folded, speedscope JSON or pprof",
    )
    def profile(
        target: TargetId = None,
        start: From = None,
        end: To = None,
        format: Annotated[str, Query(pattern=f"^({'|'.join(NAMES)})$")] = "folded",
        state: StateFilter = None,
        thread: ThreadName = None,
        inverted: bool = False,
        kind: Kind = "threads",
        tasks_of: TasksOf = "all",
        threads: Annotated[str, threads_query("all")] = "all",
    ) -> Response:
        if kind == "tasks":
            if thread or threads != "all":
                raise QueryError(
                    "'thread' and 'threads' filter thread samples: kind=tasks has none"
                )
            data = tasks.profile(target, _span(start, end), _states(state), tasks_of)
            title = f"{_title(target)} · asyncio tasks"
            return _profile_response(data, format, title, inverted, "task-samples")
        if tasks_of != "all":
            raise QueryError("'tasks' picks tasks of kind=tasks")
        data, loop = _thread_profile(target, start, end, state, thread, threads)
        response = _profile_response(data, format, _title(target), inverted)
        response.headers[THREADS_HEADER] = "loop" if loop else "all"
        return response

    @app.get(
        "/api/functions",
        summary="Top functions of the profile /api/profile gives for the same selection: self "
        "and total busy samples of the event-loop threads, as `sidecar stats` counts them",
    )
    def functions(
        target: TargetId = None,
        start: From = None,
        end: To = None,
        state: StateFilter = None,
        thread: ThreadName = None,
        threads: Annotated[str, threads_query("all")] = "all",
        limit: Annotated[
            int, Query(ge=1, le=MAX_FUNCTIONS, description="the most listed, by total")
        ] = 300,
    ) -> dict[str, Any]:
        data, _ = _thread_profile(target, start, end, state, thread, threads)
        if not data.stacks:
            raise NoSamples("no samples in this range")
        return functions_document(analyze(data), limit)

    @app.get(
        "/api/stats",
        summary="Event-loop shares (and who held the GIL), stack depth and tasks per target "
        "and framework",
    )
    def stats(target: TargetId = None, start: From = None, end: To = None) -> dict[str, Any]:
        span = _span(start, end)
        rows = [reader.target(target)] if target is not None else reader.targets()
        parts: list[TargetStats] = []
        for row in rows:
            data = reader.profile(row["id"], span)
            if not data.stacks:
                continue
            # who held the GIL while its loop waited: the sampler saw it, the store kept it
            holders = reader.gil_holders(row["id"], span)
            analysis = analyze(data, _process_info(row), holders=holders)
            # the longest of the range (all of them: /api/stalls), oldest first
            longest, _ = stall_reader.stalls(row["id"], span, limit=STATS_STALLS, longest=True)
            longest.sort(key=lambda stall: stall["start"])
            stalls = [_without_target(stall) for stall in longest]
            parts.append(TargetStats(analysis, _task_block(row["id"], span), stalls))
        return stats_document(parts)

    @app.get(
        "/api/stalls",
        summary="Stalls of the event loops: each callback that kept its loop from its poll for "
        "serve's --stall-ms or more, with its length and what held it",
    )
    def stalls(
        target: TargetId = None,
        start: From = None,
        end: To = None,
        min_ms: Annotated[float, Query(ge=0, description="the shortest listed (ms)")] = 0.0,
        limit: Annotated[int, Query(ge=1, le=MAX_STALLS, description="the most listed")] = 1000,
        order: Order = "start",
    ) -> dict[str, Any]:
        span = _span(start, end)
        found, total = stall_reader.stalls(
            target, span, min_ms=min_ms, limit=limit, longest=order == "longest"
        )
        return {
            "stalls": found,
            "total": total,
            "dropped": stall_reader.dropped(target, span),
            "stall_ms": service.config.stall_ms,
            "from": span.start,
            "to": span.end,
        }

    @app.get(
        "/api/requests",
        summary="Slow requests: each request the task scans saw in flight for serve's "
        "--slow-ms or more, with its route, trace id, duration and where its time went",
    )
    def slow_requests(
        target: TargetId = None,
        start: From = None,
        end: To = None,
        route: Annotated[
            str | None,
            Query(max_length=2048, description="METHOD ROUTE, or the route alone"),
        ] = None,
        trace: Annotated[
            str | None, Query(max_length=256, description="the trace id a request carried")
        ] = None,
        min_ms: Annotated[float, Query(ge=0, description="the shortest listed (ms)")] = 0.0,
        limit: Annotated[int, Query(ge=1, le=MAX_REQUESTS, description="the most listed")] = 100,
        order: Order = "start",
    ) -> dict[str, Any]:
        span = _span(start, end)
        found, total = request_reader.requests(
            target,
            span,
            route=route,
            trace=trace,
            min_ms=min_ms,
            limit=limit,
            longest=order == "longest",
        )
        return {
            "requests": [
                {"target": t, "pid": pid, **request.as_json()} for t, pid, request in found
            ],
            "total": total,
            "dropped": request_reader.dropped(target, span),
            "slow_ms": service.config.slow_ms,
            "from": span.start,
            "to": span.end,
        }

    @app.get("/api/diff", summary="Differential flamegraph of two ranges or two targets")
    def diff(
        target: TargetId = None,
        start: From = None,
        end: To = None,
        target_b: Annotated[int | None, Query(description="default: target")] = None,
        start_b: Annotated[float | None, Query(alias="from_b")] = None,
        end_b: Annotated[float | None, Query(alias="to_b")] = None,
        format: Annotated[str, Query(pattern="^(svg|folded|json)$")] = "svg",
        normalize: bool = True,
        threads: Annotated[str, threads_query("all")] = "all",
    ) -> Response:
        if target_b is None and start_b is None and end_b is None:
            raise QueryError("give target_b or from_b/to_b: what to compare with")
        sides = [
            (target, _span(start, end)),
            (
                target if target_b is None else target_b,
                _span(start if start_b is None else start_b, end if end_b is None else end_b),
            ),
        ]
        loop = _loop_only(threads, sides)
        before, after = (reader.profile(*side, loop_only=loop) for side in sides)
        if not before.stacks or not after.stacks:
            raise NoSamples("one of the two ranges has no samples")
        result = diff_profiles(before, after, normalize=normalize)
        scope = {THREADS_HEADER: "loop" if loop else "all"}
        if format == "folded":
            text = "".join(line + "\n" for line in result.lines)
            return PlainTextResponse(text, headers=scope)
        if format == "json":
            return JSONResponse(
                {
                    "verdict": result.verdict,
                    "threads": scope[THREADS_HEADER],
                    "before_samples": before.total,
                    "after_samples": after.total,
                    "self_changes": [_change(c) for c in result.self_changes[:50]],
                    "total_changes": [_change(c) for c in result.total_changes[:50]],
                    "state_changes": [_change(c) for c in result.state_changes],
                    "states_of": result.states_of,
                },
                headers=scope,
            )
        svg = render_diff(result, RenderOptions(title="sidecar: differential flame graph"))
        return Response(
            svg,
            media_type="image/svg+xml",
            headers={"Content-Security-Policy": SVG_CSP, **scope},
        )

    # Every route answers GET alone; another method is a 405 saying so (without these, the UI's
    # mount at "/" takes the request, as it takes any path, and answers 404).
    def not_allowed() -> Response:
        raise StarletteHTTPException(405, "only GET is served here", headers={"Allow": "GET"})

    for route in [r for r in app.routes if isinstance(r, APIRoute) and "GET" in (r.methods or ())]:
        app.add_api_route(route.path, not_allowed, methods=OTHER_METHODS, include_in_schema=False)

    if isinstance(WEB, Path) and WEB.is_dir():  # installed as files, not inside an archive
        app.mount("/", StaticFiles(directory=WEB, html=True), name="web")
    else:

        @app.get("/", include_in_schema=False)
        def index() -> HTMLResponse:
            return HTMLResponse(
                "<!doctype html><title>sidecar</title><h1>sidecar</h1>"
                "<p>API: <a href='/api/targets'>/api/targets</a>, "
                "<a href='/openapi.json'>/openapi.json</a></p>"
            )

    def _loop_only(threads: str, sides: list[tuple[int | None, Range]]) -> bool:
        """Whether ``threads`` asks for the event-loop threads' samples and each side (target,
        range) has some: otherwise every thread's are counted."""
        return threads == "loop" and all(reader.has_loop_samples(*side) for side in sides)

    def _span(start: float | None, end: float | None) -> Range:
        return Range.aligned(start, end, service.config.window)

    def _thread_profile(
        target: int | None,
        start: float | None,
        end: float | None,
        state: str | None,
        thread: str | None,
        threads: str,
    ) -> tuple[Profile, bool]:
        """The thread samples a selection picks (``/api/profile``'s, ``/api/functions``'), and
        whether they are the event-loop threads' only."""
        span = _span(start, end)
        loop = _loop_only(threads, [(target, span)])
        return reader.profile(target, span, _states(state), thread, loop_only=loop), loop

    def _task_block(target: int, span: Range) -> dict[str, Any] | None:
        """A target's tasks block; None when its tasks were not scanned in the range."""
        try:
            flight = tasks.in_flight(target, span)
        except NoTaskScans:
            return None
        block = task_block(tasks.profile(target, span).stacks, flight)
        found, total = request_reader.requests(target, span, limit=MAX_REQUESTS, longest=True)
        block["slow_requests"] = requests_block(
            [request for _, _, request in found],
            service.config.slow_ms,
            request_reader.dropped(target, span),
            total=total,
        )
        return block

    def _title(target: int | None) -> str:
        return f"sidecar: target {target}" if target is not None else "sidecar: all targets"

    return app


#: The stalls of each target /api/stats lists: the range's longest.
STATS_STALLS = 100
#: The most functions one answer of /api/functions lists.
MAX_FUNCTIONS = 5000
#: A function as ``analyze.threads.function_of`` names it: ``name (file)``, or a bare name.
FUNCTION = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*)\)$")


def _states(state: str | None) -> set[str] | None:
    """The comma-separated ``state`` filter of a query."""
    return set(state.split(",")) if state else None


def functions_document(analysis: Analysis, limit: int) -> dict[str, Any]:
    """The top functions of an analysis, as ``/api/functions`` answers: the functions above
    the loop's entry (``total_samples``, as ``stats`` ranks them) by total, then self, with
    their layer by the core's rules; a busy sample whose innermost frame is the loop's entry or
    below it (a C loop's own work) is in ``busy`` but no function's self."""
    ranked = sorted(
        analysis.total_samples.items(),
        key=lambda item: (-item[1], -analysis.self_samples[item[0]], item[0]),
    )
    rows = []
    for key, total in ranked[:limit]:
        match = FUNCTION.match(key)
        name, file = (match["name"], match["file"]) if match else (key, "")
        rows.append(
            {
                "key": key,
                "name": name,
                "file": file,
                "layer": _layer(file),
                "self": analysis.self_samples[key],
                "total": total,
            }
        )
    return {
        "busy": analysis.states["busy"],
        "threads": "all" if analysis.no_loop_thread else "loop",
        "count": len(ranked),
        "functions": rows,
    }


def _layer(file: str) -> str:
    """A function's layer by its file (``rules.layers``): ``framework``, ``event_loop``,
    ``application``, ``stdlib`` (the standard library and generated code), or ``other`` (a
    frame with no file)."""
    if not file:
        return "other"
    return layer_of_file(file) or "stdlib"


def _without_target(stall: dict[str, Any]) -> dict[str, Any]:
    """A stall as ``stats --json`` gives it, inside its target's entry."""
    return {key: value for key, value in stall.items() if key not in ("target", "pid")}


def _process_info(row: dict[str, Any]) -> ProcessInfo:
    """What discovery recorded of a stored target, for the analysis."""
    return ProcessInfo(
        pid=row["pid"],
        start_time=0,
        cmdline=row["cmdline"],
        python_version=row["python_version"],
        framework=row["framework"],
        loop=row["loop"],
        framework_source="maps" if row["framework"] != "unknown" else "",
        role=row["role"],
    )


def _change(change: Change) -> dict[str, Any]:
    return {
        "frame": change.frame,
        "before": change.before,
        "after": change.after,
        "delta": change.delta,
    }


def _profile_response(
    data: Profile, fmt: str, title: str, inverted: bool, count_name: str = "samples"
) -> Response:
    if not data.stacks:
        raise NoSamples(f"no {count_name} in this range")
    chosen = FORMATS[fmt]
    options = RenderOptions(title=title, inverted=inverted, count_name=count_name)
    headers = dict(chosen.headers)
    if fmt == "svg":
        headers["Content-Security-Policy"] = SVG_CSP
    return Response(export(data, fmt, options), media_type=chosen.media_type, headers=headers)
