"""The Helm chart (deploy/helm/switchboard), rendered by the real helm binary and validated against the
Kubernetes schemas (kubernetes-validate, strict: unknown fields are errors) of 1.28 and 1.33.

Value sets: the chart's defaults, the shipped examples (deploy/helm/examples/: three replicas with the
in-chart Redis, replicas on an external Redis with a password Secret and autoscaling, sidecar mode)
and a few variations. Beyond schema validity: the gateway config in every rendered ConfigMap passes
``switchboard check``, and the essentials an operator relies on hold (probes, security context,
drain timing matching the gateway's SIGTERM handling, PDB only with replicas, Redis wiring, checksum).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml

from tests.deploy.helm_binary import HelmUnavailable, ensure_helm
from tests.support import dynamic_backend, free_port, run_gateway, stop_process, wait_for_http, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "switchboard"
EXAMPLES = ROOT / "deploy" / "helm" / "examples"
RELEASE = "sb"
NAMESPACE = "mcp"
KUBE_VERSIONS = ("1.28.0", "1.33.0")
HELM_TIMEOUT_S = 60

VALUE_SETS: dict[str, tuple[str, ...]] = {
    "default": (),
    "three-replicas": ("-f", str(EXAMPLES / "three-replicas.yaml")),
    "external-redis": ("-f", str(EXAMPLES / "external-redis.yaml")),
    "sidecar": ("-f", str(EXAMPLES / "sidecar.yaml")),
    # sidecar reachable on the pod network (with auth): the kubelet's HTTP probes
    "sidecar-auth": ("--set", "mode=sidecar"),
    "two-replicas-no-password": ("--set", "replicaCount=2", "--set", "redis.deploy=true"),
    "sidecar-with-redis": ("-f", str(EXAMPLES / "sidecar.yaml"), "--set", "redis.deploy=true"),
    "extras": ("-f", str(Path(__file__).with_name("values-extras.yaml"))),
}
# Environment the gateway gets from its Secrets in each value set (the config refers to them).
SECRET_ENV = {
    "SWITCHBOARD_ADMIN_TOKEN": "admin-token-for-tests",
    "SWITCHBOARD_CLIENT_TOKEN": "client-token-for-tests",
}


@pytest.fixture(scope="module")
def helm() -> Path:
    try:
        return ensure_helm()
    except HelmUnavailable as exc:
        if exc.unsupported:
            pytest.skip(str(exc))
        pytest.fail(f"Helm could not be installed (make test-deps installs it): {exc}")


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=HELM_TIMEOUT_S, check=False, cwd=ROOT
    )


@functools.cache
def _render(helm: Path, args: tuple[str, ...], kube_version: str) -> tuple[dict[str, Any], ...]:
    done = run_helm(
        helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version, *args
    )
    assert done.returncode == 0, f"helm template {' '.join(args)} failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def render(helm: Path, *args: str, kube_version: str = KUBE_VERSIONS[-1]) -> list[dict[str, Any]]:
    return list(_render(helm, tuple(args), kube_version))


def render_fails(helm: Path, *args: str) -> str:
    done = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    assert done.returncode != 0, f"helm template {' '.join(args)} rendered, but should have failed"
    return done.stderr


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in of_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def gateway_deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment", f"{RELEASE}-switchboard")


def gateway_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = gateway_deployment(docs)["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "switchboard")


PASSWORD_FILE = "/etc/switchboard-redis/password"


def password_secret(docs: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(Secret, key) mounted where bus.password_file points, or None when nothing is mounted there."""
    container = gateway_container(docs)
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    mounts = [m for m in container["volumeMounts"] if PASSWORD_FILE.startswith(m["mountPath"] + "/")]
    if not mounts:
        return None
    [mount] = mounts
    assert mount["readOnly"] is True
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    [item] = volume["secret"]["items"]
    assert item["path"] == PASSWORD_FILE.rsplit("/", 1)[1]
    return volume["secret"]["secretName"], item["key"]


