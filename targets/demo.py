"""``sidecar demo`` (``make demo``): the demo services under load, sidecar serving them.

Starts the aiohttp service (uvloop) and the Tornado service (asyncio), drives both with wrk
(the handlers of "Tornado vs Aiohttp" (Avito), some pure-Python work, and a paced trickle of the
blocking call of "Being truly asynchronous with Tornado" on Tornado), runs ``sidecar serve`` on
them and prints the address of the UI. Ctrl-C stops everything it started.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACED = Path(__file__).resolve().parent / "paced.lua"
LOAD_SECONDS = 3600  # the load stops by itself after an hour

# (service, path, connections, pause between requests per connection in ms)
LOADS = (
    ("aiohttp", "/hard", 20, 0),
    ("aiohttp", "/cpu", 1, 20),
    ("tornado", "/hard-old", 20, 0),
    ("tornado", "/cpu", 1, 20),
    ("tornado", "/blocking", 1, 500),
)


def start_service(module: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", f"targets.{module}", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"demo: {module} did not start: {line!r}")
    return proc, match[1]


def start_loads(wrk: str, urls: dict[str, str], seconds: int) -> list[subprocess.Popen[str]]:
    """The demo's wrk runs (LOADS) against the services' base URLs; each stops by itself."""
    procs = []
    for service, path, connections, pause in LOADS:
        procs.append(
            subprocess.Popen(
                [
                    wrk,
                    "-t1",
                    f"-c{connections}",
                    f"-d{seconds}s",
                    "-s",
                    str(PACED),
                    urls[service] + path,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=dict(os.environ, SIDECAR_DELAY_MS=str(pause)),
                text=True,
            )
        )
    return procs


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sidecar demo", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8321, help="port of the UI (default 8321)")
    parser.add_argument("--db", default=str(ROOT / "out" / "demo.db"), help="database file")
    args = parser.parse_args(argv)
    wrk = shutil.which("wrk")
    if wrk is None:
        print(
            "demo: wrk is needed to load the demo services (apt-get install wrk)", file=sys.stderr
        )
        return 1
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)  # stop everything on SIGTERM as on Ctrl-C
    procs: list[subprocess.Popen[str]] = []
    try:
        aiohttp, aiohttp_url = start_service("aiohttp_app", "--uvloop")
        procs.append(aiohttp)
        tornado, tornado_url = start_service("tornado_app")
        procs.append(tornado)
        urls = {"aiohttp": aiohttp_url, "tornado": tornado_url}
        procs += start_loads(wrk, urls, LOAD_SECONDS)
        serve = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sidecar",
                "serve",
                "--db",
                args.db,
                "--port",
                str(args.port),
                "--window",
                "5",
                "--pid",
                str(aiohttp.pid),
                "--pid",
                str(tornado.pid),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            text=True,
        )
        procs.append(serve)
        time.sleep(1.5)
        if serve.poll() is not None:
            print("demo: sidecar serve did not start (its error is above)", file=sys.stderr)
            return 1
        ui = f"http://127.0.0.1:{args.port}"
        print(f"demo: aiohttp (uvloop) PID {aiohttp.pid} on {aiohttp_url}")
        print(f"demo: tornado (asyncio) PID {tornado.pid} on {tornado_url}")
        print(f"demo: sidecar UI   {ui}/")
        print(f"demo: sidecar API  {ui}/api/targets  ·  {ui}/api/stats  ·  {ui}/metrics")
        print(
            "demo: profiles appear after the first 5-second window; Ctrl-C stops everything",
            flush=True,
        )
        serve.wait()
        return 0
    except KeyboardInterrupt:
        print("\ndemo: stopping", file=sys.stderr)
        return 0
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
