"""A/B experiments against the real CPU vLLM engine: verdicts with intervals, aborts that keep
their samples, and a baseline that is always left serving with its own flags. (max_num_seqs raised
under a queue, with the cost and each arm's server readouts, is proved the way a user runs it, by
`advisor diagnose --experiment 1`: tests/e2e/test_diagnose_e2e.py.)"""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml
from typer.testing import CliRunner

from advisor.cli import app
from advisor.engine_process import healthy
from advisor.children import stop_pid
from advisor.localstack import LlamaServer, LocalEngine, paths
from advisor.localstack.deployment import write_deployment
from tests.support.servers import ROOT, argv_on, flag, listener

runner = CliRunner()


def experiment(dep, *args) -> tuple[int, dict]:
    r = runner.invoke(app, ["experiment", "--deployment", str(dep), "--output", "json", *args])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


def slots(argv: list[str]) -> str | None:
    """llama-server's slot count: -np as LlamaServer starts it, --parallel as the catalog writes it."""
    return flag(argv, "--parallel") or flag(argv, "-np")


# One baseline for the two prefill checks (prefix caching off, a step budget of 32 tokens): each
# experiment's candidate changes one of the two, and a shared engine saves a start (30 s on 2 cores).
PREFILL_BASE = {"max_num_seqs": 4, "extra_args": ("--no-enable-prefix-caching", "--max-num-batched-tokens", "32")}


def test_prefix_caching_on_improves_ttft_with_shared_prefixes(tmp_path, isolated_store, engines):
    """Prefix caching on, with prompts that share their first words: the cached part is not
    prefilled again, which at a step budget of 32 tokens saves many steps."""
    base = engines(**PREFILL_BASE)
    dep = write_deployment(base, tmp_path / "dep.yaml")
    # the planned design (no --blocks): sequential looks, stopping at the first decisive one
    # 16 requests per block: the effect is large, and the test's cost is its requests.
    code, r = experiment(dep, "--mechanism", "prefix_caching", "--value", "true", "--readout", "ttft_p50",
                         "--concurrency", "4", "--block-requests", "16")
    assert code == 0 and r["status"] == "finished"
    # A loaded CI host widens the interval: a run that reaches its last look undecided is
    # "inconclusive", never "regressed"; the cache's own hit rate says the mechanism engaged.
    why = (r["ratio"], r["ci"], [m["reason"] for m in r["metrics"]], r["looks"])
    assert r["verdict"] in ("improved", "inconclusive") and r["ratio"] < 1, why
    lo, hi = r["ci"]
    assert lo <= r["ratio"] <= hi
    stopping = r["manifest"]["stopping"]
    per_arm = len(r["blocks"]) // 2
    assert stopping["sequential"] and per_arm == r["looks"][-1]["blocks"], (r["looks"], stopping)
    if r["verdict"] == "improved":
        assert hi < 1 and r["stop_reason"].startswith("decisive at look"), r["stop_reason"]
        assert per_arm < stopping["max_blocks_per_arm"], (r["looks"], stopping)
    else:  # undecided at the last look it planned
        assert per_arm == stopping["max_blocks_per_arm"], (r["looks"], stopping, r["stop_reason"])
    assert r["metrics"][0]["level"] == pytest.approx(1 - r["looks"][-1]["alpha"])
    hits = {row["signal"]: row for row in r["server"]}["prefix_cache_hit_rate"]
    assert hits["watched"] and hits["candidate"] > (hits["baseline"] or 0), r["server"]
    assert r["manifest"]["candidate_argv"].count("--enable-prefix-caching") == 1
    assert "--no-enable-prefix-caching" not in r["manifest"]["candidate_argv"]
    n = r["manifest"]["workload"]["requests_per_block"]
    assert r["manifest"]["per_arm"] == {"baseline": {"blocks": per_arm, "requests": per_arm * n},
                                        "candidate": {"blocks": per_arm, "requests": per_arm * n}}
    assert r["baseline_restored"] and healthy(base.url)
    assert "--no-enable-prefix-caching" in argv_on(base.port)
    assert listener(yaml.safe_load(dep.read_text())["local"]["candidate_port"]) is None, "candidate stopped"


