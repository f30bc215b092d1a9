"""Hostile HTTP input against a real ``sidecar serve`` on 127.0.0.1 with a token: every API
route fuzzed from its OpenAPI schema (schemathesis: valid and invalid inputs, boundary
values), huge and negative time ranges, unknown targets, path traversal, wrong tokens of every
length, and the sandbox of served SVGs. No 5xx, ever; every 4xx in the one error shape.

The target profiled by the server includes ``targets.generated --hostile``: its frames are
named with markup, script, quotes, separators and control characters, so the flamegraphs
served here carry attacker-chosen text too.
"""

from __future__ import annotations

import ast
import asyncio
import http.client
import inspect
import json
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import sidecar.serve.api
from sidecar.formats.render import RenderOptions, render_svg
from sidecar.serve.api import TokenMiddleware
from targets.generated import HOSTILE
from tests.support.faultkit import Entry, record
from tests.support.helpers import Serve, Spawner, wait_until

pytestmark = pytest.mark.faults

TOKEN = "fuzz-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = 40  # per route and generation mode (valid and invalid inputs)
TRIED: dict[str, int] = {}
PER_OPERATION: dict[str, int] = {}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One sidecar for the module, with real samples of a service and of hostile frames."""
    workdir = tmp_path_factory.mktemp("hostile")
    token = workdir / "token"
    token.write_text(TOKEN + "\n")
    spawner = Spawner()
    started: Serve | None = None
    try:
        aio = spawner.target("aiohttp_app")
        hostile = spawner.target("generated", "--hostile", "--threads", "1")
        started = Serve(
            workdir / "hostile.db",
            "--window", "1", "--token-file", str(token),
            "--pid", str(aio.pid), "--pid", str(hostile.pid),
            token=TOKEN,
        )  # fmt: skip
        assert wait_until(
            lambda: (
                len(started.targets()) == 2  # type: ignore[union-attr]
                and all(t["samples"] > 100 for t in started.targets())
            ),  # type: ignore[union-attr]
            timeout=30,
        )
        yield started
    finally:
        if started is not None:
            started.kill()
        spawner.close()
    entry = Entry("hostile HTTP input", "hostile HTTP input", rounds=1, inputs=sum(TRIED.values()))
    for kind, count in sorted(TRIED.items()):
        entry.note(f"{kind}: {count} requests")
    if PER_OPERATION:
        entry.note(
            "schemathesis per operation: "
            + ", ".join(f"{op} {count}" for op, count in sorted(PER_OPERATION.items()))
        )
    entry.fault("fuzzed requests (schemathesis)", TRIED.get("schemathesis", 0))
    record(entry)


def tried(kind: str, count: int = 1) -> None:
    TRIED[kind] = TRIED.get(kind, 0) + count


def assert_error_shape(status: int, body: bytes, what: object) -> None:
    """A 4xx is ``{"error": {"status", "code", "message"}}`` with the response's status."""
    assert 400 <= status < 500, (what, status, body[:300])
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError) as err:
        raise AssertionError(f"{what}: {status} without the error shape: {body[:300]!r}") from err
    assert error["status"] == status, what
    assert isinstance(error["code"], str) and error["code"], what
    assert isinstance(error["message"], str) and error["message"], what


def assert_svg_is_sandboxed(headers: dict[str, str], body: bytes, what: object) -> None:
    """An SVG's scripts run in a sandbox with an opaque origin, never the UI's."""
    policy = headers.get("content-security-policy", "")
    directives = {d.strip().split(" ")[0]: d.strip() for d in policy.split(";") if d.strip()}
    assert "sandbox" in directives, (what, policy)
    assert "allow-same-origin" not in directives["sandbox"], (what, policy)
    assert directives.get("default-src") == "default-src 'none'", (what, policy)
    try:
        root = ET.fromstring(body)  # well-formed, whatever the frames are called
    except ET.ParseError as err:
        line, column = err.position
        text = body.decode("utf-8", "replace").splitlines()[line - 1]
        raise AssertionError(
            f"{what}: {err}: {text[max(0, column - 120) : column + 40]!r}"
        ) from err

    names = {element.tag.rsplit("}", 1)[-1] for element in root.iter()}
    assert not names & {"img", "iframe", "object", "embed", "foreignObject"}, (what, names)
    for element in root.iter():
        for attribute in element.attrib:
            name = attribute.rsplit("}", 1)[-1].lower()
            assert not (name.startswith("on") and name != "onload"), (what, element.attrib)


# -- property-based fuzzing from the OpenAPI schema ---------------------------------------


ROUTES = ["/api/targets", "/api/timeline", "/api/profile", "/api/stats", "/api/diff"]


