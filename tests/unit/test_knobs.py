"""The knob catalog: complete entries, exact vLLM argv, apply() on realistic argv, validation before
anything runs, unsupported engine/mechanism pairs, values that never meet a shell."""

from pathlib import Path

import pytest
import yaml

from advisor import knobs
from advisor.knobs import KNOBS, KnobError, Rendered, already_candidate, apply, current_value, render
from advisor.knobs.loader import CATALOG, CatalogError, load_catalog
from advisor.knobs.model import CLIENT_METRICS, ENGINES
from advisor.loadgen.metrics import DEFINITIONS
from probes import signal_defs

# DESIGN.md section 6, the mechanism vocabulary, in its order.
VOCABULARY = ["max_num_seqs", "max_num_batched_tokens", "chunked_prefill", "prefix_caching", "kv_cache_dtype",
              "quantization", "speculative", "tensor_parallel", "data_parallel", "replicas",
              "gpu_memory_utilization", "scheduling_policy", "enforce_eager", "api_server_count", "expert_parallel"]

# The flags that worked for the CPU engine on these machines (DESIGN.md section 7), plus the knob under test.
VLLM_BASE = ["-m", "vllm.entrypoints.openai.api_server", "--model", "/models/tiny-llama", "--served-model-name",
             "tiny-llama", "--max-model-len", "2048", "--enforce-eager", "--dtype", "bfloat16", "--host",
             "127.0.0.1", "--port", "8000"]
SPEC_NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}

# A value of each knob that every engine supporting it can render (speculative differs per engine).
SAMPLES = {"max_num_seqs": 8, "max_num_batched_tokens": 4096, "chunked_prefill": False, "prefix_caching": False,
           "kv_cache_dtype": "fp8", "quantization": "fp8", "tensor_parallel": 2, "data_parallel": 2,
           "replicas": 3, "gpu_memory_utilization": 0.8, "scheduling_policy": "priority", "enforce_eager": True,
           "api_server_count": 2, "expert_parallel": True}
SPEC_SAMPLES = {"vllm": SPEC_NGRAM, "sglang": {"method": "ngram", "num_speculative_tokens": 4},
                "tgi": {"method": "ngram", "num_speculative_tokens": 3},
                "llamacpp": {"method": "draft_model", "model": "draft.gguf", "num_speculative_tokens": 8}}
ENGINE_SAMPLE_OVERRIDES = {("kv_cache_dtype", "llamacpp"): "q8_0"}


def sample(mechanism, engine):
    if mechanism == "speculative":
        return SPEC_SAMPLES[engine]
    return ENGINE_SAMPLE_OVERRIDES.get((mechanism, engine), SAMPLES[mechanism])


# -- the catalog is complete ----------------------------------------------------------------------

def test_every_mechanism_of_the_vocabulary_is_present_in_order():
    assert list(KNOBS) == VOCABULARY


@pytest.mark.parametrize("name", VOCABULARY)
def test_every_knob_is_complete(name):
    k = KNOBS[name]
    assert k.name == name
    assert len(k.description) > 30 and len(k.fails_means) > 30
    assert k.value.type in ("int", "float", "bool", "choice", "speculative")
    assert k.value.allowed()
    assert k.primary is not None and k.secondary, "a primary readout and secondary readouts"
    signals = signal_defs()
    for r in k.readouts:
        assert r.statistic in CLIENT_METRICS[r.metric]
        assert r.better in ("lower", "higher")
        assert r.signal is None or r.signal in signals
    assert all(w in signals for w in k.watch)
    assert set(k.engines) == set(ENGINES)
    for e, spec in k.engines.items():
        assert spec.source, f"{name}/{e}: cite the engine's source"
        assert spec.supported or spec.reason


def test_readouts_use_the_load_generators_metrics():
    from advisor.experiments.design import readouts

    assert {"ttft", "tpot", "itl", "e2e", "goodput"} <= set(DEFINITIONS)
    assert all(readouts.known(r.metric, r.statistic) for k in KNOBS.values() for r in k.readouts)


def test_knob_primary_unpacks_as_metric_and_statistic():
    metric, statistic = KNOBS["prefix_caching"].primary
    assert (metric, statistic) == ("ttft", "p95")
    assert KNOBS["prefix_caching"].primary.signal == "ttft_p95"


def test_numerics_changing_knobs_need_a_quality_guard():
    assert {n for n, k in KNOBS.items() if k.changes_numerics} == {"quantization", "kv_cache_dtype", "speculative"}


