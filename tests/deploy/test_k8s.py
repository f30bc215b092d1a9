"""The Kubernetes deployment (deploy/k8s, deploy/Dockerfile) against the real API machinery.

`make k8s-check-tools` builds the Go checker (deploy/k8s/check: kustomize, strict decoding into
k8s.io/api types, kube-apiserver's create validation, Pod Security admission, kubeconform) and
fetches the pinned schema wheel. These tests run it on the shipped manifests and on broken
copies of them, and assert its verdicts; the checker's first build takes minutes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helpers import ROOT

pytestmark = pytest.mark.timeout(1800)  # the first build of the checker compiles Kubernetes

K8S = ROOT / "deploy" / "k8s"
CHECKER = ROOT / ".venv" / "k8s" / "k8s-check"
SCHEMAS = ROOT / ".venv" / "k8s" / "schemas"
EPHEMERAL = K8S / "debug" / "sidecar-debug.yaml"

Report = dict[str, Any]


@pytest.fixture(scope="module")
def checker() -> Path:
    done = subprocess.run(
        ["make", "--no-print-directory", "k8s-check-tools"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1700,
    )
    assert done.returncode == 0, f"make k8s-check-tools failed:\n{done.stdout}\n{done.stderr}"
    return CHECKER


def check(checker: Path, *roots: Path, ephemeral: bool = False) -> tuple[int, Report]:
    args = [str(checker), "-json", "-schemas", str(SCHEMAS)]
    if ephemeral:
        args += ["-ephemeral", str(EPHEMERAL)]
    done = subprocess.run([*args, *map(str, roots)], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    report: Report = json.loads(done.stdout)
    return done.returncode, report


def objects(report: Report, build_suffix: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The objects of the one build whose directory ends with ``build_suffix``."""
    builds = [b for b in report["builds"] if b["dir"].rstrip("/").endswith(build_suffix)]
    assert len(builds) == 1, [b["dir"] for b in report["builds"]]
    return {(o["kind"], o["name"]): o for o in builds[0]["objects"]}


def copy_tree(tmp_path: Path) -> Path:
    """A copy of deploy/k8s (without the checker's sources) that a test may break."""
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root, ignore=shutil.ignore_patterns("check"))
    return root


def test_shipped_manifests_pass_every_check(checker: Path) -> None:
    code, report = check(checker, K8S, ephemeral=True)
    assert code == 0 and report["ok"], "\n".join(report["problems"])
    dirs = {Path(b["dir"]).relative_to(K8S).as_posix() for b in report["builds"]}
    assert dirs == {
        "base",
        "examples",
        "examples/aiohttp",
        "examples/tornado",
        "examples/namespace",
        "examples/no-capability",
        "examples/pyroscope",
    }
    for build in report["builds"]:
        assert "error" not in build, build["error"]
        assert build["objects"], build["dir"]
        for obj in build["objects"]:
            where = f"{build['dir']}: {obj['kind']} {obj['name']}"
            assert "decode_error" not in obj, where
            assert obj["validation_errors"] == [], where
            assert obj["schema"]["status"] == "valid", where
        assert all(rule["ok"] for rule in build["rules"]), build["dir"]
    assert report["lint"] == []


def test_sidecar_pods_are_privileged_level_and_baseline_rejects_sys_ptrace(
    checker: Path,
) -> None:
    _, report = check(checker, K8S)
    found = objects(report, "examples")
    for name in ("aiohttp-demo", "tornado-demo"):
        verdicts = found[("Deployment", name)]["pod_security"]
        assert verdicts["privileged"] == {"allowed": True}
        baseline = verdicts["baseline"]
        assert baseline["allowed"] is False
        assert baseline["forbidden"] == [
            {
                "reason": "non-default capabilities",
                "detail": 'container "sidecar" must not include "SYS_PTRACE" in '
                "securityContext.capabilities.add",
            }
        ]
        assert verdicts["restricted"]["allowed"] is False
        # The namespace of the example enforces privileged, and admits the pods.
        admission = found[("Deployment", name)]["admission"]
        assert admission["namespace"] == "sidecar-demo"
        assert admission["enforce"].startswith("privileged:")
        assert admission["allowed"] is True


