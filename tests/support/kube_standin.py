"""A Kubernetes API server stand-in with a controller, scheduler and kubelet stand-in, for tests.

No real API server can run on the test machine, so code that talks to Kubernetes (the experiment
launcher, through lightkube's sync `Client`) is tested against this: a plain-HTTP server on
127.0.0.1 that speaks the real REST API's paths, JSON objects, list kinds and `Status` error bodies,
backed by an in-memory store, with background loops that act as the cluster's controllers and as
one kubelet that runs each scheduled container as a local process.

    with KubeStandIn(nodes=[node("gpu-1", gpus=1)], images={"demo/server": [sys.executable, "-c", SRC]}) as k:
        k.write_kubeconfig(tmp_path / "kubeconfig", namespace="ns")
        client = lightkube.Client(lightkube.KubeConfig.from_file(tmp_path / "kubeconfig"))

What it emulates
- REST: `GET /version`, discovery (`/api`, `/apis`, `/api/v1`, `/apis/apps/v1`); core/v1 namespaces,
  nodes, pods (+ `log`, `status`), services, events, resourcequotas, configmaps, secrets,
  serviceaccounts; apps/v1 deployments, statefulsets, replicasets (+ `status`, `scale`). Verbs get,
  list (also across namespaces), create, update (PUT, with resourceVersion conflicts), patch (merge,
  JSON patch, strategic merge approximated as merge patch whose lists of named items merge by name,
  apply patch approximated as merge patch), delete, deletecollection, and watch (a stream of
  ADDED/MODIFIED/DELETED from an in-memory change log, so lightkube's `Client.wait` works).
- Server-set fields (uid, resourceVersion from one global counter, creationTimestamp, generation,
  generateName), defaulting (restartPolicy, grace period, requests copied from limits, ...),
  minimal validation (422 Invalid: names, containers, images, selector vs template labels),
  409 AlreadyExists/Conflict, 404 NotFound, 400 BadRequest, all as `Status` bodies.
- Label selectors (`=`, `==`, `!=`, exists, `!k`, `in`, `notin`, `>`, `<`) and field selectors
  (`metadata.name`, `metadata.namespace`, `spec.nodeName`, `status.phase`, `involvedObject.*`, ...);
  `limit`/`continue` paging.
- The pods proxy (`/api/v1/namespaces/NS/pods/NAME[:PORT]/proxy/PATH`), authorized as the
  `pods/proxy` subresource: the request goes to the pod IP without its Authorization header (the
  real authentication filter deletes it), and the answer comes back as Go's ReverseProxy relays it
  (text/event-stream and bodies of unknown length flushed piece by piece). Not emulated: the real
  one's Go HTTP stack, TLS to the API server, and the network between the client, the API server
  and the node; WebSocket upgrades through it.
- SelfSubjectAccessReview (`kubectl auth can-i`), answered from the forbid list below.
- Bearer-token authentication (401 without the kubeconfig's token) and authorization by a deny
  list: `forbid={(verb, resource)}` answers 403 Forbidden with the real message form.
- Deletion: grace periods (pods stay listed, with deletionTimestamp, until their processes are
  stopped), propagationPolicy Background (default), Foreground (owner kept with the
  `foregroundDeletion` finalizer until its blocking dependents are gone) and Orphan, preconditions,
  and a garbage collector that deletes objects whose every owner (by ownerReferences uid) is gone
  (an owner uid that never existed counts as gone, as in a real cluster).
- Controllers: Deployments, ReplicaSets and StatefulSets keep `spec.replicas` pods (StatefulSets
  by ordinal, OrderedReady or Parallel) and report status; a changed pod template replaces the old
  pods (a Recreate-like rollout, not a surge). ResourceQuota admission (`pods`, `requests.*`,
  `limits.*`, `cpu`, `memory`) with `status.used`, FailedCreate events, ServiceAccount admission.
- Scheduler: nodeSelector, required node affinity, NoSchedule/NoExecute taints, unschedulable
  nodes, requested resources vs `status.allocatable`; FailedScheduling events with the real
  `0/N nodes are available: ...` and `preemption: ...` message.
- Kubelet: each container is a local process in its own session and process group, at its own pod
  IP 127.X.Y.N (on loopback; X.Y drawn at random per stand-in), started with the argv its image maps to; env from value/valueFrom/
  envFrom and `$(VAR)` expansion; readiness/startup probes (httpGet, tcpSocket, exec); restarts with
  back-off and CrashLoopBackOff; ErrImagePull/ImagePullBackOff for images that map to nothing;
  OOMKilled by sampling the process tree's RSS against `limits.memory`; Events as a kubelet sends.

What it does NOT emulate (on purpose, or not yet)
- TLS, client certificates, RBAC beyond the forbid list, admission webhooks, other admission
  plugins (LimitRange, PodSecurity, default tolerations), quota scopes, `count/*` quota keys.
- ReplicaSets under Deployments: a Deployment owns its pods directly (ownerReferences point at the
  Deployment); pod names still have the `<name>-<10 hex>-<5 chars>` form, and the ReplicaSet
  controller's events (SuccessfulCreate, FailedCreate `Error creating: pods "..." is forbidden: ...`)
  are recorded on the Deployment. No adoption of orphans by selector, no rollout history, no
  maxSurge/maxUnavailable, no progress deadline.
- Real pod networking, Services routing or Endpoints, DNS, volumes and mounts, init containers,
  image pulls (an image is pullable when a prefix of it is in `images`), liveness probes (never
  kill), probe timings (compressed: every 0.5 s, 1 s timeout, initial delay at most 1 s).
- cgroups: memory is enforced by sampling RSS every ~0.5 s, CPU and GPUs not at all (GPU requests
  only count for scheduling and quota); no namespaces, no container filesystem: a process sees the
  test machine.
- Two deliberate departures a real kubelet does not make: the process argv is the container's
  `command` (else the image's mapped argv prefix) + `args` + [host_flag, podIP], so that two pods
  can serve the same containerPort on their own IPs; and back-off is short (1, 2, 4, 5 s).
- Field-level server-side apply (managedFields), strategic merge directives (`$patch`), watch
  bookmarks, `follow` on pod logs (the log so far is returned), table output, protobuf, events.k8s.io.

Test-facing extras: `audit` (every request as verb, path, resource, namespace, name), `requests`
(with query, body and answer code), `errors` (exceptions in the background loops), `objects()`,
`get()`, `add()` (seed objects as if applied before; `managed=False` leaves them to the test),
`container_pids()` and `pids()`.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import http.client
import json
import math
import os
import re
import secrets
import signal
import socket
import subprocess
import tempfile
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import psutil
import yaml

GIT_VERSION = "v1.34.1-standin"
DEFAULT_USER = "system:serviceaccount:advisor:advisor"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what the API server draws generateName suffixes from
_BACKOFF_CAP_S = 5.0
_PROBE_PERIOD_S = 0.5
_TICK_S = 0.1


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


# ---------------------------------------------------------------------------------------------
# Resources the server knows


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """As in messages: `deployments.apps`, `pods`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def kind_qualified(self) -> str:
        """As in Invalid messages: `Deployment.apps`, `Pod`."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def has_status(self) -> bool:
        """Whether status is a subresource (so PUT/PATCH of the object leave it alone)."""
        return "status" in self.subresources


RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "Namespace", False, ("status",)),
    Resource("", "v1", "nodes", "Node", False, ("status",)),
    Resource("", "v1", "pods", "Pod", True, ("status", "log")),
    Resource("", "v1", "services", "Service", True, ("status",)),
    Resource("", "v1", "events", "Event", True),
    Resource("", "v1", "resourcequotas", "ResourceQuota", True, ("status",)),
    Resource("", "v1", "configmaps", "ConfigMap", True),
    Resource("", "v1", "secrets", "Secret", True),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True),
    Resource("apps", "v1", "deployments", "Deployment", True, ("status", "scale")),
    Resource("apps", "v1", "statefulsets", "StatefulSet", True, ("status", "scale")),
    Resource("apps", "v1", "replicasets", "ReplicaSet", True, ("status", "scale")),
)


def resource(plural: str) -> Resource:
    """The resource by plural (`pods`) or qualified plural (`deployments.apps`)."""
    for res in RESOURCES:
        if plural in (res.plural, res.qualified):
            return res
    raise KeyError(f"the stand-in has no resource {plural!r}")


def _resource_at(group: str, version: str, plural: str) -> Resource | None:
    return next((r for r in RESOURCES if (r.group, r.version, r.plural) == (group, version, plural)), None)


def _resource_of(obj: Mapping) -> Resource:
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    for res in RESOURCES:
        if res.api_version == api_version and res.kind == kind:
            return res
    raise KeyError(f"the stand-in has no resource for apiVersion {api_version!r} kind {kind!r}")


NAMESPACES, NODES, PODS, SERVICES, EVENTS, QUOTAS, CONFIGMAPS, SECRETS, SERVICEACCOUNTS, DEPLOYMENTS, \
    STATEFULSETS, REPLICASETS = RESOURCES
_WORKLOADS = (DEPLOYMENTS, STATEFULSETS, REPLICASETS)


# ---------------------------------------------------------------------------------------------
# Small helpers over API objects


def _meta(obj: Mapping) -> dict:
    return obj.get("metadata") or {}


def _uid(obj: Mapping) -> str:
    return str(_meta(obj).get("uid") or "")


def _deleting(obj: Mapping) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def _labels(obj: Mapping) -> dict[str, str]:
    return dict(_meta(obj).get("labels") or {})


def _pod_ready(pod: Mapping) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _pod_done(pod: Mapping) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _owned_by(obj: Mapping, uid: str) -> bool:
    return any(r.get("uid") == uid for r in _meta(obj).get("ownerReferences") or [])


def _hash(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def _suffix(n: int = 5) -> str:
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(n))


def _go_duration(seconds: float) -> str:
    """As Go prints a time.Duration of whole seconds: `10s`, `1m0s`."""
    s = int(round(seconds))
    return f"{s // 60}m{s % 60}s" if s >= 60 else f"{s}s"


# ---------------------------------------------------------------------------------------------
# Quantities


_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|[a-zA-Z]*)$")
_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18), "Ki": Fraction(2**10), "Mi": Fraction(2**20),
    "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60)}


def quantity(value: object) -> Fraction:
    """A Kubernetes quantity (`500m`, `32Gi`, `1e3`, 2) as an exact number."""
    if isinstance(value, (int, float)):
        return Fraction(value)
    m = _QUANTITY.match(str(value).strip())
    if not m or (m.group(2) not in _SUFFIXES and not re.fullmatch(r"[eE][+-]?[0-9]+", m.group(2))):
        raise ValueError(f"quantities must match the regular expression "
                         f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}")
    number, suffix = Fraction(m.group(1)), m.group(2)
    if suffix in _SUFFIXES:
        return number * _SUFFIXES[suffix]
    return number * Fraction(10) ** int(suffix[1:])


def format_quantity(name: str, value: Fraction) -> str:
    """A canonical-looking quantity: CPU in cores or millicores, bytes in the largest exact binary unit."""
    if value.denominator != 1:
        if "cpu" in name:
            return f"{math.ceil(value * 1000)}m"
        value = Fraction(math.ceil(value))
    n = int(value)
    if "memory" in name or "storage" in name:
        for unit in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            size = int(_SUFFIXES[unit])
            if n and n % size == 0:
                return f"{n // size}{unit}"
    return str(n)


def _container_requests(c: Mapping) -> dict[str, Fraction]:
    res = c.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}  # limits stand in for absent requests
    return {k: quantity(v) for k, v in merged.items()}


def pod_requests(spec: Mapping) -> dict[str, Fraction]:
    """What a pod requests for scheduling: the sum over its containers, at least each init container's,
    plus its overhead."""
    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        for k, v in _container_requests(c).items():
            total[k] = total.get(k, Fraction(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in _container_requests(c).items():
            total[k] = max(total.get(k, Fraction(0)), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, Fraction(0)) + quantity(v)
    return total


def _pod_limits(spec: Mapping) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        for k, v in ((c.get("resources") or {}).get("limits") or {}).items():
            total[k] = total.get(k, Fraction(0)) + quantity(v)
    return total


# ---------------------------------------------------------------------------------------------
# Selectors


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector."""
    key: str
    op: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt (= and == are In, != is NotIn)
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has, value = self.key in labels, labels.get(self.key)
        if self.op == "In":
            return has and value in self.values
        if self.op == "NotIn":
            return not has or value not in self.values
        if self.op == "Exists":
            return has
        if self.op == "DoesNotExist":
            return not has
        try:
            number, bound = int(value or ""), int(self.values[0])
        except ValueError:
            return False
        return number > bound if self.op == "Gt" else number < bound


_SET_TERM = re.compile(r"^([^\s!=<>(),]+)\s+(in|notin)\s+\(([^)]*)\)$")
_EQ_TERM = re.compile(r"^([^\s!=<>(),]+)\s*(==|=|!=|>|<)\s*([^\s!=<>(),]*)$")
_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _split_terms(text: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return [t.strip() for t in terms if t.strip()]


def parse_label_selector(text: str) -> list[Requirement]:
    """The requirements of a labelSelector query string; ValueError names the term it cannot read."""
    out = []
    for term in _split_terms(text or ""):
        if m := _SET_TERM.match(term):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            out.append(Requirement(m.group(1), "In" if m.group(2) == "in" else "NotIn", values))
        elif m := _EQ_TERM.match(term):
            op = {"=": "In", "==": "In", "!=": "NotIn", ">": "Gt", "<": "Lt"}[m.group(2)]
            out.append(Requirement(m.group(1), op, (m.group(3),)))
        elif term.startswith("!") and _KEY.match(term[1:].strip()):
            out.append(Requirement(term[1:].strip(), "DoesNotExist"))
        elif _KEY.match(term):
            out.append(Requirement(term, "Exists"))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return out


def selector_matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector object (matchLabels, matchExpressions); an empty one matches everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(Requirement(e.get("key", ""), e.get("operator", ""), tuple(e.get("values") or ())).matches(labels)
               for e in selector.get("matchExpressions") or [])


_FIELDS_ALL = ("metadata.name", "metadata.namespace")
_FIELDS: dict[str, tuple[str, ...]] = {
    "pods": ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
             "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"),
    "events": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
               "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
               "reason", "reportingComponent", "source", "type"),
    "nodes": ("spec.unschedulable",),
    "namespaces": ("status.phase",),
    "secrets": ("type",),
    "replicasets": ("status.replicas",),
}


