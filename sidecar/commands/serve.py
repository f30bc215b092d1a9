"""``sidecar serve``: sample every Python process in sight, keep profiles over time, serve them."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from sidecar import defaults
from sidecar.commands.options import add_rate, add_slow_ms, add_stall_ms, add_task_bound
from sidecar.commands.signals import terminate_as_interrupt
from sidecar.defaults import HEADER_TIMEOUT_S as HEADER_TIMEOUT
from sidecar.errors import UsageError

HELP = "sample Python processes continuously, store profiles and serve the UI and API"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``24h``, ``7d`` → seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 15m, 24h, 7d)")
    return float(match[1]) * _UNITS[match[2] or "s"]


#: The smallest --max-db-size: room for the schema and a few windows (16 pages of 4 KiB).
MIN_DB_SIZE = 64 * 2**10


def size(text: str) -> int:
    """``500000``, ``200K``, ``50M``, ``2G`` → bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 200M, 2G)")
    return int(match[1]) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match[2].upper()]


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("serve", help=HELP, description=HELP + ".")
    parser.add_argument("--db", default="sidecar.db", help="database file (default sidecar.db)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=8321, help="port (default 8321)")
    add_rate(parser, " per process")
    parser.add_argument(
        "--window",
        type=int,
        default=defaults.STORE_WINDOW_S,
        metavar="S",
        help=f"seconds per stored window (default {defaults.STORE_WINDOW_S})",
    )
    parser.add_argument(
        "-p",
        "--pid",
        type=int,
        action="append",
        default=[],
        help="sample only this PID (repeatable)",
    )
    parser.add_argument(
        "--match", metavar="REGEX", help="sample only processes whose command line matches"
    )
    parser.add_argument(
        "--retention",
        type=duration,
        default=duration("24h"),
        metavar="DURATION",
        help="keep this much history (default 24h)",
    )
    parser.add_argument(
        "--max-db-size",
        type=size,
        metavar="SIZE",
        help="cap the database size (e.g. 500M); the oldest windows go first",
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="file with the API token; required when --host is not loopback",
    )
    parser.add_argument(
        "--task-rate",
        type=float,
        # a string default goes through ``type``: a bad one is a usage error like the option's
        default=os.environ.get("SIDECAR_TASK_RATE") or None,
        metavar="HZ",
        help="asyncio task scans per second per process (CPython 3.11+), stored beside the "
        f"threads; 0 turns them off (default {defaults.TASK_RATE_HZ:g}, or --rate if lower) "
        "[SIDECAR_TASK_RATE]",
    )
    add_stall_ms(parser, "SIDECAR_STALL_MS")
    add_slow_ms(parser, "SIDECAR_SLOW_MS")
    add_task_bound(parser)
    parser.add_argument(
        "--blocking", action="store_true", help="pause each target during each read"
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="HTTP connections at once; more are closed as they come (default 100, fewer "
        "when the open-files limit leaves less room beside sampling and the store)",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=HEADER_TIMEOUT,
        metavar="S",
        help="seconds a client has to send a request's headers before its connection is "
        f"closed (default {HEADER_TIMEOUT:g})",
    )
    push = parser.add_argument_group(
        "pushing to Grafana Pyroscope",
        "each option's default comes from the environment variable named in brackets",
    )
    env = _from_environment
    env(
        push,
        "--push",
        "URL",
        "SIDECAR_PUSH_URL",
        "also push every window to this Pyroscope, e.g. http://pyroscope:4040",
    )
    env(
        push,
        "--push-token-file",
        "PATH",
        "SIDECAR_PUSH_TOKEN_FILE",
        "file with a bearer token, or USER:PASSWORD for basic auth",
    )
    env(push, "--push-tenant", "ID", "SIDECAR_PUSH_TENANT", "tenant (X-Scope-OrgID)")
    env(
        push,
        "--service-name",
        "NAME",
        "SIDECAR_SERVICE_NAME",
        "service_name of the pushed series, by default from each target's command line",
    )
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error")
    )
    parser.set_defaults(run=run)


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as err:
        raise UsageError(f"cannot read --token-file {path}: {err.strerror}") from err
    if len(token) < 16:
        raise UsageError(f"the token in {path} is too short (16 characters at least)")
    return token


def _from_environment(
    group: argparse._ArgumentGroup, flag: str, metavar: str, variable: str, text: str
) -> None:
    """An option whose default is the environment variable ``variable`` (unset or empty: none),
    named in brackets at the end of its help."""
    group.add_argument(
        flag, metavar=metavar, default=os.environ.get(variable) or None, help=f"{text} [{variable}]"
    )