def test_the_pyroscope_component_sets_the_push_and_keeps_the_sidecar(checker: Path) -> None:
    done = subprocess.run(
        [str(checker), "-print", str(K8S / "examples" / "pyroscope")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["initContainers"] if c["name"] == "sidecar")
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["SIDECAR_PUSH_URL"]["value"].startswith("http")
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    token = env["SIDECAR_PUSH_TOKEN_FILE"]["value"]
    mount = next(m for m in sidecar["volumeMounts"] if token.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "sidecar-pyroscope" and mount["readOnly"] is True
    # the sidecar component's own settings are all still there
    assert "PYTHONUNBUFFERED" in env and "--token-file=/etc/sidecar/token/token" in sidecar["args"]
    assert {v["name"] for v in pod["volumes"]} >= {"sidecar-data", "sidecar-token"}


def test_without_the_capability_the_pod_meets_restricted(checker: Path) -> None:
    _, report = check(checker, K8S)
    deployment = objects(report, "no-capability")[("Deployment", "nocap-demo")]
    assert deployment["pod_security"]["restricted"] == {"allowed": True}
    assert deployment["admission"]["enforce"].startswith("restricted:")
    assert deployment["admission"]["allowed"] is True


def test_ephemeral_container_recipe_is_valid_and_needs_privileged(checker: Path) -> None:
    code, report = check(checker, K8S / "examples" / "namespace", ephemeral=True)
    assert code == 0, report["problems"]
    pod = report["ephemeral"]
    assert pod["validation_errors"] == []
    assert pod["pod_security"]["privileged"]["allowed"] is True
    assert [f["reason"] for f in pod["pod_security"]["baseline"]["forbidden"]] == [
        "non-default capabilities"
    ]
    assert "SYS_PTRACE" in pod["pod_security"]["baseline"]["forbidden"][0]["detail"]
    assert all(rule["ok"] for rule in pod["rules"])


def test_a_baseline_namespace_would_reject_the_sidecar_for_sys_ptrace(
    checker: Path, tmp_path: Path
) -> None:
    root = copy_tree(tmp_path)
    namespace = root / "examples" / "namespace" / "namespace.yaml"
    namespace.write_text(
        namespace.read_text().replace('enforce: "privileged"', 'enforce: "baseline"')
    )
    code, report = check(checker, root / "examples")
    assert code == 1
    admission = objects(report, "examples")[("Deployment", "aiohttp-demo")]["admission"]
    assert admission["allowed"] is False
    assert admission["enforce"].startswith("baseline:")
    assert any("SYS_PTRACE" in p and "would reject" in p for p in report["problems"])


def test_unknown_fields_are_errors(checker: Path, tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    patch = root / "components" / "sidecar" / "sidecar.yaml"
    patch.write_text(patch.read_text().replace("readOnlyRootFilesystem:", "readOnlyRootFs:"))
    code, report = check(checker, root / "base")
    assert code == 1
    deployment = objects(report, "base")[("Deployment", "demo")]
    assert (
        'unknown field "spec.template.spec.initContainers[0].securityContext.readOnlyRootFs"'
        in (deployment["decode_error"])
    )
    assert deployment["schema"]["status"] == "invalid"


def test_apiserver_validation_rejects_what_the_apiserver_would(
    checker: Path, tmp_path: Path
) -> None:
    root = copy_tree(tmp_path)
    patch = root / "components" / "sidecar" / "sidecar.yaml"
    text = patch.read_text()
    text = text.replace("restartPolicy: Always", "restartPolicy: Sometimes")
    text = text.replace("name: sidecar-ui\n", "name: sidecar-user-interface\n")
    patch.write_text(text)
    code, report = check(checker, root / "base")
    assert code == 1
    errors = "\n".join(objects(report, "base")[("Deployment", "demo")]["validation_errors"])
    assert 'initContainers[0].restartPolicy: Unsupported value: "Sometimes"' in errors
    assert "must be no more than 15 characters" in errors


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        ("shareProcessNamespace: true", "shareProcessNamespace: false", "share-process-namespace"),
        ('add: ["SYS_PTRACE"]', 'add: ["SYS_PTRACE", "SYS_ADMIN"]', "capabilities"),
        ("readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "read-only-root"),
        ("--max-db-size=512M", "--max-db-size=900M", "database-cap-below-volume"),
        (
            "ephemeral-storage: 1280Mi",
            "ephemeral-storage: 512Mi",
            "ephemeral-storage-covers-volumes",
        ),
        ("          livenessProbe:", "          readinessProbe:", "no-readiness-probe"),
        (
            "- --token-file=/etc/sidecar/token/token",
            "- --log-level=info",
            "token-when-not-loopback",
        ),
    ],
)
def test_sidecar_rules_catch_a_broken_setting(
    checker: Path, tmp_path: Path, old: str, new: str, rule: str
) -> None:
    root = copy_tree(tmp_path)
    patch = root / "components" / "sidecar" / "sidecar.yaml"
    text = patch.read_text()
    assert old in text
    patch.write_text(text.replace(old, new))
    code, report = check(checker, root / "base")
    assert code == 1
    (build,) = report["builds"]
    failed = {r["rule"] for r in build["rules"] if not r["ok"]}
    assert rule in failed


def test_unquoted_label_values_are_reported(checker: Path, tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    service = root / "base" / "service.yaml"
    service.write_text(service.read_text().replace('name: "demo"', "name: demo", 1))
    code, report = check(checker, root / "base")
    assert code == 1
    assert [f["message"] for f in report["lint"]] == [
        'label value app.kubernetes.io/name: demo is not quoted; write "demo"'
    ]


# The container build's structure (tests/deploy/test_image.py builds nothing: it runs what
# `make image` built); here, what each stage may install and copy.

DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def dockerfile_stages() -> list[tuple[str, str, list[str]]]:
    """(image, stage name, instructions) per stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            parts = line.split()
            name = parts[3] if len(parts) >= 4 and parts[2].upper() == "AS" else ""
            stages.append((parts[1], name, []))
        elif stages:
            stages[-1][2].append(line)
    return stages


def run_commands(instructions: list[str]) -> list[str]:
    """The shell commands of a stage's RUN instructions, split at && and ;."""
    return [
        command.strip()
        for run in instructions
        if run.startswith("RUN ")
        for command in re.split(r"&&|;", re.sub(r"^RUN\s+(--mount=\S+\s+)*", "", run))
    ]


def test_dockerfile_builds_the_wheel_with_the_makefile_and_installs_the_runtime_lock_only() -> None:
    stages = {name: (image, instructions) for image, name, instructions in dockerfile_stages()}
    assert list(stages) == ["rust", "build", "install", "runtime", "demo"]
    assert stages["rust"][0] == "${RUST_IMAGE}"
    for name in ("build", "install", "runtime"):
        assert stages[name][0] == "${PYTHON_IMAGE}", name
    assert stages["demo"][0] == "runtime"
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE))
    assert args["RUST_IMAGE"].startswith("rust:") and "slim" in args["RUST_IMAGE"]
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")

    # build: the Makefile's own steps make the wheel; no second copy of them here.
    build = run_commands(stages["build"][1])
    make_targets = [c.split()[1] for c in build if c.startswith("make ")]
    assert make_targets == [".venv/.build-tools", "wheel"]
    for command in build:
        assert not re.search(r"\b(pip|maturin|cargo|rustup)\b", command), command
    for target in make_targets:
        dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True)
        assert dry.returncode == 0, dry.stderr

    # install: the runtime lock and the wheel, nothing else.
    install_stage = stages["install"][1]
    assert "COPY --from=build /src/out/wheels /tmp/install/wheels" in install_stage
    assert "COPY requirements.lock /tmp/install/" in install_stage
    pips = [c for c in run_commands(install_stage) if re.search(r"\bpip\b", c)]
    assert pips == [
        "/opt/sidecar/bin/pip install -q -r /tmp/install/requirements.lock "
        "/tmp/install/wheels/sidecar-*.whl"
    ]

    # runtime: the virtualenv, copied whole; it runs nothing.
    runtime = stages["runtime"][1]
    assert [i for i in runtime if i.startswith(("COPY", "ADD"))] == [
        "COPY --from=install /opt/sidecar /opt/sidecar"
    ]
    assert not any(i.startswith("RUN ") for i in runtime), "the runtime stage installs nothing"
    assert 'ENTRYPOINT ["sidecar"]' in runtime

    # demo: the demo lock on top, and the targets.
    demo = stages["demo"][1]
    assert [c for c in run_commands(demo) if re.search(r"\bpip\b", c)] == [
        "pip install -q -r /tmp/demo/requirements-demo.lock"
    ]
    # The development lock goes into the build stage only.
    for name, (_, instructions) in stages.items():
        if name != "build":
            assert not any("requirements-dev.lock" in i for i in instructions), name


