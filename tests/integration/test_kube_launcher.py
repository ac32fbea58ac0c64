"""The Kubernetes launcher against the API stand-in (tests/support/kube_standin.py: a real HTTP API
server with a scheduler and a kubelet that runs each pod's container as a local process at its own
127.X.Y.N address). The engine here is the fake OpenAI server, so each case takes seconds; the real
CPU vLLM through the same path is tests/e2e/test_kubernetes_e2e.py.

What every case checks besides its own point: the target is only read (the API's own audit has no
patch, update or delete of it, and its spec and generation are unchanged) and no arm is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from advisor.cli import app
from advisor.experiments.arms import kube_clone
from advisor.experiments.arms.journal import Journal
from advisor.experiments.arms.kube import KubeLauncher
from advisor.experiments.arms.protocol import LaunchError
from advisor.experiments.design.deployment import load_deployment
from tests.support.kube_standin import KubeStandIn, node
from tests.support.servers import ROOT

NS = "llm"
FAKE = "llm/fake-engine"
IMAGES = {FAKE: [sys.executable, "-m", "tests.support.fake_openai"],
          "vllm/vllm-openai": [sys.executable, "-m", "tests.support.fake_openai"],
          "llm/crasher": [sys.executable, "-c", "import sys; print('model not found', flush=True); sys.exit(3)"],
          "llm/hog": [sys.executable, "-c", "import time; b = bytearray(400 << 20); time.sleep(600)"]}
runner = CliRunner()


@pytest.fixture
def cluster(tmp_path):
    nodes = [node("gpu-1", cpu="16", memory="64Gi", gpus=3, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})]
    with KubeStandIn(nodes=nodes, images=IMAGES, log_dir=tmp_path / "pods", cwd=ROOT, namespaces=(NS,)) as k:
        yield k
        assert not k.errors, k.errors


def target(image: str = FAKE, args: tuple[str, ...] = ("--port", "8000", "--delay", "0.003", "--max-num-seqs", "2"),
           gpus: int = 1, memory_limit: str | None = None) -> dict:
    resources = {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)},
                 "limits": {"nvidia.com/gpu": str(gpus), **({"memory": memory_limit} if memory_limit else {})}}
    if not gpus:
        resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": ({"memory": memory_limit} if memory_limit else {})}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "vllm", "namespace": NS, "labels": {"app": "vllm"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "vllm"}},
                     "template": {"metadata": {"labels": {"app": "vllm", "tier": "serving"}},
                                  "spec": {"containers": [{
                                      "name": "engine", "image": f"{image}:1", "args": list(args),
                                      "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
                                      "ports": [{"name": "http", "containerPort": 8000}],
                                      "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},
                                      "resources": resources}],
                                      "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}}}


def seed(k: KubeStandIn, obj: dict, serving: bool = False) -> dict:
    """The target as if applied before: its Service, and the Deployment either run by the stand-in
    (serving) or recorded as Ready without a process (managed=False: its pod holds its GPU)."""
    k.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "vllm", "namespace": NS},
           "spec": {"selector": {"app": "vllm"}, "ports": [{"port": 80, "targetPort": 8000}]}})
    if serving:
        return k.add(obj)
    made = k.add({**obj, "status": {"replicas": 1, "readyReplicas": 1}}, managed=False)
    pod_spec = {**obj["spec"]["template"]["spec"], "nodeName": "gpu-1"}
    k.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vllm-0", "namespace": NS,
                                                            "labels": obj["spec"]["template"]["metadata"]["labels"]},
           "spec": pod_spec, "status": {"phase": "Running", "podIP": "127.0.0.254",
                                        "conditions": [{"type": "Ready", "status": "True"}]}}, managed=False)
    return made


def spec_file(k: KubeStandIn, tmp_path: Path, **extra) -> Path:
    config = k.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
    spec = {"name": "vllm-k8s", "engine": "vllm", "model": "fake", "launcher": "kubernetes",
            "kubernetes": {"workload": "deployment/vllm", "namespace": NS, "container": "engine", "port": 8000,
                           "kubeconfig": str(config), "start_timeout_s": 60, **extra}}
    path = tmp_path / "k8s.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def left_behind(k: KubeStandIn) -> list[str]:
    """Everything of the advisor's still in the cluster, and any live process of an arm's pod."""
    mine = [f"{kind}/{o['metadata']['name']}" for kind in ("deployments", "configmaps", "pods")
            for o in k.objects(kind, NS) if kube_clone.LABEL_EXPERIMENT in (o["metadata"].get("labels") or {})]
    return mine


def untouched(k: KubeStandIn, before: dict) -> None:
    writes = [a for a in k.audit if a.name == "vllm" and a.resource.startswith("deployments")
              and a.verb in ("patch", "update", "delete")]
    assert not writes, writes
    now = k.get("deployments", "vllm", NS)  # its status moves with its pods; its spec and generation must not
    assert now["spec"] == before["spec"] and now["metadata"]["generation"] == before["metadata"]["generation"]


def wait_for(check, timeout: float = 30.0, what: str = "it"):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def experiment(spec: Path, *args: str):
    return runner.invoke(app, ["experiment", "--deployment", str(spec), "--mechanism", "max_num_seqs", "--value", "8",
                               "--readout", "ttft_p50", *args])


def test_the_plan_prints_both_arms_differing_in_the_knob_only_and_creates_nothing(cluster, tmp_path, isolated_store):
    before = seed(cluster, target())
    r = experiment(spec_file(cluster, tmp_path), "--dry-run")
    assert r.exit_code == 0, r.output
    text = r.output[r.output.index("# baseline"):]
    docs = [d for d in yaml.safe_load_all(text) if d]
    base, cand = docs
    args = {arm: d["spec"]["template"]["spec"]["containers"][0]["args"] for arm, d in zip(("b", "c"), docs)}
    assert args["b"][-2:] == ["--max-num-seqs", "2"] and args["c"][-2:] == ["--max-num-seqs", "8"]
    assert kube_clone.DIFFERS in text.split("# candidate")[1]
    diffs = kube_clone.differences(base["spec"], cand["spec"])
    assert set(diffs) == {"selector.matchLabels.llm-advisor.io/arm", "template.metadata.labels.llm-advisor.io/arm",
                          "template.spec.containers[0].args"}, diffs
    pod = base["spec"]["template"]
    assert "app" not in pod["metadata"]["labels"] and pod["metadata"]["labels"]["tier"] == "serving"
    assert pod["spec"]["containers"][0]["resources"] == before["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert not [a for a in cluster.audit if a.verb == "create"], "a plan creates nothing"
    for d in docs:  # what kubectl apply --validate=strict would accept, by the API's own schema
        kubernetes_validate.validate(d, "1.37", strict=True)
    untouched(cluster, before)


def test_an_experiment_runs_on_two_fresh_arms_no_service_selects_and_leaves_nothing(cluster, tmp_path,
                                                                                      isolated_store):
    before = seed(cluster, target(), serving=True)
    wait_for(lambda: [p for p in cluster.objects("pods", NS) if p["status"].get("podIP")], what="the target's pod")
    cluster.pod_metrics = True  # a cluster with metrics-server: each arm's memory per block
    r = experiment(spec_file(cluster, tmp_path), "--blocks", "2", "--block-requests", "8", "--fixed",
                   "--output", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["status"] == "finished" and out["baseline_restored"], out.get("aborted")
    # The engine container's working set, as PodMetrics gives it (the stand-in: its processes' RSS).
    assert all(b["resident_bytes"] and b["resident_bytes"] > 10 * 2**20 for b in out["blocks"]), \
        [(b["arm"], b["resident_bytes"]) for b in out["blocks"]]
    assert any(r.path.startswith("/apis/metrics.k8s.io/v1beta1/namespaces/llm/pods/vllm-") for r in cluster.requests)
    assert not any("memory per arm not read" in n for n in out["server_notes"]), out["server_notes"]
    k8s = out["manifest"]["kubernetes"]
    assert k8s["cluster_version"].startswith("v1.") and k8s["target"] == "deployment/vllm"
    for arm in ("baseline", "candidate"):
        assert k8s[arm]["nodes"] == ["gpu-1"] and k8s[arm]["gpu_products"] == ["NVIDIA-H100-80GB-HBM3"]
        assert k8s[arm]["images"][0].startswith("docker.io/llm/fake-engine@sha256:")
    assert k8s["candidate"]["argv"][-2:] == ["--max-num-seqs", "8"] and k8s["baseline"]["argv"][-2:] == ["--max-num-seqs", "2"]
    created = [a for a in cluster.audit if a.verb == "create"]
    assert [a.resource for a in created] == ["configmaps", "deployments", "deployments"], created
    assert "restored" in out["restore_note"] or "arms deleted" in out["restore_note"], out["restore_note"]
    assert not left_behind(cluster)
    untouched(cluster, before)


def test_from_outside_the_cluster_the_arms_are_reached_through_the_pods_proxy(cluster, tmp_path, isolated_store):
    """reach: pods-proxy, for an advisor whose network does not route pod IPs: every request to an arm
    (health, configuration, /metrics, the load's streamed completions) goes through the API server's
    pods proxy with the kubeconfig's token, to the arms' pods only, and nothing is left listening."""
    import psutil

    before = seed(cluster, target(), serving=True)
    wait_for(lambda: [p for p in cluster.objects("pods", NS) if p["status"].get("podIP")], what="the target's pod")
    listening = {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    r = experiment(spec_file(cluster, tmp_path, reach="pods-proxy"), "--blocks", "2", "--block-requests", "8",
                   "--fixed", "--output", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["status"] == "finished" and out["baseline_restored"], out.get("aborted")
    assert all(b["ok"] == b["requests"] == 8 for b in out["blocks"]), [(b["ok"], b["requests"]) for b in out["blocks"]]
    # Streamed through both hops token by token, not buffered until the end of each answer.
    assert all(b["ttft_p50"] < b["e2e_p95"] / 4 and b["tpot_p50"] < 0.05 for b in out["blocks"]), \
        [(b["ttft_p50"], b["tpot_p50"], b["e2e_p95"]) for b in out["blocks"]]
    proxied = [a for a in cluster.audit if a.resource == "pods/proxy"]
    arms = {a.name for a in proxied}
    assert len(arms) == 2 and all(n.startswith(("vllm-advisor-", "vllm-")) for n in arms), arms
    target_pods = {p["metadata"]["name"] for p in cluster.objects("pods", NS)
                   if (p["metadata"].get("labels") or {}).get("app") == "vllm"}
    assert not arms & target_pods, "only the arms' pods are reached"
    verbs = {a.verb for a in proxied}
    assert verbs == {"get", "create"}, verbs  # GET /health, /metrics...; POST /v1/completions
    paths = {a.path.split("/proxy", 1)[1] for a in proxied}
    assert {"/health", "/metrics"} <= paths and paths & {"/v1/completions", "/v1/chat/completions"}, paths
    assert all(rq.code in (200, None) for rq in cluster.requests if "/proxy/" in rq.path and "completions" in rq.path)
    now = {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN
           and c.pid == os.getpid()}
    assert not (now - listening), "the relays are closed"
    assert not left_behind(cluster)
    untouched(cluster, before)


def test_a_pods_proxy_the_advisor_may_not_use_is_one_line_and_both_arms_go(tmp_path, isolated_store):
    nodes = [node("gpu-1", gpus=3, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})]
    with KubeStandIn(nodes=nodes, images=IMAGES, forbid={("create", "pods/proxy")}, cwd=ROOT,
                     namespaces=(NS,)) as k:
        before = seed(k, target())
        r = experiment(spec_file(k, tmp_path, reach="pods-proxy"), "--blocks", "2", "--block-requests", "8")
        assert r.exit_code == 2, r.output
        [line] = [x for x in r.output.splitlines() if "pods/proxy" in x]
        assert "needs to create pods/proxy in namespace llm" in line and "nothing was created" in line, r.output
        assert not [a for a in k.audit if a.verb == "create" and a.resource != "selfsubjectaccessreviews"]
        assert not left_behind(k)
        untouched(k, before)


def test_no_room_for_both_arms_is_refused_with_the_numbers_before_anything_is_created(cluster, tmp_path,
                                                                                      isolated_store):
    before = seed(cluster, target(gpus=2))  # the target's pod holds two of the node's three GPUs
    r = experiment(spec_file(cluster, tmp_path), "--blocks", "2", "--block-requests", "8")
    assert r.exit_code == 2
    assert "2 arms x 2 nvidia.com/gpu needed; 1 free on the 1 node matching nodeSelector " \
           "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3" in r.output, r.output
    assert not [a for a in cluster.audit if a.verb == "create"]
    untouched(cluster, before)


@pytest.mark.parametrize("image, memory, said", [
    # The kubelet's first failure, or the back-off after it: the line quotes whichever the pod shows.
    ("llm/missing", None, ("cannot pull llm/missing:1 (ErrImagePull): rpc error",
                           'cannot pull llm/missing:1 (ImagePullBackOff): Back-off pulling image "llm/missing:1"')),
    ("llm/crasher", None, "is crash-looping"),
    ("llm/hog", "64Mi", "was OOMKilled (exit code 137"),
], ids=["image-pull", "crash-loop", "oom-killed"])
def test_an_arm_that_will_not_serve_ends_the_experiment_in_one_line_and_both_arms_go(cluster, tmp_path,
                                                                                     isolated_store, image, memory, said):
    before = seed(cluster, target(image=image, gpus=0, memory_limit=memory))
    r = experiment(spec_file(cluster, tmp_path), "--blocks", "2", "--block-requests", "8")
    assert r.exit_code == 2, r.output
    line = r.output.strip().splitlines()[-1]
    said = (said,) if isinstance(said, str) else said
    assert any(x in line for x in said) and "the baseline arm will not serve: pod vllm-" in line, r.output
    assert not left_behind(cluster)
    untouched(cluster, before)


def test_a_refused_verb_is_one_line_naming_it_and_what_was_created_is_deleted(tmp_path, isolated_store):
    nodes = [node("gpu-1", gpus=3, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})]
    with KubeStandIn(nodes=nodes, images=IMAGES, forbid={("create", "deployments")}, cwd=ROOT,
                     namespaces=(NS,)) as k:
        before = seed(k, target())
        r = experiment(spec_file(k, tmp_path), "--blocks", "2", "--block-requests", "8")
        assert r.exit_code == 2, r.output
        assert "refused to create deployments.apps" in r.output and "(403)" in r.output
        assert "cannot create resource \"deployments\" in API group \"apps\"" in r.output, r.output
        assert [a.resource for a in k.audit if a.verb == "delete"] == ["configmaps"], "the owner it made is deleted"
        assert not left_behind(k)
        untouched(k, before)


def test_a_pod_that_cannot_be_scheduled_after_the_preflight_is_quoted_and_both_arms_go(cluster, tmp_path):
    """The nodes filled up between the room check and the arms' creation (someone else's pod took the
    GPUs): the scheduler's own FailedScheduling message ends it."""
    before = seed(cluster, target())
    dep = load_deployment(spec_file(cluster, tmp_path))
    journal = Journal(tmp_path / "journal")
    base = ["--port", "8000", "--delay", "0.003", "--max-num-seqs", "2"]
    lau = KubeLauncher(dep, base, [*base[:-1], "8"], journal, "exp-20261205-000001")
    lau.preflight()
    cluster.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "batch-job", "namespace": "default"},
                 "spec": {"nodeName": "gpu-1", "containers": [{"name": "x", "image": "other:1", "resources": {
                     "requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}]},
                 "status": {"phase": "Running"}}, managed=False)
    with pytest.raises(LaunchError, match=r"cannot be scheduled \(FailedScheduling\): 0/1 nodes are available: "
                                          r"1 Insufficient nvidia.com/gpu"):
        lau.bring_up("baseline")
    note = lau.restore()
    assert "arms deleted" in note and not left_behind(cluster)
    untouched(cluster, before)


def test_the_advisor_killed_between_blocks_then_recover_deletes_exactly_its_arms(cluster, tmp_path, isolated_store):
    before = seed(cluster, target(args=("--port", "8000", "--delay", "0.005", "--max-num-seqs", "2")), serving=True)
    spec = spec_file(cluster, tmp_path)
    said = tmp_path / "experiment.err"
    with said.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "advisor.cli", "experiment", "--deployment", str(spec),
                                 "--mechanism", "max_num_seqs", "--value", "8", "--blocks", "6", "--block-requests",
                                 "8", "--concurrency", "4", "--readout", "ttft_p50", "--fixed"], cwd=ROOT,
                                env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=err)
    data = Path(os.environ["ADVISOR_DATA_DIR"])

    def a_block_done():
        assert proc.poll() is None, f"the experiment ended before its first block: {said.read_text()[-2000:]}"
        return any('"event": "block"' in p.read_text() for p in data.glob("experiments/*/journal.jsonl"))

    try:
        wait_for(a_block_done, 120, "the first block")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    arms = left_behind(cluster)
    assert any(a.startswith("deployments/") for a in arms), "killed mid-run, its arms are still there"
    r = runner.invoke(app, ["recover", "--deployment", str(spec)])
    assert r.exit_code == 0, r.output
    assert "deleted the arms it had created (deployment/vllm-" in r.output, r.output
    wait_for(lambda: not left_behind(cluster), 30, "the arms' pods to go")
    untouched(cluster, before)


