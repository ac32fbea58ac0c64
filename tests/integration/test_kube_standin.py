"""The Kubernetes stand-in (tests/support/kube_standin.py) against lightkube's sync Client over real
HTTP: the API's shapes and errors, and its controller, scheduler and kubelet running real local
processes at their own 127.X.Y.N addresses. Every wait polls with a deadline."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
import psutil
import pytest
from lightkube import ApiError, Client, KubeConfig, codecs, operators
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod, ResourceQuota, Secret, Service
from lightkube.types import CascadeType, PatchType

from tests.support.kube_standin import KubeStandIn, node, parse_label_selector

NS = "ns"
USER = "system:serviceaccount:advisor:advisor"
SERVE = r"""
import argparse, http.server
p = argparse.ArgumentParser()
p.add_argument("--host", required=True)
p.add_argument("--port", type=int, required=True)
a = p.parse_args()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"ok from {a.host}".encode()
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
print(f"serving on {a.host}:{a.port}", flush=True)
http.server.HTTPServer((a.host, a.port), H).serve_forever()
"""
SLEEP = "import time; time.sleep(600)"
IMAGES = {"demo/server": [sys.executable, "-c", SERVE], "demo/sleeper": [sys.executable, "-c", SLEEP]}
T = TypeVar("T")


def until(check: Callable[[], T], timeout: float = 15.0, what: str = "the condition") -> T:
    """check()'s first truthy answer, polled until the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def deployment(name: str, image: str = "demo/sleeper:1", replicas: int = 1, args: list[str] | None = None,
               command: list[str] | None = None, resources: dict | None = None, probe_port: int | None = None,
               pod_spec: dict | None = None, owner: dict | None = None) -> Deployment:
    container: dict[str, Any] = {"name": "engine", "image": image}
    if args:
        container["args"] = args
    if command:
        container["command"] = command
    if resources:
        container["resources"] = resources
    if probe_port:
        container["ports"] = [{"name": "http", "containerPort": probe_port}]
        container["readinessProbe"] = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5}
    meta: dict[str, Any] = {"name": name, "labels": {"app": name}}
    if owner:
        meta["ownerReferences"] = [{**owner, "blockOwnerDeletion": True}]
    return codecs.from_dict({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name, "tier": "engine"}},
                              "spec": {"containers": [container], **(pod_spec or {})}}}})


def pods_of(client: Client, app: str) -> list[Pod]:
    return list(client.list(Pod, labels={"app": app}))