def test_revealed_config_keys_are_vllm_cache_config_labels(capture):
    text = capture("metrics-queueing-t0")
    line = next(l for l in text.splitlines() if l.startswith("vllm:cache_config_info{"))
    for k in KNOBS.values():
        if k.config_key:
            assert f'{k.config_key}="' in line, k.name


# -- vLLM renders every knob it supports, exactly -----------------------------------------------------

@pytest.mark.parametrize("mechanism, value, args", [
    ("max_num_seqs", 8, ["--max-num-seqs", "8"]),
    ("max_num_seqs", "16", ["--max-num-seqs", "16"]),
    ("max_num_batched_tokens", 4096, ["--max-num-batched-tokens", "4096"]),
    ("chunked_prefill", True, ["--enable-chunked-prefill"]),
    ("chunked_prefill", False, ["--no-enable-chunked-prefill"]),
    ("prefix_caching", True, ["--enable-prefix-caching"]),
    ("prefix_caching", False, ["--no-enable-prefix-caching"]),
    ("prefix_caching", "false", ["--no-enable-prefix-caching"]),
    ("kv_cache_dtype", "fp8", ["--kv-cache-dtype", "fp8"]),
    ("kv_cache_dtype", "fp8_e5m2", ["--kv-cache-dtype", "fp8_e5m2"]),
    ("quantization", "fp8", ["--quantization", "fp8"]),
    ("quantization", "none", []),
    ("speculative", SPEC_NGRAM,
     ["--speculative-config", '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}']),
    ("speculative", '{"num_speculative_tokens": 3, "method": "eagle", "model": "org/eagle-head"}',
     ["--speculative-config", '{"method":"eagle","model":"org/eagle-head","num_speculative_tokens":3}']),
    ("speculative", "off", []),
    ("tensor_parallel", 2, ["--tensor-parallel-size", "2"]),
    ("data_parallel", 4, ["--data-parallel-size", "4"]),
    ("gpu_memory_utilization", 0.8, ["--gpu-memory-utilization", "0.8"]),
    ("scheduling_policy", "priority", ["--scheduling-policy", "priority"]),
    ("scheduling_policy", "fcfs", ["--scheduling-policy", "fcfs"]),
    ("enforce_eager", True, ["--enforce-eager"]),
    ("enforce_eager", False, []),
])
def test_vllm_renders_exact_argv(mechanism, value, args):
    r = render(mechanism, "vllm", value)
    assert r == Rendered(args=args, env={}, replicas=None)


def test_replicas_is_a_deployment_level_count_on_every_engine():
    for engine in ENGINES:
        assert render("replicas", engine, 3) == Rendered(args=[], env={}, replicas=3)
    assert apply(VLLM_BASE, "replicas", "vllm", 3) == (VLLM_BASE, {})