def test_recover_leaves_alone_an_object_a_forged_journal_names(cluster, tmp_path, isolated_store):
    """A journal written by hand that names the target itself (its real uid) deletes nothing: the
    target does not carry the experiment's labels."""
    before = seed(cluster, target())
    spec = spec_file(cluster, tmp_path)
    dep = load_deployment(spec)
    folder = Path(os.environ["ADVISOR_DATA_DIR"]) / "experiments" / dep.key
    journal = Journal(folder)
    journal.write("exp-forged", "begin", found_serving=True)
    journal.write("exp-forged", "kube created", kind="deployment", name="vllm", namespace=NS,
                  uid=before["metadata"]["uid"])
    r = runner.invoke(app, ["recover", "--deployment", str(spec)])
    assert r.exit_code == 0, r.output
    assert "left deployment/vllm alone: it does not carry experiment exp-forged's labels" in r.output, r.output
    untouched(cluster, before)


def test_import_writes_a_spec_from_the_live_deployment(cluster, tmp_path):
    seed(cluster, target(image="vllm/vllm-openai",
                         args=("--model", "/models/llama", "--served-model-name", "llama-8b", "--port", "8000")))
    config = cluster.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
    out = tmp_path / "imported.yaml"
    r = runner.invoke(app, ["deployment", "import", f"k8s://{NS}/deployment/vllm", "--kubeconfig", str(config),
                            "--output", str(out)])
    assert r.exit_code == 0, r.output
    spec = yaml.safe_load(out.read_text())
    assert spec["launcher"] == "kubernetes" and spec["model"] == "llama-8b"
    assert spec["kubernetes"] == {"workload": "deployment/vllm", "namespace": NS, "container": "engine", "port": 8000,
                                  "kubeconfig": str(config)}
    assert load_deployment(out).engine == "vllm"
    missing = runner.invoke(app, ["deployment", "import", f"k8s://{NS}/deployment/nope", "--kubeconfig", str(config)])
    assert missing.exit_code == 2 and "deployment/nope not found in namespace llm" in missing.output