def _field_value(obj: Mapping, path: str) -> str:
    if path == "source":
        path = "source.component"
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


def parse_field_selector(text: str, plural: str) -> list[tuple[str, bool, str]]:
    """(field, equal?, value) terms; ValueError for an operator or field the server does not support."""
    out = []
    allowed = _FIELDS_ALL + _FIELDS.get(plural, ())
    for term in _split_terms(text or ""):
        m = re.match(r"^([^!=]+?)\s*(==|=|!=)\s*(.*)$", term)
        if not m:
            raise ValueError(f"invalid selector: '{text}'; can't understand '{term}'")
        if m.group(1) not in allowed:
            raise ValueError(f"field label not supported: {m.group(1)}")
        out.append((m.group(1), m.group(2) != "!=", m.group(3)))
    return out


def _fields_match(obj: Mapping, terms: Sequence[tuple[str, bool, str]]) -> bool:
    return all((_field_value(obj, f) == v) == eq for f, eq, v in terms)


# ---------------------------------------------------------------------------------------------
# Errors as the API server words them


class ApiFailure(Exception):
    """An answer other than success, carried to the handler as a `Status` body."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(res: Resource, name: str | None) -> dict:
    return {k: v for k, v in (("name", name), ("group", res.group), ("kind", res.plural)) if v}


def not_found(res: Resource, name: str) -> ApiFailure:
    return ApiFailure(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def already_exists(res: Resource, name: str) -> ApiFailure:
    return ApiFailure(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name))


def conflict(res: Resource, name: str, why: str = "the object has been modified; please apply your changes to "
                                                    "the latest version and try again") -> ApiFailure:
    return ApiFailure(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
                      _details(res, name))


def bad_request(message: str) -> ApiFailure:
    return ApiFailure(400, "BadRequest", message)


def invalid(res: Resource, name: str, causes: Sequence[tuple[str, str]]) -> ApiFailure:
    """causes: (field, `Invalid value: ...` / `Required value: ...` text)."""
    texts = [f"{f}: {t}" for f, t in causes]
    message = f'{res.kind_qualified} "{name}" is invalid: ' + (texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]")
    reason = {"Required": "FieldValueRequired", "Forbidden": "FieldValueForbidden",
              "Duplicate": "FieldValueDuplicate"}
    details = {"name": name, "group": res.group, "kind": res.kind,
               "causes": [{"reason": reason.get(t.split(" ")[0], "FieldValueInvalid"), "message": t, "field": f}
                          for f, t in causes]}
    return ApiFailure(422, "Invalid", message, {k: v for k, v in details.items() if v != ""})


def forbidden(verb: str, res: Resource, sub: str | None, namespace: str | None, name: str | None,
              user: str) -> ApiFailure:
    what = f'{res.qualified} "{name}"' if name else res.qualified
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    rbac = f"{res.plural}/{sub}" if sub else res.plural
    message = (f'{what} is forbidden: User "{user}" cannot {verb} resource "{rbac}" in API group '
               f'"{res.group}" {scope}')
    return ApiFailure(403, "Forbidden", message, _details(res, name))


_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_NAME_RULES = {
    "subdomain": (_SUBDOMAIN, 253, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                  "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
                  "'example.com', regex used for validation is "
                  "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
    "label": (_LABEL_1123, 63, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
              "or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
              "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
    "dns1035": (_LABEL_1035, 63, "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                "start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  "
                "or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"),
}
_NAME_KIND = {"namespaces": "label", "services": "dns1035"}


def _name_problem(name: str, rule: str) -> str | None:
    pattern, limit, text = _NAME_RULES[rule]
    if len(name) > limit:
        return f'Invalid value: "{name}": must be no more than {limit} characters'
    if not pattern.match(name):
        return f'Invalid value: "{name}": {text}'
    return None


# ---------------------------------------------------------------------------------------------
# Patches


def merge_patch(target: Any, patch: Any, by_name: bool = False) -> Any:
    """RFC 7386 merge patch; by_name: lists of named objects merge item by item (strategic merge's
    commonest case, for containers, env, ports, volumes)."""
    if isinstance(patch, list) and by_name and isinstance(target, list) and _named(patch) and _named(target):
        merged = [copy.deepcopy(t) for t in target]
        index = {t["name"]: i for i, t in enumerate(merged)}
        for item in patch:
            if item["name"] in index:
                merged[index[item["name"]]] = merge_patch(merged[index[item["name"]]], item, by_name)
            else:
                merged.append(copy.deepcopy(item))
        return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v, by_name)
    return out


def _named(items: list) -> bool:
    return all(isinstance(i, dict) and "name" in i for i in items)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    return doc


def json_patch(doc: Any, ops: Sequence[Mapping]) -> Any:
    """RFC 6902 (add, remove, replace, test, move, copy); ValueError on a failed op."""
    doc = copy.deepcopy(doc)
    for op in ops:
        kind, parts = op.get("op"), _pointer(str(op.get("path", "")))
        try:
            if kind == "test":
                if _walk(doc, parts) != op.get("value"):
                    raise ValueError(f"testing value {op.get('path')} failed")
                continue
            if kind in ("move", "copy"):
                src = _pointer(str(op.get("from", "")))
                value = copy.deepcopy(_walk(doc, src))
                if kind == "move":
                    doc = _json_remove(doc, src)
                doc = _json_add(doc, parts, value)
            elif kind == "add":
                doc = _json_add(doc, parts, copy.deepcopy(op.get("value")))
            elif kind == "remove":
                doc = _json_remove(doc, parts)
            elif kind == "replace":
                doc = _json_add(_json_remove(doc, parts), parts, copy.deepcopy(op.get("value")))
            else:
                raise ValueError(f"unexpected operation {kind!r}")
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError(f"the server rejected our request due to an error in our request: {kind} "
                             f"{op.get('path')}: {e}") from None
    return doc


def _json_add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent, last = _walk(doc, parts[:-1]), parts[-1]
    if isinstance(parent, list):
        parent.insert(len(parent) if last == "-" else int(last), value)
    else:
        parent[last] = value
    return doc


def _json_remove(doc: Any, parts: list[str]) -> Any:
    parent, last = _walk(doc, parts[:-1]), parts[-1]
    if isinstance(parent, list):
        del parent[int(last)]
    else:
        del parent[last]
    return doc


# ---------------------------------------------------------------------------------------------
# The store


class _Change(NamedTuple):
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    res: Resource
    obj: dict


class _Store:
    """Objects by (group/version, plural, namespace, name) with one global resourceVersion counter and
    a bounded change log that watches read. Callers get deep copies, never the stored dicts."""

    def __init__(self, history: int = 20000) -> None:
        self.cond = threading.Condition(threading.RLock())
        self._buckets: dict[tuple[str, str], dict[tuple[str, str], dict]] = {}
        self._rv = 0
        self._changes: deque[_Change] = deque(maxlen=history)
        self._born: dict[str, int] = {}  # uid -> the resourceVersion it was created at (creation order)
        self.closed = False

    @property
    def rv(self) -> int:
        return self._rv

    def born(self, uid: str) -> int:
        return self._born.get(uid, 0)

    def _bucket(self, res: Resource) -> dict[tuple[str, str], dict]:
        return self._buckets.setdefault((res.api_version, res.plural), {})

    def get(self, res: Resource, namespace: str | None, name: str) -> dict | None:
        with self.cond:
            obj = self._bucket(res).get((namespace or "", name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, res: Resource, namespace: str | None = None) -> list[dict]:
        with self.cond:
            found = sorted((k, o) for k, o in self._bucket(res).items() if namespace is None or k[0] == namespace)
            return [copy.deepcopy(o) for _, o in found]

    def everything(self) -> list[tuple[Resource, dict]]:
        with self.cond:
            return [(res, copy.deepcopy(o)) for res in RESOURCES for _, o in sorted(self._bucket(res).items())]

    def _save(self, res: Resource, obj: dict, change: str) -> dict:
        self._rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        if change != "DELETED":
            self._bucket(res)[(_meta(obj).get("namespace") or "", _meta(obj)["name"])] = obj
        self._changes.append(_Change(self._rv, change, res, copy.deepcopy(obj)))
        self.cond.notify_all()
        return copy.deepcopy(obj)

    def insert(self, res: Resource, obj: dict) -> dict | None:
        """None when the name is taken."""
        with self.cond:
            key = (_meta(obj).get("namespace") or "", _meta(obj)["name"])
            if key in self._bucket(res):
                return None
            saved = self._save(res, copy.deepcopy(obj), "ADDED")
            self._born[_uid(saved)] = self._rv
            return saved

    def update(self, res: Resource, namespace: str | None, name: str, change: Callable[[dict], Any],
               uid: str | None = None) -> dict | None:
        """Apply change to a copy and save it if it differs; None when absent (or another uid)."""
        with self.cond:
            cur = self._bucket(res).get((namespace or "", name))
            if cur is None or (uid and _uid(cur) != uid):
                return None
            new = copy.deepcopy(cur)
            change(new)
            if _same(new, cur):
                return copy.deepcopy(cur)
            return self._save(res, new, "MODIFIED")

    def remove(self, res: Resource, namespace: str | None, name: str, uid: str | None = None) -> dict | None:
        with self.cond:
            bucket = self._bucket(res)
            cur = bucket.get((namespace or "", name))
            if cur is None or (uid and _uid(cur) != uid):
                return None
            del bucket[(namespace or "", name)]
            self._born.pop(_uid(cur), None)
            return self._save(res, cur, "DELETED")

    def changes_after(self, rv: int) -> list[_Change] | None:
        """None when the log no longer reaches back to rv (a watch from there is 410 Gone)."""
        with self.cond:
            if self._changes and rv < self._changes[0].rv - 1:
                return None
            return [c for c in self._changes if c.rv > rv]

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def _same(a: Mapping, b: Mapping) -> bool:
    def bare(o: Mapping) -> dict:
        return {**o, "metadata": {k: v for k, v in _meta(o).items() if k != "resourceVersion"}}
    return bare(a) == bare(b)


# ---------------------------------------------------------------------------------------------
# Helpers for tests: nodes


def node(name: str, cpu: str = "8", memory: str = "32Gi", gpus: int = 0, labels: Mapping[str, str] | None = None,
         taints: Sequence[Mapping] | None = None) -> dict:
    """A v1 Node as its kubelet registers it: capacity = allocatable, Ready, the well-known labels."""
    capacity = {"cpu": str(cpu), "memory": str(memory), "pods": "110", "ephemeral-storage": "100Gi"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    now = _now()

    def condition(kind: str, status: str, reason: str, message: str) -> dict:
        return {"type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now}

    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              "kubernetes.io/arch": "amd64", **(labels or {})}},
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {
            "capacity": capacity, "allocatable": dict(capacity),
            "conditions": [condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                                     "kubelet has sufficient memory available"),
                           condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                                     "kubelet has no disk pressure"),
                           condition("PIDPressure", "False", "KubeletHasSufficientPID",
                                     "kubelet has sufficient PID available"),
                           condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"architecture": "amd64", "bootID": _hash(name + "boot", 32), "machineID": _hash(name, 32),
                         "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)), "containerRuntimeVersion":
                         "standin://1.0", "kernelVersion": os.uname().release, "kubeProxyVersion": GIT_VERSION,
                         "kubeletVersion": GIT_VERSION, "operatingSystem": "linux", "osImage": "kube stand-in"},
        },
    }


# ---------------------------------------------------------------------------------------------
# The audit record


class AuditEntry(NamedTuple):
    verb: str  # get, list, watch, create, update, patch, delete, deletecollection
    path: str
    resource: str  # plural, `pods/log` for a subresource, "" for /version and discovery
    namespace: str | None
    name: str | None


@dataclass
class RequestRecord:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    code: int = 0


# ---------------------------------------------------------------------------------------------
# The cluster: admission, create/update/delete semantics and events, shared by the API and loops


class _Cluster:
    def __init__(self, user: str) -> None:
        self.store = _Store()
        self.user = user
        self.unmanaged: set[str] = set()  # uids the controllers, scheduler and kubelet leave alone
        self._event_index: dict[tuple, tuple[str, str]] = {}
        self.has_kubelet: Callable[[str], bool] = lambda uid: False

    # -- events ------------------------------------------------------------------------------

    def event(self, res: Resource, obj: Mapping, kind: str, reason: str, message: str, component: str,
              host: str | None = None, field_path: str | None = None, key: tuple | None = None) -> None:
        """Record an Event on obj, or bump the count of the same one (same reason and message, or key)."""
        meta = _meta(obj)
        ns = meta.get("namespace") or "default"
        key = (meta.get("uid"), reason, field_path) + (key if key is not None else (message,))
        now = _now()
        with self.store.cond:
            found = self._event_index.get(key)

            def bump(e: dict) -> None:
                e["count"] = int(e.get("count") or 1) + 1
                e["lastTimestamp"] = now
                e["message"] = message

            if found and self.store.update(EVENTS, found[0], found[1], bump):
                return
            involved = {"kind": res.kind, "namespace": meta.get("namespace"), "name": meta.get("name"),
                        "uid": meta.get("uid"), "apiVersion": res.api_version,
                        "resourceVersion": meta.get("resourceVersion"), "fieldPath": field_path}
            name = f"{meta.get('name')}.{secrets.token_hex(8)}"
            source = {"component": component, **({"host": host} if host else {})}
            ev = {"apiVersion": "v1", "kind": "Event",
                  "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": now},
                  "involvedObject": {k: v for k, v in involved.items() if v is not None},
                  "reason": reason, "message": message, "source": source, "firstTimestamp": now,
                  "lastTimestamp": now, "count": 1, "type": kind, "reportingComponent": component,
                  "reportingInstance": host or component}
            self.store.insert(EVENTS, ev)
            self._event_index[key] = (ns, name)

    # -- namespaces ----------------------------------------------------------------------------

    def ensure_namespace(self, name: str) -> None:
        if self.store.get(NAMESPACES, None, name) is None:
            self.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, None,
                        admit=False)

    def _namespace_created(self, ns: str) -> None:
        """What the service account controller does for every new namespace."""
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}
        self.store.insert(SERVICEACCOUNTS, self._server_fields(sa))

    # -- create --------------------------------------------------------------------------------

    @staticmethod
    def _server_fields(obj: dict) -> dict:
        meta = obj.setdefault("metadata", {})
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta.pop("resourceVersion", None)
        meta.pop("deletionTimestamp", None)
        if "spec" in obj or obj.get("kind") in ("Deployment", "StatefulSet", "ReplicaSet", "Pod"):
            meta["generation"] = 1
        return obj

    def create(self, res: Resource, body: Mapping, namespace: str | None, admit: bool = True,
               managed: bool = True) -> dict:
        """The POST semantics: server fields, defaults, validation, admission; ApiFailure on refusal."""
        obj = copy.deepcopy(dict(body))
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent on "
                                  "the request")
            meta["namespace"] = namespace or meta.get("namespace") or "default"
            if self.store.get(NAMESPACES, None, meta["namespace"]) is None:
                if admit:
                    raise not_found(NAMESPACES, meta["namespace"])
                self.ensure_namespace(meta["namespace"])
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + _suffix()
        if res.has_status and res not in (NODES, NAMESPACES):
            obj.pop("status", None)  # status is the cluster's to write
        _default(res, obj)
        _validate(res, obj)
        if res is SECRETS and obj.get("stringData"):
            data = obj.setdefault("data", {})
            for k, v in obj.pop("stringData").items():
                data[k] = base64.b64encode(str(v).encode()).decode()
        if res is SERVICES:
            _service_defaults(obj)
        with self.store.cond:  # admission and insertion as one step, as quota needs
            if admit and res is PODS:
                self._admit_pod(obj)
            saved = self.store.insert(res, self._server_fields(obj))
            if saved is None:
                raise already_exists(res, meta["name"])
            if not managed:
                self.unmanaged.add(_uid(saved))
            if res is NAMESPACES:
                self._namespace_created(meta["name"])
        return saved

    def _admit_pod(self, pod: dict) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        sa = spec.get("serviceAccountName") or "default"
        if self.store.get(SERVICEACCOUNTS, meta["namespace"], sa) is None:
            raise ApiFailure(403, "Forbidden", f'pods "{meta["name"]}" is forbidden: error looking up service '
                             f'account {meta["namespace"]}/{sa}: serviceaccount "{sa}" not found',
                             _details(PODS, meta["name"]))
        self.check_quota(pod)

    # -- quota ---------------------------------------------------------------------------------

    def quota_usage(self, namespace: str, keys: Iterable[str]) -> dict[str, Fraction]:
        pods = [p for p in self.store.list(PODS, namespace) if not _pod_done(p)]
        return {k: sum((_pod_quota(p.get("spec") or {}).get(k, Fraction(0)) for p in pods), Fraction(0))
                for k in keys}

    def check_quota(self, pod: Mapping) -> None:
        """ApiFailure 403 `exceeded quota` when creating pod would exceed a ResourceQuota of its namespace."""
        meta = _meta(pod)
        wants = _pod_quota(pod.get("spec") or {})
        for q in self.store.list(QUOTAS, meta.get("namespace")):
            hard = {k: quantity(v) for k, v in ((q.get("spec") or {}).get("hard") or {}).items()}
            used = self.quota_usage(meta["namespace"], hard)
            over = sorted(k for k in hard if wants.get(k, 0) > 0 and used[k] + wants[k] > hard[k])
            if over:
                def listing(values: Mapping[str, Fraction]) -> str:
                    return ",".join(f"{k}={format_quantity(k, values.get(k, Fraction(0)))}" for k in over)
                message = (f'pods "{meta["name"]}" is forbidden: exceeded quota: {_meta(q)["name"]}, '
                           f"requested: {listing(wants)}, used: {listing(used)}, limited: {listing(hard)}")
                raise ApiFailure(403, "Forbidden", message, _details(PODS, meta["name"]))

    # -- delete --------------------------------------------------------------------------------

    def dependents(self, uid: str, blocking_only: bool = False) -> list[tuple[Resource, dict]]:
        return [(res, o) for res, o in self.store.everything()
                if any(r.get("uid") == uid and (r.get("blockOwnerDeletion") or not blocking_only)
                       for r in _meta(o).get("ownerReferences") or [])]

    def delete(self, res: Resource, namespace: str | None, name: str, policy: str | None = None,
               grace: int | None = None, preconditions: Mapping | None = None) -> dict:
        """The DELETE semantics; the answer is the object as deleted or as now marked for deletion."""
        policy = policy or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise bad_request(f'propagationPolicy: Unsupported value: "{policy}": supported values: '
                              f'"Foreground", "Background", "Orphan"')
        with self.store.cond:
            obj = self.store.get(res, namespace, name)
            if obj is None:
                raise not_found(res, name)
            _check_preconditions(res, obj, preconditions)
            uid = _uid(obj)
            if policy == "Orphan":
                self._orphan(uid)
            if res is NAMESPACES:
                return self._mark(res, obj, finalizers=(), phase="Terminating")
            if res is PODS and self.has_kubelet(uid) and grace != 0:
                period = grace if grace is not None else int((obj.get("spec") or {}).get(
                    "terminationGracePeriodSeconds", 30))
                return self._mark(res, obj, grace=period)
            if policy == "Foreground" and self.dependents(uid):
                return self._mark(res, obj, finalizers=("foregroundDeletion",))
            if _meta(obj).get("finalizers"):
                return self._mark(res, obj)
            return self.store.remove(res, namespace, name, uid) or obj

    def _mark(self, res: Resource, obj: Mapping, finalizers: Sequence[str] = (), grace: int | None = None,
              phase: str | None = None) -> dict:
        def mark(o: dict) -> None:
            meta = o["metadata"]
            meta.setdefault("deletionTimestamp", _now())
            meta.setdefault("deletionGracePeriodSeconds", grace if grace is not None else 0)
            if finalizers:
                meta["finalizers"] = sorted(set(meta.get("finalizers") or []) | set(finalizers))
            if phase:
                o.setdefault("status", {})["phase"] = phase
        meta = _meta(obj)
        return self.store.update(res, meta.get("namespace"), meta["name"], mark, _uid(obj)) or dict(obj)

    def _orphan(self, uid: str) -> None:
        for res, dep in self.dependents(uid):
            meta = _meta(dep)

            def drop(o: dict) -> None:
                refs = [r for r in o["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
                if refs:
                    o["metadata"]["ownerReferences"] = refs
                else:
                    o["metadata"].pop("ownerReferences", None)
            self.store.update(res, meta.get("namespace"), meta["name"], drop)

    # -- update --------------------------------------------------------------------------------

    def replace(self, res: Resource, namespace: str | None, name: str, body: Mapping, sub: str | None) -> dict:
        """PUT (and the end of PATCH): spec and metadata from body (status only through /status)."""
        new = copy.deepcopy(dict(body))
        with self.store.cond:
            cur = self.store.get(res, namespace, name)
            if cur is None:
                raise not_found(res, name)
            meta = new.setdefault("metadata", {})
            if meta.get("name", name) != name:
                raise bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                                  f"({name})")
            if meta.get("resourceVersion") and meta["resourceVersion"] != _meta(cur).get("resourceVersion"):
                raise conflict(res, name)
            merged = self._merge_update(res, cur, new, sub)
            if sub != "status":
                _default(res, merged)
                _validate(res, merged)
                _check_immutable(res, cur, merged)
            return self.store.update(res, namespace, name, lambda o: (o.clear(), o.update(merged)), _uid(cur)) or cur

    @staticmethod
    def _merge_update(res: Resource, cur: dict, new: dict, sub: str | None) -> dict:
        if sub == "status":
            return {**cur, "status": new.get("status", cur.get("status"))}
        merged = {**new, "apiVersion": res.api_version, "kind": res.kind}
        keep = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds",
                "namespace", "name")
        merged["metadata"] = {**{k: v for k, v in _meta(new).items() if k not in keep},
                              **{k: _meta(cur)[k] for k in keep if k in _meta(cur)}}
        if res.has_status:
            merged["status"] = cur.get("status")
            if merged["status"] is None:
                merged.pop("status")
        if merged.get("spec") != cur.get("spec") and "generation" in merged["metadata"]:
            merged["metadata"]["generation"] = int(merged["metadata"]["generation"]) + 1
        return merged


def _check_preconditions(res: Resource, obj: Mapping, pre: Mapping | None) -> None:
    pre = pre or {}
    if pre.get("uid") and pre["uid"] != _uid(obj):
        raise conflict(res, _meta(obj)["name"], f"Precondition failed: UID in precondition: {pre['uid']}, UID in "
                                                 f"object meta: {_uid(obj)}")
    if pre.get("resourceVersion") and pre["resourceVersion"] != _meta(obj).get("resourceVersion"):
        raise conflict(res, _meta(obj)["name"], f"Precondition failed: ResourceVersion in precondition: "
                                                 f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                                 f"{_meta(obj).get('resourceVersion')}")


def _pod_quota(spec: Mapping) -> dict[str, Fraction]:
    """A pod's usage under every quota key it can count against."""
    usage: dict[str, Fraction] = {"pods": Fraction(1), "count/pods": Fraction(1)}
    for k, v in pod_requests(spec).items():
        usage[f"requests.{k}"] = v
        if k in ("cpu", "memory", "ephemeral-storage"):
            usage[k] = v
    for k, v in _pod_limits(spec).items():
        usage[f"limits.{k}"] = v
    return usage


