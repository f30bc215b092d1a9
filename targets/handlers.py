"""Framework-free pieces of the demo handlers, shared by the aiohttp and Tornado services.

- the benchmark of "Tornado vs Aiohttp" (Avito): an awaited 50 ms sleep stands in for a network
  call;
- the character classifier of "Python multi-core benchmark in uvloop context" (Nexedi):
  pure-Python work per request;
- the bug of "Being truly asynchronous with Tornado": a synchronous call made inside the event
  loop.
"""

from __future__ import annotations

import gc
import http.server
import queue
import threading
import time
import urllib.request

SLEEP_TIME = 0.05
#: The awaits of /stages, in seconds: a request waits three times as long on fetch as on store.
FETCH_TIME = 0.03
STORE_TIME = 0.01

NAVYTUX = b"navytux.spb.ru"
NEXEDI = b"www.nexedi.com"
LAB = b"lab.nexedi.com"
ERP5 = b"www.erp5.com"


def isclose(ch: int, s: bytes) -> bool:
    """A character is close to a string if it is within 1 of any of its characters."""
    for ch2 in s:
        if abs(ch - ch2) <= 1:
            return True
    return False


class XClassifier:
    def __init__(self) -> None:
        self.nnavytux = 0
        self.nnexedi = 0
        self.nlab = 0
        self.nerp5 = 0
        self.ntotal = 0

    def next_char(self, ch: int) -> None:
        if isclose(ch, NAVYTUX):
            self.nnavytux += 1
        if isclose(ch, NEXEDI):
            self.nnexedi += 1
        if isclose(ch, LAB):
            self.nlab += 1
        if isclose(ch, ERP5):
            self.nerp5 += 1
        self.ntotal += 1


def classify_path(path: str, repeat: int = 200) -> bytes:
    """The handler body of "Python multi-core benchmark in uvloop context": classify every
    character of the path, `repeat` times over."""
    xc = XClassifier()
    data = path.encode() * repeat
    for char in data:
        xc.next_char(char)
    return b"%s:\t%d\n%s:\t%d\n%s:\t%d\n%s:\t%d\ntotal:\t%d\n" % (
        NAVYTUX,
        xc.nnavytux,
        NEXEDI,
        xc.nnexedi,
        LAB,
        xc.nlab,
        ERP5,
        xc.nerp5,
        xc.ntotal,
    )


def blocking_sleep() -> None:
    """The mistake of "Being truly asynchronous with Tornado" in its plainest form: a synchronous
    wait inside the event loop."""
    time.sleep(SLEEP_TIME)


def freeze_sleep(ms: float) -> None:
    """A stall of the loop of a known length, off CPU: a synchronous sleep of `ms`."""
    time.sleep(ms / 1000)


def freeze_spin(ms: float) -> None:
    """A stall of the loop of a known length, on CPU: Python code that runs for `ms`."""
    until = time.perf_counter() + ms / 1000
    while time.perf_counter() < until:
        pass


def freeze_gc(ms: float) -> None:
    """A stall of the loop in garbage collections: full collections, one after another, for
    `ms`."""
    until = time.perf_counter() + ms / 1000
    while time.perf_counter() < until:
        gc.collect()


def _sum_rate() -> float:
    """Seconds `sum` takes per number of a range, measured once."""
    began = time.perf_counter()
    sum(range(200_000))
    return max(time.perf_counter() - began, 1e-6) / 200_000


#: Work for the thread that holds the GIL (``freeze_gil``): a count to sum, and the event set
#: once it is summed.
_TO_HOLD: queue.SimpleQueue[tuple[int, threading.Event]] = queue.SimpleQueue()


def hold_gil() -> None:
    """The thread named ``holder``, as an executor's: for each count it is given, one C call
    that keeps the GIL throughout, ``sum`` of a range of that many numbers."""
    while True:
        count, done = _TO_HOLD.get()
        sum(range(count))
        done.set()


def freeze_gil(ms: float) -> None:
    """A stall of the loop by another thread that holds the GIL: the thread ``holder`` (started
    once, and kept) sums a range in one C call of about `ms`, while the loop goes on in Python
    code and, past the interpreter's switch interval, waits for the GIL until the sum is done."""
    if not any(thread.name == "holder" for thread in threading.enumerate()):
        threading.Thread(target=hold_gil, name="holder", daemon=True).start()
    done = threading.Event()
    _TO_HOLD.put((int(ms / 1000 / _sum_rate()), done))
    freeze_spin(20)
    done.wait()


#: The ways /freeze holds the loop.
FREEZES = {"sleep": freeze_sleep, "spin": freeze_spin, "gc": freeze_gc, "gil": freeze_gil}


def freeze(how: str, ms: float) -> str:
    """What /freeze?how=sleep|spin|gc|gil&ms=N does: holds the loop about `ms` in one of those
    ways (sleep: off CPU; spin: in Python code; gc: in collections; gil: waiting for the GIL
    another thread holds). Says how long it held the loop by its own clock: on a loaded machine
    a sleep ends late, and a thread is not run the moment it may be."""
    if not 0 < ms <= 60_000:
        raise ValueError(f"ms must be in (0, 60000], not {ms}")
    if how not in FREEZES:
        raise ValueError(f"how must be one of {', '.join(FREEZES)}, not {how!r}")
    began = time.perf_counter()
    FREEZES[how](ms)
    held = (time.perf_counter() - began) * 1000
    return f"froze the loop {held:.1f} ms ({how} {ms:g} ms)\n"


class _SlowService(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        time.sleep(SLEEP_TIME)
        body = b"pretend service\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class PretendService:
    """The slow external API of "Being truly asynchronous with Tornado", served from a background
    thread of the same process."""

    def __init__(self) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowService)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/external-api"
        thread = threading.Thread(target=self.server.serve_forever, name="pretend-service")
        thread.daemon = True
        thread.start()


def blocking_fetch(url: str) -> bytes:
    """A synchronous HTTP client call (a socket read) inside the event loop: the bug of "Being
    truly asynchronous with Tornado"."""
    with urllib.request.urlopen(url, timeout=5) as response:
        data: bytes = response.read()
        return data


def announce(framework: str, port: int, uvloop: bool) -> None:
    """The one line a launcher waits for."""
    loop = "uvloop" if uvloop else "asyncio"
    print(f"{framework} ({loop}) listening on http://127.0.0.1:{port}", flush=True)
