"""A Kubernetes arm that will not serve is one line quoting its pod's own status or event
(advisor/experiments/arms/kube_failures.py); a pod still on its way is no failure. The statuses
and events are shaped as the API server and the kubelet write them."""

from __future__ import annotations

import pytest

from advisor.experiments.arms.kube_failures import failure


def pod(*containers: dict, phase: str = "Pending", conditions=()) -> dict:
    return {"metadata": {"name": "vllm-1a2b3c4d-candidate-7f9c"},
            "status": {"phase": phase, "conditions": list(conditions), "containerStatuses": list(containers)}}


def container(waiting=None, last=None, restarts=0, name="vllm") -> dict:
    return {"name": name, "image": "vllm/vllm-openai:v0.32.0", "restartCount": restarts,
            "state": {"waiting": waiting} if waiting else {"running": {"startedAt": "2026-12-04T10:00:00Z"}},
            "lastState": {"terminated": last} if last else {}}


UNSCHEDULED = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
               "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}


def test_unschedulable_quotes_the_newest_failed_scheduling_event():
    events = [{"reason": "FailedScheduling", "lastTimestamp": "2026-12-04T10:00:01Z", "message": "older"},
              {"reason": "FailedScheduling", "lastTimestamp": "2026-12-04T10:00:09Z",
               "message": "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient nvidia.com/gpu. "
                          "preemption: 0/3 nodes are available: 3 No preemption victims found."}]
    why = failure(pod(phase="Pending", conditions=[UNSCHEDULED]), events)
    assert why.startswith("pod vllm-1a2b3c4d-candidate-7f9c cannot be scheduled (FailedScheduling): 0/3 nodes")
    assert "2 Insufficient nvidia.com/gpu" in why and "older" not in why
    assert "3 Insufficient" in failure(pod(conditions=[UNSCHEDULED]))  # no event yet: the condition's message


def test_an_image_that_cannot_be_pulled():
    why = failure(pod(container(waiting={"reason": "ImagePullBackOff", "message": 'Back-off pulling image '
                                         '"vllm/vllm-openai:v9"'})))
    assert "cannot pull vllm/vllm-openai:v0.32.0 (ImagePullBackOff): Back-off pulling image" in why, why


def test_a_crash_loop_names_the_restarts_and_the_last_exit():
    last = {"exitCode": 1, "reason": "Error", "message": "ValueError: unrecognized arguments: --max-num-seq 8"}
    why = failure(pod(container(waiting={"reason": "CrashLoopBackOff", "message": "back-off 40s"}, last=last,
                                restarts=4)))
    assert "crash-looping (4 restarts; last exit code 1, Error: ValueError: unrecognized arguments" in why, why
    # Three restarts and a last exit are a loop before the kubelet's back-off says so.
    assert "crash-looping" in failure(pod(container(last=last, restarts=3), phase="Running"))
    assert failure(pod(container(last=last, restarts=1), phase="Running")) is None


def test_oom_killed_says_the_memory_limit():
    why = failure(pod(container(waiting={"reason": "CrashLoopBackOff"}, last={"exitCode": 137, "reason": "OOMKilled"},
                                restarts=2)))
    assert "was OOMKilled (exit code 137, 2 restarts): its memory limit is too small" in why, why


def test_a_missing_secret_is_a_configuration_error():
    why = failure(pod(container(waiting={"reason": "CreateContainerConfigError",
                                         "message": 'secret "hf-token" not found'})))
    assert 'cannot be configured (CreateContainerConfigError): secret "hf-token" not found' in why


@pytest.mark.parametrize("state", [
    {"waiting": {"reason": "ContainerCreating"}}, {"waiting": {"reason": "PodInitializing"}}, None])
def test_a_pod_on_its_way_is_no_failure(state):
    c = container()
    if state:
        c["state"] = state
    assert failure(pod(c)) is None
    assert failure(pod(phase="Pending")) is None


def test_only_the_engine_container_is_read_when_named_and_messages_are_one_bounded_line():
    sidecar = container(waiting={"reason": "ImagePullBackOff", "message": "x\n" * 500}, name="log-shipper")
    assert failure(pod(sidecar, container()), container="vllm") is None
    why = failure(pod(sidecar, container()))
    assert "\n" not in why and len(why) < 450 and why.endswith("...")


def test_a_failed_pod():
    p = pod(phase="Failed")
    p["status"].update(reason="Evicted", message="The node was low on resource: memory.")
    assert failure(p) == "pod vllm-1a2b3c4d-candidate-7f9c failed (Evicted): The node was low on resource: memory."