def run(args: argparse.Namespace) -> int:
    import logging
    import resource

    from sidecar.serve.api import create_app
    from sidecar.serve.asked import check_at_start
    from sidecar.serve.descriptors import RESERVED, connection_cap, raise_limit
    from sidecar.serve.http import listen, server_for
    from sidecar.serve.push import endpoint
    from sidecar.serve.service import ServeConfig, Service

    if problem := defaults.rate_problem(args.rate):
        raise UsageError(problem)
    if args.max_db_size is not None and args.max_db_size < MIN_DB_SIZE:
        raise UsageError(
            f"--max-db-size must be at least 64K (the schema and a few windows), not "
            f"{args.max_db_size:,} bytes; leave it out for no cap"
        )
    if args.max_connections is not None and not 1 <= args.max_connections <= 1_000_000:
        raise UsageError("--max-connections must be between 1 and 1,000,000")
    if not 0.1 <= args.header_timeout <= 3600:  # nan compares false: refused too
        raise UsageError("--header-timeout must be between 0.1 and 3600 seconds")
    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be between 0 and 65535 (0: any free port)")
    if args.task_rate is None:  # the default, never above the thread sampling's rate
        args.task_rate = min(defaults.TASK_RATE_HZ, args.rate)
    if not 0 <= args.task_rate <= args.rate:
        raise UsageError("--task-rate must be between 0 (no task scans) and --rate")
    if not 1 <= args.window <= 3600:
        raise UsageError("--window must be between 1 and 3600 seconds")
    if args.retention < args.window * 2:
        raise UsageError("--retention must cover at least two windows")
    token = _read_token(args.token_file) if args.token_file else None
    if token is None and not _is_loopback(args.host):
        raise UsageError(
            f"listening on {args.host} exposes profiles beyond this host: give --token-file"
        )
    try:
        match = re.compile(args.match) if args.match else None
    except re.error as err:
        raise UsageError(f"--match is not a valid regular expression: {err}") from err
    if args.push is None:
        given = [n for n in ("push_token_file", "push_tenant", "service_name") if getattr(args, n)]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UsageError(f"{flag} only makes sense with --push URL")
        push = None
    else:
        push = endpoint(args.push, token_file=args.push_token_file, tenant=args.push_tenant)
    if args.service_name is not None and not args.service_name.strip():
        raise UsageError("--service-name must not be empty")
    check_at_start(args.pid)  # a PID asked for that is not there is a mistake: said now
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # a long-lived process: a large answer's buffers go back to the kernel once it is sent
    from sidecar import _native

    if not _native.return_large_allocations():
        logging.getLogger("sidecar.serve").debug("the allocator keeps its own mmap threshold")
    config = ServeConfig(
        db=Path(args.db),
        host=args.host,
        port=args.port,
        rate_hz=args.rate,
        window=args.window,
        pids=frozenset(args.pid),
        match=match,
        retention=args.retention,
        token=token,
        max_db_bytes=args.max_db_size,
        blocking=args.blocking,
        task_rate_hz=args.task_rate,
        task_bound=args.task_bound,
        stall_ms=args.stall_ms,
        slow_ms=args.slow_ms,
        push=push,
        service_name=args.service_name,
        max_connections=args.max_connections,
        header_timeout=args.header_timeout,
    )
    soft, hard = raise_limit()
    wanted = args.max_connections
    if wanted is not None and wanted > connection_cap(soft) and wanted > soft - RESERVED:
        logging.getLogger("sidecar.serve").warning(
            "--max-connections %d leaves fewer than %d of the %d open files allowed for "
            "sampling and the store: clients may take the descriptors they need",
            wanted,
            RESERVED,
            soft,
        )
    sock = listen(args.host, args.port)
    service = Service(config)
    logging.getLogger("sidecar.serve").info(
        "open files: %d allowed (hard limit %s); HTTP: %d connections at once, %g s for headers",
        soft,
        "unlimited" if hard == resource.RLIM_INFINITY else hard,
        service.http.max_connections,
        service.http.header_timeout,
    )
    try:
        service.start()
        with terminate_as_interrupt():
            server = server_for(create_app(service), args.host, args.port, service.http)
            port = sock.getsockname()[1]  # the port given, or the one picked for --port 0
            print(
                f"sidecar: serving http://{args.host}:{port} (database {args.db})",
                file=sys.stderr,
                flush=True,
            )
            server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
        sock.close()
    return 0
