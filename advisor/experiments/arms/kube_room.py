"""Whether both arms of a Kubernetes experiment fit the cluster, before anything is created (DESIGN 12).

Pure arithmetic over the API's objects as plain dicts: the nodes the pod template may schedule to
(not cordoned, its nodeSelector, the taints it tolerates, its required node affinity), each one's
allocatable minus what its running pods request, and the namespace's ResourceQuota. A refusal
says the numbers: "2 arms x 1 nvidia.com/gpu needed; 1 free on the 3 nodes matching nodeSelector
nvidia.com/gpu.product=H100". What it does not model: preemption by priority, pod (anti-)affinity
between pods, topology spread, extended resources beyond those the template requests, and the
scheduler's scoring; a fit here can still end Pending, which the launcher's wait reports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_DONE = ("Succeeded", "Failed")


def quantity(text: object) -> Decimal:
    """A Kubernetes quantity ("500m", "64Gi", "1", 2) as a number; ValueError when it is none."""
    m = _QUANTITY.match(str(text).strip())
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2) or ""])


def pod_requests(pod_spec: Mapping) -> dict[str, Decimal]:
    """What one pod requests: its containers' requests summed (a limit stands for a missing request,
    as the API server defaults it), or its largest init container's where that is more."""
    def of(c: Mapping) -> dict[str, Decimal]:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: quantity(v) for k, v in merged.items()}

    total: dict[str, Decimal] = {}
    for c in pod_spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in pod_spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return total


def _tolerated(taint: Mapping, tolerations: Sequence[Mapping]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _expression(labels: Mapping[str, str], e: Mapping) -> bool:
    key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and values:
        try:
            a, b = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def eligible(node: Mapping, pod_spec: Mapping) -> bool:
    """Whether the scheduler may place the pod on the node (cordon, nodeSelector, taints with
    NoSchedule or NoExecute, required node affinity)."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    tolerations = pod_spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(taint, tolerations):
            return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(all(_expression(labels, e) for e in t.get("matchExpressions") or []) for t in terms):
        return False
    return True


def free(node: Mapping, pods: Iterable[Mapping]) -> dict[str, Decimal]:
    """The node's allocatable less what its pods that still run request."""
    name = (node.get("metadata") or {}).get("name")
    left = {k: quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}
    for p in pods:
        if (p.get("spec") or {}).get("nodeName") != name or (p.get("status") or {}).get("phase") in _DONE:
            continue
        for k, v in pod_requests(p.get("spec") or {}).items():
            left[k] = left.get(k, Decimal(0)) - v
    return left


def _show(v: Decimal, resource: str) -> str:
    if resource == "memory":
        return f"{v / 2**30:.3g}Gi"
    return f"{v.normalize():f}" if v == v.to_integral_value() else f"{v:.3g}"


def _where(pod_spec: Mapping, n: int) -> str:
    sel = pod_spec.get("nodeSelector") or {}
    match = f" matching nodeSelector {', '.join(f'{k}={v}' for k, v in sel.items())}" if sel else " it may schedule to"
    return f"the {n} node{'s' if n != 1 else ''}{match}"


def refusal(nodes: Sequence[Mapping], pods: Sequence[Mapping], pod_spec: Mapping, arms: int = 2,
            quotas: Sequence[Mapping] = ()) -> str | None:
    """Why `arms` pods of this template cannot all be placed now, with the numbers; None when they fit."""
    need = pod_requests(pod_spec)
    ok = [n for n in nodes if eligible(n, pod_spec)]
    if not ok:
        return f"no node the pod template may schedule to ({_where(pod_spec, 0)}, not cordoned, its taints tolerated)"
    frees = [free(n, pods) for n in ok]
    placed = 0
    for f in sorted(frees, key=lambda f: [f.get(k, Decimal(0)) for k in sorted(need)]):
        while placed < arms and all(f.get(k, Decimal(0)) >= v for k, v in need.items()):
            for k, v in need.items():
                f[k] -= v
            placed += 1
    if placed < arms:
        scarce = next((k for k in sorted(need, key=lambda k: (k != "nvidia.com/gpu", k))
                       if sum(max(f.get(k, Decimal(0)), Decimal(0)) for f in (free(n, pods) for n in ok))
                       < need[k] * arms), None)
        if scarce is not None:
            total = sum(max(f.get(scarce, Decimal(0)), Decimal(0)) for f in (free(n, pods) for n in ok))
            return (f"{arms} arms x {_show(need[scarce], scarce)} {scarce} needed; {_show(total, scarce)} free on "
                    f"{_where(pod_spec, len(ok))}")
        return (f"{arms} arms need {', '.join(f'{_show(v, k)} {k}' for k, v in need.items())} each on one node; "
                f"only {placed} fit on {_where(pod_spec, len(ok))}, whose free resources are split across nodes")
    for q in quotas:
        hard = (q.get("status") or {}).get("hard") or (q.get("spec") or {}).get("hard") or {}
        used = (q.get("status") or {}).get("used") or {}
        name = (q.get("metadata") or {}).get("name", "quota")
        for key, limit in hard.items():
            resource = key.removeprefix("requests.")
            want = Decimal(arms) if key in ("pods", "count/pods") else (need.get(resource, Decimal(0)) * arms
                                                                         if key.startswith("requests.") or key in ("cpu", "memory") else None)
            if want is None or want == 0:
                continue
            left = quantity(limit) - quantity(used.get(key, 0))
            if left < want:
                return (f"ResourceQuota {name}: {arms} arms need {_show(want, resource)} {key}; "
                        f"{_show(max(left, Decimal(0)), resource)} left of {limit}")
    return None
