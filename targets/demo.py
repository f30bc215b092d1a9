"""``make demo``: a demo aiohttp service under load, recorded by sidecar into a flamegraph.

Starts ``targets.aiohttp_app``, drives /hard, /cpu and /blocking with wrk, records 10 seconds
with ``sidecar record`` and prints where the SVG and folded stacks are.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out"
SECONDS = 10


def main() -> int:
    wrk = shutil.which("wrk")
    if wrk is None:
        print("demo: wrk is needed to load the demo service (apt-get install wrk)", file=sys.stderr)
        return 1
    OUT.mkdir(exist_ok=True)
    app = subprocess.Popen(
        [sys.executable, "-m", "targets.aiohttp_app"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    loads: list[subprocess.Popen[bytes]] = []
    try:
        assert app.stdout is not None
        line = app.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not match:
            print(f"demo: the demo service did not start: {line!r}", file=sys.stderr)
            return 1
        url = f"http://127.0.0.1:{match[1]}"
        print(f"demo: aiohttp service PID {app.pid} on {url}", flush=True)
        for path, connections in (("/hard", 20), ("/cpu", 2), ("/blocking", 1)):
            loads.append(
                subprocess.Popen(
                    [wrk, "-t1", f"-c{connections}", f"-d{SECONDS + 3}s", url + path],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        time.sleep(1)
        svg, folded = OUT / "demo.svg", OUT / "demo.folded"
        base = [sys.executable, "-m", "sidecar", "record", "--pid", str(app.pid)]
        base += ["--duration", str(SECONDS)]
        code = subprocess.call([*base, "-o", str(svg)], cwd=ROOT)
        if code == 0:
            code = subprocess.call(
                [*base[:-2], "--duration", "2", "--format", "folded", "-q", "-o", str(folded)],
                cwd=ROOT,
            )
        if code == 0:
            print(f"demo: flamegraph  {svg}")
            print(f"demo: folded      {folded}")
            print("demo: open the SVG in a browser; [blocked] frames show where the loop stalls")
        return code
    finally:
        for load in loads:
            load.terminate()
        app.terminate()
        app.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
