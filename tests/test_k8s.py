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
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import ROOT

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


# The container build: it cannot be run here (no container engine), so its structure is read.

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


def test_dockerfile_builds_with_the_makefile_in_a_rust_stage_and_runs_slim() -> None:
    stages = dockerfile_stages()
    assert [name for _, name, _ in stages] == ["rust", "build", "runtime"]
    (rust_image, _, _), (build_image, _, build), (runtime_image, _, runtime) = stages
    assert rust_image == "${RUST_IMAGE}" and build_image == runtime_image == "${PYTHON_IMAGE}"
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE))
    assert args["RUST_IMAGE"].startswith("rust:") and "slim" in args["RUST_IMAGE"]
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")

    runs = [i for i in build if i.startswith("RUN ")]
    commands = [
        command.strip()
        for run in runs
        for command in re.split(r"&&|;", re.sub(r"^RUN\s+(--mount=\S+\s+)*", "", run))
    ]
    make_targets = [c.split()[1] for c in commands if c.startswith("make ")]
    assert make_targets == [".venv/.deps", "install"]
    # The install steps live in the Makefile only: no second copy of them here.
    for command in commands:
        assert not re.search(r"\b(pip|maturin|cargo|rustup)\b", command), command
    for target in make_targets:
        dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True)
        assert dry.returncode == 0, dry.stderr

    assert "COPY --from=build /opt/sidecar /opt/sidecar" in runtime
    assert not any(i.startswith("RUN ") for i in runtime), "the runtime stage installs nothing"
    assert 'ENTRYPOINT ["sidecar"]' in runtime


def test_dockerfile_copies_every_directory_the_package_needs() -> None:
    copied = {
        i.split()[1].split("/")[0]
        for _, _, instructions in dockerfile_stages()
        for i in instructions
        if i.startswith("COPY ") and not i.startswith("COPY --from")
    }
    needed = {d for d in ("native", "sidecar", "targets", "web") if (ROOT / d).is_dir()}
    assert needed <= copied, f"add COPY lines to deploy/Dockerfile for {needed - copied}"
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    for directory in needed:
        assert f"!{directory}" in ignore or any(
            line.startswith(f"!{directory}/") for line in ignore
        ), f"deploy/Dockerfile.dockerignore keeps {directory}/ out of the build context"