def ready(pod: Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def container_status(client: Client, app: str) -> Any:
    pods = pods_of(client, app)
    statuses = pods[0].status.containerStatuses if pods and pods[0].status else None
    return statuses[0] if statuses else None


def running(pid: int) -> bool:
    """A zombie (a container's child orphaned to init, not yet reaped by it) runs no more."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def events_for(client: Client, name: str, reason: str) -> list[Event]:
    return [e for e in client.list(Event, fields={"involvedObject.name": name}) if e.reason == reason]


@pytest.fixture
def kube(tmp_path):
    """start(**KubeStandIn kwargs) -> (stand-in, lightkube Client on namespace `ns`); all closed after."""
    made: list[KubeStandIn] = []

    def start(**kw: Any) -> tuple[KubeStandIn, Client]:
        kw.setdefault("images", IMAGES)
        standin = KubeStandIn(**kw).start()
        made.append(standin)
        config = standin.write_kubeconfig(tmp_path / f"kubeconfig-{len(made)}", namespace=NS)
        return standin, Client(KubeConfig.from_file(config), trust_env=False)

    yield start
    for standin in made:
        standin.close()
    for standin in made:
        assert standin.errors == [], standin.errors[0]


def test_kubeconfig_version_discovery_and_token(kube):
    standin, client = kube()
    assert client.namespace == NS
    version = client._client._client.get("/version").json()  # what the launcher reads, on lightkube's own httpx
    assert (version["gitVersion"], version["major"], version["minor"]) == ("v1.34.1-standin", "1", "34")
    resources = client._client._client.get("/apis/apps/v1").json()
    assert resources["kind"] == "APIResourceList"
    assert {"deployments", "statefulsets", "replicasets"} <= {r["name"] for r in resources["resources"]}
    anonymous = httpx.get(f"{standin.url}/api/v1/namespaces/{NS}/pods")
    assert anonymous.status_code == 401 and anonymous.json()["reason"] == "Unauthorized"
    assert [n.metadata.name for n in client.list(Node)] == ["node-1"]


def test_create_get_list_with_selectors_and_errors(kube):
    standin, client = kube()
    for name, labels in (("a", {"app": "x", "tier": "web"}), ("b", {"app": "x", "tier": "db"}), ("c", {"app": "y"})):
        made = client.create(ConfigMap(metadata=ObjectMeta(**{"name": name, "labels": labels}), data={"k": name}))
        assert made.metadata.uid and made.metadata.resourceVersion and made.metadata.creationTimestamp
        assert made.metadata.namespace == NS

    def names(**kw: Any) -> list[str]:
        return sorted(o.metadata.name for o in client.list(ConfigMap, **kw))

    assert names(labels={"app": "x"}) == ["a", "b"]
    assert names(labels={"app": "x", "tier": operators.not_equal("db")}) == ["a"]
    assert names(labels={"tier": operators.in_(["web", "db"])}) == ["a", "b"]
    assert names(labels={"tier": operators.not_in(["web"])}) == ["b", "c"]
    assert names(labels={"tier": operators.exists()}) == ["a", "b"]
    assert names(labels={"tier": operators.not_exists()}) == ["c"]
    assert names(fields={"metadata.name": "b"}) == ["b"]
    assert names(labels={"app": "x"}, chunk_size=1) == ["a", "b"]  # limit/continue paging
    assert [r.matches({"a": "1"}) for r in parse_label_selector("a==1,!b,c notin (x)")] == [True, True, True]
    assert client.get(ConfigMap, "a").data == {"k": "a"}
    raw = client._client._client.get(f"/api/v1/namespaces/{NS}/configmaps").json()
    assert raw["kind"] == "ConfigMapList" and raw["apiVersion"] == "v1" and raw["metadata"]["resourceVersion"]
    assert all(i["kind"] == "ConfigMap" and i["apiVersion"] == "v1" for i in raw["items"])
    everywhere = client._client._client.get("/api/v1/configmaps").json()["items"]
    assert {i["metadata"]["namespace"] for i in everywhere} == {NS}

    with pytest.raises(ApiError) as gone:
        client.get(ConfigMap, "nope")
    assert (gone.value.status.code, gone.value.status.reason) == (404, "NotFound")
    assert gone.value.status.message == 'configmaps "nope" not found'
    with pytest.raises(ApiError) as twice:
        client.create(ConfigMap(metadata=ObjectMeta(**{"name": "a"})))
    assert (twice.value.status.code, twice.value.status.message) == (409, 'configmaps "a" already exists')
    with pytest.raises(ApiError) as bad:
        client.create(deployment("Bad_Name"))
    assert bad.value.status.code == 422 and bad.value.status.reason == "Invalid"
    assert bad.value.status.message.startswith('Deployment.apps "Bad_Name" is invalid: metadata.name: Invalid value')
    generated = client.create(ConfigMap(metadata=ObjectMeta(**{"generateName": "gen-"})))
    assert generated.metadata.name.startswith("gen-") and len(generated.metadata.name) == 9
    assert standin.objects("configmaps", NS)[0]["metadata"]["name"] == "a"


def test_a_deployment_gets_ready_pods_serving_at_their_own_loopback_addresses(kube):
    standin, client = kube()
    port = free_port()
    made = client.create(deployment("web", image="demo/server:1.0", replicas=2, args=["--port", str(port)],
                                    probe_port=port))
    pods = until(lambda: [p for p in pods_of(client, "web") if ready(p)] if len(
        [p for p in pods_of(client, "web") if ready(p)]) == 2 else None, what="two ready pods")
    ips = sorted(p.status.podIP for p in pods)
    assert len(set(ips)) == 2 and all(ip.startswith("127.") and not ip.startswith("127.0.0.") for ip in ips)
    for p in pods:
        assert p.status.phase == "Running" and p.status.hostIP == "127.0.0.1" and p.spec.nodeName == "node-1"
        name_parts = p.metadata.name.split("-")
        assert name_parts[0] == "web" and len(name_parts[1]) == 10 and len(name_parts[2]) == 5
        assert p.metadata.ownerReferences[0].uid == made.metadata.uid
        assert p.metadata.labels == {"app": "web", "tier": "engine", "pod-template-hash": name_parts[1]}
        c = p.status.containerStatuses[0]
        assert (c.name, c.image, c.ready, c.started, c.restartCount) == ("engine", "demo/server:1.0", True, True, 0)
        assert c.imageID.startswith("docker.io/demo/server@sha256:") and c.state.running.startedAt
        reply = httpx.get(f"http://{p.status.podIP}:{port}/health", timeout=2)
        assert reply.status_code == 200 and reply.text == f"ok from {p.status.podIP}"
        assert "".join(client.log(p.metadata.name, tail_lines=1)) == f"serving on {p.status.podIP}:{port}\n"
    status = until(lambda: (s := client.get(Deployment, "web").status) and s.readyReplicas == 2 and s,
                   what="readyReplicas 2")
    assert (status.replicas, status.availableReplicas, status.observedGeneration) == (2, 2, 1)
    assert client.wait(Deployment, "web", for_conditions=["Available"]).metadata.name == "web"  # through a watch
    assert {e.reason for e in client.list(Event, fields={"involvedObject.kind": "Pod"})} >= {
        "Scheduled", "Pulling", "Pulled", "Created", "Started"}

    pids = [standin.container_pids(p.metadata.name, NS)["engine"] for p in pods]
    client.patch(Deployment, "web", {"spec": {"replicas": 1}}, patch_type=PatchType.MERGE)
    until(lambda: len(pods_of(client, "web")) == 1, what="the scale-down")
    assert sum(running(pid) for pid in pids) == 1
    assert ("patch", f"/apis/apps/v1/namespaces/{NS}/deployments/web", "deployments", NS, "web") in standin.audit
    assert client.get(Deployment, "web").metadata.generation == 2


def test_a_pod_that_fits_no_node_is_pending_with_the_schedulers_message(kube):
    standin, client = kube(nodes=[node("cpu-1", labels={"pool": "cpu"}),
                                  node("gpu-1", gpus=1, labels={"pool": "gpu"}),
                                  node("gpu-2", gpus=1, labels={"pool": "gpu"})])
    client.create(deployment("big", resources={"limits": {"nvidia.com/gpu": "2"}},
                             pod_spec={"nodeSelector": {"pool": "gpu"}}))
    pod = until(lambda: next(iter(pods_of(client, "big")), None), what="the pod")
    name = pod.metadata.name
    expected = ("0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient "
                "nvidia.com/gpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
                "2 No preemption victims found for incoming pod.")
    event = until(lambda: next(iter(events_for(client, name, "FailedScheduling")), None), what="FailedScheduling")
    assert (event.type, event.message, event.source.component) == ("Warning", expected, "default-scheduler")
    assert event.involvedObject.kind == "Pod" and event.involvedObject.uid == pod.metadata.uid
    assert event.firstTimestamp and event.lastTimestamp
    pod = client.get(Pod, name)
    assert pod.status.phase == "Pending" and pod.spec.nodeName is None
    scheduled = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert (scheduled.status, scheduled.reason, scheduled.message) == ("False", "Unschedulable", expected)
    until(lambda: [e.count for e in events_for(client, name, "FailedScheduling")] >= [2], what="a retry")
    assert len(events_for(client, name, "FailedScheduling")) == 1  # one event, counted

    standin.add(node("gpu-3", gpus=2, labels={"pool": "gpu"}))
    assert until(lambda: client.get(Pod, name).spec.nodeName, what="scheduling") == "gpu-3"
    assert client.get(Pod, name).spec.containers[0].resources.requests == {"nvidia.com/gpu": "2"}  # from limits


def test_an_image_that_maps_to_nothing_cannot_be_pulled(kube):
    _, client = kube()
    client.create(deployment("nopull", image="nosuch/image:1"))
    status = until(lambda: (c := container_status(client, "nopull")) and c.state.waiting
                   and c.state.waiting.reason == "ImagePullBackOff" and c, what="ImagePullBackOff")
    assert status.state.waiting.message == 'Back-off pulling image "nosuch/image:1"'
    name = pods_of(client, "nopull")[0].metadata.name
    failed = {e.message for e in events_for(client, name, "Failed")}
    assert failed >= {'Failed to pull image "nosuch/image:1": rpc error: code = NotFound desc = failed to pull and '
                      'unpack image "nosuch/image:1": not found', "Error: ErrImagePull"}
    assert pods_of(client, "nopull")[0].status.phase == "Pending"
    with pytest.raises(ApiError) as waiting:
        list(client.log(name))
    assert waiting.value.status.message == (f'container "engine" in pod "{name}" is waiting to start: trying and '
                                            "failing to pull image")


def test_a_command_that_exits_1_crash_loops(kube):
    _, client = kube()
    crash = [sys.executable, "-c", "import sys; print('loading'); print('fatal: no model', flush=True); sys.exit(1)"]
    client.create(deployment("crash", command=crash))
    status = until(lambda: (c := container_status(client, "crash")) and c.state.waiting
                   and c.state.waiting.reason == "CrashLoopBackOff" and c, what="CrashLoopBackOff")
    assert status.restartCount >= 1 and not status.ready
    last = status.lastState.terminated
    assert (last.exitCode, last.reason, last.message) == (1, "Error", "fatal: no model")
    assert last.startedAt and last.finishedAt
    assert "restarting failed container=engine pod=crash-" in status.state.waiting.message
    until(lambda: container_status(client, "crash").restartCount >= 2, what="a second restart")
    name = pods_of(client, "crash")[0].metadata.name
    backoff = events_for(client, name, "BackOff")
    assert backoff and backoff[0].type == "Warning"
    assert backoff[0].message.startswith(f"Back-off restarting failed container engine in pod {name}")


def test_a_memory_limit_is_enforced_as_oomkilled(kube):
    _, client = kube()
    hog = [sys.executable, "-c", "import time; b = b'x' * (200 * 2**20); time.sleep(60)"]
    client.create(deployment("hog", command=hog, resources={"limits": {"memory": "20Mi"}}))
    status = until(lambda: (c := container_status(client, "hog")) and c.lastState.terminated
                   and c.lastState.terminated.reason == "OOMKilled" and c, what="OOMKilled")
    assert status.lastState.terminated.exitCode == 137 and status.restartCount >= 1


def test_an_exceeded_quota_creates_no_pod_and_says_so(kube):
    standin, client = kube(nodes=[node("gpu-1", gpus=2)])
    standin.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "prod-0", "namespace": NS},
                 "spec": {"nodeName": "gpu-1", "containers": [{"name": "engine", "image": "vllm/vllm-openai:v1",
                          "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                 "status": {"phase": "Running"}}, managed=False)  # production's pod, holding the one GPU allowed
    standin.add({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-quota", "namespace": NS},
                 "spec": {"hard": {"requests.nvidia.com/gpu": "1", "pods": "10"}}})
    client.create(deployment("arm", resources={"limits": {"nvidia.com/gpu": "1"}}))
    event = until(lambda: next(iter(events_for(client, "arm", "FailedCreate")), None), what="FailedCreate")
    assert event.type == "Warning" and event.involvedObject.kind == "Deployment"
    assert event.message.startswith('Error creating: pods "arm-')
    assert event.message.endswith(' is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1, '
                                  'used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1')
    assert pods_of(client, "arm") == []
    quota = until(lambda: (q := client.get(ResourceQuota, "gpu-quota")).status and q, what="quota status")
    assert quota.status.used == {"requests.nvidia.com/gpu": "1", "pods": "1"}
    assert client.get(Pod, "prod-0").status.phase == "Running"  # a seeded, unmanaged pod keeps its status


def test_a_forbidden_verb_is_answered_403_in_the_real_words(kube):
    standin, client = kube(forbid={("create", "deployments"), ("list", "nodes")})
    with pytest.raises(ApiError) as refused:
        client.create(deployment("arm"))
    assert (refused.value.status.code, refused.value.status.reason) == (403, "Forbidden")
    assert refused.value.status.message == (
        f'deployments.apps is forbidden: User "{USER}" cannot create resource "deployments" in API group "apps" in '
        f'the namespace "{NS}"')
    with pytest.raises(ApiError) as cluster_scope:
        list(client.list(Node))
    assert cluster_scope.value.status.message == (f'nodes is forbidden: User "{USER}" cannot list resource "nodes" in '
                                                  'API group "" at the cluster scope')
    assert standin.objects("deployments") == []
    assert ("create", f"/apis/apps/v1/namespaces/{NS}/deployments", "deployments", NS, None) in standin.audit


def test_deleting_an_owner_collects_its_workloads_and_stops_their_processes(kube):
    standin, client = kube()
    owner = client.create(ConfigMap(metadata=ObjectMeta(**{"name": "experiment-owner"})))
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "experiment-owner", "uid": owner.metadata.uid}
    client.create(deployment("arm-a", owner=ref))
    client.create(deployment("arm-b", owner=ref))
    pods = until(lambda: (p := pods_of(client, "arm-a") + pods_of(client, "arm-b")) and len(p) == 2
                 and all(ready(x) for x in p) and p, what="both arms running")
    pids = [standin.container_pids(p.metadata.name, NS)["engine"] for p in pods]
    assert all(running(pid) for pid in pids)

    client.delete(ConfigMap, "experiment-owner")  # Background: the garbage collector does the rest
    until(lambda: not standin.objects("deployments", NS) and not standin.objects("pods", NS), what="collection")
    until(lambda: not any(running(pid) for pid in pids), what="the processes to stop")


def test_a_foreground_delete_keeps_the_owner_until_its_pods_are_gone(kube):
    standin, client = kube()
    stubborn = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                      "time.sleep(600)"]
    client.create(deployment("slow", command=stubborn, pod_spec={"terminationGracePeriodSeconds": 2}))
    pod = until(lambda: (p := pods_of(client, "slow")) and ready(p[0]) and p[0], what="a running pod")
    pid = standin.container_pids(pod.metadata.name, NS)["engine"]
    client.delete(Deployment, "slow", cascade=CascadeType.FOREGROUND)
    held = client.get(Deployment, "slow")
    assert held.metadata.deletionTimestamp and "foregroundDeletion" in held.metadata.finalizers
    terminating = until(lambda: (p := pods_of(client, "slow")) and p[0].metadata.deletionTimestamp and p[0],
                        what="the pod terminating")
    assert terminating.metadata.deletionGracePeriodSeconds == 2 and running(pid)  # SIGTERM ignored
    until(lambda: not standin.objects("deployments", NS), what="the owner's removal")
    assert not running(pid) and pods_of(client, "slow") == []  # SIGKILL after the grace period


def test_the_audit_log_records_every_verb(kube):
    standin, client = kube()
    client.create(ConfigMap(metadata=ObjectMeta(**{"name": "target"}), data={"a": "1"}))
    client.create(ConfigMap(metadata=ObjectMeta(**{"name": "other"}), data={"a": "1"}))
    client.get(ConfigMap, "target")
    list(client.list(ConfigMap))
    client.patch(ConfigMap, "other", {"data": {"a": "2"}})
    replaced = client.get(ConfigMap, "other")
    replaced.data = {"a": "3"}
    client.replace(replaced)
    client.delete(ConfigMap, "other")
    seen = [(a.verb, a.resource, a.name) for a in standin.audit if a.resource == "configmaps"]
    assert seen == [("create", "configmaps", None), ("create", "configmaps", None), ("get", "configmaps", "target"),
                    ("list", "configmaps", None), ("patch", "configmaps", "other"), ("get", "configmaps", "other"),
                    ("update", "configmaps", "other"), ("delete", "configmaps", "other")]
    assert not [a for a in standin.audit if a.name == "target" and a.verb in ("patch", "update", "delete")]
    assert standin.requests[-1].query.get("propagationPolicy") is None  # lightkube's default: the server's
    with pytest.raises(ApiError) as stale:
        replaced.data = {"a": "4"}
        client.replace(ConfigMap(metadata=ObjectMeta(**{"name": "target", "resourceVersion": "1"}), data={"a": "4"}))
    assert stale.value.status.code == 409 and stale.value.status.reason == "Conflict"


def test_env_comes_from_values_secrets_configmaps_and_fields_only(kube, monkeypatch):
    monkeypatch.setenv("STANDIN_SHOULD_NOT_LEAK", "1")
    standin, client = kube()
    client.create(Secret(metadata=ObjectMeta(**{"name": "hf"}), stringData={"token": "s3cret"}))
    client.create(ConfigMap(metadata=ObjectMeta(**{"name": "cfg"}), data={"model": "tiny"}))
    show = [sys.executable, "-c", "import os, json, sys; print(json.dumps({'env': dict(os.environ), 'argv': "
                                  "sys.argv[1:]}), flush=True); import time; time.sleep(600)"]
    spec = {"containers": [{"name": "engine", "image": "demo/sleeper", "command": show, "args": ["--model", "$(MODEL)"],
                            "env": [{"name": "PLAIN", "value": "v"},
                                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                                    {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "cfg",
                                                                                         "key": "model"}}},
                                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}
    client.create(codecs.from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "show"}, "spec": spec}))
    line = until(lambda: client.get(Pod, "show").status.phase == "Running" and "".join(client.log("show")),
                 what="the env line")
    seen = json.loads(line)
    ip = client.get(Pod, "show").status.podIP
    assert seen["argv"] == ["--model", "tiny", "--host", ip]
    env = seen["env"]
    assert (env["PLAIN"], env["TOKEN"], env["MODEL"], env["POD"], env["IP"]) == ("v", "s3cret", "tiny", "show", ip)
    assert "STANDIN_SHOULD_NOT_LEAK" not in env
    assert set(env) - {"PLAIN", "TOKEN", "MODEL", "POD", "IP"} <= {"PATH", "HOME", "LANG", "LC_CTYPE"}
    assert standin.get("pods", "show", NS)["status"]["qosClass"] == "BestEffort"


def test_a_statefulset_starts_its_ordinals_in_order(kube):
    _, client = kube()
    sts = codecs.from_dict({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "engine", "image": "demo/sleeper"}]}}}})
    client.create(sts)
    client.create(codecs.from_dict({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
                                    "spec": {"selector": {"app": "db"}, "ports": [{"port": 80}]}}))
    until(lambda: (s := client.get(StatefulSet, "db").status) and s.readyReplicas == 2, what="two ready ordinals")
    pods = sorted(pods_of(client, "db"), key=lambda p: p.metadata.name)
    assert [p.metadata.name for p in pods] == ["db-0", "db-1"]
    assert pods[0].metadata.creationTimestamp <= pods[1].metadata.creationTimestamp
    assert pods[1].metadata.labels["statefulset.kubernetes.io/pod-name"] == "db-1"
    client.patch(StatefulSet, "db", {"spec": {"replicas": 1}}, patch_type=PatchType.MERGE)
    until(lambda: [p.metadata.name for p in pods_of(client, "db")] == ["db-0"], what="db-1 removed")
    assert client.get(Service, "db").spec.clusterIP.startswith("10.96.")


def test_close_leaves_no_process_behind(kube):
    standin, client = kube()
    spawner = [sys.executable, "-c", "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
                                     "'import time; time.sleep(600)']); print(c.pid, flush=True); time.sleep(600)"]
    client.create(deployment("spawner", command=spawner, replicas=2))
    pods = until(lambda: (p := pods_of(client, "spawner")) and len(p) == 2 and all(ready(x) for x in p) and p,
                 what="two running pods")
    leaders = [standin.container_pids(p.metadata.name, NS)["engine"] for p in pods]
    children = [int(until(lambda n=p.metadata.name: "".join(client.log(n)).strip(), what="the child's pid"))
                for p in pods]
    assert all(running(pid) for pid in leaders + children)
    standin.close()
    assert not [pid for pid in leaders + children if running(pid)]
    assert standin.pids() == []
    mine = {c.pid for c in psutil.Process().children(recursive=True)}
    assert not mine & set(leaders + children)