def test_a_a_gives_no_verdict_of_difference(local_engine, tmp_path, isolated_store):
    """--aa against a baseline the advisor did not start (both arms at its URL): never a verdict of
    difference, and the noise it measured is what the next plan uses."""
    dep = tmp_path / "aa.yaml"
    dep.write_text(yaml.safe_dump({"name": "aa", "engine": "vllm", "model": "tiny-llama", "launcher": "endpoints",
                                   "endpoints": {"baseline": local_engine.url, "candidate": local_engine.url}}))
    code, r = experiment(dep, "--aa", "--readout", "ttft_p50", "--block-requests", "16", "--blocks", "4",
                         "--concurrency", "4")
    assert code == 0
    assert r["verdict"] in ("no change", "inconclusive"), (r["ratio"], r["ci"], r["looks"])
    assert all(m["verdict"] in ("no change", "inconclusive") for m in r["metrics"]), r["metrics"]
    noise = {(c["metric"], c["statistic"]): c for c in r["calibration"]}
    assert noise[("ttft", "p50")]["blocks"] == len(r["blocks"]) and noise[("ttft", "p50")]["block_sd"] > 0
    plans = runner.invoke(app, ["experiment", "--deployment", str(dep), "--plan", "--output", "json"])
    rows = {(x["metric"], x["statistic"]): x for x in json.loads(plans.stdout)}
    assert rows[("ttft", "p50")]["noise_source"].startswith(f"A/A calibration {r['id']}"), rows[("ttft", "p50")]
    assert healthy(local_engine.url)


def _journalled(data, event: str, **fields) -> bool:
    """Whether an experiment's journal under the data folder holds an `event` entry with these fields."""
    for path in (data / "experiments").glob("*/journal.jsonl") if (data / "experiments").exists() else ():
        for line in path.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
            except ValueError:  # a line being written
                continue
            if e.get("event") == event and all(e.get(k) == v for k, v in fields.items()):
                return True
    return False


# The two tests below are about the runner and the launcher (an abort that keeps its samples, a
# recovery from the journal), which do the same for every engine: they run on llama-server, which
# starts in two seconds where a vLLM engine takes thirty, one slot and one thread each.

def test_candidate_killed_mid_run_aborts_keeps_samples_and_baseline_serves(tmp_path, isolated_store):
    with LlamaServer(model=paths.tiny_gguf("Q8_0"), max_num_seqs=1, threads=1) as base:
        found = listener(base.port)
        dep = write_deployment(base, tmp_path / "dep.yaml", name="local-cpu-llama")
        cport = yaml.safe_load(dep.read_text())["local"]["candidate_port"]
        proc = subprocess.Popen([sys.executable, "-m", "advisor.cli", "experiment", "--deployment", str(dep),
                                 "--mechanism", "max_num_seqs", "--value", "2", "--blocks", "8", "--readout",
                                 "ttft_p50", "--block-requests", "16", "--output", "json"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=os.environ.copy())
        deadline = time.monotonic() + 400
        killed = False
        while time.monotonic() < deadline and proc.poll() is None:
            pid = listener(cport)
            # Once a block has run on it, the candidate dies (SIGKILL to its process group).
            if pid and _journalled(isolated_store / "data", "block", arm="candidate"):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
                killed = True
                break
            time.sleep(0.05)
        out, err = proc.communicate(timeout=400)
        assert killed, err[-2000:]
        r = json.loads(out)
        assert proc.returncode == 1 and r["status"] == "aborted", err[-2000:]
        assert "candidate" in r["aborted"]
        assert any(b["arm"] == "candidate" for b in r["blocks"]), "the samples measured before the abort are kept"
        assert r["baseline_restored"] and healthy(base.url)
        assert listener(base.port) == found and slots(argv_on(base.port)) == "1"


def test_advisor_killed_mid_run_is_recovered_at_next_start(tmp_path, isolated_store):
    with LlamaServer(model=paths.tiny_gguf("Q8_0"), max_num_seqs=1, threads=1) as base:
        # The candidate takes the engine's port: the advisor must own the engine it found serving.
        dep = write_deployment(base, tmp_path / "dep.yaml", name="local-cpu-llama", arms="sequential",
                               owns_process=True)
        proc = subprocess.Popen([sys.executable, "-m", "advisor.cli", "experiment", "--deployment", str(dep),
                                 "--mechanism", "max_num_seqs", "--value", "3", "--output", "json",
                                 # A long design: the test needs the candidate up, not a verdict.
                                 "--readout", "ttft_p50", "--blocks", "8", "--block-requests", "16"],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "advisor.err", "w"),
                                env=os.environ.copy())
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            pid = listener(base.port)
            if pid and slots(psutil.Process(pid).cmdline()) == "3" and healthy(base.url):
                break
            time.sleep(0.05)
        else:
            proc.kill()
            pytest.fail("the candidate never took the port: " + (tmp_path / "advisor.err").read_text()[-3000:])
        proc.kill()  # SIGKILL: no finally, no restore; the candidate keeps the target port
        proc.wait()
        assert slots(argv_on(base.port)) == "3"
        r = runner.invoke(app, ["recover", "--deployment", str(dep)])
        assert r.exit_code == 0, r.output
        assert "baseline restarted" in r.output
        assert healthy(base.url) and slots(argv_on(base.port)) == "1"
        again = runner.invoke(app, ["recover", "--deployment", str(dep)])
        assert "nothing to recover" in again.output
        # The baseline now runs as a process the launcher started; stop it with the engine fixture's port.
        stop_pid(listener(base.port))


