"""The Kubernetes manifests (deploy/k8s): both overlays render and pass the validator, and the
validator really rejects what it is there to reject.

The validator (deploy/k8s/validate, Go) is built once per session into a temporary directory;
its modules come from the Go module proxy when the module cache is cold, from the cache after.
Rendering uses `kubectl kustomize`; on a machine without kubectl, kustomize itself is built
from the Go module proxy (the same v5.5.0 that kubectl 1.32 embeds). No cluster is needed.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
K8S = ROOT / "deploy" / "k8s"
KUSTOMIZE_MODULE = "sigs.k8s.io/kustomize/kustomize/v5@v5.5.0"

# The Secrets production expects to exist (deploy/k8s/README.md): name -> keys.
PRODUCTION_SECRETS = {
    "transcript-owner-kafka": ["password", "username"],
    "transcript-owner-kafka-ca": ["ca.crt"],
    "transcript-owner-topics-kafka": ["password", "username"],
}
STS = "StatefulSet transcript-owner/transcript-owner"
WORKER = "spec.template.spec.containers[worker]"


def go_env() -> dict[str, str]:
    """Go fetches from the module proxy only (never `direct` from a VCS), with this toolchain."""
    if shutil.which("go") is None:
        pytest.fail("go is not installed: the validator (deploy/k8s/validate) is a Go program")
    env = dict(os.environ)
    configured = subprocess.run(["go", "env", "GOPROXY"], capture_output=True, text=True,
                                check=True).stdout.strip()
    proxies = [p for p in re.split(r"[,|]", configured) if p and p not in ("direct", "off")]
    env.update(
        GOPROXY=",".join(proxies) or "https://proxy.golang.org",
        GOTOOLCHAIN="local",
        GOFLAGS="-mod=readonly -buildvcs=false",  # go.sum must be complete: nothing is added
        CGO_ENABLED="0",
    )
    return env


@pytest.fixture(scope="session")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("k8s-bin")


@pytest.fixture(scope="session")
def validator(bin_dir: Path) -> Path:
    exe = bin_dir / "validate"
    done = subprocess.run(["go", "build", "-o", str(exe), "."], cwd=K8S / "validate",
                          env=go_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"go build of the validator failed:\n{done.stderr}"
    return exe


@pytest.fixture(scope="session")
def kustomize(bin_dir: Path) -> list[str]:
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    env = go_env() | {"GOBIN": str(bin_dir), "GOFLAGS": "-buildvcs=false"}
    done = subprocess.run(["go", "install", KUSTOMIZE_MODULE], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"no kubectl, and kustomize did not build:\n{done.stderr}"
    return [str(bin_dir / "kustomize"), "build"]


@pytest.fixture(scope="session")
def rendered(kustomize: list[str]) -> dict[str, str]:
    out = {}
    for overlay in ("dev", "production"):
        done = subprocess.run([*kustomize, str(K8S / "overlays" / overlay)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"overlay {overlay} does not render:\n{done.stderr}"
        out[overlay] = done.stdout
    return out


def validate(validator: Path, stream: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(validator), *flags], input=stream, capture_output=True,
                          text=True, timeout=60)


def objects(stream: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(stream) if d]


def one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def worker(docs: list[dict]) -> dict:
    return one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]


def config(docs: list[dict]) -> dict[str, str]:
    return one(docs, "ConfigMap")["data"]


# ---- the overlays as they are ----

@pytest.mark.parametrize("overlay", ["dev", "production"])
def test_overlay_passes_the_validator(overlay, rendered, validator):
    flags = ["-production"] if overlay == "production" else []
    done = validate(validator, rendered[overlay], *flags)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: ")


def test_production_renders_no_secret_and_expects_the_documented_ones(rendered, validator):
    docs = objects(rendered["production"])
    assert not [d for d in docs if d["kind"] == "Secret"]
    done = validate(validator, rendered["production"], "-production")
    expected = {}
    for line in done.stdout.splitlines()[1:]:
        m = re.fullmatch(r"expects Secret transcript-owner/(\S+) \(keys: (.*)\)", line)
        assert m, line
        expected[m[1]] = m[2].split(", ")
    assert expected == PRODUCTION_SECRETS


def test_production_settings(rendered):
    docs = objects(rendered["production"])
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {
        "transcript-owner"}
    sts = one(docs, "StatefulSet")
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    cfg = config(docs)
    assert cfg["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert cfg["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert cfg["TRANSCRIPT_REPLICATION_FACTOR"] == "3"
    topics = yaml.safe_load((ROOT / "topics.yaml").read_text())
    assert int(cfg["TRANSCRIPT_PARTITIONS"]) == topics["defaults"]["partitions"]
    for name in ("delivery.confirmations", "transcript.entries", "{app_id}-sessions-changelog"):
        assert "partitions" not in (topics["topics"][name] or {}), name
    assert sts["spec"]["replicas"] <= int(cfg["TRANSCRIPT_PARTITIONS"])
    pod = sts["spec"]["template"]["spec"]
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    assert re.fullmatch(r"localhost/transcript-owner:\d+\.\d+\.\d+", worker(docs)["image"])
    storage = sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    assert storage == "20Gi"


def test_dev_settings(rendered):
    docs = objects(rendered["dev"])
    sts = one(docs, "StatefulSet")
    assert sts["metadata"]["namespace"] == "transcript-owner-dev"
    assert sts["spec"]["replicas"] == 1
    cfg = config(docs)
    assert cfg["KAFKA_SECURITY_PROTOCOL"] == "PLAINTEXT"
    assert cfg["KAFKA_SSL_CAFILE"] == ""
    # placeholders only: the generated Secrets hold nothing that looks like a credential
    for secret in (d for d in docs if d["kind"] == "Secret"):
        for value in secret["data"].values():
            text = base64.b64decode(value).decode()
            assert text.startswith(("dev-", "placeholder")), (secret["metadata"]["name"], text)


def _mib(quantity: str) -> float:
    m = re.fullmatch(r"(\d+)(Mi|Gi)", quantity)
    assert m, quantity
    return int(m[1]) * (1024 if m[2] == "Gi" else 1)


@pytest.mark.parametrize("overlay", ["dev", "production"])
def test_the_workers_memory_follows_from_plan(rendered, overlay):
    """plan's "a worker's memory" (issue 43: bounded by settings, measured by make
    bench-scale) with room: the request 1.25 times it, the limit 1.5 times."""
    from workers.commands.plan import MEASURED

    resources = worker(objects(rendered[overlay]))["resources"]
    peak = MEASURED.worker_peak_rss_mb
    assert _mib(resources["requests"]["memory"]) >= 1.25 * peak
    assert _mib(resources["limits"]["memory"]) >= 1.5 * peak
    assert _mib(resources["limits"]["memory"]) >= _mib(resources["requests"]["memory"])


def test_both_overlays_share_the_worker_contract(rendered):
    for overlay, stream in rendered.items():
        docs = objects(stream)
        pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
        c = worker(docs)
        env = {e["name"]: e for e in c["env"]}
        instance_id = env["TRANSCRIPT_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
        assert instance_id == "metadata.name", overlay
        assert pod["terminationGracePeriodSeconds"] == 45, overlay
        assert env["TRANSCRIPT_SHUTDOWN_TIMEOUT_S"]["value"] == "30", overlay
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert pod["securityContext"]["runAsUser"] == 10001
        headless = [d for d in docs if d["kind"] == "Service"
                    and d["spec"].get("clusterIP") == "None"]
        assert [h["metadata"]["name"] for h in headless] == [
            one(docs, "StatefulSet")["spec"]["serviceName"]]
        assert headless[0]["spec"]["publishNotReadyAddresses"] is True
        job = one(docs, "Job")
        assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["topics", "apply"]
        assert one(docs, "ServiceAccount")["automountServiceAccountToken"] is False


def test_the_http_port_is_admitted_from_prometheus_only(rendered):
    """Issue 42: any peer that could connect held the probes' port. The NetworkPolicy admits
    the port only from Prometheus's pods (the selectors an operator sets: deploy/k8s/README.md)
    and, as every NetworkPolicy does, from the pod's own node: the kubelet's probes."""
    for overlay, stream in rendered.items():
        docs = objects(stream)
        policy = one(docs, "NetworkPolicy")
        sts = one(docs, "StatefulSet")
        assert policy["metadata"]["namespace"] == sts["metadata"]["namespace"], overlay
        assert policy["spec"]["podSelector"]["matchLabels"] == sts["spec"]["selector"][
            "matchLabels"], overlay
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        [rule] = policy["spec"]["ingress"]
        assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
        assert [p["name"] for p in worker(docs)["ports"]] == ["http"]  # the only port
        assert rule["from"] == [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]


def _policy(docs: list[dict]) -> dict:
    return one(docs, "NetworkPolicy")


# ---- the validator rejects ----

def mutate(stream: str, change) -> str:
    docs = objects(stream)
    change(docs)
    return yaml.safe_dump_all(docs, sort_keys=False)


def _set_env(docs, name, entry):
    c = worker(docs)
    c["env"] = [e for e in c["env"] if e["name"] != name] + [dict(name=name, **entry)]


REJECTED = {
    # the API types
    "unknown field in the StatefulSet": (
        lambda docs: worker(docs).update(imagePulPolicy="Always"),
        f'{STS}: unknown field "spec.template.spec.containers[0].imagePulPolicy"'),
    "unknown top-level field": (
        lambda docs: one(docs, "StatefulSet")["spec"].update(podManagmentPolicy="Parallel"),
        f'{STS}: unknown field "spec.podManagmentPolicy"'),
    "wrong type": (
        lambda docs: one(docs, "StatefulSet")["spec"].update(replicas="3"),
        f"{STS}: does not decode: cannot unmarshal string into Go struct field "
        "StatefulSetSpec.spec.replicas of type int32"),
    "a number where the API wants a string": (
        lambda docs: _set_env(docs, "TRANSCRIPT_SHUTDOWN_TIMEOUT_S", {"value": 30}),
        f"{STS}: does not decode: cannot unmarshal number into Go struct field "
        "EnvVar.spec.template.spec.containers.env.value of type string"),
    "not a quantity": (
        lambda docs: worker(docs)["resources"]["limits"].update(memory="4 GB"),
        f"{STS}: spec.template.spec.containers[0].resources.limits.memory: not a quantity"),
    "unknown kind": (
        lambda docs: docs.append({"apiVersion": "v1", "kind": "Pod",
                                  "metadata": {"name": "stray", "namespace": "transcript-owner"}}),
        "Pod transcript-owner/stray: unknown apiVersion/kind v1 Pod"),
    # the project's rules
    "missing limit": (
        lambda docs: worker(docs)["resources"]["limits"].pop("memory"),
        f"{STS}: {WORKER}.resources.limits.memory: missing"),
    "missing request in the Job": (
        lambda docs: one(docs, "Job")["spec"]["template"]["spec"]["containers"][0]["resources"]
        .pop("requests"),
        "Job transcript-owner/transcript-owner-topics: spec.template.spec.containers[topics]"
        ".resources.requests.cpu: missing"),
    "wrong readiness path": (
        lambda docs: worker(docs)["readinessProbe"]["httpGet"].update(path="/healthz"),
        f'{STS}: {WORKER}.readinessProbe.httpGet.path: "/healthz", expected "/readyz"'),
    "wrong liveness path": (
        lambda docs: worker(docs)["livenessProbe"]["httpGet"].update(path="/readyz"),
        f'{STS}: {WORKER}.livenessProbe.httpGet.path: "/readyz", expected "/livez"'),
    "probe on an undeclared port": (
        lambda docs: worker(docs)["readinessProbe"]["httpGet"].update(port="web"),
        f"{STS}: {WORKER}.readinessProbe.httpGet.port: web is not a port of the container"),
    "impatient liveness": (
        lambda docs: worker(docs)["livenessProbe"].update(periodSeconds=10, failureThreshold=3),
        f"{STS}: {WORKER}.livenessProbe: periodSeconds*failureThreshold is 30 s"),
    "grace period not above the shutdown timeout": (
        lambda docs: _set_env(docs, "TRANSCRIPT_SHUTDOWN_TIMEOUT_S", {"value": "45"}),
        f"{STS}: spec.template.spec.terminationGracePeriodSeconds: 45 is not above "
        "TRANSCRIPT_SHUTDOWN_TIMEOUT_S=45"),
    "instance id not from the pod name": (
        lambda docs: _set_env(docs, "TRANSCRIPT_INSTANCE_ID", {"value": "worker"}),
        f"{STS}: {WORKER}.env[TRANSCRIPT_INSTANCE_ID]: comes from value"),
    "more replicas than partitions": (
        lambda docs: one(docs, "StatefulSet")["spec"].update(replicas=9),
        f"{STS}: spec.replicas: 9 replicas for 8 partitions"),
    "state off the volume": (
        lambda docs: config(docs).update(TRANSCRIPT_STATE_DIR="/srv/state"),
        f"{STS}: {WORKER}.env[TRANSCRIPT_STATE_DIR]: /srv/state is on no volume"),
    "password in the ConfigMap": (
        lambda docs: config(docs).update(KAFKA_SASL_PASSWORD="hunter2"),
        re.compile(r"ConfigMap transcript-owner/transcript-owner-config-\w+: "
                   r"data\.KAFKA_SASL_PASSWORD: a credential in a ConfigMap")),
    "a Secret with data in production": (
        lambda docs: docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {
            "name": "transcript-owner-kafka", "namespace": "transcript-owner"},
            "stringData": {"username": "u", "password": "p"}}),
        "Secret transcript-owner/transcript-owner-kafka: data: a production Secret is created "
        "by the operator"),
    "an unpinned image in production": (
        lambda docs: worker(docs).update(image="localhost/transcript-owner:latest"),
        f'{STS}: {WORKER}.image: "localhost/transcript-owner:latest" is not pinned'),
    "no NetworkPolicy for the worker": (
        lambda docs: docs.remove(_policy(docs)),
        f"{STS}: spec.template.metadata.labels: no NetworkPolicy restricts the ingress of these "
        "pods"),
    "a NetworkPolicy on a port the pods do not declare": (
        lambda docs: _policy(docs)["spec"]["ingress"][0]["ports"][0].update(port="metrics"),
        "NetworkPolicy transcript-owner/transcript-owner-http: spec.ingress[0].ports[0].port: "
        "metrics is not a port of the pods of StatefulSet transcript-owner/transcript-owner"),
    "a NetworkPolicy that admits every source": (
        lambda docs: _policy(docs)["spec"]["ingress"][0].pop("from"),
        "NetworkPolicy transcript-owner/transcript-owner-http: spec.ingress[0].from: empty: the "
        "rule admits every source"),
    "a NetworkPolicy that admits every pod of every namespace": (
        lambda docs: _policy(docs)["spec"]["ingress"][0].update(
            {"from": [{"namespaceSelector": {}}]}),
        "NetworkPolicy transcript-owner/transcript-owner-http: spec.ingress[0].from[0]: every "
        "pod of every namespace"),
    "a NetworkPolicy that selects nothing": (
        lambda docs: _policy(docs)["spec"]["podSelector"]["matchLabels"]
        .update({"app.kubernetes.io/component": "wroker"}),
        "NetworkPolicy transcript-owner/transcript-owner-http: spec.podSelector: selects the "
        "pods of no workload"),
    "a PDB that selects nothing": (
        lambda docs: one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]
        .update({"app.kubernetes.io/component": "wroker"}),
        "PodDisruptionBudget transcript-owner/transcript-owner: spec.selector: selects the pods "
        "of no workload"),
}


@pytest.mark.parametrize("case", REJECTED, ids=list(REJECTED))
def test_validator_rejects(case, rendered, validator):
    change, message = REJECTED[case]
    done = validate(validator, mutate(rendered["production"], change), "-production")
    assert done.returncode == 1, (done.stdout, done.stderr)
    if isinstance(message, re.Pattern):
        assert message.search(done.stderr), done.stderr
    else:
        assert message in done.stderr, done.stderr


def test_validator_rejects_a_duplicate_field(rendered, validator):
    text = rendered["production"].replace(
        "  podManagementPolicy: Parallel\n",
        "  podManagementPolicy: Parallel\n  podManagementPolicy: OrderedReady\n", 1)
    assert text != rendered["production"]
    done = validate(validator, text, "-production")
    assert done.returncode == 1
    assert f'{STS}: invalid YAML' in done.stderr
    assert 'key "podManagementPolicy" already set in map' in done.stderr


def test_the_dev_overlay_is_not_production(rendered, validator):
    done = validate(validator, rendered["dev"], "-production")
    assert done.returncode == 1
    assert done.stderr.count("a production Secret is created by the operator") == 3


def test_validator_rejects_empty_input(validator):
    done = validate(validator, "")
    assert done.returncode == 1
    assert "no Kubernetes object" in done.stderr