@pytest.mark.parametrize("mechanism, engine, value, args, env", [
    ("max_num_seqs", "sglang", 8, ["--max-running-requests", "8"], {}),
    ("max_num_seqs", "tgi", 8, ["--max-batch-size", "8"], {}),
    ("max_num_seqs", "llamacpp", 8, ["--parallel", "8"], {}),
    ("max_num_batched_tokens", "sglang", 8192, ["--max-prefill-tokens", "8192"], {}),
    ("max_num_batched_tokens", "tgi", 8192, ["--max-batch-prefill-tokens", "8192"], {}),
    ("max_num_batched_tokens", "llamacpp", 1024, ["--batch-size", "1024"], {}),
    ("chunked_prefill", "sglang", False, ["--chunked-prefill-size", "-1"], {}),
    ("chunked_prefill", "sglang", True, [], {}),
    ("prefix_caching", "sglang", False, ["--disable-radix-cache"], {}),
    ("prefix_caching", "tgi", False, [], {"PREFIX_CACHING": "0"}),
    ("prefix_caching", "tgi", True, [], {"PREFIX_CACHING": "1"}),
    ("prefix_caching", "llamacpp", False, ["--no-cache-prompt"], {}),
    ("kv_cache_dtype", "sglang", "fp8", ["--kv-cache-dtype", "fp8_e4m3"], {}),
    ("kv_cache_dtype", "tgi", "fp8", ["--kv-cache-dtype", "fp8_e4m3fn"], {}),
    ("kv_cache_dtype", "tgi", "auto", [], {}),
    ("kv_cache_dtype", "llamacpp", "q8_0", ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0"], {}),
    ("quantization", "tgi", "bitsandbytes-nf4", ["--quantize", "bitsandbytes-nf4"], {}),
    ("speculative", "sglang", {"method": "eagle", "model": "org/head", "num_speculative_tokens": 4},
     ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "org/head",
      "--speculative-num-draft-tokens", "4"], {}),
    ("speculative", "tgi", {"method": "ngram", "num_speculative_tokens": 3}, ["--speculate", "3"], {}),
    ("speculative", "llamacpp", {"model": "draft.gguf", "num_speculative_tokens": 8},
     ["--model-draft", "draft.gguf", "--spec-draft-n-max", "8"], {}),
    ("tensor_parallel", "sglang", 2, ["--tp-size", "2"], {}),
    ("tensor_parallel", "tgi", 2, ["--num-shard", "2"], {}),
    ("data_parallel", "sglang", 2, ["--dp-size", "2"], {}),
    ("gpu_memory_utilization", "sglang", 0.85, ["--mem-fraction-static", "0.85"], {}),
    ("gpu_memory_utilization", "tgi", 0.9, ["--cuda-memory-fraction", "0.9"], {}),
    ("scheduling_policy", "sglang", "priority", ["--enable-priority-scheduling"], {}),
    ("enforce_eager", "sglang", True, ["--disable-cuda-graph"], {}),
    ("enforce_eager", "tgi", True, ["--cuda-graphs", "0"], {}),
    ("enforce_eager", "llamacpp", True, [], {"GGML_CUDA_DISABLE_GRAPHS": "1"}),
])
def test_other_engines_render(mechanism, engine, value, args, env):
    assert render(mechanism, engine, value) == Rendered(args=args, env=env, replicas=None)


@pytest.mark.parametrize("mechanism, engine", [
    (m, e) for m in VOCABULARY for e in ENGINES if KNOBS[m].engines[e].supported])
def test_every_supported_pair_renders_applies_and_reads_back(mechanism, engine):
    value = sample(mechanism, engine)
    r = render(mechanism, engine, value)
    assert all(isinstance(a, str) for a in r.args)
    new, env = apply(["serve", "--port", "8000"], mechanism, engine, value)
    assert new[:3] == ["serve", "--port", "8000"] and new[3:] == r.args and env == r.env
    back = current_value(new, mechanism, engine)
    if not r.args:
        assert back is None
    elif mechanism == "speculative":
        assert back["num_speculative_tokens"] == value["num_speculative_tokens"]
    else:  # the same setting, possibly under an equivalent name (fp8 is fp8_e4m3 on SGLang)
        assert render(mechanism, engine, back) == r
        if mechanism != "kv_cache_dtype":
            assert back == knobs.validate(mechanism, value)
    # applying the same knob again replaces, never stacks
    again, _ = apply(new, mechanism, engine, value)
    assert again == new


# -- apply() on a realistic baseline argv ---------------------------------------------------------

@pytest.mark.parametrize("spelling", [["--max-num-seqs", "2"], ["--max-num-seqs=2"], ["--max_num_seqs", "2"],
                                      ["--max_num_seqs=2"]])
def test_apply_replaces_every_spelling_of_max_num_seqs(spelling):
    base = VLLM_BASE[:8] + spelling + VLLM_BASE[8:]
    new, env = apply(base, "max_num_seqs", "vllm", 8)
    assert new == VLLM_BASE + ["--max-num-seqs", "8"]
    assert env == {}
    assert base == VLLM_BASE[:8] + spelling + VLLM_BASE[8:], "the baseline list is not mutated"


def test_apply_removes_repeated_occurrences_and_keeps_order():
    base = ["--max-num-seqs", "2"] + VLLM_BASE + ["--max-num-seqs=4"]
    assert apply(base, "max_num_seqs", "vllm", 16)[0] == VLLM_BASE + ["--max-num-seqs", "16"]


def test_apply_flips_no_enable_prefix_caching():
    base = VLLM_BASE + ["--no-enable-prefix-caching", "--max-num-seqs", "2"]
    new, _ = apply(base, "prefix_caching", "vllm", True)
    assert new == VLLM_BASE + ["--max-num-seqs", "2", "--enable-prefix-caching"]
    assert current_value(base, "prefix_caching", "vllm") is False
    assert current_value(new, "prefix_caching", "vllm") is True
    assert current_value(VLLM_BASE, "prefix_caching", "vllm") is None