def test_invalid_value_is_refused_before_anything_starts(tmp_path, isolated_store, local_engine):
    dep = write_deployment(local_engine, tmp_path / "dep.yaml")
    cport = yaml.safe_load(dep.read_text())["local"]["candidate_port"]
    r = runner.invoke(app, ["experiment", "--deployment", str(dep), "--mechanism", "max_num_seqs", "--value", "-1"])
    assert r.exit_code == 2 and "max_num_seqs: -1 is not allowed" in r.output
    assert listener(cport) is None
    assert not (isolated_store / "data" / "experiments").exists(), "no journal, no lock: nothing started"


def test_priority_scheduling_lets_the_urgent_class_overtake_the_queue(tmp_path, local_engine, isolated_store):
    """scheduling_policy fcfs -> priority with two classes (interactive requests at priority 0
    among three times as many batch ones at 1, 12 sent within a quarter second to 2 slots; the
    knob's default workload in shape, with shorter answers to keep CI short): the candidate derived
    from the baseline's state, and the interactive class's TTFT falls."""
    workload = tmp_path / "two-classes.yaml"
    # Seed 5 draws 4 interactive requests of the 12, in the order b b U b b b U b U b U b: 4 samples
    # of the urgent class per arm and block (a fresh seed could draw 2 or fewer, 40 % of the time,
    # and the judge rightly refuses fewer than 10 samples per arm). Sent 20 ms apart, in that order,
    # so that every block builds the same queue: two batch requests hold the slots and the urgent
    # ones wait behind 1 to 6 batch ones under fcfs. Sent all at once (a closed loop of 12) they
    # reached the engine in a different order in each block, and a block whose urgent requests came
    # first had no queue to overtake: its ratio near 1 bounded the interval of the block median
    # (CI three times: [0.16, 1.21] around 0.16; here 0.16 to 0.46 from run to run).
    workload.write_text(yaml.safe_dump({
        "name": "two-classes", "requests": 12, "seed": 5, "arrival": {"kind": "constant", "rate": 50},
        "buckets": [{"name": "interactive", "prompt_tokens": [50, 100], "output_tokens": [8, 16], "priority": 0},
                    {"name": "batch", "prompt_tokens": [50, 100], "output_tokens": [48, 64], "weight": 3,
                     "priority": 1}]}))
    base = local_engine
    dep = write_deployment(base, tmp_path / "dep.yaml")
    # Sequential looks up to 12 blocks per arm, stopping at the first decisive one (most often the
    # first). The effect is large and its direction never changed, but its interval is the block
    # medians' and 4 urgent samples make a noisy median: in CI the interval's top ended above 1 in 3
    # of 6 runs (ratio 0.31 [0.17, 1.07] at 4 blocks; 0.35 [0.29, 1.36] at 8; 0.36 [0.29, 1.19] at 12)
    # while alone here it read 0.44 [0.36, 0.63]. So the test holds the direction and its size, and
    # a verdict only where one is reached: never "regressed" or "no change", the estimate below 0.6.
    code, r = experiment(dep, "--mechanism", "scheduling_policy", "--workload", str(workload), "--blocks", "12")
    assert code == 0 and r["status"] == "finished", r
    assert r["value"] == "'priority'" and r["primary_metric"] == "urgent_ttft p50"
    assert flag(r["manifest"]["candidate_argv"], "--scheduling-policy") == "priority"
    print(f"\npriority: urgent TTFT p50 ratio {r['ratio']}, CI {r['ci']}: {r['verdict']}; {r.get('stop_reason')}")
    assert r["verdict"] in ("improved", "inconclusive"), (r["ratio"], r["ci"], r["reason"], r.get("stop_reason"))
    assert r["ratio"] is not None and r["ratio"] < 0.6, (r["ratio"], r["ci"], r["reason"])
    if r["verdict"] == "improved":
        assert r["ci"][1] < 1
    else:
        assert "planned maximum of 12 blocks" in (r.get("stop_reason") or ""), r.get("stop_reason")
    # Both classes in every block, and no request refused for carrying a priority under fcfs.
    assert all(b["errors"] == 0 for b in r["blocks"]), r["blocks"]
    buckets = {b["bucket"] for b in r["buckets"]}
    assert buckets == {"interactive", "batch"}, r["buckets"]
    assert r["baseline_restored"] and "--scheduling-policy" not in argv_on(base.port)


