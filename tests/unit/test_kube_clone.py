"""The Kubernetes arms cloned from a target workload (advisor/experiments/arms/kube_clone.py): every
field of the pod template kept except the knob's args, no label a Service selects, the target's
server-owned metadata dropped, and the two arms different only in the engine's args and their arm
label. The target is a vLLM Deployment shaped like the production-stack chart's, as the API returns it."""

from __future__ import annotations

import copy

import pytest

from advisor.experiments.arms.kube_clone import (LABEL_ARM, LABEL_EXPERIMENT, CloneError, arm_name, clone_arms,
                                                 differences, selected_by, strip_server_fields)

ARGS = ["--model", "/data/llama-3-8b", "--max-num-seqs", "2", "--port", "8000"]
CAND = ["--model", "/data/llama-3-8b", "--max-num-seqs", "8", "--port", "8000"]
SERVICE_SELECTORS = [{"app": "vllm", "model": "llama3"}, {"environment": "prod"}, None, {}]


def target() -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "vllm-llama3-deployment-vllm", "namespace": "serving", "uid": "9b1d-...",
                     "resourceVersion": "81234", "generation": 7, "creationTimestamp": "2026-11-01T10:00:00Z",
                     "labels": {"app": "vllm", "model": "llama3"},
                     "annotations": {"deployment.kubernetes.io/revision": "7", "team": "inference"},
                     "managedFields": [{"manager": "helm"}],
                     "ownerReferences": [{"kind": "InferenceService", "name": "x", "uid": "u"}]},
        "spec": {
            "replicas": 4, "revisionHistoryLimit": 3, "strategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": {"app": "vllm", "model": "llama3"}},
            "template": {
                "metadata": {"labels": {"app": "vllm", "model": "llama3", "environment": "prod",
                                        "helm-release": "vllm"},
                             "annotations": {"prometheus.io/scrape": "true"}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In",
                                                                      "values": ["gpu"]}]}]}}},
                    "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
                                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "10Gi"}}],
                    "containers": [
                        {"name": "vllm", "image": "vllm/vllm-openai@sha256:abc", "command": ["vllm", "serve"],
                         "args": ARGS, "ports": [{"containerPort": 8000, "name": "http"}],
                         "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}}],
                         "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"},
                                       "requests": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"}},
                         "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 5},
                         "volumeMounts": [{"name": "models", "mountPath": "/data"}]},
                        {"name": "log-shipper", "image": "fluent-bit:3", "args": ["-c", "/cfg"]}]}}},
        "status": {"readyReplicas": 4},
    }


def arms(**kw) -> dict[str, dict]:
    return clone_arms(target(), "vllm", {"baseline": ARGS, "candidate": CAND}, "exp-20261204-201124",
                      SERVICE_SELECTORS, **kw)


def test_the_pod_template_is_kept_whole_but_the_engine_args_and_the_selected_labels():
    t = target()
    for arm, want in (("baseline", ARGS), ("candidate", CAND)):
        pod = arms()[arm]["spec"]["template"]
        source = copy.deepcopy(t["spec"]["template"])
        diff = differences(source, pod)
        changed_args = ["spec.containers[0].args"] if want != ARGS else []
        assert sorted(d for d in diff if not d.startswith("metadata.labels")) == changed_args, diff
        assert pod["spec"]["containers"][0]["args"] == want
        assert pod["spec"]["containers"][1] == t["spec"]["template"]["spec"]["containers"][1]
        labels = pod["metadata"]["labels"]
        assert labels["helm-release"] == "vllm" and labels[LABEL_ARM] == arm
        assert not {"app", "model", "environment"} & set(labels), "every key a Service selects on is dropped"
        assert selected_by(labels, SERVICE_SELECTORS) == []


def test_the_two_arms_differ_only_in_the_knob_and_their_arm():
    a = arms()
    diff = differences(a["baseline"], a["candidate"])
    assert sorted(diff) == ["metadata.labels.llm-advisor.io/arm", "metadata.name",
                            "spec.selector.matchLabels.llm-advisor.io/arm",
                            "spec.template.metadata.labels.llm-advisor.io/arm",
                            "spec.template.spec.containers[0].args"], diff