def header_map(headers: Any) -> dict[str, str]:
    """Response headers by lower-case name (schemathesis keeps lists of values)."""
    return {k.lower(): (v[0] if isinstance(v, list) else v) for k, v in headers.items()}


def test_every_route_fuzzed_from_the_openapi_schema(server: Serve) -> None:
    """Every operation of /openapi.json, with inputs schemathesis generates from it: valid
    ones (positive) and invalid ones (negative: wrong types, out of range, missing)."""
    api = schemathesis.openapi.from_url(
        f"http://127.0.0.1:{server.port}/openapi.json", headers=AUTH, timeout=30
    )
    operations = [result.ok() for result in api.get_all_operations()]
    assert {f"GET {route}" for route in ROUTES} <= {op.label for op in operations}
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if mode is GenerationMode.NEGATIVE and not operation.query:
                continue  # nothing to make invalid

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
                database=None,
                phases=[Phase.explicit, Phase.generate],  # a failure is shown as found
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def fuzz(case: Any) -> None:
                response = case.call(headers=AUTH, timeout=60)
                tried("schemathesis")
                status, body = response.status_code, response.content
                headers = header_map(response.headers)
                what = (case.operation.label, case.query)
                assert status < 500, (what, status, body[:300])
                if status >= 400:
                    assert_error_shape(status, body, what)
                elif headers.get("content-type", "").startswith("image/svg+xml"):
                    assert_svg_is_sandboxed(headers, body, what)

            before = TRIED.get("schemathesis", 0)
            fuzz()
            PER_OPERATION[f"{operation.label} ({mode.value})"] = TRIED["schemathesis"] - before


# -- hand-picked hostile input --------------------------------------------------------------

HOSTILE_QUERIES = [
    "from=-1",
    "from=-1e308&to=-1",
    "from=1e308&to=1e309",
    "to=1e400",
    "from=nan",
    "from=NaN&to=inf",
    "from=-inf",
    "from=0&to=99999999999",
    "from=0&to=1e11",
    "from=10&to=5",
    "from=5&to=5",
    "from=" + "9" * 400,
    "from=1e-400",
    "from=0x10",
    "from=%00",
    "from=1%2C2",
    "target=-1",
    "target=0",
    "target=999999",
    f"target={2**63}",
    f"target={2**64}",
    f"target=-{2**63 + 1}",
    "target=1.5",
    "target=1e3",
    "target=",
    "target=%27%20OR%201%3D1--",
    "target=1&target=2",
    "target_b=999999&format=json",
    "from_b=-5&to_b=1e309&format=json",
    "step=0",
    "step=-1",
    "step=86401",
    f"step={2**70}",
    "step=1&from=0&to=1e10",
    "format=../../etc/passwd",
    "format=svg%00",
    "state=busy,,idle",
    "state=%00",
    "state=" + ",".join(["busy"] * 500),
    "thread=" + "x" * 5000,
    "thread=%00%01%02",
    "thread=" + "%E2%80%AE" * 50,
    "inverted=maybe",
    "normalize=2",
    "token=" + "x" * 10000,
]


def test_huge_negative_and_nonsense_parameters_never_5xx(server: Serve) -> None:
    for route in ROUTES:
        for query in HOSTILE_QUERIES:
            path = f"{route}?{query}"
            status, body, headers = server.request(path, timeout=60)
            tried("hand-picked parameters")
            assert status < 500, (path, status, body[:300])
            if status >= 400:
                assert_error_shape(status, body, path)
            elif headers.get("content-type", "").startswith("image/svg+xml"):
                assert_svg_is_sandboxed(headers, body, path)
    # an unknown target is a 404 in the error shape on every route that takes one
    for route in ROUTES[1:]:
        status, body, _ = server.request(f"{route}?target=424242&target_b=424242")
        assert status == 404 and json.loads(body)["error"]["code"] == "unknown_target", route