def test_max_num_seqs_lowered_for_a_wide_decode_batch_reads_tpot(tmp_path, isolated_store):
    """ADV002's decode-batch check (TPOT high, the batch too wide) as the diagnosis runs it: the
    direction down from the baseline's own argv (16 slots, 16 long generations in flight: 16 / 4 = 4
    slots) and its readout, TPOT. Each arm's engine shows the narrower batch; the verdict is what the
    CPU engine does with it, with every readout and the baseline restored."""
    with LocalEngine(max_num_seqs=16) as base:
        dep = write_deployment(base, tmp_path / "dep.yaml")
        code, r = experiment(dep, "--mechanism", "max_num_seqs", "--direction", "down", "--readout", "tpot_p50",
                             "--concurrency", "16", "--blocks", "2", "--block-requests", "16", "--fixed")
        assert code == 0 and r["status"] == "finished", r
        assert r["value"] == "4" and r["primary_metric"] == "tpot p50" and r["manifest"]["direction"] == "down"
        assert flag(r["manifest"]["candidate_argv"], "--max-num-seqs") == "4"
        server = {row["signal"]: row for row in r["server"]}
        running, waiting = server["requests_running_avg"], server["requests_waiting_avg"]
        # The candidate never ran more than its 4 slots; the baseline held the 16 in flight, running or,
        # where its KV cache ran short and it preempted, waiting (one run read 1 running, 11 waiting).
        assert running["candidate"] <= 4.01 < running["baseline"] + waiting["baseline"], r["server"]
        print(f"\ndecode batch 16 -> 4: TPOT p50 ratio {r['ratio']}, CI {r['ci']}: {r['verdict']}")
        # The test is the direction, the candidate and each arm's own signals, not the verdict: two
        # blocks per arm, the fewest (at four, measured twice here: improved, ratio 0.69, 95 % CI
        # [0.55, 0.81]); fewer sequences per decode step never made TPOT worse.
        assert r["verdict"] != "regressed", (r["ratio"], r["ci"])
        lo, hi = r["ci"] or (None, None)
        if r["verdict"] == "improved":
            assert hi < 1
        if r["verdict"] != "improved":  # the engine's own signals, in the words of the knob's fails_means
            assert any(n.startswith("watched signals, baseline -> candidate:") for n in r["server_notes"]), r
        assert r["baseline_restored"] and flag(argv_on(base.port), "--max-num-seqs") == "16"