# ---------------------------------------------------------------------------------------------
# Defaulting and validation (the small part of the API server's that callers meet)


def _default_container(c: dict) -> None:
    image = str(c.get("image") or "")
    tag = image.rsplit("/", 1)[-1]
    c.setdefault("imagePullPolicy", "Always" if ":" not in tag or tag.endswith(":latest") else "IfNotPresent")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    res = c.setdefault("resources", {})
    limits = res.get("limits") or {}
    if limits:
        res["requests"] = {**limits, **(res.get("requests") or {})}
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")


def _default_pod_spec(spec: dict) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    if spec.get("serviceAccountName") or spec.get("serviceAccount"):
        spec.setdefault("serviceAccountName", spec.get("serviceAccount"))
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
    else:
        spec["serviceAccountName"] = spec["serviceAccount"] = "default"
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(c, dict):
            _default_container(c)


def _default(res: Resource, obj: dict) -> None:
    spec = obj.get("spec")
    if res is PODS and isinstance(spec, dict):
        _default_pod_spec(spec)
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", _qos(spec))
    elif res in _WORKLOADS and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        if res is DEPLOYMENTS:
            spec.setdefault("strategy", {"type": "RollingUpdate",
                                         "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
            spec.setdefault("progressDeadlineSeconds", 600)
        if res is STATEFULSETS:
            spec.setdefault("podManagementPolicy", "OrderedReady")
            spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        pod_spec = (spec.get("template") or {}).get("spec")
        if isinstance(pod_spec, dict):
            _default_pod_spec(pod_spec)
    elif res is NAMESPACES:
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("status", {"phase": "Active"})
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"].get("name", "")
    elif res is SECRETS:
        obj.setdefault("type", "Opaque")


def _qos(spec: Mapping) -> str:
    containers = spec.get("containers") or []
    resources = [c.get("resources") or {} for c in containers if isinstance(c, dict)]
    if not any((r.get("requests") or r.get("limits")) for r in resources):
        return "BestEffort"
    guaranteed = all(all(k in (r.get("limits") or {}) for k in ("cpu", "memory"))
                     and (r.get("requests") or {}).get("cpu", r["limits"]["cpu"]) == r["limits"]["cpu"]
                     and (r.get("requests") or {}).get("memory", r["limits"]["memory"]) == r["limits"]["memory"]
                     for r in resources)
    return "Guaranteed" if guaranteed else "Burstable"


def _service_defaults(svc: dict) -> None:
    spec = svc.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") != "None":
        spec.setdefault("clusterIP", f"10.96.{secrets.randbelow(255)}.{1 + secrets.randbelow(253)}")
        spec["clusterIPs"] = [spec["clusterIP"]]
    for p in spec.get("ports") or []:
        p.setdefault("protocol", "TCP")
        p.setdefault("targetPort", p.get("port"))


def _validate(res: Resource, obj: Mapping) -> None:
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    causes: list[tuple[str, str]] = []
    if not name:
        causes.append(("metadata.name", "Required value: name or generateName is required"))
    elif problem := _name_problem(name, _NAME_KIND.get(res.plural, "subdomain")):
        causes.append(("metadata.name", problem))
    spec = obj.get("spec") or {}
    if res is PODS:
        causes += _pod_spec_problems(spec, "spec")
    elif res in _WORKLOADS:
        causes += _workload_problems(spec)
    if causes:
        raise invalid(res, name, causes)


def _pod_spec_problems(spec: Mapping, at: str) -> list[tuple[str, str]]:
    causes = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append((f"{at}.containers", "Required value"))
    seen: set[str] = set()
    for i, c in enumerate(containers):
        cname = str(c.get("name") or "")
        if not cname:
            causes.append((f"{at}.containers[{i}].name", "Required value"))
        elif problem := _name_problem(cname, "label"):
            causes.append((f"{at}.containers[{i}].name", problem))
        elif cname in seen:
            causes.append((f"{at}.containers[{i}].name", f'Duplicate value: "{cname}"'))
        seen.add(cname)
        if not c.get("image"):
            causes.append((f"{at}.containers[{i}].image", "Required value"))
        for k, v in ((c.get("resources") or {}).get("limits") or {}).items():
            try:
                quantity(v)
            except ValueError as e:
                causes.append((f"{at}.containers[{i}].resources.limits[{k}]", f'Invalid value: "{v}": {e}'))
    return causes


def _workload_problems(spec: Mapping) -> list[tuple[str, str]]:
    causes = []
    selector = spec.get("selector")
    template = spec.get("template") or {}
    labels = _labels(template)
    if not selector:
        causes.append(("spec.selector", "Required value"))
    elif not selector_matches(selector, labels):
        shown = "map[string]string{" + ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items())) + "}"
        causes.append(("spec.template.metadata.labels", f"Invalid value: {shown}: `selector` does not match "
                                                         "template `labels`"))
    if int(spec.get("replicas", 1) or 0) < 0:
        causes.append(("spec.replicas", f"Invalid value: {spec.get('replicas')}: must be greater than or equal to 0"))
    return causes + _pod_spec_problems(template.get("spec") or {}, "spec.template.spec")


