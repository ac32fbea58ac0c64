"""The Kubernetes launcher: two fresh arms cloned from the target's own workload (DESIGN 12).

After Kayenta and Argo Rollouts' `Experiment`: the baseline is never production itself but a fresh
replica of the target's pod template, created together with the candidate on the same cluster;
both differ from the target only in the advisor's labels (no Service selects them) and, for the
candidate, in the knob's rendering in the engine container's args (kube_clone.py). The target is
only ever read. Before anything is created, both arms must fit the nodes the template may schedule
to and the namespace's quota (kube_room.py).

Every created object is journalled by UID before the first block, and all of them name one owner
object per experiment (a ConfigMap), so the cluster's garbage collector removes the arms even if
neither the advisor nor `advisor recover` can; recover deletes only journalled objects that still
carry this experiment's labels. A pod that cannot serve (unschedulable, its image not pulled, a
crash loop, OOMKilled) ends the experiment with one line quoting the pod's status or event
(kube_failures.py), and the arms are deleted on every exit path.

The advisor reaches an arm at its pod IP (it runs in the cluster, or on a network that routes pod
IPs), or through the API server's pods proxy from outside the cluster (kube_reach.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from advisor import escape
from advisor.engine_process import healthy
from advisor.experiments.arms import arm_check, kube_clone, kube_failures, kube_room
from advisor.experiments.arms.engine_state import observe_url
from advisor.experiments.arms.journal import Journal
from advisor.experiments.arms.kube_api import Kube, KubeError
from advisor.experiments.arms.kube_reach import PodRelay
from advisor.experiments.arms.processes import Resident
from advisor.experiments.arms.protocol import LaunchError
from advisor.experiments.design.deployment import Deployment, KubernetesSpec

ARMS = ("baseline", "candidate")
_POLL_S = 0.5


def client_for(spec: KubernetesSpec) -> Kube:
    try:
        return Kube(spec.namespace, spec.kubeconfig, spec.context, spec.api_timeout_s)
    except KubeError as e:
        raise LaunchError(str(e)) from None


def read_target(kube: Kube, spec: KubernetesSpec) -> dict:
    """The target workload as the API returns it; LaunchError when it is missing or not cloneable."""
    kind, name = spec.kind, spec.name
    try:
        obj = kube.get(kind, name)
    except KubeError as e:
        raise LaunchError(str(e)) from None
    if obj is None:
        raise LaunchError(f"{kind}/{name} not found in namespace {spec.namespace} ({kube.server})")
    return obj


def engine_container(target: dict, spec: KubernetesSpec) -> dict:
    containers = (((target.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    for c in containers:
        if c.get("name") == spec.container:
            return c
    names = ", ".join(str(c.get("name")) for c in containers)
    raise LaunchError(f"{spec.workload} has no container named {spec.container!r} (its containers: {names})")


def target_args(spec: KubernetesSpec, kube: Kube | None = None) -> list[str]:
    """The engine container's args as the cluster serves them now: the baseline the candidate
    differs from by one knob."""
    own = kube is None
    kube = kube or client_for(spec)
    try:
        return [str(a) for a in engine_container(read_target(kube, spec), spec).get("args") or []]
    finally:
        if own:
            kube.close()


def target_replicas(spec: KubernetesSpec) -> int:
    """The target's own replica count (spec.replicas): the replicas knob's baseline."""
    kube = client_for(spec)
    try:
        return int(((read_target(kube, spec).get("spec") or {}).get("replicas")) or 1)
    finally:
        kube.close()


class KubeLauncher:
    """Fresh baseline and candidate workloads cloned from the target (see the module's docstring)."""

    def __init__(self, dep: Deployment, base_args: list[str], candidate_args: list[str], journal: Journal | None,
                 experiment: str, replicas: dict[str, int] | None = None, kube: Kube | None = None,
                 clock: Callable[[], float] = time.monotonic, mechanism: str | None = None):
        self.dep, self.spec = dep, dep.kubernetes
        self.args = {"baseline": list(base_args), "candidate": list(candidate_args)}
        # One pod per arm; the replicas knob's arms are the target's count and the candidate's.
        self.replicas = {"baseline": 1, "candidate": 1, **(replicas or {})}
        self.journal, self.experiment, self.mechanism = journal, experiment, mechanism
        self._kube, self.clock = kube, clock
        self.compared = False
        self._memory_note: str | None = None
        self.starts = 0
        self.notes: list[str] = []
        self.target: dict | None = None
        self.manifests: dict[str, dict] = {}
        self.created: list[dict] = []  # {kind, name, namespace, uid}, the owner first
        self.ready: dict[str, list[dict]] = {}  # arm -> its pods when they became ready
        self._relays: dict[str, PodRelay] = {}  # pod uid -> its relay (reach: pods-proxy)
        self.info: dict = {}

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            self._kube = client_for(self.spec)
        return self._kube

    def _api(self, fn):
        try:
            return fn()
        except KubeError as e:
            raise LaunchError(str(e)) from None

    # -- before anything exists -------------------------------------------------------------

    def plan(self) -> dict[str, dict]:
        """Both arms' manifests, from the target and the namespace's Services, nothing created."""
        self.target = read_target(self.kube, self.spec)
        engine_container(self.target, self.spec)
        services = self._api(lambda: self.kube.list("service"))
        selectors = [(s.get("spec") or {}).get("selector") for s in services]
        try:
            self.manifests = kube_clone.clone_arms(self.target, self.spec.container, self.args, self.experiment,
                                                   selectors, self.replicas)
        except kube_clone.CloneError as e:
            raise LaunchError(str(e)) from None
        return self.manifests

    def preflight(self) -> None:
        self.plan()
        pod_spec = self.manifests["baseline"]["spec"]["template"]["spec"]
        nodes = self._api(lambda: self.kube.list("node"))
        pods = self._api(lambda: self.kube.list("pod", all_namespaces=True))
        quotas = self._api(lambda: self.kube.list("resourcequota"))
        why = kube_room.refusal(nodes, pods, pod_spec, arms=sum(self.replicas.values()), quotas=quotas)
        if why:
            raise LaunchError(f"no room for the experiment's arms in the cluster: {why}; nothing was created")
        if self.spec.reach == "pods-proxy":
            for verb in ("get", "create"):  # GET /health, /metrics; POST the load's completions
                if self.kube.can_i(verb, "pods", "proxy") is False:
                    raise LaunchError(f"reach: pods-proxy needs to {verb} pods/proxy in namespace {self.spec.namespace}, "
                                      "which the advisor may not (deploy/kubernetes/advisor-rbac.yaml); or run the "
                                      "advisor in the cluster with reach: pod-ip; nothing was created")
        meta = self.target["metadata"]
        self.info = {"cluster_version": self._api(self.kube.version), "target": self.spec.workload,
                     "namespace": self.spec.namespace, "target_generation": meta.get("generation")}
        self.notes.append(f"arms: a fresh baseline and the candidate, cloned from {self.spec.workload} in namespace "
                          f"{self.spec.namespace} and created together; no Service selects them, and the target is "
                          "only read")

    def found_state(self) -> dict:
        status = (self.target or {}).get("status") or {}
        return {"found_serving": bool(status.get("readyReplicas")), "kubernetes": dict(self.info)}

    # -- the arms -----------------------------------------------------------------------------

    def _create_all(self) -> None:
        """The owner, then both arms, each journalled before and after its creation: a crash in
        between leaves a name recover can look up; the owner lets the garbage collector finish."""
        ns = self.spec.namespace
        owner_name = kube_clone.arm_name(self.spec.name, self.experiment, "owner")
        owner = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": owner_name, "namespace": ns, "labels": self._labels()},
                 "data": {"experiment": self.experiment, "target": self.spec.workload}}
        made = self._journalled_create(owner)
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner_name, "uid": made["metadata"]["uid"]}
        for arm in ARMS:
            obj = self.manifests[arm]
            obj["metadata"]["ownerReferences"] = [{**ref, "blockOwnerDeletion": True}]
            self._journalled_create(obj)

    def _labels(self) -> dict[str, str]:
        return {kube_clone.LABEL_EXPERIMENT: kube_clone.experiment_label(self.experiment),
                kube_clone.MANAGED_BY[0]: kube_clone.MANAGED_BY[1]}

    def _journalled_create(self, obj: dict) -> dict:
        kind, meta = obj["kind"].lower(), obj["metadata"]
        self.journal.write(self.experiment, "kube creating", kind=kind, name=meta["name"], namespace=meta["namespace"])
        made = self._api(lambda: self.kube.create(obj))
        entry = {"kind": kind, "name": meta["name"], "namespace": meta["namespace"], "uid": made["metadata"]["uid"]}
        self.created.append(entry)
        self.journal.write(self.experiment, "kube created", **entry)
        return made

    def _pods(self, arm: str) -> list[dict]:
        labels = {kube_clone.LABEL_EXPERIMENT: kube_clone.experiment_label(self.experiment), kube_clone.LABEL_ARM: arm}
        return self._api(lambda: self.kube.list("pod", labels=labels))

    def _events(self, pod: dict) -> list[dict]:
        name = pod["metadata"]["name"]
        return self._api(lambda: self.kube.list("event", fields={"involvedObject.name": name}))

    def _workload_events(self, arm: str) -> list[dict]:
        name = self.manifests[arm]["metadata"]["name"]
        return self._api(lambda: self.kube.list("event", fields={"involvedObject.name": name}))

    def bring_up(self, arm: str) -> str:
        if not self.created:
            self._create_all()
        if arm not in self.ready:
            self.ready[arm] = self._wait_ready(arm)
            self.starts += len(self.ready[arm])
            self._describe(arm)
        if len(self.ready) == 2 and not self.compared:
            self._compare()
        return self.url(arm)

    def _compare(self) -> None:
        """Before the candidate's first block: what the two engines reveal about themselves differs
        in the knob only (their version, models, configuration info), else the run is refused."""
        self.compared = True
        if self.mechanism is None:
            return
        base, cand = (observe_url(self.url(arm), self.dep.engine, self.dep.model) for arm in ARMS)
        note = arm_check.check(base, cand, self.mechanism, aa=self.mechanism == "aa", what="arms")
        if note:
            self.notes.append(note)

    def _wait_ready(self, arm: str) -> list[dict]:
        deadline = self.clock() + self.spec.start_timeout_s
        want = self.replicas[arm]
        while True:
            pods = self._pods(arm)
            for pod in pods:
                why = kube_failures.failure(pod, self._events(pod), self.spec.container)
                if why:
                    raise LaunchError(f"the {arm} arm will not serve: {why}")
            if not pods:
                created = [e for e in self._workload_events(arm) if e.get("reason") == "FailedCreate"]
                if created:
                    said = escape.one_line(created[-1].get("message"), 300)
                    raise LaunchError(f"the {arm} arm's pods cannot be created (FailedCreate): {said}")
            ready = [p for p in pods if _ready(p) and (p.get("status") or {}).get("podIP")]
            if len(ready) >= want and all(healthy(self._pod_url(p), self.spec.health_path, timeout=2.0)
                                          for p in ready[:want]):
                return ready[:want]
            if self.clock() > deadline:
                state = "; ".join(_pod_state(p) for p in pods) or "no pod created"
                raise LaunchError(f"the {arm} arm was not ready within {self.spec.start_timeout_s:.0f}s ({state})")
            time.sleep(_POLL_S)

    def _describe(self, arm: str) -> None:
        """Where the arm runs, for the manifest: its nodes, their GPU model, its image digests."""
        nodes = sorted({(p.get("spec") or {}).get("nodeName") or "?" for p in self.ready[arm]})
        gpus = []
        for n in nodes:
            node = self._api(lambda n=n: self.kube.get("node", n)) if n != "?" else None
            labels = ((node or {}).get("metadata") or {}).get("labels") or {}
            gpus.append(labels.get("nvidia.com/gpu.product"))
        images = sorted({c.get("imageID") or c.get("image") or "?" for p in self.ready[arm]
                         for c in (p.get("status") or {}).get("containerStatuses") or []
                         if c.get("name") == self.spec.container})
        self.info[arm] = {"workload": self.manifests[arm]["metadata"]["name"], "nodes": nodes,
                          "gpu_products": [g for g in gpus if g], "images": images,
                          "pods": [p["metadata"]["name"] for p in self.ready[arm]],
                          "argv": [*(engine_container(self.manifests[arm], self.spec).get("command") or []),
                                   *self.args[arm]]}

    def _pod_url(self, pod: dict) -> str:
        if self.spec.reach == "pods-proxy":
            uid = pod["metadata"]["uid"]
            if uid not in self._relays:
                self._relays[uid] = PodRelay(self.kube, pod["metadata"]["name"], self.spec.port)
            return self._relays[uid].url
        return f"http://{pod['status']['podIP']}:{self.spec.port}"

    def _close_relays(self, pods: list[dict] | None = None) -> None:
        uids = list(self._relays) if pods is None else [p["metadata"]["uid"] for p in pods]
        for uid in uids:
            relay = self._relays.pop(uid, None)
            if relay is not None:
                relay.close()

    def url(self, arm: str) -> str:
        return self.urls(arm)[0]

    def urls(self, arm: str) -> list[str]:
        pods = self.ready.get(arm)
        if not pods:
            raise LaunchError(f"the {arm} arm is not up")
        return [self._pod_url(p) for p in pods]

    def check(self, arm: str) -> str | None:
        """Why the arm's pods are no longer the ones that became ready (gone, restarted, failing)."""
        before = {p["metadata"]["uid"]: p for p in self.ready.get(arm, [])}
        try:
            now = {p["metadata"]["uid"]: p for p in self._pods(arm)}
        except LaunchError as e:
            return str(e)
        for uid, old in before.items():
            pod = now.get(uid)
            name = old["metadata"]["name"]
            if pod is None:
                return f"the {arm}'s pod {name} is gone"
            why = kube_failures.failure(pod, (), self.spec.container)
            if why:
                return why
            if _restarts(pod, self.spec.container) > _restarts(old, self.spec.container):
                return f"the {arm}'s pod {name} restarted ({_pod_state(pod)})"
        return None

    def take_down(self, arm: str) -> None:
        name = self.manifests[arm]["metadata"]["name"]
        kind = self.manifests[arm]["kind"].lower()
        self._api(lambda: self.kube.delete(kind, name, self.spec.namespace))
        self._close_relays(self.ready.pop(arm, []))

    def restore(self) -> str | None:
        """Deletes every object it created (the arms, then the owner) and waits for their pods to go;
        the target, only read, is checked unchanged by anyone else."""
        self._close_relays()  # nothing is measured after this
        if not self.created:
            return f"nothing was created; {self.spec.workload} was only read"
        gone = delete_created(self.kube, self.created)
        labels = {kube_clone.LABEL_EXPERIMENT: kube_clone.experiment_label(self.experiment)}
        deadline = self.clock() + 120
        # A foreground deletion keeps each object until its pods are gone: done when nothing is left.
        while self._api(lambda: self.kube.list("pod", labels=labels)) or any(
                self._api(lambda e=e: self.kube.get(e["kind"], e["name"], e["namespace"])) for e in self.created):
            if self.clock() > deadline:
                raise LaunchError("the arms were still terminating after 120 s; `advisor recover` deletes what is "
                                  "left")
            time.sleep(_POLL_S)
        note = f"arms deleted ({', '.join(gone)}); {self.spec.workload} was only read"
        now = self._api(lambda: self.kube.get(self.spec.kind, self.spec.name))
        # Its status moves with its pods; a new generation is a change of its spec (a rollout).
        before = self.info.get("target_generation")
        if now is not None and before is not None and now["metadata"].get("generation") != before:
            note += (f" (its spec changed meanwhile, by someone else: generation {before} -> "
                     f"{now['metadata'].get('generation')}; the arms were cloned from generation {before})")
        return note

    def resident_bytes(self, arm: str, files: tuple[str, ...] = ()) -> Resident:
        """The arm's engine containers' working set, summed over its pods, from the cluster's metrics
        API (metrics-server samples it every 15 s or so: a block's reading may be a sample old).
        Unknown, with one note saying why, where the cluster does not serve it."""
        total = 0
        for pod in self.ready.get(arm, []):
            used, why = self.kube.pod_memory(pod["metadata"]["name"], self.spec.container)
            if used is None:
                if not self._memory_note:
                    self._memory_note = f"memory per arm not read: {why}"
                    self.notes.append(self._memory_note)
                return Resident()
            total += used
        return Resident(rss=total) if self.ready.get(arm) else Resident()

    def close(self) -> None:
        self._close_relays()
        if self._kube is not None:
            self._kube.close()