def gateway_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [text] = [d["data"]["config.yaml"] for d in of_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    config = yaml.safe_load(text)
    assert isinstance(config, dict)
    return config


def sidecar_snippet(docs: list[dict[str, Any]]) -> dict[str, Any]:
    data = one(docs, "ConfigMap", f"{RELEASE}-switchboard-sidecar-snippet")["data"]
    return {key: yaml.safe_load(text) for key, text in data.items()}


def pods_of_snippet(snippet: dict[str, Any]) -> list[dict[str, Any]]:
    """The snippet pasted into an MCP server's pod, as an ordinary container and as a native sidecar."""
    server = {"name": "mcp-server", "image": "example/mcp-server:1", "ports": [{"containerPort": 8080}]}
    pod_settings = snippet["pod.yaml"]
    metadata = {
        "name": "mcp-server",
        "labels": pod_settings.get("labels", {}),
        "annotations": pod_settings["annotations"],
    }
    base = {
        "terminationGracePeriodSeconds": pod_settings["terminationGracePeriodSeconds"],
        "volumes": snippet["volumes.yaml"],
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {**base, "containers": [server, *snippet["containers.yaml"]]},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {**base, "initContainers": snippet["initContainers.yaml"], "containers": [server]},
        },
    ]


# ---- every manifest is valid --------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS, ids=str)
def test_helm_lint_strict(helm: Path, values: str) -> None:
    done = run_helm(helm, "lint", "--strict", str(CHART), "--namespace", NAMESPACE, *VALUE_SETS[values])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUE_SETS, ids=str)
def test_every_manifest_validates_against_the_kubernetes_schemas(helm: Path, values: str, kube_version: str) -> None:
    docs = render(helm, *VALUE_SETS[values], kube_version=kube_version)
    assert docs
    if values.startswith("sidecar"):
        docs += pods_of_snippet(sidecar_snippet(docs))
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']} {doc['metadata'].get('name')} is not valid Kubernetes {kube_version}: {exc}")


def test_the_chart_refuses_kubernetes_older_than_1_28(helm: Path) -> None:
    assert "kubeVersion" in render_fails(helm, "--kube-version", "1.27.0")


@pytest.mark.parametrize("values", VALUE_SETS, ids=str)
def test_the_rendered_gateway_config_passes_switchboard_check(helm: Path, values: str, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(gateway_config(render(helm, *VALUE_SETS[values]))), encoding="utf-8")
    switchboard = Path(sys.executable).with_name("switchboard")
    done = subprocess.run(
        [str(switchboard), "check", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **SECRET_ENV},
    )
    assert done.returncode == 0, done.stdout + done.stderr


# ---- gateway mode --------------------------------------------------------------------------------


