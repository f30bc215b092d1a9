"""The image `make image` built, as users get it: the OCI archives out/sidecar-image.tar and
out/sidecar-demo-image.tar, loaded and run with buildah (`buildah from oci-archive:...`, then
`buildah run --isolation chroot`, the one way to run a container on these machines).

A chroot-isolated container shares the host's PID and network namespaces, as the containers of
a pod that shares its process namespace share theirs, and has its own root filesystem. So the
demo image runs the demo aiohttp service in one container, and the sidecar image records it
from another, with every capability dropped but CAP_SYS_PTRACE (buildah 1.28 ignores
``--cap-add`` after ``--cap-drop ALL``, so each other capability is dropped by name and the
container's effective set is checked). Runs only where `make image` has run; in CI (CI=true) a
missing image fails the test. Sizes and contents go to tests/reports/image.md.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.access import CAPABILITIES as ALL_CAPABILITIES
from tests.support.helpers import REPORTS, ROOT, Spawner
from tests.support.pythons import in_ci

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ARCHIVE = ROOT / "out" / "sidecar-image.tar"
DEMO_ARCHIVE = ROOT / "out" / "sidecar-demo-image.tar"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
BASE = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE)[1]  # type: ignore[index]
BUDGET_ABOVE_BASE = 120_000_000
#: Every Linux capability but SYS_PTRACE (bit 19), to drop one by one.
CAPABILITIES = [name for name in ALL_CAPABILITIES if name != "SYS_PTRACE"]
ONLY_PTRACE = [f"--cap-drop=CAP_{name}" for name in CAPABILITIES] + ["--cap-add=CAP_SYS_PTRACE"]
NO_CAPABILITY = [f"--cap-drop=CAP_{name}" for name in [*CAPABILITIES, "SYS_PTRACE"]]
DEV_TOOLS = ("pytest", "mypy", "maturin", "playwright", "ruff", "locust", "cargo", "rustc", "gcc")

REPORT: dict[str, object] = {}


def _needed(what: str, fix: str) -> None:
    reason = f"{what}: {fix}"
    if in_ci():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def buildah(*argv: str, timeout: float = 300) -> str:
    done = subprocess.run(
        ["buildah", *argv], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"buildah {' '.join(argv[:3])}: {done.stderr[-2000:]}"
    return done.stdout


class Container:
    """A working container of an OCI archive's image, removed at the end."""

    def __init__(self, archive: Path) -> None:
        self.id = buildah("from", "--quiet", f"oci-archive:{archive}").strip().splitlines()[-1]

    def argv(self, *command: str, caps: list[str], volumes: tuple[str, ...] = ()) -> list[str]:
        mounts = [f"--volume={v}" for v in volumes]
        return ["buildah", "run", "--isolation=chroot", *caps, *mounts, self.id, "--", *command]

    def run(
        self, *command: str, caps: list[str] = ONLY_PTRACE, volumes: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*command, caps=caps, volumes=volumes),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def remove(self) -> None:
        subprocess.run(["buildah", "rm", self.id], capture_output=True, check=False)


def _container(archive: Path) -> Iterator[Container]:
    if shutil.which("buildah") is None:
        _needed("no buildah on this machine", "apt-get install buildah, then make image")
    if not archive.is_file():
        _needed(f"no {archive.relative_to(ROOT)}", "run make image")
    container = Container(archive)
    try:
        yield container
    finally:
        container.remove()


@pytest.fixture(scope="module")
def image() -> Iterator[Container]:
    yield from _container(ARCHIVE)


@pytest.fixture(scope="module")
def demo() -> Iterator[Container]:
    yield from _container(DEMO_ARCHIVE)


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    if REPORT:
        write_report()


