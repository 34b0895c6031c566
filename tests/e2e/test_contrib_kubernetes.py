"""contrib/kubernetes/: the manifests, checked by the tools a cluster's operator would use.

kubernetes-validate (the API's own schemas, strict: an unknown field fails) against the
oldest and the newest Kubernetes version the README names, checkov with checkov.cfg (each
skip with its reason; installed by scripts/setup.sh --test in a venv of its own), promtool
for the autoscaling rule, and the manifests' settings against spoolrender's own: its
argument parser, its config loader, its defaults and metric names. The runners' probe runs
against a real runner on a real spool. No cluster runs here: what only a cluster can show
(scheduling, the HPA's decisions, a real preStop) is not tested.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from support.checkout import REPO
from support.waiting import wait_for

from e2e.test_contrib import METRICS, check_cli_accepts, run, tool
from spoolrender import defaults
from spoolrender.config.spool_config import load_config
from spoolrender.spool.layout import SpoolLayout

K8S = REPO / "contrib" / "kubernetes"
PROMETHEUS = REPO / "contrib" / "prometheus"
AUTOSCALING_RULES = PROMETHEUS / "spoolrender-autoscaling.yml"
AUTOSCALING_TESTS = PROMETHEUS / "spoolrender-autoscaling.test.yml"
ADAPTER = PROMETHEUS / "prometheus-adapter.yaml"
CHECKOV_CONFIG = K8S / "checkov.cfg"
# The versions contrib/kubernetes/README.md promises: the oldest with every field the
# manifests use (PodDisruptionBudget.spec.unhealthyPodEvictionPolicy is GA in 1.31), the newest
# kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.31.0", "1.37.0")
INSTALLED = "/opt/spoolrender/.venv/bin/spoolrender"  # the image's spoolrender (README.md)
IMAGE_SPOOL = "/srv/spoolrender/spool"
# Between SIGTERM and SIGKILL of a cancelled render, and a margin to publish and move jobs.
STOP_MARGIN_S = defaults.KILL_GRACE_S + 10


def manifest_files() -> list[Path]:
    return sorted(K8S.glob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def objects() -> dict[tuple[str, str], dict[str, Any]]:
    """Every object of the manifests by (kind, name)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in manifest_files():
        for doc in documents(path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in found, f"{path.name}: {key} defined twice"
            found[key] = doc
    return found


def pod_spec(kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = objects()[(kind, name)]["spec"]["template"]["spec"]
    return spec


def container(kind: str, name: str) -> dict[str, Any]:
    (only,) = pod_spec(kind, name)["containers"]
    return dict(only)


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


# --- the tools ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_pass_kubernetes_validate(version: str) -> None:
    kinds = set()
    for path in manifest_files():
        for doc in documents(path):
            kinds.add(doc["kind"])
            # strict: a field the API does not have (a typo) is an error, not ignored. It
            # raises on the first error and says which version's schemas it used.
            try:
                used = kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{path.name}: {doc['kind']} {doc['metadata']['name']}: {exc}")
            assert used == version.removesuffix(".0")
    assert kinds == {
        "Namespace", "PersistentVolumeClaim", "Job", "Deployment", "Service", "HorizontalPodAutoscaler",
        "PodDisruptionBudget", "NetworkPolicy",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("readOnlyRootFilesystem: true", "readOnlyRootFilesytem: true", "readOnlyRootFilesytem"),
        ("maxReplicas: 20", "maxReplicas: twenty", "twenty"),
    ],
    ids=["typo", "not-an-integer"],
)
def test_kubernetes_validate_catches_a_broken_manifest(old: str, new: str, message: str) -> None:
    path = K8S / ("autoscaling.yaml" if "Replicas" in old else "runner.yaml")
    text = path.read_text()
    assert old in text
    (doc,) = yaml.safe_load_all(text.replace(old, new, 1))
    with pytest.raises(kubernetes_validate.ValidationError, match=message):
        kubernetes_validate.validate(doc, KUBERNETES_VERSIONS[-1], strict=True)


def checkov_skips() -> dict[str, str]:
    """The skipped checks of checkov.cfg and the reason each carries (its comment)."""
    skips: dict[str, str] = {}
    lines = CHECKOV_CONFIG.read_text().splitlines()
    for check in yaml.safe_load(CHECKOV_CONFIG.read_text())["skip-check"]:
        (line,) = [ln for ln in lines if ln.strip().startswith(f"- {check}")]
        reason = line.partition("#")[2].strip()
        assert len(reason) > 20, f"{check}: no reason given"
        skips[check] = reason
    return skips


def test_checkov_skips_each_carry_a_reason() -> None:
    assert checkov_skips()
    assert all(len(r) > 20 for r in checkov_skips().values())


# A root container with a writable root filesystem: what checkov must refuse in runner.yaml.
ROOT_CONTAINER = {
    "runAsNonRoot: true": "runAsNonRoot: false",
    "readOnlyRootFilesystem: true": "readOnlyRootFilesystem: false",
    "runAsUser: 10001": "runAsUser: 0",
}
ROOT_CONTAINER_CHECKS = {"CKV_K8S_22", "CKV_K8S_23", "CKV_K8S_40"}  # read-only root fs, non-root, high uid


def test_checkov_passes_the_manifests_and_refuses_a_root_container(tmp_path: Path) -> None:
    """checkov (contrib/kubernetes/README.md's command, checkov.cfg's skips) over the manifests
    as shipped plus one copy of runner.yaml made to run as root on a writable root
    filesystem, in one scan: every failed check is the broken copy's, and it fails the
    three that the change breaks, so the scan that passes the real manifests is one that
    can fail."""
    venv = REPO / ".cache" / "checkov"
    if not venv.exists():
        pytest.skip("checkov not installed (bash scripts/test.sh installs it via scripts/setup.sh --test)")
    # setup.sh stamps the venv once pip has finished: without the stamp (pip killed
    # midway) its checkov may lack dependencies, and would fail here with an ImportError.
    assert (venv / ".spoolrender-installed").is_file(), f"{venv} is half-installed: run bash scripts/setup.sh --test"
    checkov = venv / "bin" / "checkov"
    scanned = tmp_path / "kubernetes"
    scanned.mkdir()
    for path in manifest_files():
        shutil.copy(path, scanned / path.name)
    broken = (K8S / "runner.yaml").read_text()
    for old, new in ROOT_CONTAINER.items():
        assert old in broken, old
        broken = broken.replace(old, new)
    (scanned / "root-runner.yaml").write_text(broken)
    args = ["--config-file", str(CHECKOV_CONFIG), "--directory", str(scanned), "-o", "json", "--quiet"]
    result = run([str(checkov), *args])
    assert result.returncode in (0, 1), result.stderr[-2000:]
    report = json.loads(result.stdout)
    (kubernetes,) = [r for r in (report if isinstance(report, list) else [report]) if r["check_type"] == "kubernetes"]
    summary = kubernetes["summary"]
    assert summary["parsing_errors"] == 0 and summary["passed"] > 100, summary
    failed = {(Path(c["file_path"]).name, c["check_id"]) for c in kubernetes["results"]["failed_checks"]}
    assert {name for name, _ in failed} == {"root-runner.yaml"}, sorted(failed)
    assert {check for _, check in failed} >= ROOT_CONTAINER_CHECKS, sorted(failed)
    assert not {check for _, check in failed} & set(checkov_skips())


def test_autoscaling_rule_passes_promtool() -> None:
    promtool = tool("promtool")
    result = run([promtool, "check", "rules", str(AUTOSCALING_RULES)])
    assert result.returncode == 0 and "SUCCESS: 1 rules found" in result.stdout, result.stdout + result.stderr
    # Two targets exporting the same gauges count once; nothing waiting counts 0; no
    # spoolrender series at all is no demand (the HPA then keeps its count).
    result = run([promtool, "test", "rules", AUTOSCALING_TESTS.name], cwd=PROMETHEUS)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [(" or vector(0)", ""), ("max without", "sum without")],
    ids=["idle-spool-absent", "counted-twice"],
)
def test_autoscaling_rule_tests_catch_a_broken_rule(tmp_path: Path, old: str, new: str) -> None:
    promtool = tool("promtool")
    rules = AUTOSCALING_RULES.read_text()
    assert old in rules
    (tmp_path / AUTOSCALING_RULES.name).write_text(rules.replace(old, new))
    shutil.copy(AUTOSCALING_TESTS, tmp_path)
    result = run([promtool, "test", "rules", AUTOSCALING_TESTS.name], cwd=tmp_path)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