@pytest.mark.parametrize("values", ["default", "three-replicas", "external-redis"])
def test_gateway_probes_security_context_and_volumes(helm: Path, values: str) -> None:
    docs = render(helm, *VALUE_SETS[values])
    container = gateway_container(docs)
    assert container["args"][:3] == ["run", "-c", "/etc/switchboard/config.yaml"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        assert {"path": path, "port": "http"}.items() <= container[probe]["httpGet"].items()
    assert container["ports"] == [{"name": "http", "containerPort": 8787, "protocol": "TCP"}]
    assert {"requests", "limits"} <= container["resources"].keys()

    security = container["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == 10001
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False

    # read-only root: /tmp is an emptyDir, the config a read-only ConfigMap mount
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert mounts["/etc/switchboard"]["readOnly"] is True
    assert volumes[mounts["/etc/switchboard"]["name"]]["configMap"]["name"] == f"{RELEASE}-switchboard"

    service = one(docs, "Service", f"{RELEASE}-switchboard")
    labels = gateway_deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def _gateway_drain_seconds() -> float:
    """The longest the gateway takes from SIGTERM to exit, read from its source (see values.yaml "drain"):
    uvicorn's graceful shutdown plus a stdio backend's stop, or the worker supervisor's bound."""
    cli = (ROOT / "gateway" / "cli.py").read_text(encoding="utf-8")
    graceful = re.findall(r"timeout_graceful_shutdown=(\d+(?:\.\d+)?)", cli)
    stdio = (ROOT / "gateway" / "upstreams" / "stdio.py").read_text(encoding="utf-8")
    close = stdio[stdio.index("async def close(") :]
    close = close[: close.index("\n    def ")]
    waits = re.findall(r"_wait_exit\((\d+(?:\.\d+)?)\)", close)
    workers = ROOT / "gateway" / "workers.py"
    source = workers.read_text(encoding="utf-8") if workers.exists() else ""
    supervisor = re.findall(r"^DRAIN_S = (\d+(?:\.\d+)?)", source, re.M)
    assert graceful and waits and (supervisor or not workers.exists()), (
        "the gateway's shutdown timing moved: update this test and drain.* in deploy/helm/switchboard/values.yaml"
    )
    return max([max(float(g) for g in graceful) + sum(float(w) for w in waits), *map(float, supervisor)])


@pytest.mark.parametrize("values", ["default", "three-replicas", "sidecar"])
def test_drain_matches_the_gateways_sigterm_handling(helm: Path, values: str) -> None:
    docs = render(helm, *VALUE_SETS[values])
    if values == "sidecar":
        snippet = sidecar_snippet(docs)
        container, grace = snippet["containers.yaml"][0], snippet["pod.yaml"]["terminationGracePeriodSeconds"]
    else:
        container = gateway_container(docs)
        grace = gateway_deployment(docs)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    sleep = int(command[1])
    assert sleep >= 3, "the endpoints controllers need a few seconds to take the pod out of the Service"
    assert grace >= sleep + _gateway_drain_seconds(), (sleep, _gateway_drain_seconds(), grace)
    drain = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["drain"]
    assert drain["gatewayDrainSeconds"] >= _gateway_drain_seconds()


def test_a_real_gateway_exits_within_the_drain_after_sigterm() -> None:
    """SIGTERM to a gateway with a stdio backend: a clean shutdown within values.yaml's gatewayDrainSeconds."""
    drain = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["drain"]
    with run_gateway({"backends": {"tools": dynamic_backend(), "demo": {"transport": "builtin"}}}) as gateway:
        started = time.monotonic()
        gateway.proc.send_signal(signal.SIGTERM)
        returncode = gateway.proc.wait(timeout=drain["gatewayDrainSeconds"] + drain["marginSeconds"])
        took = time.monotonic() - started
    # 0, not death by the signal (143, which Kubernetes reports as an error): uvicorn raises the signal
    # again after a clean shutdown, which gateway/workers.py's server does not (for SIGTERM).
    assert returncode == 0, gateway.log()
    assert "Application shutdown complete" in gateway.log()
    assert took <= drain["gatewayDrainSeconds"], f"took {took:.1f} s"


def test_one_replica_has_no_pdb_and_the_memory_bus(helm: Path) -> None:
    docs = render(helm)
    assert of_kind(docs, "PodDisruptionBudget") == []
    assert gateway_deployment(docs)["spec"]["replicas"] == 1
    assert "bus" not in gateway_config(docs)
    assert [d["metadata"]["name"] for d in of_kind(docs, "Deployment")] == [f"{RELEASE}-switchboard"]
    assert "topologySpreadConstraints" not in gateway_deployment(docs)["spec"]["template"]["spec"]


def test_three_replicas_with_the_in_chart_redis(helm: Path) -> None:
    docs = render(helm, *VALUE_SETS["three-replicas"])
    deployment = gateway_deployment(docs)
    assert deployment["spec"]["replicas"] == 3
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]

    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread[0]["whenUnsatisfiable"] == "ScheduleAnyway"

    # the bus: the chart wrote it, with the password in a file of the Secret
    assert gateway_config(docs)["bus"] == {
        "kind": "redis",
        "url": f"redis://{RELEASE}-switchboard-redis.{NAMESPACE}.svc:6379/0",
        "password_file": PASSWORD_FILE,
    }
    assert password_secret(docs) == ("switchboard-tokens", "redis-password")
    assert gateway_container(docs)["envFrom"] == [{"secretRef": {"name": "switchboard-tokens"}}]

    # the Redis: its Service is the URL's host, and selectors never mix the two workloads
    redis = one(docs, "Deployment", f"{RELEASE}-switchboard-redis")
    redis_pod_labels = redis["spec"]["template"]["metadata"]["labels"]
    redis_service = one(docs, "Service", f"{RELEASE}-switchboard-redis")
    assert redis_service["spec"]["ports"][0]["port"] == 6379
    assert redis_service["spec"]["selector"].items() <= redis_pod_labels.items()
    assert not redis_service["spec"]["selector"].items() <= pod_labels.items()
    assert not deployment["spec"]["selector"]["matchLabels"].items() <= redis_pod_labels.items()
    assert not one(docs, "Service", f"{RELEASE}-switchboard")["spec"]["selector"].items() <= redis_pod_labels.items()
    assert redis["spec"]["replicas"] == 1 and redis["spec"]["strategy"]["type"] == "Recreate"
    redis_container = redis["spec"]["template"]["spec"]["containers"][0]
    assert redis_container["image"] == "redis:7-alpine"
    assert "--requirepass" in redis_container["args"]
    assert redis_container["securityContext"]["readOnlyRootFilesystem"] is True
    assert redis["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True

    # only the gateway's pods reach it
    policy = one(docs, "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= redis_pod_labels.items()
    admitted = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert admitted.items() <= pod_labels.items()


def test_a_redis_without_password_gets_a_plain_url(helm: Path) -> None:
    docs = render(helm, *VALUE_SETS["two-replicas-no-password"])
    assert gateway_config(docs)["bus"]["url"] == f"redis://{RELEASE}-switchboard-redis.{NAMESPACE}.svc:6379/0"
    assert "password_file" not in gateway_config(docs)["bus"]
    assert password_secret(docs) is None
    redis_pod = one(docs, "Deployment", f"{RELEASE}-switchboard-redis")["spec"]["template"]["spec"]
    assert "--requirepass" not in redis_pod["containers"][0]["args"]
    assert one(docs, "PodDisruptionBudget")


def test_external_redis_with_a_password_secret_and_autoscaling(helm: Path) -> None:
    docs = render(helm, *VALUE_SETS["external-redis"])
    assert [d["metadata"]["name"] for d in of_kind(docs, "Deployment")] == [f"{RELEASE}-switchboard"]
    bus = gateway_config(docs)["bus"]
    assert bus == {
        "kind": "redis",
        "url": "rediss://redis.prod.example.com:6380/2",
        "password_file": PASSWORD_FILE,
        "prefix": "switchboard-prod:",  # the operator's own bus settings are kept
    }
    assert password_secret(docs) == ("prod-redis", "password")

    # autoscaling: the HPA owns the replica count, the PDB is there
    assert "replicas" not in gateway_deployment(docs)["spec"]
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == f"{RELEASE}-switchboard"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 8)
    assert one(docs, "PodDisruptionBudget")

    # the chart-made Secret: referenced, and its checksum rolls the pods
    secret = one(docs, "Secret", f"{RELEASE}-switchboard")
    assert set(secret["stringData"]) == {"SWITCHBOARD_ADMIN_TOKEN", "SWITCHBOARD_CLIENT_TOKEN"}
    assert gateway_container(docs)["envFrom"] == [{"secretRef": {"name": f"{RELEASE}-switchboard"}}]
    annotations = gateway_deployment(docs)["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/secret"])
    # the Ingress routes the public name to the Service, and the probes pass the Host guard
    ingress = one(docs, "Ingress")
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == "mcp.example.com"
    assert rule["http"]["paths"][0]["backend"]["service"] == {
        "name": f"{RELEASE}-switchboard",
        "port": {"number": 8787},
    }
    assert gateway_container(docs)["readinessProbe"]["httpGet"]["httpHeaders"] == [
        {"name": "Host", "value": "mcp.example.com"}
    ]
    # no credential in the ConfigMap
    config_text = one(docs, "ConfigMap", f"{RELEASE}-switchboard")["data"]["config.yaml"]
    assert "change-me" not in config_text


def test_any_bus_url_is_kept_as_written(helm: Path) -> None:
    url = "redis+sentinel://sentinel-0.redis:26379,sentinel-1.redis:26379/mymaster/0"
    docs = render(
        helm,
        "--set-json",
        f"redis.url={json.dumps(url)}",
        "--set",
        "redis.password.existingSecret=r",
        "--set",
        "replicaCount=2",
    )
    assert gateway_config(docs)["bus"] == {"kind": "redis", "url": url, "password_file": PASSWORD_FILE}


def test_workers_pass_to_the_gateway_and_need_the_bus(helm: Path) -> None:
    assert "need the Redis bus" in render_fails(helm, "--set", "workers=auto")
    docs = render(helm, "--set", "workers=auto", "--set", "redis.deploy=true")
    assert gateway_container(docs)["args"] == ["run", "-c", "/etc/switchboard/config.yaml", "--workers", "auto"]
    assert gateway_config(docs)["bus"]["kind"] == "redis"
    assert of_kind(docs, "PodDisruptionBudget") == []  # one pod: nothing to budget
    assert "--workers" not in gateway_container(render(helm))["args"]


@contextlib.contextmanager
def redis_with_password(password: str) -> Iterator[str]:
    """A throwaway redis-server on a free loopback port that requires ``password``; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test-deps installs it)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="switchboard-redis-") as workdir:
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(
            [*argv, "--dir", workdir, "--requirepass", password], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_for_port("127.0.0.1", port, 10, proc)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            stop_process(proc)


def test_the_rendered_bus_config_reaches_a_real_redis_with_its_password(
    helm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The three-replica example's config, with the Service's host swapped for a local Redis and the
    Secret's file for a local one, runs a real gateway that authenticates to Redis and subscribes."""
    import redis

    config = gateway_config(render(helm, *VALUE_SETS["three-replicas"]))
    assert config["bus"]["password_file"] == PASSWORD_FILE
    password = "p" + os.urandom(8).hex()
    (tmp_path / "password").write_text(password + "\n", encoding="utf-8")
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    with redis_with_password(password) as url:
        config["bus"] = {**config["bus"], "url": url, "password_file": str(tmp_path / "password")}
        config.pop("listen")  # run_gateway binds a free loopback port
        config["backends"] = {"demo": {"transport": "builtin", "required": True}}
        with run_gateway(config) as gateway:
            client = redis.Redis.from_url(url, password=password, socket_timeout=5)
            try:
                deadline = time.monotonic() + 10
                while not (channels := client.pubsub_channels()):
                    assert time.monotonic() < deadline, f"the gateway never subscribed:\n{gateway.log()}"
                    time.sleep(0.1)
            finally:
                client.close()
            assert any(c.startswith(b"switchboard:") for c in channels), channels
            assert "lost Redis" not in gateway.log()


def test_workers_drain_within_the_grace_period(tmp_path: Path) -> None:
    """``--workers 2`` (the chart's workers value) on a real Redis: SIGTERM stops the supervisor and its
    workers within gatewayDrainSeconds."""
    drain = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["drain"]
    with redis_with_password("pw") as url:
        port = free_port()
        config = {
            "listen": {"host": "127.0.0.1", "port": port},
            "backends": {"tools": dynamic_backend(), "demo": {"transport": "builtin"}},
            "bus": {"kind": "redis", "url": url.replace("redis://", "redis://:pw@")},
        }
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        log = (tmp_path / "gateway.log").open("wb")
        command = [sys.executable, "-m", "gateway", "run", "-c", str(tmp_path / "config.yaml"), "--workers", "2"]
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_http(f"http://127.0.0.1:{port}/readyz", 30, proc)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            returncode = proc.wait(timeout=drain["gatewayDrainSeconds"] + drain["marginSeconds"])
            took = time.monotonic() - started
        finally:
            stop_process(proc)
            log.close()
    output = (tmp_path / "gateway.log").read_text(errors="replace")
    assert returncode == 0, output
    assert took <= drain["gatewayDrainSeconds"], f"took {took:.1f} s\n{output}"


def test_replicas_without_redis_are_refused(helm: Path) -> None:
    assert "need the Redis bus" in render_fails(helm, "--set", "replicaCount=3")
    assert "need the Redis bus" in render_fails(helm, "--set", "autoscaling.enabled=true")
    # a bus the operator configured in the gateway config is accepted
    docs = render(
        helm, "--set", "replicaCount=2", "--set", "config.bus.kind=redis", "--set", "config.bus.url=redis://r:6379/0"
    )
    assert gateway_config(docs)["bus"] == {"kind": "redis", "url": "redis://r:6379/0"}


def test_gateway_mode_refuses_a_loopback_listen_address(helm: Path) -> None:
    assert "loopback" in render_fails(helm, "--set", "config.listen.host=127.0.0.1")


def test_unknown_mode_is_refused(helm: Path) -> None:
    assert "mode must be gateway or sidecar" in render_fails(helm, "--set", "mode=daemonset")


def test_checksum_annotation_follows_the_config(helm: Path) -> None:
    def checksum(*args: str) -> str:
        docs = render(helm, *args)
        value = gateway_deployment(docs)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        assert isinstance(value, str)
        return value

    base = checksum()
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    # the checksum is of the config the ConfigMap holds
    text = one(render(helm), "ConfigMap", f"{RELEASE}-switchboard")["data"]["config.yaml"]
    assert hashlib.sha256(text.rstrip("\n").encode()).hexdigest() == base
    assert checksum("--set", "config.log_level=debug") != base
    assert checksum("--set", "redis.deploy=true") != base  # the bus is part of the config
    assert checksum("--set", "resources.limits.memory=1Gi") == base


# ---- sidecar mode --------------------------------------------------------------------------------


def test_sidecar_mode_renders_config_and_snippet_only(helm: Path) -> None:
    docs = render(helm, *VALUE_SETS["sidecar"])
    assert {d["kind"] for d in docs} == {"ConfigMap"}
    assert gateway_config(docs)["listen"] == {"host": "127.0.0.1", "port": 8787}
    snippet = sidecar_snippet(docs)
    [container] = snippet["containers.yaml"]
    [native] = snippet["initContainers.yaml"]
    assert native["restartPolicy"] == "Always"
    assert {k: v for k, v in native.items() if k != "restartPolicy"} == container
    assert "envFrom" not in container  # no credentials in this example

    # loopback: the probes run inside the container against 127.0.0.1
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        command = container[probe]["exec"]["command"]
        assert command[:2] == ["python", "-c"]
        assert f"http://127.0.0.1:8787{path}" in command[2]
    assert container["securityContext"]["runAsUser"] == 10001
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"] for v in snippet["volumes.yaml"]}
    assert {m["name"] for m in container["volumeMounts"]} <= volumes
    assert re.fullmatch(r"[0-9a-f]{64}", snippet["pod.yaml"]["annotations"]["checksum/switchboard-config"])


@pytest.mark.parametrize("allowed_hosts", [None, ["mcp.example.com:*"]], ids=["default", "allowed-hosts"])
def test_sidecar_probe_commands_work_against_a_real_gateway(helm: Path, allowed_hosts: list[str] | None) -> None:
    """The in-container probe commands, run as the kubelet would, against a running gateway (whose
    Host guard, when security.allowed_hosts is set, refuses the default Host header)."""
    extra = ("--set-json", f"config.security={json.dumps({'allowed_hosts': allowed_hosts})}") if allowed_hosts else ()
    container = sidecar_snippet(render(helm, *VALUE_SETS["sidecar"], *extra))["containers.yaml"][0]
    config: dict[str, Any] = {"backends": {"demo": {"transport": "builtin", "required": True}}}
    if allowed_hosts:
        config["security"] = {"allowed_hosts": allowed_hosts}
    with run_gateway(config, wait_ready=False) as gateway:
        port = gateway.url.rsplit(":", 1)[1]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            _, flag, code = container[probe]["exec"]["command"]
            code = code.replace("127.0.0.1:8787", f"127.0.0.1:{port}")
            deadline = time.monotonic() + 30
            while True:  # the readiness probe fails until the backend is connected
                done = subprocess.run([sys.executable, flag, code], capture_output=True, text=True, timeout=30)
                if done.returncode == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert done.returncode == 0, done.stderr
    # and a probe fails when nothing answers
    done = subprocess.run([sys.executable, flag, code], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode != 0


def test_http_probes_pass_the_gateways_host_guard(helm: Path) -> None:
    """With security.allowed_hosts the kubelet's probes name an allowed Host; without it they are refused."""
    allowed = {"allowed_hosts": ["mcp.example.com:*", "other.example.com"]}
    docs = render(helm, "--set-json", f"config.security={json.dumps(allowed)}")
    probe = gateway_container(docs)["readinessProbe"]["httpGet"]
    assert probe["httpHeaders"] == [{"name": "Host", "value": "mcp.example.com:8787"}]
    assert "httpHeaders" not in gateway_container(render(helm))["readinessProbe"]["httpGet"]

    headers = {h["name"]: h["value"] for h in probe["httpHeaders"]}
    config = {"backends": {"demo": {"transport": "builtin", "required": True}}, "security": allowed}
    with run_gateway(config, wait_ready=False) as gateway:
        with httpx.Client(timeout=10) as client:  # as the kubelet does: GET pod-ip:port/path with the headers
            deadline = time.monotonic() + 30
            while (answer := client.get(f"{gateway.url}{probe['path']}", headers=headers)).status_code != 200:
                assert time.monotonic() < deadline, answer.text
                time.sleep(0.2)
            refused = client.get(f"{gateway.url}{probe['path']}")
    assert refused.status_code >= 400


def test_sidecar_with_the_in_chart_redis_is_admitted_by_its_network_policy(helm: Path) -> None:
    docs = render(helm, *VALUE_SETS["sidecar-with-redis"])
    assert of_kind(docs, "Deployment") == [one(docs, "Deployment", f"{RELEASE}-switchboard-redis")]
    assert gateway_config(docs)["bus"]["url"] == f"redis://{RELEASE}-switchboard-redis.{NAMESPACE}.svc:6379/0"
    admitted = one(docs, "NetworkPolicy")["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert admitted == sidecar_snippet(docs)["pod.yaml"]["labels"]


def test_optional_values_reach_the_manifests(helm: Path) -> None:
    docs = render(helm, *VALUE_SETS["extras"])
    deployment = one(docs, "Deployment", "mcp-gateway")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "registry.example.com/switchboard:1.2.3"
    assert container["args"] == ["run", "-c", "/etc/switchboard/config.yaml", "--port", "8787"]
    assert {"LOG_FORMAT", "FROM_FIELD", "TMPDIR"} <= {e["name"] for e in container["env"]}
    assert {"name": "jwks", "mountPath": "/etc/switchboard-jwks", "readOnly": True} in container["volumeMounts"]
    assert "jwks" in {v["name"] for v in pod["volumes"]}
    assert pod["serviceAccountName"] == "mcp-gateway-sa"
    assert pod["priorityClassName"] == "high"
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert pod["terminationGracePeriodSeconds"] == 30
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "10"]
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "platform"
    assert one(docs, "Secret", "mcp-gateway")["stringData"]["NUMERIC"] == "12345"
    assert of_kind(docs, "NetworkPolicy") == []
    assert one(docs, "Service", "mcp-gateway")["spec"]["ports"][0] == {
        "name": "http",
        "port": 443,
        "targetPort": "http",
        "protocol": "TCP",
    }
    assert [r["host"] for r in one(docs, "Ingress")["spec"]["rules"]] == ["a.example.com", "b.example.com"]


def test_sidecar_on_the_pod_network_uses_http_probes(helm: Path) -> None:
    container = sidecar_snippet(render(helm, *VALUE_SETS["sidecar-auth"]))["containers.yaml"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["envFrom"] == [{"secretRef": {"name": "switchboard-tokens"}}]