def test_the_arms_are_new_objects_named_after_the_target_without_its_server_fields_or_owners():
    a = arms(owner={"apiVersion": "v1", "kind": "ConfigMap", "name": "exp", "uid": "owner-uid"})
    for arm, obj in a.items():
        meta = obj["metadata"]
        assert meta["namespace"] == "serving" and meta["name"].endswith(f"-{arm}") and len(meta["name"]) <= 63
        assert meta["name"] != "vllm-llama3-deployment-vllm"
        assert set(meta) == {"name", "namespace", "labels", "annotations", "ownerReferences"}
        assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "ConfigMap", "name": "exp", "uid": "owner-uid",
                                            "blockOwnerDeletion": True}]
        assert obj["spec"]["replicas"] == 1 and obj["spec"]["selector"] == {"matchLabels": {
            LABEL_EXPERIMENT: "exp-20261204-201124", LABEL_ARM: arm}}
        assert "status" not in obj and obj["spec"]["revisionHistoryLimit"] == 3
    assert arms(replicas={"baseline": 1, "candidate": 2})["candidate"]["spec"]["replicas"] == 2


def test_the_target_is_not_changed_by_cloning():
    t = target()
    before = copy.deepcopy(t)
    clone_arms(t, "vllm", {"baseline": ARGS, "candidate": CAND}, "e", SERVICE_SELECTORS)
    assert t == before


def test_names_stay_dns_labels_and_unique_per_experiment():
    long = "a" * 80
    n1, n2 = arm_name(long, "exp-1", "candidate"), arm_name(long, "exp-2", "candidate")
    assert len(n1) <= 63 and n1.endswith("-candidate") and n1 != n2
    assert arm_name("My_Model.Server", "e", "baseline").startswith("my-model-server-")


@pytest.mark.parametrize("change, says", [
    (lambda t: t.update(kind="InferenceService"), "InferenceService cannot be cloned"),
    (lambda t: t["spec"]["template"]["spec"]["containers"][0].update(name="engine"), "no container named 'vllm'"),
    (lambda t: t["spec"]["template"]["spec"].update(containers=[]), "no pod template with containers"),
])
def test_what_cannot_be_cloned_is_one_line_with_the_reason(change, says):
    t = target()
    change(t)
    with pytest.raises(CloneError, match=says):
        clone_arms(t, "vllm", {"baseline": ARGS}, "e", [])


def test_a_statefulset_keeps_its_service_name_and_claim_templates():
    t = target()
    t["kind"] = "StatefulSet"
    t["spec"]["serviceName"] = "vllm-headless"
    t["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "cache"}, "spec": {"resources": {}}}]
    a = clone_arms(t, "vllm", {"baseline": ARGS, "candidate": CAND}, "e", SERVICE_SELECTORS)
    assert a["candidate"]["kind"] == "StatefulSet" and a["candidate"]["spec"]["serviceName"] == "vllm-headless"
    assert a["candidate"]["spec"]["volumeClaimTemplates"] == t["spec"]["volumeClaimTemplates"]


def test_server_fields_are_stripped_for_the_plan():
    clean = strip_server_fields(target())
    assert "status" not in clean and set(clean["metadata"]) == {"name", "namespace", "labels", "annotations"}
    assert clean["metadata"]["annotations"] == {"team": "inference"}


def test_the_plan_prints_both_manifests_as_yaml_with_the_knobs_line_marked():
    import yaml

    from advisor.experiments.arms.kube_clone import DIFFERS, manifests_yaml

    text = manifests_yaml(arms())
    docs = list(yaml.safe_load_all(text))
    assert [d["metadata"]["labels"][LABEL_ARM] for d in docs] == ["baseline", "candidate"]
    assert docs == [arms()["baseline"], arms()["candidate"]], "the YAML is the manifests, comments aside"
    marked = [line.strip() for line in text.splitlines() if DIFFERS in line]
    assert marked == [f"- '8'  {DIFFERS}"], marked