def _check_immutable(res: Resource, cur: Mapping, new: Mapping) -> None:
    name = _meta(cur)["name"]
    if res in _WORKLOADS and (cur.get("spec") or {}).get("selector") != (new.get("spec") or {}).get("selector"):
        shown = json.dumps((new.get("spec") or {}).get("selector"))
        raise invalid(res, name, [("spec.selector", f"Invalid value: {shown}: field is immutable")])
    if res is PODS:
        def without_images(spec: Mapping) -> dict:
            spec = copy.deepcopy(dict(spec or {}))
            for c in spec.get("containers") or []:
                c.pop("image", None)
            spec.pop("activeDeadlineSeconds", None)
            spec.pop("tolerations", None)
            return spec
        if without_images(cur.get("spec") or {}) != without_images(new.get("spec") or {}):
            raise invalid(res, name, [("spec", "Forbidden: pod updates may not change fields other than "
                                               "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                                               "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                                               "existing tolerations), `spec.terminationGracePeriodSeconds` (allow "
                                               "it to be set to 1 if it was previously negative)")])


# ---------------------------------------------------------------------------------------------
# Scheduler


def _tolerates(taint: Mapping, tolerations: Sequence[Mapping]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _node_term_matches(term: Mapping, node_obj: Mapping) -> bool:
    labels = _labels(node_obj)
    fields = {"metadata.name": _meta(node_obj).get("name", "")}
    return (all(Requirement(e.get("key", ""), e.get("operator", ""), tuple(e.get("values") or ())).matches(labels)
                for e in term.get("matchExpressions") or [])
            and all(Requirement(e.get("key", ""), e.get("operator", ""), tuple(e.get("values") or ())).matches(fields)
                    for e in term.get("matchFields") or []))


def _affinity_matches(spec: Mapping, node_obj: Mapping) -> bool:
    labels = _labels(node_obj)
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(_node_term_matches(t, node_obj) for t in terms)


def filter_node(spec: Mapping, node_obj: Mapping, bound: Sequence[Mapping]) -> tuple[str, list[str]]:
    """Why a pod (spec) cannot go to a node, as the scheduler's filter plugins in their order say
    it: ("", []) when it fits, else (plugin, reasons). bound: the pods already on that node."""
    tolerations = spec.get("tolerations") or []
    if (node_obj.get("spec") or {}).get("unschedulable") and not _tolerates(
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}, tolerations):
        return "NodeUnschedulable", ["node(s) were unschedulable"]
    for taint in (node_obj.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(taint, tolerations):
            shown = f"{{{taint.get('key')}: {taint.get('value', '')}}}"
            return "TaintToleration", [f"node(s) had untolerated taint {shown}"]
    if not _affinity_matches(spec, node_obj):
        return "NodeAffinity", ["node(s) didn't match Pod's node affinity/selector"]
    allocatable = {k: quantity(v) for k, v in ((node_obj.get("status") or {}).get("allocatable") or {}).items()}
    used: dict[str, Fraction] = {}
    for p in bound:
        for k, v in pod_requests(p.get("spec") or {}).items():
            used[k] = used.get(k, Fraction(0)) + v
    reasons = []
    if len(bound) + 1 > allocatable.get("pods", Fraction(110)):
        reasons.append("Too many pods")
    for k, v in sorted(pod_requests(spec).items()):
        if v > 0 and used.get(k, Fraction(0)) + v > allocatable.get(k, Fraction(0)):
            reasons.append(f"Insufficient {k}")
    return ("NodeResourcesFit", reasons) if reasons else ("", [])


def _histogram(counts: Mapping[str, int]) -> str:
    return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))


def unschedulable_message(failures: Sequence[tuple[str, list[str]]]) -> str:
    """The scheduler's FitError text for per-node failures [(plugin, reasons)]."""
    total = len(failures)
    if total == 0:
        return "no nodes available to schedule pods"
    counts: dict[str, int] = {}
    preemption: dict[str, int] = {}
    for plugin, reasons in failures:
        for r in reasons:
            counts[r] = counts.get(r, 0) + 1
        why = ("No preemption victims found for incoming pod" if plugin == "NodeResourcesFit"
               else "Preemption is not helpful for scheduling")
        preemption[why] = preemption.get(why, 0) + 1
    return (f"0/{total} nodes are available: {_histogram(counts)}. "
            f"preemption: 0/{total} nodes are available: {_histogram(preemption)}.")


# ---------------------------------------------------------------------------------------------
# Kubelet


def _normalize_image(image: str) -> str:
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/", "index.docker.io/"):
        if image.startswith(prefix):
            return image[len(prefix):]
    return image


def _image_id(image: str) -> str:
    repo = image.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    first = repo.split("/", 1)[0]
    if "/" not in repo:
        repo = f"docker.io/library/{repo}"
    elif "." not in first and ":" not in first and first != "localhost":
        repo = f"docker.io/{repo}"
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's $(VAR) expansion: defined variables replaced, `$$` an escaped `$`."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), str(text))