def test_no_arm_pod_is_selected_by_a_service(cluster, tmp_path):
    seed(cluster, target())
    dep = load_deployment(spec_file(cluster, tmp_path))
    base = ["--port", "8000", "--max-num-seqs", "2"]
    lau = KubeLauncher(dep, base, [*base[:-1], "8"], None, "exp-20261205-000002")
    arms = lau.plan()
    service = cluster.get("services", "vllm", NS)
    for obj in arms.values():
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert not all(labels.get(k) == v for k, v in service["spec"]["selector"].items()), labels
    lau.close()


def test_diagnose_with_a_kubernetes_spec_proves_its_top_check_on_cloned_arms(cluster, tmp_path, isolated_store):
    """`advisor diagnose --deployment k8s.yaml --experiment 1`: the diagnosis reads the target's
    /metrics (a queue: two scrapes captured from the real engine, served in turn), its top check
    becomes an experiment whose baseline args are read from the cluster, on two cloned arms."""
    fixtures = ROOT / "tests" / "fixtures" / "vllm-0.32.0-cpu"
    args = ("--port", "8000", "--delay", "0.0005", "--model-id", "tiny-llama", "--slots-from-max-num-seqs",
            "--max-num-seqs", "2",
            "--metrics", str(fixtures / "metrics-queueing-t0.txt"), "--metrics", str(fixtures / "metrics-queueing-t1.txt"))
    before = seed(cluster, target(args=args), serving=True)
    [pod] = wait_for(lambda: [p for p in cluster.objects("pods", NS) if p["status"].get("podIP")
                              and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])],
                     what="the target's pod")
    url = f"http://{pod['status']['podIP']}:8000"
    spec = spec_file(cluster, tmp_path, url=url)
    r = runner.invoke(app, ["diagnose", "--deployment", str(spec), "--url", url, "--window", "1s", "--experiment", "1",
                            "--output", "json"])
    assert r.exit_code in (0, 1), r.output
    d = json.loads(r.stdout)
    checks = sorted((c for f in d["findings"] for c in f["checks"]), key=lambda c: c["rank"])
    tested = [c for c in checks if (c.get("verdict") or {}).get("experiment")]
    assert tested and tested[0]["mechanism"] == "max_num_seqs", [(c["mechanism"], c.get("verdict")) for c in checks]
    [x] = [e for e in d["experiments"] if e["id"] == tested[0]["verdict"]["experiment"]]
    assert x["status"] == "finished" and x["manifest"]["deployment"]["launcher"] == "kubernetes", x.get("aborted")
    base, cand = x["manifest"]["baseline_argv"], x["manifest"]["candidate_argv"]
    assert base[base.index("--max-num-seqs") + 1] == "2" and int(cand[cand.index("--max-num-seqs") + 1]) > 2
    assert x["verdict"] == "improved", (x["ratio"], x["ci"], x["looks"])  # the fake's slots queue as vLLM's do
    # A cluster without metrics-server: no memory per arm, and the report says why rather than zero.
    assert all(b["resident_bytes"] is None for b in x["blocks"])
    assert any("memory per arm not read: the cluster serves no pod metrics" in n for n in x["server_notes"]), \
        x["server_notes"]
    assert not left_behind(cluster)
    untouched(cluster, before)
