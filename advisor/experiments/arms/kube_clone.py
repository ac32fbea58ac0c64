"""The two arms of a Kubernetes experiment, cloned from the target's own workload (DESIGN 12).

Pure functions over the API's objects as plain dicts (what any client reads and applies), so the
cloning is tested apart from any cluster. The rules, after Argo Rollouts' `Experiment` and Kayenta:
- the target is only read: the arms are new objects, named after it, in its namespace;
- both arms come from the same pod template, identical in image, resources and GPU requests, node
  selector, affinity, tolerations, volumes, env and probes, and differ only in the engine
  container's args (the knob's rendering) and in which arm their labels name;
- their pods carry the advisor's labels and none of the label keys that the namespace's Services
  select on, so no Service routes production traffic to them;
- what the API server owns (status, uid, resourceVersion, managedFields, the owners of the target)
  is dropped; an owner reference to the experiment's own object may be given, so that the
  cluster's garbage collector removes both arms if the advisor cannot.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence

import yaml

from advisor.errors import AdvisorError

KINDS = ("Deployment", "StatefulSet")
LABEL_EXPERIMENT = "llm-advisor.io/experiment"
LABEL_ARM = "llm-advisor.io/arm"
MANAGED_BY = ("app.kubernetes.io/managed-by", "llm-advisor")
# Set by the API server or by controllers on the target: an arm that copied them would claim the
# target's history (a rollout revision, kubectl's last applied configuration).
_SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "ownerReferences",
                    "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "finalizers")
_CONTROLLER_ANNOTATIONS = ("deployment.kubernetes.io/revision", "kubectl.kubernetes.io/last-applied-configuration")
_NAME_MAX = 63  # a DNS-1123 label: a pod's hostname is derived from the workload's name


class CloneError(AdvisorError, ValueError):
    """The target cannot be cloned into arms as it is (its kind, its container, its selectors)."""


def arm_name(target: str, experiment: str, arm: str) -> str:
    """`<target>-<experiment digest>-<arm>`, shortened to a DNS-1123 label by cutting the target's
    name: the experiment and the arm stay readable and the name unique per experiment."""
    digest = hashlib.sha256(experiment.encode()).hexdigest()[:8]
    tail = f"-{digest}-{arm}"
    head = re.sub(r"[^a-z0-9-]", "-", target.lower())[: _NAME_MAX - len(tail)].rstrip("-")
    return f"{head}{tail}"


def selected_keys(selectors: Iterable[Mapping[str, str] | None]) -> set[str]:
    """Every label key some Service selects on (a Service's spec.selector; None or {} selects nothing)."""
    return {k for s in selectors for k in (s or {})}


def selected_by(labels: Mapping[str, str], selectors: Iterable[Mapping[str, str] | None]) -> list[dict[str, str]]:
    """The selectors that would route to a pod with these labels (each non-empty one it matches)."""
    return [dict(s) for s in selectors if s and all(labels.get(k) == v for k, v in s.items())]


def clone_arms(target: Mapping, container: str, args: Mapping[str, Sequence[str]], experiment: str,
               selectors: Iterable[Mapping[str, str] | None], replicas: Mapping[str, int] | None = None,
               owner: Mapping | None = None) -> dict[str, dict]:
    """The arms' manifests, arm -> object, from the target workload as the API returns it.

    container: the engine container's name; args: arm -> that container's full args (the
    baseline's are the target's own; the candidate's differ by the knob); selectors: the
    spec.selector of every Service in the namespace; replicas: arm -> replicas (default 1 each);
    owner: an ownerReference (apiVersion, kind, name, uid) to the experiment's own object."""
    kind = target.get("kind")
    if kind not in KINDS:
        raise CloneError(f"{kind or 'an object without a kind'} cannot be cloned into arms: only a Deployment or a "
                         "StatefulSet (a KServe InferenceService or a LeaderWorkerSet is read through the Deployment "
                         "it owns, where that is how it runs)")
    meta = target.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    template = ((target.get("spec") or {}).get("template")) or {}
    containers = (template.get("spec") or {}).get("containers") or []
    if not name or not containers:
        raise CloneError("the target has no name or no pod template with containers")
    names = [c.get("name") for c in containers]
    if container not in names:
        raise CloneError(f"{kind.lower()}/{name} has no container named {container!r} (its containers: "
                         f"{', '.join(map(str, names))})")
    selectors = list(selectors)
    drop = selected_keys(selectors)
    out = {}
    for arm, arm_args in args.items():
        mine = {LABEL_EXPERIMENT: _label_value(experiment), LABEL_ARM: arm}
        pod = copy.deepcopy(dict(template))
        pod_meta = pod.setdefault("metadata", {})
        kept = {k: v for k, v in (pod_meta.get("labels") or {}).items() if k not in drop}
        pod_meta["labels"] = {**kept, **mine, MANAGED_BY[0]: MANAGED_BY[1]}
        for c in pod["spec"]["containers"]:
            if c.get("name") == container:
                c["args"] = [str(a) for a in arm_args]
        still = selected_by(pod_meta["labels"], selectors)
        if still:  # cannot happen once every selected key is dropped; kept as the rule's own check
            raise CloneError(f"the {arm} arm's pods would be selected by a Service ({still[0]})")
        spec = {k: copy.deepcopy(v) for k, v in (target.get("spec") or {}).items()
                if k not in ("template", "selector", "replicas", "paused")}
        spec.update(replicas=(replicas or {}).get(arm, 1), selector={"matchLabels": mine}, template=pod)
        obj_meta = {"name": arm_name(name, experiment, arm), "namespace": namespace,
                    "labels": {**mine, MANAGED_BY[0]: MANAGED_BY[1]},
                    "annotations": {"llm-advisor.io/cloned-from": f"{kind.lower()}/{name}"}}
        if owner:
            obj_meta["ownerReferences"] = [{**dict(owner), "blockOwnerDeletion": True}]
        out[arm] = {"apiVersion": target.get("apiVersion", "apps/v1"), "kind": kind,
                    "metadata": {k: v for k, v in obj_meta.items() if v is not None}, "spec": spec}
    return out


def experiment_label(experiment: str) -> str:
    """The value of LABEL_EXPERIMENT on everything an experiment creates."""
    return _label_value(experiment)


def _label_value(text: str) -> str:
    """A label value (at most 63 characters of [A-Za-z0-9._-], alphanumeric at both ends)."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", text)[:_NAME_MAX].strip("-._")
    return value or "x"


def differences(a: object, b: object, path: str = "") -> list[str]:
    """The paths where two objects differ ("spec.template.spec.containers[0].args"), for the rule
    that arms differ only where the knob and their arm label say."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += differences(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and not all(
            isinstance(x, str) for x in a + b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def strip_server_fields(obj: Mapping) -> dict:
    """The target as a user would have applied it: what the API server and controllers add removed
    (for `--plan` and for comparing the arms with the target)."""
    out = copy.deepcopy(dict(obj))
    out.pop("status", None)
    meta = out.get("metadata") or {}
    for k in _SERVER_METADATA:
        meta.pop(k, None)
    notes = meta.get("annotations") or {}
    for k in _CONTROLLER_ANNOTATIONS:
        notes.pop(k, None)
    return out


DIFFERS = "# <- the knob: differs from the baseline"


def manifests_yaml(arms: Mapping[str, Mapping]) -> str:
    """The arms as YAML documents that `kubectl apply -f` accepts, the baseline first; in every arm
    after it, each line of the engine's args that differs from the baseline's is marked with a
    comment (names and arm labels differ by construction and are not marked)."""
    docs = {arm: yaml.safe_dump(dict(obj), sort_keys=False, default_flow_style=False, width=1000).splitlines()
            for arm, obj in arms.items()}
    order = list(docs)
    base = docs[order[0]]
    out = [f"# {order[0]}", *base]
    for arm in order[1:]:
        lines = list(docs[arm])
        matcher = difflib.SequenceMatcher(a=base, b=lines, autojunk=False)
        for op, _, _, j1, j2 in matcher.get_opcodes():
            if op in ("replace", "insert"):
                for j in range(j1, j2):
                    text = lines[j].strip()
                    if text.startswith("- ") and not any(k in text for k in (LABEL_ARM, "name:")):
                        lines[j] = f"{lines[j]}  {DIFFERS}"
        out += ["---", f"# {arm}", *lines]
    return "\n".join(out) + "\n"
