"""The advisor's one way to a Kubernetes API server (DESIGN 12): lightkube's sync client, read and
written as the plain dicts the pure modules (kube_clone, kube_room, kube_failures) take, every error
one `KubeError` line.

Why lightkube: it is typed (its models follow the API's OpenAPI schema, so a manifest it refuses to
build is refused before it reaches a server), it runs on httpx like the rest of the advisor (one
TLS, proxy and timeout story), it reads kubeconfig files, contexts and the in-cluster service
account the way kubectl does, and it imports in about 60 ms. The official client is generated,
synchronous on urllib3 and imports in over a second; kr8s has port-forwarding, which the launcher
does not use (arms are reached at their pod IPs, or through the pods proxy: kube_reach.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import httpx
from lightkube import ApiError, Client, KubeConfig, codecs
from lightkube.core.exceptions import ConfigError
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod, ResourceQuota, Service
from lightkube.types import CascadeType

from advisor import escape
from advisor.errors import AdvisorError
from advisor.experiments.arms.kube_room import quantity

# kind (lower case, as in `deployment/NAME`) -> lightkube resource
RESOURCES = {"deployment": Deployment, "statefulset": StatefulSet, "pod": Pod, "node": Node, "service": Service,
             "event": Event, "resourcequota": ResourceQuota, "configmap": ConfigMap}
_PLURAL = {"deployment": "deployments.apps", "statefulset": "statefulsets.apps", "resourcequota": "resourcequotas"}


class KubeError(AdvisorError, RuntimeError):
    """The API server could not be reached, refused a verb, or answered what the advisor cannot use."""


def _what(kind: str, name: str | None, namespace: str | None) -> str:
    where = f" in namespace {namespace}" if namespace else ""
    return f"{_PLURAL.get(kind, kind + 's')} {name}{where}" if name else f"{_PLURAL.get(kind, kind + 's')}{where}"


class Kube:
    """A client on one cluster and namespace. kubeconfig: a file (default: in-cluster service
    account, then $KUBECONFIG, then ~/.kube/config, as kubectl does); context: one of its contexts
    (default: its current one)."""

    def __init__(self, namespace: str, kubeconfig: str | None = None, context: str | None = None,
                 timeout: float = 15.0):
        self.namespace, self._timeout = namespace, timeout
        try:
            config = KubeConfig.from_file(Path(kubeconfig).expanduser()) if kubeconfig else KubeConfig.from_env()
            single = config.get(context)
            if single is None:
                raise ConfigError(f"no context {context!r}" if context else "no current context")
            self.server = single.cluster.server
            self._client = Client(single, namespace=namespace, timeout=httpx.Timeout(timeout),
                                  field_manager="llm-advisor", trust_env=False)
        except (ConfigError, OSError, KeyError, ValueError, AttributeError) as e:
            where = kubeconfig or "the in-cluster service account, $KUBECONFIG or ~/.kube/config"
            raise KubeError(f"no usable Kubernetes configuration in {where}"
                            + (f" (context {context})" if context else "") + f": {escape.one_line(str(e), 200)}") from None

    def _call(self, verb: str, kind: str, name: str | None, namespace: str | None, fn):
        try:
            return fn()
        except ApiError as e:
            status = e.status
            code = getattr(status, "code", None)
            if code == 404 and verb in ("get", "delete"):
                return None
            why = escape.one_line(getattr(status, "message", None) or str(e), 300)
            hint = (": the advisor's ServiceAccount needs that verb (deploy/kubernetes/advisor-rbac.yaml)"
                    if code == 403 else "")
            raise KubeError(f"the Kubernetes API refused to {verb} {_what(kind, name, namespace)} ({code}): "
                            f"{why}{hint}") from None
        except httpx.HTTPError as e:
            raise KubeError(f"cannot reach the Kubernetes API at {self.server}: "
                            f"{escape.one_line(str(e) or type(e).__name__, 200)}") from None

    def version(self) -> str:
        """The server's gitVersion, for the manifest. lightkube has no call for /version: its httpx
        client (base URL, TLS and credentials already set from the kubeconfig) is asked directly."""
        try:
            r = self._client._client._client.get("/version")
            r.raise_for_status()
            return str(r.json().get("gitVersion", "?"))
        except (httpx.HTTPError, ValueError, AttributeError) as e:
            raise KubeError(f"cannot read the Kubernetes version at {self.server}: "
                            f"{escape.one_line(str(e) or type(e).__name__, 200)}") from None

    def pod_memory(self, pod: str, container: str, namespace: str | None = None) -> tuple[int | None, str | None]:
        """A container's working set in bytes from the metrics API (metrics-server's PodMetrics, what
        `kubectl top pod` shows), or None and why not. lightkube has no model for that group: its
        httpx client is asked directly, as for /version. Never raises: memory is a readout, not a
        precondition of the experiment."""
        ns = namespace or self.namespace
        path = f"/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods/{pod}"
        try:
            r = self._client._client._client.get(path)
        except (httpx.HTTPError, AttributeError) as e:
            return None, f"cannot reach the metrics API: {escape.one_line(str(e) or type(e).__name__, 120)}"
        if r.status_code == 404:
            return None, "the cluster serves no pod metrics (metrics.k8s.io: install metrics-server to read them)"
        if r.status_code == 403:
            return None, "the advisor may not read pod metrics (metrics.k8s.io pods: get, deploy/kubernetes/advisor-rbac.yaml)"
        if r.status_code != 200:
            return None, f"the metrics API answered {r.status_code}"
        try:
            for c in r.json().get("containers") or []:
                if c.get("name") == container:
                    return int(quantity((c.get("usage") or {}).get("memory"))), None
        except (ValueError, TypeError, AttributeError, ArithmeticError):
            return None, "the metrics API's answer for the pod is not PodMetrics"
        return None, f"the metrics API has no container {container} in pod {pod}"

    def can_i(self, verb: str, resource: str, subresource: str = "", group: str = "") -> bool | None:
        """`kubectl auth can-i`: whether this client may do verb on resource in its namespace, by a
        SelfSubjectAccessReview (which every authenticated user may create); None when the answer
        cannot be had (the caller then learns it from the first refusal)."""
        http = self._client._client._client
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                  "spec": {"resourceAttributes": {"namespace": self.namespace, "verb": verb, "group": group,
                                                  "resource": resource, "subresource": subresource}}}
        try:
            r = http.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=review)
            if r.status_code not in (200, 201):
                return None
            allowed = (r.json().get("status") or {}).get("allowed")
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return allowed if isinstance(allowed, bool) else None

    def pod_proxy(self, method: str, pod: str, port: int, target: str, headers: Mapping[str, str],
                  body: bytes | None, read_timeout_s: float) -> httpx.Response:
        """A request to a pod's port through the API server's pods proxy
        (`pods/NAME:PORT/proxy/PATH`), sent with this client's credentials and answered as a stream
        (the caller closes it). target: the path and query as the pod should see them. KubeError
        when the API server cannot be reached; its own refusals (403, the pod unreachable: 503)
        come back as answers, to be passed on."""
        http = self._client._client._client
        url = f"/api/v1/namespaces/{self.namespace}/pods/{pod}:{port}/proxy{target}"
        try:
            request = http.build_request(method, url, headers=dict(headers), content=body,
                                         timeout=httpx.Timeout(self._timeout, read=read_timeout_s))
            return http.send(request, stream=True)
        except (httpx.HTTPError, AttributeError) as e:
            raise KubeError(f"cannot reach pod {pod} through the Kubernetes API at {self.server}: "
                            f"{escape.one_line(str(e) or type(e).__name__, 200)}") from None

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        res = RESOURCES[kind]
        ns = None if kind == "node" else (namespace or self.namespace)
        obj = self._call("get", kind, name, ns, lambda: self._client.get(res, name, namespace=ns)
                         if ns else self._client.get(res, name))
        return None if obj is None else _plain(obj, kind)

    def list(self, kind: str, namespace: str | None = None, labels: Mapping[str, str] | None = None,
             fields: Mapping[str, str] | None = None, all_namespaces: bool = False) -> list[dict]:
        res = RESOURCES[kind]
        ns = "*" if all_namespaces else (None if kind == "node" else (namespace or self.namespace))
        kw = {"labels": dict(labels)} if labels else {}
        if fields:
            kw["fields"] = dict(fields)
        return self._call("list", kind, None, None if ns == "*" else ns,
                          lambda: [_plain(o, kind) for o in (self._client.list(res, namespace=ns, **kw) if ns
                                                             else self._client.list(res, **kw))])

    def create(self, obj: Mapping) -> dict:
        kind = str(obj.get("kind", "")).lower()
        meta = obj.get("metadata") or {}
        try:
            typed = codecs.from_dict(dict(obj))
        except Exception as e:  # noqa: BLE001 - lightkube's schema refused the manifest
            raise KubeError(f"the {kind} {meta.get('name')} is not a valid manifest: {escape.one_line(str(e), 200)}") \
                from None
        made = self._call("create", kind, meta.get("name"), meta.get("namespace"),
                          lambda: self._client.create(typed, namespace=meta.get("namespace")))
        return _plain(made, kind)

    def delete(self, kind: str, name: str, namespace: str | None = None, cascade: str = "Foreground") -> bool:
        """False when it was already gone."""
        ns = namespace or self.namespace
        done = self._call("delete", kind, name, ns,
                          lambda: self._client.delete(RESOURCES[kind], name, namespace=ns,
                                                      cascade=CascadeType[cascade.upper()]) or True)
        return done is not None

    def close(self) -> None:
        self._client.close()


def _plain(obj, kind: str) -> dict:
    d = obj.to_dict()
    d.setdefault("kind", RESOURCES[kind].__name__)
    return d