# --- the manifests against spoolrender ----------------------------------------------------


def test_command_lines_are_accepted_by_spoolrender() -> None:
    for kind, name in [("Deployment", "spoolrender-runner"), ("Deployment", "spoolrender-serve"),
                       ("Job", "spoolrender-init")]:  # fmt: skip
        command = container(kind, name)["command"]
        if command[0] == "/usr/bin/tini":  # PID 1 that reaps orphans and passes signals on
            assert command[1] == "--"
            command = command[2:]
        assert command[0] == INSTALLED, name
        check_cli_accepts(command[1:])
        assert IMAGE_SPOOL in command, name


def test_runner_stops_within_its_grace_and_has_one_slot_per_cpu(tmp_path: Path, spool: SpoolLayout) -> None:
    runner = container("Deployment", "spoolrender-runner")
    env = env_of(runner)
    # The grace period is the render timeout: a scale-down or rollout cuts no render short.
    grace = float(env["SPOOLRENDER_GRACE_SECONDS"])
    assert grace == defaults.DEFAULT_TIMEOUT_S
    assert pod_spec("Deployment", "spoolrender-runner")["terminationGracePeriodSeconds"] == grace + STOP_MARGIN_S
    # One slot per CPU requested, from the Downward API, rounded up to whole CPUs.
    assert env["SPOOLRENDER_SLOTS"] == {
        "resourceFieldRef": {"containerName": runner["name"], "resource": "requests.cpu", "divisor": "1"}
    }
    cpus = int(runner["resources"]["requests"]["cpu"])
    memory_mib = int(runner["resources"]["requests"]["memory"].removesuffix("Mi"))
    assert memory_mib >= cpus * defaults.MEMORY_PER_JOB_MB + 512
    # The autoscaler's jobs per pod are the pod's slots.
    hpa = objects()[("HorizontalPodAutoscaler", "spoolrender-runner")]["spec"]
    assert hpa["scaleTargetRef"]["name"] == "spoolrender-runner"
    (metric,) = hpa["metrics"]
    assert int(metric["external"]["target"]["averageValue"]) == cpus
    # The environment as the kubelet hands it over (the Downward API gives "1"), loaded by
    # spoolrender: every name is a setting it knows, with the value meant.
    environ = {k: str(v) for k, v in env.items() if isinstance(v, str)} | {"SPOOLRENDER_SLOTS": str(cpus)}
    environ["SPOOLRENDER_REMOTION_PROJECT"] = str(tmp_path)  # the image's path does not exist here
    config = load_config(spool.root, environ=environ)
    assert config.slots == cpus and config.grace_seconds == grace