def test_other_methods_are_405_and_a_range_blames_the_bound_given(server: Serve) -> None:
    """Every route answers GET alone: HEAD, POST, PUT, PATCH, DELETE and OPTIONS get 405 in the
    error shape with ``Allow: GET`` (the UI's mount at "/" used to take them: 404); a range with
    ``to=inf`` names ``to``, not the ``from`` it defaults from."""
    for route in [*ROUTES, "/healthz", "/metrics"]:
        for method in ("HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
            answer = httpx.request(method, f"{server.url}{route}", headers=AUTH, timeout=30)
            tried("other methods")
            assert answer.status_code == 405, (method, route, answer.status_code)
            assert answer.headers["allow"] == "GET", (method, route)
            if method != "HEAD":
                assert_error_shape(405, answer.content, f"{method} {route}")
    status, body, _ = server.request("/api/timeline?to=inf")
    assert status == 400 and "'to' must be a unix time" in body.decode(), body
    status, body, _ = server.request("/api/timeline?from=inf")
    assert status == 400 and "'from' must be a unix time" in body.decode(), body


TRAVERSALS = [
    "/../../../../etc/passwd",
    "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/..%2f..%2f..%2fetc%2fpasswd",
    "/..%252f..%252fetc%252fpasswd",
    "/js/../../api.py",
    "/js/..%2f..%2fapi.py",
    "/js/%2e%2e/%2e%2e/pyproject.toml",
    "/..%5c..%5cpyproject.toml",
    "/%c0%ae%c0%ae/%c0%ae%c0%ae/etc/passwd",
    "//etc/passwd",
    "/./././../pyproject.toml",
    "/index.html%00.js",
    "/.git/config",
    "/../.git/config",
    "/api/../../pyproject.toml",
    "/api/..%2f..%2fpyproject.toml",
    "/openapi.json/../../pyproject.toml",
    "/..;/pyproject.toml",
    "/static/../../../../proc/self/environ",
    "/" + "../" * 64 + "etc/passwd",
    "/%2fetc%2fpasswd",
]
SECRETS = (b"root:x:0:0", b"[build-system]", b"from sidecar", b"[core]", b"PATH=")


def raw_get(port: int, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
    """A request with the path exactly as given (no client-side normalization)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest("GET", path, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        return (
            response.status,
            response.read(),
            {k.lower(): v for k, v in response.getheaders()},
        )
    finally:
        conn.close()


def test_path_traversal_never_leaves_the_web_directory(server: Serve) -> None:
    for path in TRAVERSALS:
        for headers in ({}, AUTH):
            status, body, _ = raw_get(server.port, path, headers)
            tried("path traversal")
            assert status < 500, (path, status, body[:200])
            assert not any(secret in body for secret in SECRETS), (path, body[:200])
            if status >= 400 and status != 401:
                assert status in (400, 404, 405), (path, status)
            if status >= 400:
                assert_error_shape(status, body, path)
    # the UI's own files are served
    status, body, _ = raw_get(server.port, "/", {})
    assert status == 200 and b"<html" in body.lower()


# -- the token --------------------------------------------------------------------------------


def test_the_token_is_compared_in_constant_time_by_the_middleware(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The middleware compares with hmac.compare_digest, on bytes, and nothing else compares
    the token: no ==, !=, in, startswith on it."""
    source = textwrap.dedent(inspect.getsource(TokenMiddleware.dispatch))
    tree = ast.parse(source)
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "compare_digest"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "hmac"
    ]
    assert len(calls) == 1
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            mentioned = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            assert "token" not in mentioned and "given" not in names, ast.unparse(node)

    seen: list[tuple[object, object]] = []
    real = sidecar.serve.api.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(sidecar.serve.api.hmac, "compare_digest", spy)

    async def ok(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/api/x", ok)])
    app.add_middleware(TokenMiddleware, token=TOKEN)

    async def calls() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [
                (await client.get("/api/x", headers={"Authorization": "Bearer nope"})).status_code,
                (await client.get("/api/x", params={"token": TOKEN[:-1]})).status_code,
                (await client.get("/api/x", headers=AUTH)).status_code,
            ]

    assert asyncio.run(calls()) == [401, 401, 200]
    right = TOKEN.encode()
    assert seen == [(b"nope", right), (TOKEN[:-1].encode(), right), (right, right)]


def wrong_tokens() -> list[str]:
    """Wrong tokens of every length up to twice the real one's, prefixes and near misses."""
    out = ["x" * n for n in range(2 * len(TOKEN) + 2) if n != len(TOKEN)]
    out += [TOKEN[:n] for n in range(len(TOKEN))]
    out += [TOKEN + c for c in "x0 \t"]
    out += [TOKEN.upper(), TOKEN[::-1], TOKEN[:-1] + "g", "\u00e9" + TOKEN[1:], TOKEN + "\u2028"]
    return out


def test_wrong_tokens_of_every_length_get_401(server: Serve) -> None:
    for token in wrong_tokens():
        attempts = [(f"/api/stats?token={http_quote(token)}", {})]
        if token.strip() != TOKEN:  # spaces around a header value are not part of it (HTTP)
            attempts.append(("/api/targets", {"Authorization": f"Bearer {token}"}))
            attempts.append(("/openapi.json", {"Authorization": f"bearer {token}"}))
        for path, headers in attempts:
            status, body, _ = raw_get(server.port, path, headers_latin1(headers))
            tried("wrong tokens")
            assert status == 401, (token, path, status)
            assert json.loads(body)["error"]["code"] == "unauthorized"
    for path in ("/api/targets", "/openapi.json", "/api/timeline"):
        assert raw_get(server.port, path, {})[0] == 401  # no token at all
        assert raw_get(server.port, path, AUTH)[0] == 200
    assert raw_get(server.port, f"/api/targets?token={TOKEN}", {})[0] == 200
    for open_path in ("/healthz", "/metrics", "/"):
        assert raw_get(server.port, open_path, {})[0] == 200


def http_quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def headers_latin1(headers: dict[str, str]) -> dict[str, str]:
    """Header values as http.client sends them (latin-1); others UTF-8 bytes seen as latin-1."""
    return {k: v.encode("utf-8").decode("latin-1") for k, v in headers.items()}


# -- served SVGs --------------------------------------------------------------------------------


def test_served_svgs_are_sandboxed_and_escape_hostile_frames(server: Serve) -> None:
    targets = {t["cmdline"].split(" -m ")[-1].split()[0]: t["id"] for t in server.targets()}
    hostile, aio = targets["targets.generated"], targets["targets.aiohttp_app"]
    paths = [
        f"/api/profile?target={hostile}&format=svg",
        f"/api/profile?target={hostile}&format=svg&inverted=true",
        "/api/profile?format=svg&state=busy",
        f"/api/diff?target={aio}&target_b={hostile}",
        f"/api/diff?target={hostile}&target_b={hostile}&format=svg",
    ]
    for path in paths:
        status, body, headers = server.request(path, timeout=60)
        tried("SVG responses")
        assert status == 200, (path, body[:300])
        assert headers["content-type"].startswith("image/svg+xml")
        assert_svg_is_sandboxed(headers, body, path)
        assert b"<script>alert" not in body and b"<img src=x" not in body
    folded = server.request(f"/api/profile?target={hostile}&format=folded")[1].decode()
    assert "<script>alert(document.domain)</script>" in folded  # the frames really are hostile
    assert not any(ord(c) < 32 and c not in "\n\t" for c in folded)


def test_no_web_file_is_an_svg_served_without_a_sandbox() -> None:
    web = Path(sidecar.serve.api.WEB)
    assert not list(web.rglob("*.svg")), "static SVGs would be served without the CSP"


def test_flamegraphs_of_hostile_frames_are_well_formed_svg() -> None:
    """Whatever a frame or title is called (control characters, NUL, surrogates, markup), the
    SVG parses: a name with a control character used to make the whole document unreadable."""
    for number, bad in enumerate([*HOSTILE, "\ud800lone", "\ufffe\uffff"]):
        for frame in (f"{bad}{number} (mod.py:2)", f"f (x{bad}/1.py:2)"):
            lines = [f"main (a.py:1);{frame};leaf (b.py:3) 5", "main (a.py:1);other (c.py:1) 7"]
            svg = render_svg(lines, RenderOptions(title=f"title {bad}"))
            tried("hostile frame names rendered")
            root = ET.fromstring(svg)
            assert not {e.tag.rsplit("}", 1)[-1] for e in root.iter()} & {"img", "iframe"}


def test_healthz_names_an_untraceable_program_never_its_arguments(
    spawn: Spawner, serve: Any, tmp_path: Path
) -> None:
    """/healthz answers without the token: of a process it cannot trace it says the PID, the
    program's name, the error and the attempts, never the command line's arguments (a
    password in them); the command line is in /api/targets, behind the token."""
    secret = "--db-password=S3cr3tPassw0rd"
    fake = tmp_path / "python3"  # named like an interpreter, but it is not one
    fake.write_bytes(Path("/bin/sh").read_bytes())  # a shell that waits, its arguments kept
    fake.chmod(0o755)
    popen = spawn.command(str(fake), "-c", "sleep 60; :", "app.py", secret)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    server = serve("--token-file", str(token), pids=(popen.pid,), token=TOKEN)
    assert wait_until(lambda: bool(server.json("/healthz")["problems"]), timeout=20)
    raw = httpx.get(f"{server.url}/healthz", timeout=10)  # no token
    assert raw.status_code == 200
    (problem,) = raw.json()["problems"]
    assert problem["pid"] == popen.pid and problem["program"] == "python3", problem
    assert set(problem) == {"pid", "program", "error", "attempts"}, problem
    assert "S3cr3t" not in raw.text and "app.py" not in raw.text, raw.text
    assert httpx.get(f"{server.url}/api/targets", timeout=10).status_code == 401
    (target,) = server.targets()  # with the token: the command line is data
    assert target["cmdline"].endswith(secret) and target["problem"], target
    entry = Entry("a secret in an untraceable command line", "hostile HTTP input", rounds=1)
    entry.inputs = 2
    entry.note("/healthz without the token names the program, not its arguments")
    entry.fault("secret in a command line", 1)
    record(entry)