def test_sidecar_reports_the_package_version(image: Container) -> None:
    done = image.run("sidecar", "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"sidecar {VERSION}"
    caps = image.run("grep", "-E", "^Cap(Eff|Prm|Bnd)", "/proc/self/status")
    sets = dict(line.split(":\t") for line in caps.stdout.splitlines())
    assert {name: int(value, 16) for name, value in sets.items()} == {
        "CapEff": 1 << 19,
        "CapPrm": 1 << 19,
        "CapBnd": 1 << 19,
    }, "the container must hold CAP_SYS_PTRACE and nothing else"
    REPORT["capabilities"] = "CapEff = CapPrm = CapBnd = 0x80000 (CAP_SYS_PTRACE only)"


def test_the_image_holds_the_runtime_lock_and_no_development_tool(image: Container) -> None:
    probe = (
        "import importlib.metadata as m, importlib.util as u, json, shutil, sys; "
        "print(json.dumps({"
        "'python': '%d.%d' % sys.version_info[:2], "
        "'dists': sorted({d.metadata['Name'].lower().replace('_', '-'): d.version "
        "for d in m.distributions()}.items()), "
        f"'modules': [n for n in {list(DEV_TOOLS)!r} if u.find_spec(n)], "
        f"'commands': [n for n in {[*DEV_TOOLS, 'cc', 'make']!r} if shutil.which(n)]"
        "}))"
    )
    done = image.run("python", "-c", probe)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["python"] == "3.11"
    assert found["modules"] == [] and found["commands"] == [], found
    # Nothing outside the virtualenv either: no toolchain copied along from the build stage.
    for path in ("/usr/local/cargo", "/usr/local/rustup", "/usr/bin/gcc", "/src"):
        assert image.run("test", "-e", path).returncode == 1, path
    locked = {}
    for raw in (ROOT / "requirements.lock").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            locked[name.lower().replace("_", "-")] = version
    dists = dict(found["dists"])
    # the installer's own (every virtualenv of 3.11 has them) are not locked
    installer = {name: dists.pop(name) for name in ("pip", "setuptools") if name in dists}
    assert dists == {**locked, "sidecar": VERSION}
    REPORT["distributions"] = len(dists)
    REPORT["installer"] = ", ".join(f"{n} {v}" for n, v in sorted(installer.items()))


def test_image_size_above_its_base_is_within_budget() -> None:
    if not ARCHIVE.is_file():
        _needed(f"no {ARCHIVE.relative_to(ROOT)}", "run make image")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "deploy" / "imagesize.py"),
            "--engine",
            "buildah",
            "--base",
            BASE,
            "--json",
            str(ARCHIVE),
            str(DEMO_ARCHIVE),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    sizes = {Path(r["archive"]).name: r for r in json.loads(done.stdout)}
    runtime = sizes[ARCHIVE.name]
    REPORT["sizes"] = sizes
    # The runtime stage adds one layer to its base: the virtualenv.
    assert runtime["layers_above_base"] == 1
    assert 0 < runtime["above_base_bytes"] < BUDGET_ABOVE_BASE, runtime