def test_enforce_eager_false_removes_the_flag():
    new, env = apply(VLLM_BASE, "enforce_eager", "vllm", False)
    assert "--enforce-eager" not in new and env == {}
    assert new == [a for a in VLLM_BASE if a != "--enforce-eager"]
    assert current_value(VLLM_BASE, "enforce_eager", "vllm") is True


def test_speculative_replaces_json_and_dotted_forms():
    base = VLLM_BASE + ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}',
                        "--speculative-config.prompt_lookup_max", "3", "--speculative_config.num_speculative_tokens=5"]
    assert current_value(base, "speculative", "vllm") == {
        "method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 3}
    new, _ = apply(base, "speculative", "vllm", SPEC_NGRAM)
    assert new == VLLM_BASE + ["--speculative-config",
                               '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}']
    assert apply(base, "speculative", "vllm", "off")[0] == VLLM_BASE


def test_short_and_alias_spellings_on_other_engines():
    assert apply(["-m", "x.gguf", "-np", "4", "-c", "8192"], "max_num_seqs", "llamacpp", 8)[0] == \
        ["-m", "x.gguf", "-c", "8192", "--parallel", "8"]
    assert apply(["-ctk", "f16", "--cache-type-v=f16", "-fa", "on"], "kv_cache_dtype", "llamacpp", "q8_0")[0] == \
        ["-fa", "on", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0"]
    assert apply(["--model-path", "m", "--tp", "4"], "tensor_parallel", "sglang", 2)[0] == \
        ["--model-path", "m", "--tp-size", "2"]
    assert apply(["--model-id", "m", "--sharded", "true", "--num-shard", "4"], "tensor_parallel", "tgi", 1)[0] == \
        ["--model-id", "m", "--num-shard", "1"]
    assert apply(["--model", "m", "-tp", "2"], "tensor_parallel", "vllm", 4)[0] == \
        ["--model", "m", "--tensor-parallel-size", "4"]
    assert apply(["--model-path", "m", "--chunked-prefill-size", "4096"], "chunked_prefill", "sglang", False)[0] == \
        ["--model-path", "m", "--chunked-prefill-size", "-1"]
    assert apply(["--model-id", "m", "--cuda-graphs", "1,2,4"], "enforce_eager", "tgi", True)[0] == \
        ["--model-id", "m", "--cuda-graphs", "0"]
    assert apply(["--model-id", "m"], "prefix_caching", "tgi", False) == (["--model-id", "m"], {"PREFIX_CACHING": "0"})


def test_current_value_reads_what_the_baseline_sets():
    assert current_value(VLLM_BASE + ["--max-num-seqs", "2"], "max_num_seqs", "vllm") == 2
    assert current_value(VLLM_BASE + ["--max-num-seqs=2", "--max-num-seqs", "6"], "max_num_seqs", "vllm") == 6
    assert current_value(VLLM_BASE, "max_num_seqs", "vllm") is None
    assert current_value(["--max-num-batched-tokens", "2k"], "max_num_batched_tokens", "vllm") == 2000
    assert current_value(["--kv-cache-dtype", "fp8_e4m3"], "kv_cache_dtype", "sglang") == "fp8_e4m3"
    assert current_value(["--kv-cache-dtype", "fp8_e4m3fn"], "kv_cache_dtype", "tgi") == "fp8"
    assert current_value(["--chunked-prefill-size", "4096"], "chunked_prefill", "sglang") is True
    assert current_value(["--num-shard", "2", "--sharded", "true"], "tensor_parallel", "tgi") == 2
    assert current_value(["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"],
                         "speculative", "sglang") == {"method": "ngram", "num_speculative_tokens": 4}
    assert current_value(VLLM_BASE, "replicas", "vllm") is None


# -- invalid values and unsupported pairs fail before anything runs ----------------------------------

@pytest.mark.parametrize("mechanism, value, message", [
    ("max_num_seqs", 0, "max_num_seqs: 0 is not allowed (an integer from 1 to 65536)"),
    ("max_num_seqs", -1, "max_num_seqs: -1 is not allowed (an integer from 1 to 65536)"),
    ("max_num_seqs", "abc", "max_num_seqs: 'abc' is not allowed (an integer from 1 to 65536)"),
    ("max_num_seqs", 1.5, "max_num_seqs: 1.5 is not allowed (an integer from 1 to 65536)"),
    ("max_num_seqs", True, "max_num_seqs: true is not allowed"),
    ("max_num_seqs", None, "max_num_seqs: null is not allowed"),
    ("max_num_seqs", "8; rm -rf /", "max_num_seqs: '8; rm -rf /' is not allowed"),
    ("max_num_batched_tokens", "4096 --enforce-eager", "is not allowed"),
    ("tensor_parallel", 0, "tensor_parallel: 0 is not allowed"),
    ("gpu_memory_utilization", 1.5, "gpu_memory_utilization: 1.5 is not allowed (a number from 0.05 to 1)"),
    ("gpu_memory_utilization", "nan", "is not allowed"),
    ("gpu_memory_utilization", 0, "is not allowed"),
    ("prefix_caching", "maybe", "prefix_caching: 'maybe' is not allowed (true or false)"),
    ("prefix_caching", 2, "is not allowed"),
    ("kv_cache_dtype", "fp9", "kv_cache_dtype: 'fp9' is not allowed (one of auto, "),
    ("kv_cache_dtype", "fp8 --trust-remote-code", "is not allowed"),
    ("scheduling_policy", "lifo", "scheduling_policy: 'lifo' is not allowed (one of fcfs, priority)"),
    ("speculative", "{bad json", "speculative: '{bad json' is not allowed"),
    ("speculative", "[1, 2]", "is not allowed"),
    ("speculative", {"method": "ngram"}, "num_speculative_tokens must be an integer from 1 to 64"),
    ("speculative", {"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
    ("speculative", {"method": "magic", "num_speculative_tokens": 2}, "method must be one of"),
    ("speculative", {"num_speculative_tokens": 2}, "give a method or a draft model"),
    ("speculative", {"method": "draft_model", "model": "--trust-remote-code", "num_speculative_tokens": 2},
     "model must be a path"),
    ("speculative", {"method": "ngram", "num_speculative_tokens": 2, "Bad Key": 1}, "is not a lower-case name"),
    ("speculative", {"method": "ngram", "num_speculative_tokens": 2, "x": "a\nb"}, "control characters"),
])
def test_invalid_values_raise_before_anything_runs(mechanism, value, message):
    base = list(VLLM_BASE)
    for call in (lambda: render(mechanism, "vllm", value), lambda: apply(base, mechanism, "vllm", value)):
        with pytest.raises(KnobError) as e:
            call()
        assert message in str(e.value)
        assert "\n" not in str(e.value), "one line"
    assert base == VLLM_BASE


@pytest.mark.parametrize("mechanism, engine", [
    (m, e) for m in VOCABULARY for e in ENGINES if not KNOBS[m].engines[e].supported])
def test_unsupported_pairs_raise(mechanism, engine):
    with pytest.raises(KnobError, match=f"^{mechanism} is not supported on {engine}: "):
        render(mechanism, engine, sample(mechanism, engine))
    with pytest.raises(KnobError, match="not supported"):
        apply(["serve"], mechanism, engine, sample(mechanism, engine))


def test_the_expected_pairs_are_unsupported():
    unsupported = {(m, e) for m in VOCABULARY for e in ENGINES if not KNOBS[m].engines[e].supported}
    assert unsupported == {
        ("chunked_prefill", "tgi"), ("chunked_prefill", "llamacpp"), ("quantization", "llamacpp"),
        ("tensor_parallel", "llamacpp"), ("data_parallel", "tgi"), ("data_parallel", "llamacpp"),
        ("gpu_memory_utilization", "llamacpp"), ("scheduling_policy", "tgi"), ("scheduling_policy", "llamacpp"),
        ("api_server_count", "llamacpp"), ("expert_parallel", "sglang"), ("expert_parallel", "tgi"),
        ("expert_parallel", "llamacpp")}
    assert all(KNOBS[m].engines["vllm"].supported for m in VOCABULARY)


@pytest.mark.parametrize("mechanism, engine, value, message", [
    ("kv_cache_dtype", "vllm", "q8_0", "kv_cache_dtype: 'q8_0' is not available on vllm (available there: auto"),
    ("kv_cache_dtype", "tgi", "bfloat16", "is not available on tgi"),
    ("quantization", "tgi", "modelopt", "is not available on tgi"),
    ("speculative", "tgi", {"method": "eagle", "num_speculative_tokens": 3}, "method 'eagle' is not available on tgi"),
    ("speculative", "tgi", {"method": "ngram", "num_speculative_tokens": 3, "model": "m"}, "model has no tgi equivalent"),
    ("speculative", "sglang", {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2},
     "prompt_lookup_max has no sglang equivalent"),
])
def test_values_an_engine_lacks_raise(mechanism, engine, value, message):
    with pytest.raises(KnobError, match=message.replace("(", r"\(")):
        render(mechanism, engine, value)


def test_unknown_mechanism_and_engine():
    with pytest.raises(KnobError, match="unknown mechanism 'magic'"):
        render("magic", "vllm", 1)
    with pytest.raises(KnobError, match="unknown engine 'trtllm'"):
        render("max_num_seqs", "trtllm", 8)


# -- values never pass through a shell ------------------------------------------------------------------

def test_text_with_shell_metacharacters_stays_one_argv_element():
    model = "/models/draft; rm -rf / $(whoami) `id` | cat"
    r = render("speculative", "sglang", {"method": "draft_model", "model": model, "num_speculative_tokens": 2})
    assert r.args == ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", model,
                      "--speculative-num-draft-tokens", "2"]
    r = render("speculative", "vllm", {"method": "draft_model", "model": model, "num_speculative_tokens": 2})
    assert len(r.args) == 2 and model in r.args[1]


def test_a_shell_string_baseline_is_refused():
    with pytest.raises(KnobError, match="argv list, never a shell string"):
        apply("vllm serve m --max-num-seqs 2", "max_num_seqs", "vllm", 8)
    with pytest.raises(KnobError, match="only text elements"):
        apply(["--port", 8000], "max_num_seqs", "vllm", 8)


def test_no_module_builds_a_command_line():
    src = "\n".join(p.read_text() for p in Path(knobs.__file__).parent.glob("*.py"))
    for forbidden in ("shlex", "subprocess", "os.system", "shell=True", '" ".join', "' '.join"):
        assert forbidden not in src


# -- revealed configuration (config-aware checks) ---------------------------------------------------------

def test_already_candidate_reads_revealed_config():
    assert already_candidate("prefix_caching", {"enable_prefix_caching": "True"}) == "enable_prefix_caching=True already"
    assert already_candidate("prefix_caching", {"enable_prefix_caching": "False"}) is None
    assert already_candidate("kv_cache_dtype", {"cache_dtype": "fp8_e4m3"}) == "cache_dtype=fp8_e4m3 already"
    assert already_candidate("kv_cache_dtype", {"cache_dtype": "auto"}) is None
    assert already_candidate("gpu_memory_utilization", {"gpu_memory_utilization": "0.92"}) is None
    assert already_candidate("max_num_seqs", {"enable_prefix_caching": "True"}) is None
    assert already_candidate("prefix_caching", {}) is None


def test_already_candidate_on_a_real_capture(capture):
    text = capture("metrics-queueing-t0")
    assert 'enable_prefix_caching="False"' in text  # that run had prefix caching off
    assert already_candidate("prefix_caching", {"enable_prefix_caching": "False"}) is None


# -- a malformed catalog fails loudly -------------------------------------------------------------------------

@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["knobs"]["max_num_seqs"].pop("fails_means"), r"knobs.max_num_seqs: missing required field 'fails_means'"),
    (lambda c: c["knobs"]["max_num_seqs"]["engines"].pop("tgi"), r"knobs.max_num_seqs.engines: needs exactly"),
    (lambda c: c["knobs"]["max_num_seqs"]["readouts"]["primary"].update(signal="ttft_p955"), r"unknown signal 'ttft_p955'"),
    (lambda c: c["knobs"]["max_num_seqs"]["readouts"]["primary"].update(statistic="p42"), r"statistic: e2e offers"),
    (lambda c: c["knobs"]["max_num_seqs"]["engines"]["vllm"].update(replaces=["--other"]), r"listed in replaces"),
    (lambda c: c["knobs"]["prefix_caching"]["engines"]["vllm"]["renders"].pop(False), r"needs a rendering for each"),
    (lambda c: c["knobs"]["kv_cache_dtype"]["engines"]["vllm"]["values"].update(fp16="fp16"), r"'fp16' is not a value"),
    (lambda c: c["knobs"]["max_num_seqs"]["value"].update(type="text"), r"value.type: 'text' is not one of"),
])
def test_malformed_catalog_names_the_entry(tmp_path, mutate, message):
    raw = yaml.safe_load(CATALOG.read_text())
    mutate(raw)
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    with pytest.raises(CatalogError, match=message):
        load_catalog(path)


def test_the_shipped_catalog_loads():
    loaded, engines = load_catalog()
    assert list(loaded) == VOCABULARY and list(engines) == list(ENGINES)