def delete_created(kube: Kube, created: list[dict]) -> list[str]:
    """Deletes the journalled objects, arms before their owner; what it deleted, as kind/name."""
    done = []
    for e in sorted(created, key=lambda e: e["kind"] == "configmap"):
        try:
            if kube.delete(e["kind"], e["name"], e["namespace"]):
                done.append(f"{e['kind']}/{e['name']}")
        except KubeError as err:
            raise LaunchError(str(err)) from None
    return done


def _ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _restarts(pod: dict, container: str) -> int:
    return sum(int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or []
               if c.get("name") == container)


def _pod_state(pod: dict) -> str:
    status = pod.get("status") or {}
    waiting = [((c.get("state") or {}).get("waiting") or {}).get("reason")
               for c in status.get("containerStatuses") or []]
    why = ", ".join(w for w in waiting if w)
    return f"pod {pod['metadata']['name']} {status.get('phase', '?')}" + (f" ({why})" if why else "")


def recover_objects(spec: KubernetesSpec, experiment: str, entries: list[dict]) -> list[str]:
    """What an experiment whose advisor died had created, deleted: each journalled object only if
    the live one is still that object (its UID, or, where the advisor died between asking and
    being answered, its name) and carries this experiment's labels. A journal can be edited by hand:
    an object that does not prove it is the advisor's is left alone, and said so."""
    kube = client_for(spec)
    want = kube_clone.experiment_label(experiment)
    named: dict[tuple, dict] = {}
    for e in entries:
        if e.get("event") not in ("kube creating", "kube created"):
            continue
        key = (e.get("kind"), e.get("name"), e.get("namespace"))
        if not all(isinstance(k, str) for k in key) or key[0] not in ("deployment", "statefulset", "configmap"):
            continue
        named[key] = {**named.get(key, {}), **{k: e[k] for k in ("kind", "name", "namespace", "uid") if k in e}}
    done, ours = [], []
    try:
        for (kind, name, namespace), e in named.items():
            live = kube.get(kind, name, namespace)
            if live is None:
                continue
            meta = live.get("metadata") or {}
            labels = meta.get("labels") or {}
            if e.get("uid") and meta.get("uid") != e["uid"]:
                done.append(f"left {kind}/{name} alone: it is not the object the experiment created (another uid)")
            elif labels.get(kube_clone.LABEL_EXPERIMENT) != want or \
                    labels.get(kube_clone.MANAGED_BY[0]) != kube_clone.MANAGED_BY[1]:
                done.append(f"left {kind}/{name} alone: it does not carry experiment {experiment}'s labels")
            else:
                ours.append({"kind": kind, "name": name, "namespace": namespace})
        deleted = delete_created(kube, ours)
    except KubeError as err:
        raise LaunchError(str(err)) from None
    finally:
        kube.close()
    if deleted:
        done.append(f"deleted the arms it had created ({', '.join(deleted)})")
    return done or ["no arm of it was left in the cluster"]