def _last_line(path: Path | None) -> str:
    if path is None or not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - 4096))
        lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def _signal_tree(proc: subprocess.Popen, sig: int) -> list[psutil.Process]:
    """Signal the process's group (its container) and every descendant, also those that left the
    group; the descendants signalled."""
    try:
        kids = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
    except psutil.Error:
        kids = []
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for k in kids:
        try:
            k.send_signal(sig)
        except psutil.Error:
            pass
    return kids


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _kill_tree(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """SIGKILL the process, its group and descendants; return once none of them runs (a descendant
    orphaned to init may stay a zombie until init reaps it: not running)."""
    kids = _signal_tree(proc, signal.SIGKILL)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + timeout
    while any(_running(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.02)


class _ProbeFailed(Exception):
    pass


def _probe_port(port: Any, container: Mapping) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise _ProbeFailed(f"port {port!r} is not a named port of the container")


def run_probe(probe: Mapping, ip: str, container: Mapping, env: Mapping[str, str], timeout: float = 1.0) -> bool:
    """One probe attempt (httpGet 200..399, tcpSocket connect, exec exit 0); False on any failure."""
    try:
        if "httpGet" in probe:
            get = probe["httpGet"]
            conn = http.client.HTTPConnection(get.get("host") or ip, _probe_port(get.get("port"), container),
                                              timeout=timeout)
            try:
                headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
                conn.request("GET", get.get("path") or "/", headers={"User-Agent": "kube-probe/1.34", **headers})
                return 200 <= conn.getresponse().status < 400
            finally:
                conn.close()
        if "tcpSocket" in probe:
            tcp = probe["tcpSocket"]
            with socket.create_connection((tcp.get("host") or ip, _probe_port(tcp.get("port"), container)),
                                          timeout=timeout):
                return True
        if "exec" in probe:
            done = subprocess.run(list(probe["exec"].get("command") or []), env=dict(env), timeout=timeout,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return done.returncode == 0
    except (OSError, http.client.HTTPException, subprocess.SubprocessError, _ProbeFailed, ValueError, KeyError):
        return False
    return True  # a probe with no handler the stand-in knows (grpc) counts as passing


@dataclass
class _Run:
    """One start of a container: its process and log."""
    proc: subprocess.Popen | None  # None: it could not be started
    log: Path
    started_at: str
    container_id: str


@dataclass
class _Container:
    spec: dict
    index: int
    runs: list[_Run] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    waiting: tuple[str, str] | None = ("ContainerCreating", "")
    terminated: dict | None = None  # the current state when it stays terminated (restartPolicy)
    last: dict | None = None
    restarts: int = 0
    ready: bool = False
    started: bool = False
    pulled: bool = False
    next_start: float = 0.0
    pull_failed_at: float | None = None
    pull_failures: int = 0
    probe_next: float = 0.0
    probe_failures: int = 0
    mem_next: float = 0.0
    env: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.spec.get("name"))

    @property
    def image(self) -> str:
        return str(self.spec.get("image") or "")

    def status(self) -> dict:
        if self.proc is not None and self.runs:
            state: dict = {"running": {"startedAt": self.runs[-1].started_at}}
        elif self.terminated is not None:
            state = {"terminated": self.terminated}
        else:
            reason, message = self.waiting or ("ContainerCreating", "")
            state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        out = {"name": self.name, "image": self.image, "imageID": _image_id(self.image) if self.pulled else "",
               "ready": self.ready, "started": self.started, "restartCount": self.restarts, "state": state,
               "lastState": {"terminated": self.last} if self.last else {}}
        if self.runs:
            out["containerID"] = self.runs[-1].container_id
        return out


class _PodWorker:
    """The kubelet's work for one pod: start, probe, watch, restart and finally stop its containers."""

    def __init__(self, standin: KubeStandIn, pod: Mapping, ip: str) -> None:
        self.s, self.cluster = standin, standin.cluster
        meta = _meta(pod)
        self.ns, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.node = (pod.get("spec") or {}).get("nodeName")
        self.ip = ip
        self.started_at = _now()
        self.containers = [_Container(copy.deepcopy(c), i) for i, c in enumerate((pod.get("spec") or {}).get(
            "containers") or [])]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"kubelet-{self.ns}-{self.name}", daemon=True)

    # -- loop ----------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                pod = self.cluster.store.get(PODS, self.ns, self.name)
                if pod is None or _uid(pod) != self.uid:
                    self._terminate(0)  # force-deleted: the kubelet kills what is left
                    return
                if _deleting(pod):
                    self._terminate(min(int(_meta(pod).get("deletionGracePeriodSeconds") or 0), 10))
                    self.cluster.store.remove(PODS, self.ns, self.name, self.uid)
                    return
                for c in self.containers:
                    self._step(pod, c)
                self._write_status()
                self.stop.wait(_TICK_S)
            self._terminate(2)  # close(): the stand-in is going away
        except Exception:  # noqa: BLE001 - a test reads these from standin.errors
            self.s.errors.append(traceback.format_exc())
            self._terminate(0)
        finally:
            self.s.kubelet_done(self)

    def _terminate(self, grace: float) -> None:
        with self.lock:
            procs = [c.proc for c in self.containers if c.proc is not None]
        kids = [k for p in procs for k in _signal_tree(p, signal.SIGTERM if grace > 0 else signal.SIGKILL)]
        deadline = time.monotonic() + grace
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for k in kids:  # descendants that outlived their leader's SIGTERM get the grace period's end too
            try:
                k.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        for p in procs:
            _kill_tree(p)  # also what the leader left behind in its group
        # A killed descendant runs until the kernel delivers the signal: on a loaded host that was
        # after close() returned (test_close_leaves_no_process_behind saw one running).
        deadline = time.monotonic() + 5.0
        while any(_running(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.02)
        with self.lock:
            for c in self.containers:
                c.proc, c.ready, c.started = None, False, False

    # -- one container -------------------------------------------------------------------------

    def _step(self, pod: Mapping, c: _Container) -> None:
        now = time.monotonic()
        if c.proc is None:
            if c.terminated is not None:
                return
            if c.waiting and c.waiting[0] == "ErrImagePull" and c.pull_failed_at and now - c.pull_failed_at > 0.5:
                self._image_backoff(pod, c)
            if now >= c.next_start:
                self._start(pod, c)
            return
        code = c.proc.poll()
        if code is not None:
            self._exited(pod, c, 128 - code if code < 0 else code, None)
            return
        if now >= c.mem_next:
            c.mem_next = now + 0.5
            if self._over_memory(c):
                _kill_tree(c.proc)
                self._exited(pod, c, 137, "OOMKilled")
                return
        if now >= c.probe_next:
            self._probe(pod, c, now)

    def _over_memory(self, c: _Container) -> bool:
        limit = ((c.spec.get("resources") or {}).get("limits") or {}).get("memory")
        return limit is not None and c.proc is not None and _tree_rss(c.proc.pid) > quantity(limit)

    def _event(self, pod: Mapping, c: _Container | None, kind: str, reason: str, message: str) -> None:
        path = f"spec.containers{{{c.name}}}" if c is not None else None
        self.cluster.event(PODS, pod, kind, reason, message, "kubelet", host=self.node, field_path=path)

    def _start(self, pod: Mapping, c: _Container) -> None:
        prefix = self.s.image_argv(c.image)
        if not c.pulled:
            self._event(pod, c, "Normal", "Pulling", f'Pulling image "{c.image}"')
        if prefix is None:
            self._pull_failed(pod, c)
            return
        if not c.pulled:
            c.pulled = True
            self._event(pod, c, "Normal", "Pulled", f'Successfully pulled image "{c.image}" in 0s (0s including '
                                                    "waiting)")
        else:
            self._event(pod, c, "Normal", "Pulled", f'Container image "{c.image}" already present on machine')
        try:
            env = self.s.container_env(pod, c.spec)
        except ValueError as e:
            c.waiting, c.next_start = ("CreateContainerConfigError", str(e)), time.monotonic() + 1.0
            self._event(pod, c, "Warning", "Failed", f"Error: {e}")
            return
        argv = [_expand(a, env) for a in (c.spec.get("command") or prefix)] + \
               [_expand(a, env) for a in c.spec.get("args") or []]
        if self.s.host_flag:
            argv += [self.s.host_flag, self.ip]
        log = self.s.log_dir / f"{self.ns}_{self.name}_{self.uid[:8]}" / c.name / f"{len(c.runs)}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        container_id = "containerd://" + _hash(f"{self.uid}/{c.name}/{len(c.runs)}", 64)
        self._event(pod, c, "Normal", "Created", f"Created container: {c.name}")
        try:
            with log.open("wb") as out:
                proc = subprocess.Popen(argv, env=env, cwd=c.spec.get("workingDir") or self.s.cwd, stdout=out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        except (OSError, ValueError) as e:
            log.write_text(f"{e}\n")
            with self.lock:
                c.runs.append(_Run(None, log, _now(), container_id))
            self._exited(pod, c, 128, "StartError", f"failed to create containerd task: failed to create shim task: "
                                                   f"OCI runtime create failed: exec: {argv[0]!r}: {e}")
            return
        self.s.started(proc)
        with self.lock:
            c.runs.append(_Run(proc, log, _now(), container_id))
            c.proc, c.env, c.waiting, c.terminated = proc, env, None, None
            c.started = "startupProbe" not in c.spec
            c.ready = False
            delay = min(float((c.spec.get("readinessProbe") or c.spec.get("startupProbe") or {}).get(
                "initialDelaySeconds") or 0), 1.0)
            c.probe_next, c.probe_failures, c.mem_next = time.monotonic() + delay, 0, time.monotonic()
        self._event(pod, c, "Normal", "Started", f"Started container {c.name}")

    def _pull_failed(self, pod: Mapping, c: _Container) -> None:
        c.pull_failed_at = time.monotonic()
        c.pull_failures += 1
        c.next_start = c.pull_failed_at + min(2.0 ** (c.pull_failures - 1), _BACKOFF_CAP_S)
        detail = f'rpc error: code = NotFound desc = failed to pull and unpack image "{c.image}": not found'
        c.waiting = ("ErrImagePull", detail)
        self._event(pod, c, "Warning", "Failed", f'Failed to pull image "{c.image}": {detail}')
        self._event(pod, c, "Warning", "Failed", "Error: ErrImagePull")

    def _image_backoff(self, pod: Mapping, c: _Container) -> None:
        c.waiting = ("ImagePullBackOff", f'Back-off pulling image "{c.image}"')
        self._event(pod, c, "Normal", "BackOff", f'Back-off pulling image "{c.image}"')
        self._event(pod, c, "Warning", "Failed", "Error: ImagePullBackOff")

    def _exited(self, pod: Mapping, c: _Container, code: int, reason: str | None, message: str | None = None) -> None:
        run = c.runs[-1]
        if run.proc is not None:
            _kill_tree(run.proc)  # the rest of its group goes with it, as with a container's cgroup
        terminated = {"exitCode": code, "reason": reason or ("Completed" if code == 0 else "Error"),
                      "startedAt": run.started_at, "finishedAt": _now(), "containerID": run.container_id}
        said = message or _last_line(run.log)
        if said:
            terminated["message"] = said
        policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
        with self.lock:
            c.proc, c.ready, c.started = None, False, False
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                c.terminated, c.waiting = terminated, None
                return
            c.last, c.restarts = terminated, c.restarts + 1
            backoff = min(2.0 ** (c.restarts - 1), _BACKOFF_CAP_S)
            c.next_start = time.monotonic() + backoff
            c.waiting = ("CrashLoopBackOff", f"back-off {_go_duration(backoff)} restarting failed container={c.name} "
                                             f"pod={self.name}_{self.ns}({self.uid})")
        self._event(pod, c, "Warning", "BackOff", f"Back-off restarting failed container {c.name} in pod "
                                                  f"{self.name}_{self.ns}({self.uid})")

    def _probe(self, pod: Mapping, c: _Container, now: float) -> None:
        c.probe_next = now + _PROBE_PERIOD_S
        startup, readiness = c.spec.get("startupProbe"), c.spec.get("readinessProbe")
        if not c.started:
            if run_probe(startup or {}, self.ip, c.spec, c.env):
                c.started = True
            else:
                return
        if readiness is None:
            c.ready = True
            return
        if run_probe(readiness, self.ip, c.spec, c.env):
            c.ready, c.probe_failures = True, 0
            return
        c.probe_failures += 1
        if c.ready and c.probe_failures >= int(readiness.get("failureThreshold") or 3):
            c.ready = False
            self._event(pod, c, "Warning", "Unhealthy", "Readiness probe failed")

    # -- status --------------------------------------------------------------------------------

    def _write_status(self) -> None:
        with self.lock:
            statuses = [c.status() for c in self.containers]
            ever = all(c.runs for c in self.containers)
            ended = [c.terminated for c in self.containers]
            unready = [c.name for c in self.containers if not c.ready]

        if all(t is not None for t in ended) and ended:
            phase = "Succeeded" if all(t["exitCode"] == 0 for t in ended) else "Failed"  # type: ignore[index]
        else:
            phase = "Running" if ever else "Pending"

        def change(pod: dict) -> None:
            st = pod.setdefault("status", {})
            conditions = {c["type"]: c for c in st.get("conditions") or []}
            ready_msg = f"containers with unready status: [{' '.join(unready)}]" if unready else None
            _condition(conditions, "PodReadyToStartContainers", True)
            _condition(conditions, "Initialized", True)
            _condition(conditions, "Ready", not unready, "ContainersNotReady", ready_msg)
            _condition(conditions, "ContainersReady", not unready, "ContainersNotReady", ready_msg)
            order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
            st["conditions"] = sorted(conditions.values(), key=lambda c: order.index(c["type"])
                                      if c["type"] in order else len(order))
            st.update(phase=phase, hostIP="127.0.0.1", hostIPs=[{"ip": "127.0.0.1"}], podIP=self.ip,
                      podIPs=[{"ip": self.ip}], startTime=self.started_at, containerStatuses=statuses)

        self.cluster.store.update(PODS, self.ns, self.name, change, self.uid)

    def pids(self) -> dict[str, int]:
        with self.lock:
            return {c.name: c.proc.pid for c in self.containers if c.proc is not None}

    def log_path(self, container: str, previous: bool) -> Path | None:
        with self.lock:
            c = next((c for c in self.containers if c.name == container), None)
            if c is None:
                return None
            runs = c.runs[:-1] if previous else c.runs
            return runs[-1].log if runs else None

    def waiting_reason(self, container: str) -> str | None:
        with self.lock:
            c = next((c for c in self.containers if c.name == container), None)
            return None if c is None or c.runs else (c.waiting or ("ContainerCreating", ""))[0]


def _condition(conditions: dict[str, dict], kind: str, ok: bool, reason: str | None = None,
               message: str | None = None) -> None:
    status = "True" if ok else "False"
    cur = conditions.get(kind)
    new = {"type": kind, "status": status, "lastProbeTime": None,
           "lastTransitionTime": cur["lastTransitionTime"] if cur and cur.get("status") == status else _now()}
    if not ok and reason:
        new["reason"] = reason
    if not ok and message:
        new["message"] = message
    conditions[kind] = new


# ---------------------------------------------------------------------------------------------
# Controllers: garbage collector, workloads, scheduler, quota, kubelet start


class _Controllers:
    def __init__(self, standin: KubeStandIn) -> None:
        self.s, self.cluster, self.store = standin, standin.cluster, standin.cluster.store
        self._create_backoff: dict[str, tuple[float, float]] = {}  # workload uid -> (next try, delay)
        self._sched_event_at: dict[str, float] = {}

    def reconcile(self) -> None:
        self.collect_garbage()
        for res in _WORKLOADS:
            for wl in self.store.list(res):
                if _uid(wl) not in self.cluster.unmanaged:
                    self._workload(res, wl)
        self.schedule()
        self.s.start_kubelets()
        self.update_quotas()

    # -- garbage collector -----------------------------------------------------------------------

    def collect_garbage(self) -> None:
        everything = self.store.everything()
        by_uid = {_uid(o): o for _, o in everything}
        for res, obj in everything:
            refs = _meta(obj).get("ownerReferences") or []
            if not refs or _deleting(obj):
                continue
            owners = [by_uid.get(r.get("uid")) for r in refs]
            alive = [o for o in owners if o is not None]
            try:
                if not alive:
                    self.cluster.delete(res, _meta(obj).get("namespace"), _meta(obj)["name"], "Background")
                elif all("foregroundDeletion" in (_meta(o).get("finalizers") or []) for o in alive):
                    self.cluster.delete(res, _meta(obj).get("namespace"), _meta(obj)["name"], "Foreground")
            except ApiFailure:
                pass  # gone meanwhile
        for res, obj in everything:
            if _deleting(obj):
                self._finish_deletion(res, obj)

    def _finish_deletion(self, res: Resource, obj: Mapping) -> None:
        meta = _meta(obj)
        if res is NAMESPACES:
            self._empty_namespace(meta["name"], obj)
            return
        finalizers = list(meta.get("finalizers") or [])
        if "foregroundDeletion" in finalizers and not self.cluster.dependents(_uid(obj), blocking_only=True):
            finalizers.remove("foregroundDeletion")

            def unblock(o: dict) -> None:
                o["metadata"]["finalizers"] = finalizers
            self.store.update(res, meta.get("namespace"), meta["name"], unblock, _uid(obj))
        if not finalizers and not (res is PODS and self.cluster.has_kubelet(_uid(obj))):
            self.store.remove(res, meta.get("namespace"), meta["name"], _uid(obj))

    def _empty_namespace(self, ns: str, obj: Mapping) -> None:
        left = [(res, o) for res in RESOURCES if res.namespaced for o in self.store.list(res, ns)]
        for res, o in left:
            if not _deleting(o):
                try:
                    self.cluster.delete(res, ns, _meta(o)["name"])
                except ApiFailure:
                    pass
        if not left:
            self.store.remove(NAMESPACES, None, ns, _uid(obj))

    # -- workloads -----------------------------------------------------------------------------

    def _owned(self, wl: Mapping) -> list[dict]:
        return [p for p in self.store.list(PODS, _meta(wl)["namespace"]) if _owned_by(p, _uid(wl))]

    def _workload(self, res: Resource, wl: dict) -> None:
        if _deleting(wl):
            self._write_workload_status(res, wl, self._owned(wl), "")
            return
        template = (wl.get("spec") or {}).get("template") or {}
        revision = _hash(json.dumps(template, sort_keys=True), 10)
        if res is STATEFULSETS:
            self._statefulset(wl, revision)
        else:
            self._replicated(res, wl, revision)
        self._write_workload_status(res, wl, self._owned(wl), revision)

    def _replicated(self, res: Resource, wl: dict, revision: str) -> None:
        meta, spec = _meta(wl), wl.get("spec") or {}
        want = int(spec.get("replicas", 1))
        active = [p for p in self._owned(wl) if not _deleting(p) and not _pod_done(p)]
        hash_key = "pod-template-hash"
        current = [p for p in active if res is REPLICASETS or _labels(p).get(hash_key) == revision]
        for p in active:
            if p not in current:
                self._delete_pod(res, wl, p)  # a new template replaces the old pods (Recreate-like)
        if len(current) < want:
            prefix = f"{meta['name']}-{revision}-" if res is DEPLOYMENTS else f"{meta['name']}-"
            extra = {hash_key: revision} if res is DEPLOYMENTS else {}
            for _ in range(want - len(current)):
                if not self._create_pod(res, wl, prefix + _suffix(), extra):
                    break
        elif len(current) > want:
            # the ReplicaSet controller's order: unscheduled, pending, not ready, ready; newest first
            def rank(p: Mapping) -> tuple:
                st = p.get("status") or {}
                return (bool((p.get("spec") or {}).get("nodeName")), st.get("phase") == "Running", _pod_ready(p),
                        -self.store.born(_uid(p)))
            for p in sorted(current, key=rank)[: len(current) - want]:
                self._delete_pod(res, wl, p)

    def _statefulset(self, wl: dict, revision: str) -> None:
        meta, spec = _meta(wl), wl.get("spec") or {}
        want, name = int(spec.get("replicas", 1)), meta["name"]
        parallel = spec.get("podManagementPolicy") == "Parallel"
        owned = self._owned(wl)
        by_ordinal = {int(_meta(p)["name"].rsplit("-", 1)[1]): p for p in owned
                      if _meta(p)["name"].rsplit("-", 1)[-1].isdigit()}
        if any(_deleting(p) for p in owned) and not parallel:
            return  # one change at a time, as OrderedReady does
        for i in range(want):
            p = by_ordinal.get(i)
            if p is None:
                if not self._create_pod(STATEFULSETS, wl, f"{name}-{i}", {
                        "controller-revision-hash": f"{name}-{revision}", "statefulset.kubernetes.io/pod-name":
                        f"{name}-{i}", "apps.kubernetes.io/pod-index": str(i)}) or not parallel:
                    return
            elif not parallel and not _pod_ready(p):
                return
        for i in sorted((i for i in by_ordinal if i >= want), reverse=True):
            self._delete_pod(STATEFULSETS, wl, by_ordinal[i])
            if not parallel:
                return
        stale = [i for i in sorted(by_ordinal, reverse=True) if i < want
                 and _labels(by_ordinal[i]).get("controller-revision-hash") != f"{name}-{revision}"]
        if stale:
            self._delete_pod(STATEFULSETS, wl, by_ordinal[stale[0]])

    def _component(self, res: Resource) -> str:
        return {STATEFULSETS: "statefulset-controller"}.get(res, "replicaset-controller")

    def _create_pod(self, res: Resource, wl: Mapping, name: str, extra_labels: Mapping[str, str]) -> bool:
        uid, now = _uid(wl), time.monotonic()
        next_try, delay = self._create_backoff.get(uid, (0.0, 0.0))
        if now < next_try:
            return False
        meta, template = _meta(wl), copy.deepcopy((wl.get("spec") or {}).get("template") or {})
        tmeta = template.get("metadata") or {}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": meta["namespace"],
                            "labels": {**(tmeta.get("labels") or {}), **extra_labels},
                            "ownerReferences": [{"apiVersion": res.api_version, "kind": res.kind, "name": meta["name"],
                                                 "uid": uid, "controller": True, "blockOwnerDeletion": True}]},
               "spec": template.get("spec") or {}}
        if tmeta.get("annotations"):
            pod["metadata"]["annotations"] = tmeta["annotations"]
        if res is STATEFULSETS:
            pod["spec"].setdefault("hostname", name)
            if (wl.get("spec") or {}).get("serviceName"):
                pod["spec"].setdefault("subdomain", wl["spec"]["serviceName"])
        try:
            self.cluster.create(PODS, pod, meta["namespace"])
        except ApiFailure as e:
            delay = min(max(delay * 2, 1.0), _BACKOFF_CAP_S)
            self._create_backoff[uid] = (now + delay, delay)
            said = (f"create Pod {name} in StatefulSet {meta['name']} failed error: {e.message}"
                    if res is STATEFULSETS else f"Error creating: {e.message}")
            self.cluster.event(res, wl, "Warning", "FailedCreate", said, self._component(res))
            return False
        self._create_backoff.pop(uid, None)
        said = (f"create Pod {name} in StatefulSet {meta['name']} successful" if res is STATEFULSETS
                else f"Created pod: {name}")
        self.cluster.event(res, wl, "Normal", "SuccessfulCreate", said, self._component(res))
        return True

    def _delete_pod(self, res: Resource, wl: Mapping, pod: Mapping) -> None:
        name = _meta(pod)["name"]
        try:
            self.cluster.delete(PODS, _meta(pod)["namespace"], name)
        except ApiFailure:
            return
        said = (f"delete Pod {name} in StatefulSet {_meta(wl)['name']} successful" if res is STATEFULSETS
                else f"Deleted pod: {name}")
        self.cluster.event(res, wl, "Normal", "SuccessfulDelete", said, self._component(res))

    def _write_workload_status(self, res: Resource, wl: Mapping, pods: Sequence[Mapping], revision: str) -> None:
        meta, spec = _meta(wl), wl.get("spec") or {}
        want = int(spec.get("replicas", 1))
        active = [p for p in pods if not _deleting(p) and not _pod_done(p)]
        ready = [p for p in active if _pod_ready(p)]
        updated = [p for p in active if revision and revision in (_labels(p).get("pod-template-hash"),
                                                                  _labels(p).get("controller-revision-hash",
                                                                                 "").rsplit("-", 1)[-1])]
        counts = {"replicas": len(active), "readyReplicas": len(ready), "availableReplicas": len(ready),
                  "updatedReplicas": len(updated)}
        if res is DEPLOYMENTS:
            counts["unavailableReplicas"] = max(want - len(ready), 0)
        if res is STATEFULSETS:
            counts["currentReplicas"] = len(updated)
        status: dict[str, Any] = {"observedGeneration": meta.get("generation", 1),
                                  **{k: v for k, v in counts.items() if v}}  # the API omits zero counts
        if res is STATEFULSETS:
            status.update(currentRevision=f"{meta['name']}-{revision}", updateRevision=f"{meta['name']}-{revision}",
                          collisionCount=0, replicas=len(active))
        if res is REPLICASETS:
            status["replicas"] = len(active)
        if res is DEPLOYMENTS:
            status["conditions"] = self._deployment_conditions(wl, len(ready) >= want)

        def change(o: dict) -> None:
            o["status"] = status
        self.store.update(res, meta["namespace"], meta["name"], change, _uid(wl))

    @staticmethod
    def _deployment_conditions(wl: Mapping, available: bool) -> list[dict]:
        old = {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or []}

        def cond(kind: str, ok: bool, reason: str, message: str) -> dict:
            prev = old.get(kind)
            status = "True" if ok else "False"
            same = prev is not None and prev.get("status") == status and prev.get("reason") == reason
            return {"type": kind, "status": status, "reason": reason, "message": message,
                    "lastUpdateTime": prev["lastUpdateTime"] if same else _now(),
                    "lastTransitionTime": prev["lastTransitionTime"] if same else _now()}

        name = _meta(wl)["name"]
        return [cond("Available", available, "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                     "Deployment has minimum availability." if available
                     else "Deployment does not have minimum availability."),
                cond("Progressing", True, "NewReplicaSetAvailable" if available else "ReplicaSetUpdated",
                     f'Deployment "{name}" has successfully progressed.' if available
                     else f'Deployment "{name}" is progressing.')]

    # -- scheduler -----------------------------------------------------------------------------

    def schedule(self) -> None:
        pods = self.store.list(PODS)
        pending = sorted((p for p in pods if not (p.get("spec") or {}).get("nodeName") and not _deleting(p)
                          and _uid(p) not in self.cluster.unmanaged), key=lambda p: self.store.born(_uid(p)))
        if not pending:
            return
        nodes = self.store.list(NODES)
        bound = [p for p in pods if (p.get("spec") or {}).get("nodeName") and not _pod_done(p)]
        for pod in pending:
            failures, chosen = [], None
            for n in nodes:
                on_node = [p for p in bound if p["spec"]["nodeName"] == _meta(n)["name"]]
                plugin, reasons = filter_node(pod.get("spec") or {}, n, on_node)
                if not reasons:
                    chosen = n
                    break
                failures.append((plugin, reasons))
            if chosen is not None:
                self._bind(pod, _meta(chosen)["name"])
                pod["spec"]["nodeName"] = _meta(chosen)["name"]
                bound.append(pod)
            else:
                self._unschedulable(pod, unschedulable_message(failures))

    def _bind(self, pod: Mapping, node_name: str) -> None:
        meta = _meta(pod)

        def bind(o: dict) -> None:
            o["spec"]["nodeName"] = node_name
            conditions = {c["type"]: c for c in (o.get("status") or {}).get("conditions") or []}
            _condition(conditions, "PodScheduled", True)
            o.setdefault("status", {})["conditions"] = list(conditions.values())
        if self.store.update(PODS, meta["namespace"], meta["name"], bind, _uid(pod)):
            self.cluster.event(PODS, pod, "Normal", "Scheduled", f"Successfully assigned {meta['namespace']}/"
                               f"{meta['name']} to {node_name}", "default-scheduler")

    def _unschedulable(self, pod: Mapping, message: str) -> None:
        meta = _meta(pod)

        def mark(o: dict) -> None:
            st = o.setdefault("status", {})
            conditions = {c["type"]: c for c in st.get("conditions") or []}
            _condition(conditions, "PodScheduled", False, "Unschedulable", message)
            st["conditions"], st["phase"] = list(conditions.values()), "Pending"
        self.store.update(PODS, meta["namespace"], meta["name"], mark, _uid(pod))
        now = time.monotonic()
        if now - self._sched_event_at.get(_uid(pod), -10.0) >= 1.0:  # the real scheduler backs off its retries
            self._sched_event_at[_uid(pod)] = now
            self.cluster.event(PODS, pod, "Warning", "FailedScheduling", message, "default-scheduler", key=())

    # -- quota ---------------------------------------------------------------------------------

    def update_quotas(self) -> None:
        for q in self.store.list(QUOTAS):
            meta = _meta(q)
            hard = dict((q.get("spec") or {}).get("hard") or {})
            used = self.cluster.quota_usage(meta["namespace"], hard)
            status = {"hard": hard, "used": {k: format_quantity(k, v) for k, v in used.items()}}

            def change(o: dict) -> None:
                o["status"] = status
            self.store.update(QUOTAS, meta["namespace"], meta["name"], change, _uid(q))


# ---------------------------------------------------------------------------------------------
# HTTP


@dataclass
class _Route:
    res: Resource | None
    namespace: str | None = None
    name: str | None = None
    sub: str | None = None
    discovery: tuple[str, ...] | None = None  # ("api",), ("apis",), ("api", "v1"), ("apis", "apps", "v1") ...


def _route(path: str) -> _Route | None:
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return None
    if parts[0] == "api":
        if len(parts) == 1:
            return _Route(None, discovery=("api",))
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) <= 2:
            return _Route(None, discovery=tuple(parts))
        group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        return _Route(None, discovery=tuple(parts))
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3 and _resource_at(group, version, rest[2]) is not None:
        namespace, rest = rest[1], rest[2:]
    res = _resource_at(group, version, rest[0])
    if res is None or len(rest) > 3 or (res.namespaced and namespace is None and len(rest) > 1):
        return _Route(None)
    if not res.namespaced and namespace is not None:
        return _Route(None)
    route = _Route(res, namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None)
    if route.sub is not None and route.sub not in res.subresources:
        return _Route(None)
    return route