def test_pods_are_locked_down_and_write_only_their_volumes() -> None:
    for kind, name in [("Deployment", "spoolrender-runner"), ("Deployment", "spoolrender-serve"),
                       ("Job", "spoolrender-init")]:  # fmt: skip
        spec = pod_spec(kind, name)
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        (c,) = spec["containers"]
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        }, name  # fmt: skip
        assert set(c["resources"]) == {"requests", "limits"}, name
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["spool"]["persistentVolumeClaim"]["claimName"] == "spoolrender-spool"
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert mounts["/srv/spoolrender"] == "spool" and IMAGE_SPOOL.startswith("/srv/spoolrender/")
        env = env_of(c)
        for variable in ("HOME", "TMPDIR", "SPOOLRENDER_CACHE_DIR"):  # where a process writes
            if variable in env:
                assert any(env[variable] == path for path in mounts), (name, variable)
    pvc = objects()[("PersistentVolumeClaim", "spoolrender-spool")]["spec"]
    assert pvc["accessModes"] == ["ReadWriteMany"]
    namespace = objects()[("Namespace", "spoolrender")]["metadata"]["labels"]
    assert namespace["pod-security.kubernetes.io/enforce"] == "restricted"


def test_autoscaler_metric_is_the_recording_rule_over_spoolrender_metrics() -> None:
    hpa = objects()[("HorizontalPodAutoscaler", "spoolrender-runner")]["spec"]
    (metric,) = hpa["metrics"]
    (rule,) = [r for g in yaml.safe_load(AUTOSCALING_RULES.read_text())["groups"] for r in g["rules"]]
    (adapter,) = yaml.safe_load(ADAPTER.read_text())["externalRules"]
    assert adapter["name"]["as"] == metric["external"]["metric"]["name"]
    assert adapter["seriesQuery"].strip("'") == rule["record"] and rule["record"] in adapter["metricsQuery"]
    used = set(re.findall(r"\bspoolrender_[a-z_]+\b", rule["expr"]))
    assert used == {"spoolrender_queue_jobs_waiting", "spoolrender_jobs"} and used <= METRICS
    pdb = objects()[("PodDisruptionBudget", "spoolrender-runner")]["spec"]
    runner = objects()[("Deployment", "spoolrender-runner")]["spec"]
    assert pdb["selector"] == runner["selector"]
    serve = objects()[("Service", "spoolrender-serve")]["spec"]
    assert serve["selector"] == objects()[("Deployment", "spoolrender-serve")]["spec"]["selector"]["matchLabels"]