def test_dockerfile_copies_every_directory_the_image_needs() -> None:
    stages = {name: instructions for _, name, instructions in dockerfile_stages()}

    def copied(stage: str) -> set[str]:
        return {
            path.split("/")[0]
            for i in stages[stage]
            if i.startswith("COPY ") and not i.startswith("COPY --from")
            for path in i.split()[1:-1]
        }

    # The wheel is made of the package and its native core; the demo adds the targets.
    wheel = {d for d in ("native", "sidecar", "web") if (ROOT / d).is_dir()}
    assert wheel <= copied("build"), (
        f"add COPY lines to the build stage for {wheel - copied('build')}"
    )
    assert "targets" in copied("demo") and "targets" not in copied("build")
    every = set().union(*(copied(stage) for stage in stages))
    for name in every:
        assert (ROOT / name).exists(), f"deploy/Dockerfile copies {name}, which is not in the tree"
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    for name in every:
        assert f"!{name}" in ignore or any(line.startswith(f"!{name}/") for line in ignore), (
            f"deploy/Dockerfile.dockerignore keeps {name} out of the build context"
        )


def test_the_examples_run_the_demo_image_beside_the_sidecar_image(checker: Path) -> None:
    """The images the examples name are the ones `make image` tags (deploy/image.sh)."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    script = (ROOT / "deploy" / "image.sh").read_text()
    assert 'image="sidecar:$version"' in script and 'demo="sidecar-demo:$version"' in script
    examples = {"aiohttp": "aiohttp_app", "tornado": "tornado_app", "no-capability": "aiohttp_app"}
    for example, module in examples.items():
        done = subprocess.run(
            [str(checker), "-print", str(K8S / "examples" / example)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        docs = [d for d in yaml.safe_load_all(done.stdout) if d]
        pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
        images = {c["name"]: c["image"] for c in pod["containers"] + pod["initContainers"]}
        assert images == {"app": f"sidecar-demo:{version}", "sidecar": f"sidecar:{version}"}
        app = next(c for c in pod["containers"] if c["name"] == "app")
        # the demo image's python and working directory (/opt/demo) run the module
        assert app["command"][:3] == ["python", "-m", f"targets.{module}"]
        assert (ROOT / "targets" / f"{module}.py").is_file()