_NO_SUCH = ApiFailure(404, "NotFound", "the server could not find the requested resource", {})
_PODS_PROXY = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/:]+)(?::(?P<port>[^/]+))?/proxy"
                         r"(?P<rest>/.*)?$")
# What the API server does not pass on to the pod: its own credentials (the authentication filter
# deletes Authorization once it has authenticated the request) and hop-by-hop headers.
_NOT_PROXIED = {"authorization", "host", "connection", "keep-alive", "transfer-encoding", "content-length",
                "proxy-connection", "upgrade", "te", "trailer"}
_METRICS_POD = re.compile(r"^/apis/metrics\.k8s\.io/v1beta1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60
    standin: KubeStandIn  # set on the subclass each stand-in makes

    def setup(self) -> None:
        super().setup()
        # Headers and each streamed piece are small separate writes: with Nagle's algorithm on, each
        # waits for the client's delayed ACK (40 ms), which would read as time to the first token.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self._serve("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        record = RequestRecord(method, url.path, query, None)
        self.standin.requests.append(record)
        try:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            proxy = _PODS_PROXY.match(url.path)
            if proxy:  # the body is the pod's business, not a Kubernetes object
                code, body = self.standin.api.proxy_pod(method, proxy, url.query, raw, self.headers, self)
                record.code = code
                if body is not _STREAMED:
                    self._send(code, body)
                return
            record.body = self._decode(raw)
            metrics = _METRICS_POD.match(url.path) if method == "GET" else None
            if metrics:
                code, body = self.standin.pod_metrics_answer(metrics["ns"], metrics["name"])
            elif method == "POST" and url.path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
                code, body = self.standin.api.access_review(record.body, self.headers)
            else:
                code, body = self.standin.api.handle(method, url.path, query, record.body, self.headers, self)
        except ApiFailure as e:
            code, body = e.code, e.status()
        except Exception:  # noqa: BLE001 - an answer, and a trace for the test to read
            self.standin.errors.append(traceback.format_exc())
            code, body = 500, ApiFailure(500, "InternalError", "Internal error occurred: stand-in failed").status()
        record.code = code
        if body is not _STREAMED:
            self._send(code, body)

    def _decode(self, raw: bytes) -> Any:
        if not raw:
            return None
        text = raw.decode()
        try:
            return json.loads(text)
        except ValueError:
            if "yaml" in (self.headers.get("Content-Type") or ""):
                try:
                    return yaml.safe_load(text)
                except yaml.YAMLError:
                    pass
            raise bad_request(f"the body of the request was in an unknown format - accepted media types include: "
                              f"application/json, application/yaml") from None

    def _send(self, code: int, body: Any) -> None:
        if isinstance(body, str):
            data, kind = body.encode(), "text/plain"
        else:
            data, kind = json.dumps(body).encode(), "application/json"  # lightkube wants exactly this
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)

    def stream(self, lines: Iterator[dict]) -> None:
        """A chunked stream of JSON lines (a watch)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        try:
            for line in lines:
                data = json.dumps(line).encode() + b"\n"
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass


_STREAMED = object()


class _Api:
    """The REST semantics over the cluster, one call per request."""

    def __init__(self, standin: KubeStandIn) -> None:
        self.s, self.cluster, self.store = standin, standin.cluster, standin.cluster.store

    def handle(self, method: str, path: str, query: Mapping[str, str], body: Any, headers: Mapping,
               handler: _Handler) -> tuple[int, Any]:
        route = _route(path)
        verb = self._verb(method, route, query)
        if route is None or route.res is None:
            self.s.audit.append(AuditEntry(verb, path, "", None, None))
        else:
            rbac = f"{route.res.plural}/{route.sub}" if route.sub else route.res.plural
            self.s.audit.append(AuditEntry(verb, path, rbac, route.namespace, route.name))
        if path in ("/version", "/version/"):
            return 200, self.s.version_info()
        if path in ("/healthz", "/livez", "/readyz"):
            return 200, "ok"
        self._authenticate(headers)
        if route is None or (route.res is None and route.discovery is None):
            raise _NO_SUCH
        if route.discovery is not None:
            return 200, self._discovery(route.discovery)
        assert route.res is not None
        self._authorize(verb, route)
        return self._dispatch(method, verb, route, query, body, headers, handler)

    @staticmethod
    def _verb(method: str, route: _Route | None, query: Mapping[str, str]) -> str:
        named = route is not None and route.name is not None
        if method == "GET":
            if not named and query.get("watch") in ("true", "1"):
                return "watch"
            return "get" if named or route is None or route.res is None else "list"
        return {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if named else "deletecollection"}[method]

    def access_review(self, body: Any, headers: Mapping) -> tuple[int, dict]:
        """A SelfSubjectAccessReview (`kubectl auth can-i`): allowed unless the forbid list denies it."""
        self._authenticate(headers)
        attrs = ((body or {}).get("spec") or {}).get("resourceAttributes") or {}
        verb, plural, sub = attrs.get("verb", ""), attrs.get("resource", ""), attrs.get("subresource") or ""
        rbac = f"{plural}/{sub}" if sub else plural
        self.s.audit.append(AuditEntry("create", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                                       "selfsubjectaccessreviews", None, None))
        denied = any(v in (verb, "*") and r in (rbac, "*") for v, r in self.s.forbid)
        status = {"allowed": not denied}
        if not denied:
            status["reason"] = 'RBAC: allowed by the stand-in (nothing in its forbid list)'
        return 201, {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                     "metadata": {"creationTimestamp": None}, "spec": (body or {}).get("spec") or {}, "status": status}

    def proxy_pod(self, method: str, m: re.Match, query: str, raw: bytes, headers: Mapping,
                  handler: _Handler) -> tuple[int, Any]:
        """The pods proxy (`pods/NAME[:PORT]/proxy/PATH`): authenticated and authorized as the
        `pods/proxy` subresource (GET is get, POST create, ...), then the request goes to the pod's
        IP and port, and the answer comes back as Go's ReverseProxy relays it: a text/event-stream
        or a body of unknown length flushed as each piece arrives, the rest whole."""
        ns, name, port, rest = m["ns"], m["name"], m["port"], m["rest"] or "/"
        verb = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}.get(method, "get")
        self.s.audit.append(AuditEntry(verb, m.group(0), "pods/proxy", ns, name))
        self._authenticate(headers)
        self._authorize(verb, _Route(PODS, ns, name, "proxy"))
        pod = self.store.get(PODS, ns, name)
        if pod is None:
            raise not_found(PODS, name)
        ip = pod.get("status", {}).get("podIP")
        if not ip:
            raise ApiFailure(503, "ServiceUnavailable", "address not allowed")
        target = int(port) if port and port.isdigit() else next(
            (p.get("containerPort") for c in pod["spec"].get("containers", []) for p in c.get("ports", [])
             if not port or p.get("name") == port), 80)
        conn = http.client.HTTPConnection(ip, target, timeout=600)
        try:
            conn.request(method, rest + (f"?{query}" if query else ""), body=raw or None,
                         headers={k: v for k, v in headers.items() if k.lower() not in _NOT_PROXIED})
            answer = conn.getresponse()
        except OSError as e:
            conn.close()
            why = "connect: connection refused" if isinstance(e, ConnectionRefusedError) else str(e)
            raise ApiFailure(503, "ServiceUnavailable",
                             f"error trying to reach service: dial tcp {ip}:{target}: {why}") from None
        try:
            kind = (answer.getheader("Content-Type") or "").split(";")[0].strip()
            length = answer.getheader("Content-Length")
            handler.send_response(answer.status)
            for k, v in answer.getheaders():
                if k.lower() not in _NOT_PROXIED:
                    handler.send_header(k, v)
            if kind != "text/event-stream" and length is not None:
                data = answer.read()
                handler.send_header("Content-Length", str(len(data)))
                handler.end_headers()
                handler.wfile.write(data)
                return answer.status, _STREAMED
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            try:
                while piece := answer.read1(65536):
                    handler.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    handler.wfile.flush()
                handler.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):  # the client went away: so does the pod's request
                handler.close_connection = True
            return answer.status, _STREAMED
        finally:
            conn.close()

    def _authenticate(self, headers: Mapping) -> None:
        if (headers.get("Authorization") or "") != f"Bearer {self.s.token}":
            raise ApiFailure(401, "Unauthorized", "Unauthorized")

    def _authorize(self, verb: str, route: _Route) -> None:
        res = route.res
        assert res is not None
        names = {res.plural, res.qualified}
        if route.sub:
            names = {f"{n}/{route.sub}" for n in names}
        if any((v in (verb, "*")) and r in names | {"*"} for v, r in self.s.forbid):
            raise forbidden(verb, res, route.sub, route.namespace, route.name, self.s.user)

    def _discovery(self, parts: tuple[str, ...]) -> dict:
        if parts == ("api",):
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": self.s.url.split("//", 1)[1]}]}
        groups = sorted({r.group for r in RESOURCES if r.group})
        if parts == ("apis",):
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [self._group(g) for g in groups]}
        if parts[0] == "apis" and len(parts) == 2 and parts[1] in groups:
            return {"kind": "APIGroup", "apiVersion": "v1", **self._group(parts[1])}
        group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
        found = [r for r in RESOURCES if (r.group, r.version) == (group, version)]
        if not found:
            raise _NO_SUCH
        resources = []
        for r in found:
            verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
            resources.append({"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced,
                              "kind": r.kind, "verbs": verbs})
            for sub in r.subresources:
                resources.append({"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                                  "kind": "Scale" if sub == "scale" else r.kind,
                                  "verbs": ["get"] if sub == "log" else ["get", "patch", "update"]})
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": found[0].api_version,
                "resources": resources}

    @staticmethod
    def _group(group: str) -> dict:
        versions = sorted({r.version for r in RESOURCES if r.group == group})
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": listed, "preferredVersion": listed[0]}

    # -- dispatch ------------------------------------------------------------------------------

    def _dispatch(self, method: str, verb: str, route: _Route, query: Mapping[str, str], body: Any,
                  headers: Mapping, handler: _Handler) -> tuple[int, Any]:
        res = route.res
        assert res is not None
        if res.namespaced and route.namespace is None and verb not in ("list", "watch"):
            raise ApiFailure(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if verb == "list":
            return 200, self._list(res, route.namespace, query)
        if verb == "watch":
            handler.stream(self._watch(res, route.namespace, query))
            return 200, _STREAMED
        if verb == "create":
            if route.name is not None:
                raise ApiFailure(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                          "resource")
            return 201, self._create(res, route.namespace, body)
        assert route.name is not None or verb == "deletecollection"
        if verb == "get":
            return 200, self._get(res, route, query)
        if verb == "update":
            return 200, self._put(res, route, body)
        if verb == "patch":
            return 200, self._patch(res, route, query, body, headers)
        if verb == "delete":
            return 200, self._delete(res, route, query, body)
        return 200, self._delete_collection(res, route.namespace, query, body)

    def _list(self, res: Resource, namespace: str | None, query: Mapping[str, str]) -> dict:
        items = self._selected(res, namespace, query)
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        start = 0
        if query.get("continue"):
            try:
                token = json.loads(base64.urlsafe_b64decode(query["continue"].encode()))
                start = int(token["start"])
            except (ValueError, KeyError, TypeError):
                raise bad_request("continue key is not valid") from None
        if query.get("limit") and int(query["limit"]) > 0:
            limit = int(query["limit"])
            page = items[start:start + limit]
            if start + limit < len(items):
                meta["continue"] = base64.urlsafe_b64encode(json.dumps({"start": start + limit}).encode()).decode()
                meta["remainingItemCount"] = len(items) - start - limit
            items = page
        else:
            items = items[start:]
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": items}

    def _selected(self, res: Resource, namespace: str | None, query: Mapping[str, str]) -> list[dict]:
        try:
            labels = parse_label_selector(query.get("labelSelector", ""))
            fields = parse_field_selector(query.get("fieldSelector", ""), res.plural)
        except ValueError as e:
            raise bad_request(str(e)) from None
        return [o for o in self.store.list(res, namespace)
                if all(r.matches(_labels(o)) for r in labels) and _fields_match(o, fields)]

    def _watch(self, res: Resource, namespace: str | None, query: Mapping[str, str]) -> Iterator[dict]:
        try:
            labels = parse_label_selector(query.get("labelSelector", ""))
            fields = parse_field_selector(query.get("fieldSelector", ""), res.plural)
        except ValueError as e:
            raise bad_request(str(e)) from None

        def wanted(obj: Mapping) -> bool:
            return ((namespace is None or _meta(obj).get("namespace") == namespace)
                    and all(r.matches(_labels(obj)) for r in labels) and _fields_match(obj, fields))

        def events() -> Iterator[dict]:
            since = query.get("resourceVersion") or "0"
            with self.store.cond:
                if since == "0":
                    start = self.store.rv
                    initial = [o for o in self.store.list(res, namespace) if wanted(o)]
                else:
                    start, initial = int(since), []
            for o in initial:
                yield {"type": "ADDED", "object": o}
            deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
            while time.monotonic() < deadline:
                with self.store.cond:
                    changes = self.store.changes_after(start)
                    while changes == [] and not self.store.closed and time.monotonic() < deadline:
                        self.store.cond.wait(min(1.0, max(0.01, deadline - time.monotonic())))
                        changes = self.store.changes_after(start)
                    if self.store.closed:
                        return
                if changes is None:
                    yield {"type": "ERROR", "object": ApiFailure(410, "Expired", f"too old resource version: "
                                                                 f"{start}").status()}
                    return
                for c in changes:
                    start = c.rv
                    if c.res is res and wanted(c.obj):
                        yield {"type": c.type, "object": c.obj}
        return events()

    def _get(self, res: Resource, route: _Route, query: Mapping[str, str]) -> Any:
        assert route.name is not None
        obj = self.store.get(res, route.namespace, route.name)
        if obj is None:
            raise not_found(res, route.name)
        if route.sub == "log":
            return self.s.pod_log(obj, query)
        if route.sub == "scale":
            return _scale(res, obj)
        return obj

    def _create(self, res: Resource, namespace: str | None, body: Any) -> dict:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        if body.get("kind") and body["kind"] != res.kind:
            raise bad_request(f"the API version in the data ({body.get('apiVersion')}) does not match the expected "
                              f"API version ({res.api_version})" if body.get("apiVersion") != res.api_version else
                              f"{body['kind']} in version \"{res.version}\" cannot be handled as a {res.kind}")
        return self.cluster.create(res, body, namespace)

    def _put(self, res: Resource, route: _Route, body: Any) -> dict:
        assert route.name is not None
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        if route.sub == "scale":
            return self._set_scale(res, route, int(((body.get("spec") or {}).get("replicas")) or 0))
        return self.cluster.replace(res, route.namespace, route.name, body, route.sub)

    def _patch(self, res: Resource, route: _Route, query: Mapping[str, str], body: Any, headers: Mapping) -> dict:
        assert route.name is not None
        kind = (headers.get("Content-Type") or "").split(";")[0].strip()
        cur = self.store.get(res, route.namespace, route.name)
        if kind == "application/apply-patch+yaml":
            if not query.get("fieldManager"):
                raise bad_request("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is "
                                  "required for apply patch")
            if cur is None:
                return self.cluster.create(res, {**(body or {}), "metadata": {**_meta(body or {}),
                                                                               "name": route.name}}, route.namespace)
        if cur is None:
            raise not_found(res, route.name)
        if route.sub == "scale":
            cur = _scale(res, cur)
        try:
            if kind == "application/json-patch+json":
                new = json_patch(cur, body if isinstance(body, list) else [])
            elif kind in ("application/merge-patch+json", "application/strategic-merge-patch+json",
                          "application/apply-patch+yaml"):
                new = merge_patch(cur, body, by_name=kind != "application/merge-patch+json")
            else:
                raise ApiFailure(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                                 f"accepted media types include: application/json-patch+json, application/merge-"
                                 f"patch+json, application/apply-patch+yaml")
        except ValueError as e:
            raise ApiFailure(422, "Invalid", str(e)) from None
        if route.sub == "scale":
            return self._set_scale(res, route, int(((new.get("spec") or {}).get("replicas")) or 0))
        if _meta(body if isinstance(body, dict) else {}).get("resourceVersion") is None:
            new.setdefault("metadata", {}).pop("resourceVersion", None)
        return self.cluster.replace(res, route.namespace, route.name, new, route.sub)

    def _set_scale(self, res: Resource, route: _Route, replicas: int) -> dict:
        assert route.name is not None
        cur = self.store.get(res, route.namespace, route.name)
        if cur is None:
            raise not_found(res, route.name)
        spec = {**(cur.get("spec") or {}), "replicas": replicas}
        done = self.cluster.replace(res, route.namespace, route.name, {**cur, "spec": spec,
                                                                        "metadata": {**_meta(cur),
                                                                                     "resourceVersion": None}}, None)
        return _scale(res, done)

    def _delete(self, res: Resource, route: _Route, query: Mapping[str, str], body: Any) -> dict:
        assert route.name is not None
        options = body if isinstance(body, dict) else {}
        policy = query.get("propagationPolicy") or options.get("propagationPolicy")
        if policy is None and "orphanDependents" in options:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        return self.cluster.delete(res, route.namespace, route.name, policy,
                                   None if grace is None else int(grace), options.get("preconditions"))

    def _delete_collection(self, res: Resource, namespace: str | None, query: Mapping[str, str], body: Any) -> dict:
        options = body if isinstance(body, dict) else {}
        policy = query.get("propagationPolicy") or options.get("propagationPolicy")
        deleted = []
        for o in self._selected(res, namespace, query):
            try:
                deleted.append(self.cluster.delete(res, _meta(o).get("namespace"), _meta(o)["name"], policy))
            except ApiFailure:
                pass
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)}, "items": deleted}


def _scale(res: Resource, obj: Mapping) -> dict:
    meta, spec = _meta(obj), obj.get("spec") or {}
    selector = spec.get("selector") or {}
    text = ",".join([f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())])
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": int(spec.get("replicas", 1))},
            "status": {"replicas": int((obj.get("status") or {}).get("replicas", 0)), "selector": text}}


# ---------------------------------------------------------------------------------------------
# The stand-in


class KubeStandIn:
    """An API server, controllers, scheduler and kubelet for one test; see the module's docstring.

    nodes: Node objects (see `node()`; default one 8-CPU, 32Gi node "node-1"); images: image-name
    prefix -> the argv prefix run in place of the image's entrypoint (a container's `command`
    replaces it); forbid: {(verb, resource)} answered 403 (`*` for any verb); host_flag: appended
    with the pod IP to every container's argv (None: nothing appended); log_dir: where containers'
    output goes (default: a temporary directory removed by close()); user: the name 403 messages
    give; token: the bearer token required (default: random); cwd: the processes' working
    directory when a container sets no workingDir (default: the test's)."""

    def __init__(self, nodes: Sequence[Mapping] | None = None, images: Mapping[str, Sequence[str]] | None = None,
                 forbid: Iterable[tuple[str, str]] = (), host_flag: str | None = "--host",
                 log_dir: str | os.PathLike | None = None, *, user: str = DEFAULT_USER, token: str | None = None,
                 cwd: str | os.PathLike | None = None, namespaces: Sequence[str] = ("default",),
                 tick_s: float = 0.2, pod_metrics: bool = False) -> None:
        self.images = {_normalize_image(k): list(v) for k, v in (images or {}).items()}
        self.forbid = {(str(v), str(r)) for v, r in forbid}
        self.host_flag = host_flag
        self.user, self.token = user, token or secrets.token_hex(16)
        self.cwd = None if cwd is None else str(cwd)
        self.tick_s = tick_s
        self.pod_metrics = pod_metrics  # serve metrics.k8s.io PodMetrics, as a cluster with metrics-server does
        self._tmp = None if log_dir is not None else tempfile.TemporaryDirectory(prefix="kube-standin-")
        self.log_dir = Path(log_dir if log_dir is not None else self._tmp.name)  # type: ignore[union-attr]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.audit: list[AuditEntry] = []
        self.requests: list[RequestRecord] = []
        self.errors: list[str] = []
        self.cluster = _Cluster(user)
        self.cluster.has_kubelet = self._has_kubelet
        self.api = _Api(self)
        self.controllers = _Controllers(self)
        self._workers: dict[str, _PodWorker] = {}
        self._finished: set[str] = set()  # uids whose worker ended
        self._ips: dict[str, str] = {}  # pod uid -> its IP
        self._subnet = f"127.{secrets.randbelow(254) + 1}.{secrets.randbelow(256)}"
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self.url = ""
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease", *namespaces):
            self.cluster.ensure_namespace(ns)
        for n in nodes if nodes is not None else [node("node-1")]:
            self.add(n)

    def pod_metrics_answer(self, namespace: str, name: str) -> tuple[int, dict]:
        """metrics-server's PodMetrics for a running pod: each container's working set, here the RSS
        of its process tree (metrics-server reports the cgroup's working set, which also counts the
        page cache the container touched), and its CPU. 404 when the cluster serves no metrics API
        (the default: no metrics-server), as a real API server answers for an unregistered group."""
        if not self.pod_metrics:
            raise _NO_SUCH
        pod = self.cluster.store.get(PODS, namespace, name)
        worker = self._workers.get(_uid(pod)) if pod is not None else None
        if worker is None:
            raise ApiFailure(404, "NotFound", f'podmetrics.metrics.k8s.io "{name}" not found',
                             {"name": name, "group": "metrics.k8s.io", "kind": "pods"})
        containers = []
        for c in worker.containers:
            rss = 0
            if c.proc is not None and c.proc.poll() is None:
                try:
                    top = psutil.Process(c.proc.pid)
                    rss = sum(p.memory_info().rss for p in [top, *top.children(recursive=True)])
                except psutil.Error:
                    pass
            containers.append({"name": c.name, "usage": {"cpu": "0", "memory": f"{rss // 1024}Ki"}})
        return 200, {"kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
                     "metadata": {"name": name, "namespace": namespace}, "timestamp": _now(), "window": "10s",
                     "containers": containers}

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> KubeStandIn:
        if self._server is not None:
            return self
        handler = type("StandInHandler", (_Handler,), {"standin": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._threads = [threading.Thread(target=self._server.serve_forever, args=(0.05,), name="kube-standin-http",
                                          daemon=True),
                         threading.Thread(target=self._loop, name="kube-standin-controllers", daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def __enter__(self) -> KubeStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the loops, every container process (and its group) and the server."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        for t in self._threads[1:]:
            t.join(10)
        with self._lock:
            workers = list(self._workers.values())
        for w in workers:
            w.stop.set()
        for w in workers:
            w.thread.join(15)
        with self._lock:
            procs = list(self._procs)
        for p in procs:  # whatever a worker could not stop
            _kill_tree(p)
        self.cluster.store.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def _loop(self) -> None:
        while not self._stopping.wait(self.tick_s):
            try:
                self.controllers.reconcile()
            except Exception:  # noqa: BLE001 - a test reads these from standin.errors
                self.errors.append(traceback.format_exc())

    # -- test-facing ---------------------------------------------------------------------------

    def write_kubeconfig(self, path: str | os.PathLike, namespace: str = "default", context: str = "standin") -> Path:
        """A kubeconfig for this server (bearer token user, `context` current, `namespace` created if missing)."""
        if not self.url:
            raise RuntimeError("start the stand-in (or enter it) before writing its kubeconfig")
        self.cluster.ensure_namespace(namespace)
        config = {"apiVersion": "v1", "kind": "Config", "preferences": {},
                  "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
                  "users": [{"name": "standin-user", "user": {"token": self.token}}],
                  "contexts": [{"name": context, "context": {"cluster": "standin", "user": "standin-user",
                                                             "namespace": namespace}}],
                  "current-context": context}
        out = Path(path)
        out.write_text(yaml.safe_dump(config, sort_keys=False))
        return out

    def add(self, obj: Mapping, managed: bool = True) -> dict:
        """Seed an object as if applied before the test (no audit, quota or ServiceAccount admission);
        its namespace is created if missing. managed=False: controllers, scheduler and kubelet leave it
        (and its given status) alone, e.g. a target Deployment that should look serving."""
        res = _resource_of(obj)
        ns = _meta(obj).get("namespace") or ("default" if res.namespaced else None)
        if ns:
            self.cluster.ensure_namespace(ns)
        status = copy.deepcopy(obj.get("status"))
        saved = self.cluster.create(res, obj, ns, admit=False, managed=managed)
        if status is not None:  # a seeded object keeps the status it was given
            def keep(o: dict) -> None:
                o["status"] = status
            saved = self.cluster.store.update(res, ns, _meta(saved)["name"], keep) or saved
        return saved

    def objects(self, kind_plural: str, namespace: str | None = None) -> list[dict]:
        return self.cluster.store.list(resource(kind_plural), namespace)

    def get(self, kind_plural: str, name: str, namespace: str | None = "default") -> dict | None:
        res = resource(kind_plural)
        return self.cluster.store.get(res, namespace if res.namespaced else None, name)

    def events(self, namespace: str | None = None, involved: str | None = None) -> list[dict]:
        return [e for e in self.objects("events", namespace)
                if involved is None or (e.get("involvedObject") or {}).get("name") == involved]

    def container_pids(self, pod: str, namespace: str = "default") -> dict[str, int]:
        """container name -> pid of its running process (the leader of its process group)."""
        obj = self.cluster.store.get(PODS, namespace, pod)
        with self._lock:
            worker = self._workers.get(_uid(obj)) if obj else None
        return worker.pids() if worker else {}

    def pids(self) -> list[int]:
        """Every process the kubelet started that has not been reaped."""
        with self._lock:
            return [p.pid for p in self._procs if p.poll() is None]

    def version_info(self) -> dict:
        major, minor = GIT_VERSION[1:].split(".")[:2]
        return {"major": major, "minor": minor, "gitVersion": GIT_VERSION, "gitCommit": "0" * 40,
                "gitTreeState": "clean", "buildDate": "2025-09-09T00:00:00Z", "goVersion": "go1.24.6",
                "compiler": "gc", "platform": "linux/amd64"}

    # -- kubelet ---------------------------------------------------------------------------------

    def image_argv(self, image: str) -> list[str] | None:
        """The argv prefix an image maps to (longest matching prefix), None when it cannot be pulled."""
        name = _normalize_image(image)
        matches = [k for k in self.images if name.startswith(k)]
        return list(self.images[max(matches, key=len)]) if matches else None

    def container_env(self, pod: Mapping, c: Mapping) -> dict[str, str]:
        """PATH, HOME, LANG of the test process and the container's env; ValueError for a missing
        ConfigMap/Secret or key (the kubelet's CreateContainerConfigError)."""
        env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
        ns = _meta(pod)["namespace"]
        for src in c.get("envFrom") or []:
            prefix = src.get("prefix") or ""
            for ref_key, res in (("configMapRef", CONFIGMAPS), ("secretRef", SECRETS)):
                ref = src.get(ref_key)
                if ref:
                    data = self._env_source(res, ns, ref.get("name", ""), bool(ref.get("optional")))
                    env.update({prefix + k: v for k, v in data.items()})
        for e in c.get("env") or []:
            value = self._env_value(pod, c, e, env)
            if value is not None:
                env[e["name"]] = value
        return env

    def _env_source(self, res: Resource, ns: str, name: str, optional: bool) -> dict[str, str]:
        obj = self.cluster.store.get(res, ns, name)
        if obj is None:
            if optional:
                return {}
            raise ValueError(f'{"configmap" if res is CONFIGMAPS else "secret"} "{name}" not found')
        if res is SECRETS:
            return {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
        return {str(k): str(v) for k, v in (obj.get("data") or {}).items()}

    def _env_value(self, pod: Mapping, c: Mapping, e: Mapping, env: Mapping[str, str]) -> str | None:
        if "valueFrom" not in e:
            return _expand(e.get("value", ""), env)
        source = e["valueFrom"]
        ns = _meta(pod)["namespace"]
        for ref_key, res, kind in (("configMapKeyRef", CONFIGMAPS, "ConfigMap"), ("secretKeyRef", SECRETS, "Secret")):
            ref = source.get(ref_key)
            if ref:
                data = self._env_source(res, ns, ref.get("name", ""), bool(ref.get("optional")))
                if ref.get("key") not in data:
                    if ref.get("optional"):
                        return None
                    raise ValueError(f"couldn't find key {ref.get('key')} in {kind} {ns}/{ref.get('name')}")
                return data[ref["key"]]
        if "fieldRef" in source:
            return self._field_ref(pod, source["fieldRef"].get("fieldPath", ""))
        if "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            kind, name = ref.get("resource", "").split(".", 1)
            value = ((c.get("resources") or {}).get(kind) or {}).get(name)
            if value is None:
                return "0"
            return str(math.ceil(quantity(value) / quantity(ref.get("divisor") or "1")))
        return None

    def _field_ref(self, pod: Mapping, path: str) -> str:
        meta, uid = _meta(pod), _uid(pod)
        with self._lock:
            ip = self._ips.get(uid, "")
        if m := re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path):
            return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
        values = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"), "metadata.uid": uid,
                  "spec.nodeName": (pod.get("spec") or {}).get("nodeName"),
                  "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName"),
                  "status.podIP": ip, "status.podIPs": ip, "status.hostIP": "127.0.0.1", "status.hostIPs": "127.0.0.1"}
        if path not in values:
            raise ValueError(f"unsupported fieldPath: {path}")
        return str(values[path] or "")

    def _allocate_ip(self, uid: str) -> str:
        # Each stand-in its own /24 of loopback, drawn at random: stand-ins in parallel test workers
        # (or a test's own engines on 127.0.0.1) must not hand two pods one address and port.
        with self._lock:
            taken = set(self._ips.values())
            for n in range(2, 255):
                ip = f"{self._subnet}.{n}"
                if ip not in taken:
                    self._ips[uid] = ip
                    return ip
        raise RuntimeError("no pod IPs left")

    def _has_kubelet(self, uid: str) -> bool:
        with self._lock:
            return uid in self._workers

    def start_kubelets(self) -> None:
        """Start a pod worker for every pod bound to a known node that has none."""
        if self._stopping.is_set():
            return
        nodes = {_meta(n)["name"] for n in self.cluster.store.list(NODES)}
        for pod in self.cluster.store.list(PODS):
            uid = _uid(pod)
            if ((pod.get("spec") or {}).get("nodeName") not in nodes or uid in self.cluster.unmanaged
                    or _pod_done(pod) or self._has_kubelet(uid)):
                continue
            if _deleting(pod):
                self.cluster.store.remove(PODS, _meta(pod)["namespace"], _meta(pod)["name"], uid)
                continue
            if uid in self._finished:
                continue  # its worker ended (close, or a failure in errors): not started twice
            worker = _PodWorker(self, pod, self._allocate_ip(uid))
            with self._lock:
                self._workers[uid] = worker
            worker.thread.start()

    def kubelet_done(self, worker: _PodWorker) -> None:
        with self._lock:
            self._workers.pop(worker.uid, None)
            self._ips.pop(worker.uid, None)
            self._finished.add(worker.uid)

    def started(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs = [p for p in self._procs if p.poll() is None] + [proc]

    def pod_log(self, pod: Mapping, query: Mapping[str, str]) -> str:
        meta = _meta(pod)
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        container = query.get("container") or (names[0] if len(names) == 1 else None)
        if container is None:
            raise bad_request(f"a container name must be specified for pod {meta['name']}, choose one of: "
                              f"[{' '.join(map(str, names))}]")
        if container not in names:
            raise bad_request(f"container {container} is not valid for pod {meta['name']}")
        with self._lock:
            worker = self._workers.get(_uid(pod))
        previous = query.get("previous") in ("true", "1")
        path = worker.log_path(container, previous) if worker else None
        if path is None:
            if previous:
                raise bad_request(f'previous terminated container "{container}" in pod "{meta["name"]}" not found')
            waiting = (worker.waiting_reason(container) if worker else None) or "ContainerCreating"
            if waiting in ("ErrImagePull", "ImagePullBackOff"):
                waiting = "trying and failing to pull image"
            raise bad_request(f'container "{container}" in pod "{meta["name"]}" is waiting to start: {waiting}')
        text = path.read_bytes().decode(errors="replace") if path.exists() else ""
        if query.get("tailLines"):
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(query["tailLines"]):]) if int(query["tailLines"]) > 0 else ""
        if query.get("limitBytes"):
            text = text.encode()[: int(query["limitBytes"])].decode(errors="ignore")
        return text