def probe_script(c: dict[str, Any], probe: str) -> str:
    command = c[probe]["exec"]["command"]
    assert command[:2] == ["/opt/spoolrender/.venv/bin/python", "-c"]
    return str(command[2])


def test_runner_probe_says_whether_this_pods_runner_is_online(
    spool: SpoolLayout, start_runner: Any, tmp_path: Path
) -> None:
    runner = container("Deployment", "spoolrender-runner")
    script = probe_script(runner, "readinessProbe")
    assert all(probe_script(runner, p) == script for p in ("startupProbe", "livenessProbe"))
    # The script as written, with this checkout's spoolrender and the test's spool.
    here = str(Path(sys.executable).with_name("spoolrender"))
    local = script.replace(INSTALLED, here).replace(IMAGE_SPOOL, str(spool.root))
    assert local != script

    def probe() -> int:
        return subprocess.run([sys.executable, "-c", local], capture_output=True, timeout=120).returncode

    assert probe() == 1  # no runner yet
    proc = start_runner()
    wait_for(lambda: probe() == 0, timeout=120)
    proc.terminate()  # one SIGTERM: the graceful stop removes the runner's beacon
    assert proc.wait(timeout=120) == 0
    assert probe() == 1


def test_readme_explains_every_file_and_object() -> None:
    text = (K8S / "README.md").read_text()
    for path in [*manifest_files(), CHECKOV_CONFIG, AUTOSCALING_RULES, ADAPTER]:
        assert path.name in text, path.name
    for kind, name in objects():
        assert f"`{name}`" in text and kind in text, (kind, name)
    for version in KUBERNETES_VERSIONS:
        assert version.removesuffix(".0") in text
    for storage in ("CephFS", "NFS", "GlusterFS"):
        assert storage in text
    assert os.fspath(Path("docs") / "reliability.md") in text