def test_a_larger_token_budget_admits_long_prompts_in_fewer_steps(tmp_path, isolated_store, engines):
    """ADV001's prefill-admission check: max_num_batched_tokens up (x2, from the baseline's own 32)
    with prompts of 500 to 700 tokens, four in flight on four slots (no queue): each prompt is
    prefilled in chunks of the step's token budget, about 20 steps at 32 and 10 at 64, and on the tiny
    model a step's fixed cost dominates. (At 128 -> 256 the steps' fixed cost was no longer what TTFT
    was made of: ratio 1.20, 95 % CI [0.97, 1.41], inconclusive, measured on this 2-core host.) The
    baseline is the prefix test's: caching off, and these prompts share nothing anyway."""
    base = engines(**PREFILL_BASE)
    dep = write_deployment(base, tmp_path / "dep.yaml")
    code, r = experiment(dep, "--mechanism", "max_num_batched_tokens", "--direction", "up", "--readout",
                         "ttft_p50", "--concurrency", "4", "--blocks", "4", "--block-requests", "16", "--fixed")
    assert code == 0 and r["status"] == "finished", r
    assert r["value"] == "64" and flag(r["manifest"]["candidate_argv"], "--max-num-batched-tokens") == "64"
    print(f"\ntoken budget 32 -> 64: TTFT p50 ratio {r['ratio']}, CI {r['ci']}: {r['verdict']}")
    assert r["verdict"] == "improved", (r["ratio"], r["ci"], r["reason"], r["blocks"])
    assert r["ci"][1] < 1
    assert r["baseline_restored"] and flag(argv_on(base.port), "--max-num-batched-tokens") == "32"


def test_ngram_speculative_decoding_is_judged_with_its_acceptance_and_the_quality_guard(tmp_path, local_engine,
                                                                                       isolated_store):
    """speculative off -> on (the catalog's candidate: n-gram lookup, 4 draft tokens), which vLLM's CPU
    build serves: TPOT judged per block, the candidate's own engine reporting how many drafts it
    accepted (the baseline drafts nothing), and the quality guard comparing both arms' greedy tokens,
    since verification must leave them as they were."""
    dep = write_deployment(local_engine, tmp_path / "dep.yaml")
    # Two blocks per arm, the fewest: the test is the candidate, its acceptance and the quality guard.
    code, r = experiment(dep, "--mechanism", "speculative", "--readout", "tpot_p50", "--concurrency", "2",
                         "--blocks", "2", "--block-requests", "16", "--fixed")
    assert code == 0 and r["status"] == "finished", r
    spec = json.loads(flag(r["manifest"]["candidate_argv"], "--speculative-config"))
    assert spec == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    server = {row["signal"]: row for row in r["server"]}
    acceptance = server["spec_acceptance_rate"]
    assert acceptance["watched"] and acceptance["baseline"] is None and 0 <= acceptance["candidate"] <= 1, r["server"]
    q = r["quality"]
    print(f"\nngram: TPOT p50 ratio {r['ratio']}, CI {r['ci']}: {r['verdict']}; acceptance {acceptance['candidate']}; "
          f"quality {q['verdict']}, exact match {q['exact_match']}")
    assert q["prompts"] >= 200 and q["verdict"] in ("within margin", "past margin", "unclear"), q
    # Measured here at four blocks per arm: improved (TPOT p50 ratio 0.78, 95 % CI [0.59, 0.85], acceptance
    # 0.93, every greedy token the same); drafts the target verifies never made TPOT worse at two in flight.
    assert r["verdict"] != "regressed", (r["ratio"], r["ci"], acceptance)
    if r["verdict"] != "improved":
        [line] = [n for n in r["server_notes"] if n.startswith("watched signals, baseline -> candidate:")]
        assert "spec_acceptance_rate - ->" in line, line
    assert r["baseline_restored"] and "--speculative-config" not in argv_on(local_engine.port)