class CpuLoad:
    """Requests to a demo service's /cpu (classify_path) in a thread, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.done = threading.Event()
        self.served = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for _ in range(100_000):  # bounded; stopped once the recording is done
            if self.done.is_set():
                return
            try:
                with urllib.request.urlopen(self.url + "/cpu?repeat=200", timeout=10) as reply:
                    reply.read()
                    self.served += 1
            except OSError:
                return  # the service stopped

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=15)


def classify_samples(folded: Path) -> tuple[int, int]:
    """(all samples, samples in classify_path of the demo's handlers) of a folded profile."""
    lines = folded.read_text().splitlines()
    counts = [(line, int(line.rsplit(" ", 1)[1])) for line in lines]
    hits = [n for line, n in counts if re.search(r"classify_path \(\S*targets/handlers\.py:", line)]
    return sum(n for _, n in counts), sum(hits)


def test_target_on_the_host_is_recorded_from_the_image_with_sys_ptrace_only(
    image: Container, spawn: Spawner, tmp_path: Path
) -> None:
    # A chroot-isolated container has no mount namespace of its own: /proc/PID/maps of a
    # process in another buildah container names its files by that container's root as the
    # host sees it (/var/tmp/buildahNNN/mnt/rootfs/...), a path no other container can open,
    # whereas each container of a pod has its own mount namespace. So the target runs on the
    # host: another root filesystem in the same PID namespace, its files read through
    # /proc/PID/root as in a pod. It runs as root with every capability.
    target = spawn.target("aiohttp_app", "--port", "0")
    load = CpuLoad(target.url)
    try:
        # Without the capability the kernel refuses (the target holds capabilities the
        # sidecar lacks), and sidecar says which one to add.
        denied = image.run(
            "sidecar", "record", "--pid", str(target.pid), "--duration", "1",
            "--format", "folded", "-o", "/tmp/p.folded", caps=NO_CAPABILITY,
        )  # fmt: skip
        assert denied.returncode == 1, denied.stderr
        # sidecar's one line; buildah run adds its own lines on the command's exit status
        said = [
            line
            for line in denied.stderr.strip().splitlines()
            if not re.fullmatch(r"(subprocess exited with status|Error: exit status) \d+", line)
        ]
        assert len(said) == 1 and said[0].startswith("sidecar: error: "), denied.stderr
        assert "CAP_SYS_PTRACE" in said[0], said

        done = image.run(
            "sidecar", "record", "--pid", str(target.pid), "--duration", "3",
            "--format", "folded", "-o", "/out/profile.folded", volumes=(f"{tmp_path}:/out",),
        )  # fmt: skip
    finally:
        load.stop()
    assert done.returncode == 0, done.stderr
    samples, in_handler = classify_samples(tmp_path / "profile.folded")
    assert load.served > 0 and in_handler > 0, (tmp_path / "profile.folded").read_text()[:2000]
    REPORT["record"] = (
        f"host target `python -m targets.aiohttp_app` (PID {target.pid}) under load of /cpu: "
        f"{samples} samples, {in_handler} in classify_path (targets/handlers.py); without "
        f"CAP_SYS_PTRACE: `{said[0]}`"
    )


# The demo image's service, started as deploy/k8s/examples start it, and its sidecar beside it
# in the same container (same root filesystem), recording it while the host loads it.
DEMO_SCRIPT = """
python -m targets.aiohttp_app --host 127.0.0.1 --port 0 >/tmp/target.log 2>&1 &
target=$!
i=0
until grep -q listening /tmp/target.log || [ $i -ge 200 ]; do sleep 0.1; i=$((i + 1)); done
cat /tmp/target.log
sleep 1
sidecar record --pid $target --duration 3 --format folded -o /out/demo.folded
status=$?
kill $target
exit $status
"""


def test_demo_image_runs_a_demo_service_that_its_sidecar_records(
    demo: Container, tmp_path: Path
) -> None:
    argv = demo.argv("sh", "-c", DEMO_SCRIPT, caps=ONLY_PTRACE, volumes=(f"{tmp_path}:/out",))
    started = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    load = None
    try:
        assert started.stdout is not None
        line = started.stdout.readline()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert match, f"the demo service did not start: {line!r}"
        load = CpuLoad(match[1])
        _, stderr = started.communicate(timeout=120)
    finally:
        if load is not None:
            load.stop()
        if started.poll() is None:
            started.kill()
            started.wait()
    assert started.returncode == 0, stderr
    samples, in_handler = classify_samples(tmp_path / "demo.folded")
    assert load.served > 0 and in_handler > 0, (tmp_path / "demo.folded").read_text()[:2000]
    REPORT["demo"] = (
        f"`python -m targets.aiohttp_app` served {load.served} requests of /cpu, recorded by "
        f"the image's sidecar: {samples} samples, {in_handler} in classify_path"
    )


def write_report() -> None:
    lines = [
        "# The image (make image)",
        "",
        f"Written by tests/deploy/test_image.py from {ARCHIVE.relative_to(ROOT)} and "
        f"{DEMO_ARCHIVE.relative_to(ROOT)}, run with buildah (chroot isolation).",
        "",
    ]
    sizes = REPORT.get("sizes")
    if isinstance(sizes, dict):
        lines += [
            "| archive | image | size MB | above base MB | layers above base |",
            "|---|---|---:|---:|---:|",
            *(
                f"| {name} | {r['image']} | {r['size_bytes'] / 1e6:.1f} | "
                f"{r['above_base_bytes'] / 1e6:.1f} | {r['layers_above_base']} of {r['layers']} |"
                for name, r in sizes.items()
            ),
            "",
            f"Base: {BASE}; budget above base: {BUDGET_ABOVE_BASE / 1e6:.0f} MB "
            "(uncompressed layers).",
            "",
        ]
    for key, title in (
        ("distributions", "Distributions in /opt/sidecar (requirements.lock and sidecar)"),
        ("installer", "Installer"),
        ("capabilities", "Capabilities of the sidecar container"),
        ("demo", "Demo image"),
        ("record", "sidecar record from the image"),
    ):
        if key in REPORT:
            lines.append(f"- {title}: {REPORT[key]}")
    (REPORTS / "image.md").write_text("\n".join(lines) + "\n")
