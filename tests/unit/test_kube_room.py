"""Room for both Kubernetes arms before anything is created (advisor/experiments/arms/kube_room.py):
the nodes a pod template may schedule to, their allocatable less their pods' requests, and the
namespace's quota; a refusal names the numbers."""

from __future__ import annotations

from decimal import Decimal

import pytest

from advisor.experiments.arms.kube_room import eligible, pod_requests, quantity, refusal

H100 = {"nvidia.com/gpu.product": "H100"}
TEMPLATE = {"nodeSelector": H100,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "vllm", "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "8",
                                                                        "memory": "64Gi"},
                                                           "limits": {"nvidia.com/gpu": "1"}}},
                           {"name": "sidecar", "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}}]}


def node(name: str, gpus: int, labels=H100, taints=(), cordoned=False, cpu="64", memory="512Gi") -> dict:
    return {"metadata": {"name": name, "labels": dict(labels)},
            "spec": {"unschedulable": cordoned,
                     "taints": list(taints) or [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory}}}


def pod(on: str, gpus: int, phase="Running") -> dict:
    return {"spec": {"nodeName": on, "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


@pytest.mark.parametrize("text, value", [("500m", Decimal("0.5")), ("64Gi", Decimal(64 * 2**30)), ("1", 1),
                                         (2, 2), ("1e3", 1000), ("1.5G", Decimal("1.5e9"))])
def test_quantities(text, value):
    assert quantity(text) == value


def test_a_pod_requests_its_containers_sum_a_limit_standing_for_a_missing_request():
    r = pod_requests(TEMPLATE)
    assert r["nvidia.com/gpu"] == 1 and r["cpu"] == Decimal("8.5") and r["memory"] == 64 * 2**30 + 256 * 2**20


def test_both_arms_fit_where_two_gpus_are_free():
    nodes = [node("a", 8), node("b", 8)]
    assert refusal(nodes, [pod("a", 7), pod("b", 7)], TEMPLATE) is None


def test_one_free_gpu_for_two_arms_is_refused_with_the_numbers():
    nodes = [node("a", 8), node("b", 8), node("c", 8), node("l40", 8, labels={"nvidia.com/gpu.product": "L40S"})]
    pods = [pod("a", 8), pod("b", 8), pod("c", 7), pod("l40", 0), pod("a", 1, phase="Succeeded")]
    why = refusal(nodes, pods, TEMPLATE)
    assert why == ("2 arms x 1 nvidia.com/gpu needed; 1 free on the 3 nodes matching nodeSelector "
                   "nvidia.com/gpu.product=H100"), why


def test_cordoned_and_untolerated_nodes_do_not_count():
    assert not eligible(node("a", 8, cordoned=True), TEMPLATE)
    tainted = node("b", 8, taints=[{"key": "dedicated", "value": "training", "effect": "NoSchedule"}])
    assert not eligible(tainted, TEMPLATE)
    assert eligible(node("c", 8), TEMPLATE)
    why = refusal([node("a", 8, cordoned=True), tainted], [], TEMPLATE)
    assert why.startswith("no node the pod template may schedule to"), why


def test_required_node_affinity_is_read():
    spec = {**TEMPLATE, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["inference"]}]}]}}}}
    assert not eligible(node("a", 8), spec)
    assert eligible(node("a", 8, labels={**H100, "pool": "inference"}), spec)


def test_free_resources_split_across_nodes_are_not_one_arms_room():
    spec = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}}}]}
    nodes = [node("a", 1, labels={}), node("b", 1, labels={}), node("c", 1, labels={}), node("d", 1, labels={})]
    why = refusal(nodes, [], {**spec, "tolerations": TEMPLATE["tolerations"]})
    assert "only 0 fit" in why and "split across nodes" in why, why


def test_the_namespaces_quota_is_checked_after_the_nodes():
    quota = {"metadata": {"name": "serving-gpus"},
             "status": {"hard": {"requests.nvidia.com/gpu": "8", "pods": "50"},
                        "used": {"requests.nvidia.com/gpu": "7", "pods": "12"}}}
    why = refusal([node("a", 8)], [], TEMPLATE, quotas=[quota])
    assert why == "ResourceQuota serving-gpus: 2 arms need 2 requests.nvidia.com/gpu; 1 left of 8", why
    roomy = {**quota, "status": {**quota["status"], "used": {"requests.nvidia.com/gpu": "2"}}}
    assert refusal([node("a", 8)], [], TEMPLATE, quotas=[roomy]) is None
