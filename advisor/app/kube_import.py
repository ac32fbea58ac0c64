"""Importing a Kubernetes target as a deployment spec (`advisor deployment import k8s://...`): read
the live workload once and write what an experiment needs (launcher kubernetes, the engine, the
served model, the engine container and its port), so a user starts from what the cluster runs
rather than from a hand-written copy that may already differ from it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from advisor import knobs
from advisor.errors import AdvisorError
from advisor.experiments.arms.kube_api import Kube, KubeError
from advisor.experiments.design.deployment import Deployment
from advisor.models.locate import model_args

# Which engine a container runs, from its image and command words (the first that matches).
_ENGINES = (("sglang", "sglang"), ("text-generation-inference", "tgi"), ("tgi", "tgi"), ("llama.cpp", "llamacpp"),
            ("llama-server", "llamacpp"), ("llama-cpp", "llamacpp"), ("vllm", "vllm"))
_DEFAULT_PORT = {"vllm": 8000, "sglang": 30000, "tgi": 80, "llamacpp": 8080}
_PORT_FLAGS = ("--port",)


class KubeImportError(AdvisorError, ValueError):
    """The reference or the live object cannot be turned into a spec."""


@dataclass(frozen=True)
class Reference:
    namespace: str
    kind: str
    name: str

    @classmethod
    def parse(cls, text: str) -> "Reference":
        m = re.fullmatch(r"k8s://([a-z0-9-]+)/(deployment|statefulset|deployments|statefulsets)/([a-z0-9.-]+)",
                         text.strip())
        if not m:
            raise KubeImportError(f"give the target as k8s://NAMESPACE/deployment/NAME or k8s://NAMESPACE/statefulset/"
                               f"NAME, got {text!r}")
        return cls(m.group(1), m.group(2).rstrip("s"), m.group(3))


def engine_of(container: dict) -> str | None:
    """The engine a container runs, from its image and command words; None for none known."""
    words = " ".join([str(container.get("image", "")), *map(str, container.get("command") or [])]).lower()
    return next((engine for needle, engine in _ENGINES if needle in words), None)


def _flag(args: list[str], flags: tuple[str, ...]) -> str | None:
    for i, a in enumerate(args):
        for f in flags:
            if a == f and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(f + "="):
                return a.split("=", 1)[1]
    return None


def import_spec(ref: Reference, container: str | None = None, kubeconfig: str | None = None,
                context: str | None = None, prometheus: str | None = None, url: str | None = None) -> dict:
    """The deployment spec (as a plain dict, validated) for the live workload `ref`."""
    try:
        kube = Kube(ref.namespace, kubeconfig, context)
    except KubeError as e:
        raise KubeImportError(str(e)) from None
    try:
        obj = kube.get(ref.kind, ref.name)
    except KubeError as e:
        raise KubeImportError(str(e)) from None
    finally:
        kube.close()
    if obj is None:
        raise KubeImportError(f"{ref.kind}/{ref.name} not found in namespace {ref.namespace}")
    containers = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    if container is not None:
        chosen = [c for c in containers if c.get("name") == container]
    else:
        chosen = [c for c in containers if engine_of(c)] or (containers if len(containers) == 1 else [])
    names = ", ".join(str(c.get("name")) for c in containers)
    if len(chosen) != 1:
        raise KubeImportError(f"{ref.kind}/{ref.name}: say which container runs the engine with --container (its "
                           f"containers: {names})")
    c = chosen[0]
    engine = engine_of(c)
    if engine is None:
        raise KubeImportError(f"container {c.get('name')} runs {c.get('image')!r}, which is none of the engines the "
                           "advisor knows (vllm, sglang, tgi, llamacpp)")
    args = [str(a) for a in c.get("args") or []]
    argv = [*map(str, c.get("command") or []), *args]
    model = _flag(args, ("--served-model-name",)) or model_args(argv, knobs.model_flags(engine))
    if not model:
        raise KubeImportError(f"container {c.get('name')}: no model named in its command or args")
    port_text = _flag(args, _PORT_FLAGS)
    ports = [p.get("containerPort") for p in c.get("ports") or [] if p.get("containerPort")]
    port = int(port_text) if port_text and port_text.isdigit() else (ports[0] if ports else _DEFAULT_PORT[engine])
    k8s = {"workload": f"{ref.kind}/{ref.name}", "namespace": ref.namespace, "container": c["name"], "port": port}
    if kubeconfig:
        k8s["kubeconfig"] = kubeconfig
    if context:
        k8s["context"] = context
    if url:
        k8s["url"] = url
    spec = {"name": ref.name, "engine": engine, "model": model, "launcher": "kubernetes", "kubernetes": k8s}
    if prometheus:
        spec["prometheus"] = prometheus
    try:
        Deployment.model_validate(spec)
    except ValueError as e:
        raise KubeImportError(f"the spec read from {ref.kind}/{ref.name} is not valid: {e}") from None
    return spec
