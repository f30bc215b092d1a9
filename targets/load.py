"""Fixed-rate HTTP load with latency percentiles, driven by locust as a library.

``python -m targets.load URL --rate RPS --duration S [--users N] [--warmup S] [--json]``

``--users`` simulated users share the rate: each sends one request per USERS/RATE seconds on
its own keep-alive connection, on a fixed schedule, and the users' schedules are spread evenly
over that interval, so the load is even rather than in bursts. A user whose response comes
later than its next slot sends at once; when responses take longer than the interval itself,
the achieved rate falls below the asked one: that is the service saturating, and the report
says so. The run stops by itself after warm-up plus duration. When the measured part begins,
one line ``measuring URL ...`` goes to stderr. Latency percentiles are locust's (whole
milliseconds below 100 ms, then rounded to 10 ms).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import sys
import time
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

import gevent
import locust
import locust.env

PERCENTILES = (0.5, 0.9, 0.99)


@dataclass
class LoadResult:
    url: str
    rate: float
    duration: float
    users: int
    requests: int
    failures: int
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float


def default_users(rate: float) -> int:
    """Enough users that each sends at most two requests a second (a 500 ms budget each)."""
    return max(1, math.ceil(rate / 2))


def run(url: str, rate: float, duration: float, users: int, warmup: float = 1.0) -> LoadResult:
    """Drives ``url`` at ``rate`` requests per second for ``duration`` seconds after a warm-up
    that is not measured."""
    parts = urlsplit(url)
    host = f"{parts.scheme}://{parts.netloc}"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    per_user = rate / users
    interval = 1.0 / per_user
    order = itertools.count()

    class Client(locust.FastHttpUser):
        # Each user keeps its own fixed schedule, one request per interval (locust's
        # constant_throughput bunches users together and overshoots the rate here).
        wait_time = locust.constant(0)
        network_timeout = 10.0
        connection_timeout = 5.0
        due = 0.0

        def on_start(self) -> None:
            # locust starts a whole batch of users at once; without an offset each they would
            # send in lockstep, bursts of USERS requests once per interval.
            gevent.sleep(next(order) % users * interval / users)
            self.due = time.monotonic()

        @locust.task
        def get(self) -> None:
            self.due += interval
            self.client.get(path, name=path)
            gevent.sleep(max(0.0, self.due - time.monotonic()))

    Client.host = host
    env = locust.env.Environment(user_classes=[Client], host=host)
    runner = env.create_local_runner()
    runner.start(users, spawn_rate=users)
    gevent.sleep(max(warmup, 2 * interval))
    env.stats.reset_all()
    began = time.monotonic()
    # The line a caller waits for before it measures anything of its own.
    print(f"measuring {url} at {rate:g} req/s for {duration:g} s", file=sys.stderr, flush=True)
    gevent.sleep(duration)
    total = env.stats.total
    elapsed = time.monotonic() - began
    requests, failures = total.num_requests, total.num_failures
    percentiles = [float(total.get_response_time_percentile(p) or 0.0) for p in PERCENTILES]
    result = LoadResult(
        url=url,
        rate=rate,
        duration=round(elapsed, 3),
        users=users,
        requests=requests,
        failures=failures,
        rps=round(requests / elapsed, 1) if elapsed else 0.0,
        p50_ms=percentiles[0],
        p90_ms=percentiles[1],
        p99_ms=percentiles[2],
        max_ms=round(float(total.max_response_time or 0.0), 1),
        mean_ms=round(float(total.avg_response_time), 1),
    )
    runner.quit()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="http://127.0.0.1:PORT/path")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--duration", type=float, required=True, help="measured seconds")
    parser.add_argument("--users", type=int, help="simulated users (default: rate / 2)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    host = urlsplit(args.url).hostname or ""
    if not (host == "localhost" or host.startswith("127.") or host == "::1"):
        parser.error("load is only sent to this machine (127.0.0.0/8, localhost)")
    if args.rate <= 0 or args.duration <= 0:
        parser.error("--rate and --duration must be positive")
    logging.basicConfig(level=logging.ERROR)
    result = run(
        args.url, args.rate, args.duration, args.users or default_users(args.rate), args.warmup
    )
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print(
            f"{result.url}: asked {result.rate:g} req/s, got {result.rps:g} req/s over "
            f"{result.duration:g} s ({result.requests} requests, {result.failures} failed, "
            f"{result.users} users)\n"
            f"latency ms: p50 {result.p50_ms:g} · p90 {result.p90_ms:g} · p99 {result.p99_ms:g}"
            f" · max {result.max_ms:g} · mean {result.mean_ms:g}"
        )
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
