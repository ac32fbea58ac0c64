"""A/B experiments against the real CPU vLLM engine: verdicts with intervals, aborts that keep
their samples, and a baseline that is always left serving with its own flags."""

import json
import os
import signal
import subprocess
import sys
import time
from statistics import median

import psutil
import pytest
import yaml
from typer.testing import CliRunner

from advisor.cli import app
from advisor.experiments.launchers import healthy, stop_pid
from advisor.localstack import LocalEngine
from advisor.localstack.deployment import write_deployment
from tests.support.servers import ROOT, listener

runner = CliRunner()


def experiment(dep, *args) -> tuple[int, dict]:
    r = runner.invoke(app, ["experiment", "--deployment", str(dep), "--output", "json", *args])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


def argv_on(port: int) -> list[str]:
    return psutil.Process(listener(port)).cmdline()


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_prefix_caching_on_improves_ttft_with_shared_prefixes(tmp_path, isolated_store):
    with LocalEngine(max_num_seqs=4, extra_args=["--no-enable-prefix-caching"]) as base:
        dep = write_deployment(base, tmp_path / "dep.yaml")
        # the planned design (no --blocks): sequential looks, stopping at the first decisive one
        # 16 requests per block: the effect is large, and the test's cost is its requests.
        code, r = experiment(dep, "--mechanism", "prefix_caching", "--value", "true", "--readout", "ttft_p50",
                             "--concurrency", "4", "--block-requests", "16")
        assert code == 0 and r["status"] == "finished"
        assert r["verdict"] == "improved", (r["ratio"], r["ci"], [m["reason"] for m in r["metrics"]], r["looks"])
        lo, hi = r["ci"]
        assert lo <= r["ratio"] <= hi < 1
        stopping = r["manifest"]["stopping"]
        assert stopping["sequential"] and r["stop_reason"].startswith("decisive at look"), r["stop_reason"]
        per_arm = len(r["blocks"]) // 2
        assert per_arm == r["looks"][-1]["blocks"] < stopping["max_blocks_per_arm"], (r["looks"], stopping)
        assert r["metrics"][0]["level"] == pytest.approx(1 - r["looks"][-1]["alpha"])
        assert r["manifest"]["candidate_argv"].count("--enable-prefix-caching") == 1
        assert "--no-enable-prefix-caching" not in r["manifest"]["candidate_argv"]
        n = r["manifest"]["workload"]["requests_per_block"]
        assert r["manifest"]["per_arm"] == {"baseline": {"blocks": per_arm, "requests": per_arm * n},
                                            "candidate": {"blocks": per_arm, "requests": per_arm * n}}
        assert r["baseline_restored"] and healthy(base.url)
        assert "--no-enable-prefix-caching" in argv_on(base.port)
        assert listener(yaml.safe_load(dep.read_text())["local"]["candidate_port"]) is None, "candidate stopped"


def _block_tokens_per_s(r: dict, arm: str) -> list[float]:
    """Each valid block's output tokens per second, worked out again from the store's samples: the
    ok requests' tokens over the block's first send to its last token."""
    from advisor.store import open_store

    out = []
    with open_store(os.environ["ADVISOR_DB_URL"]) as store:
        for b in r["blocks"]:
            if b["arm"] == arm and b["generator_valid"]:
                s = store.load_samples(b["run_id"])
                sent = s[s["sent_s"].notna()]
                ends = sent["sent_s"] + sent["e2e"].fillna(sent["ttft"]).fillna(0.0)
                ok = sent[sent["status"] == "ok"]
                out.append(float(ok["output_tokens"].sum()) / float(ends.max() - sent["sent_s"].min()))
    return out


def test_max_num_seqs_raised_under_a_queue_improves_ttft(tmp_path, local_engine, isolated_store):
    dep = write_deployment(local_engine, tmp_path / "dep.yaml")
    # 16 slots against the baseline's 2, at 16 in flight (the default for this knob): only the
    # baseline queues.
    code, r = experiment(dep, "--mechanism", "max_num_seqs", "--value", "16", "--readout", "ttft_p50", "--blocks", "6",
                         "--block-requests", "16", "--price-per-hour", "0.8/host")
    assert code == 0, r
    # Cost per output token of each arm, from the median of its blocks' tokens/s, worked by hand;
    # the candidate's ratio is its throughput ratio inverted, interval too.
    cost = r["cost"]
    for arm in ("baseline", "candidate"):
        a = cost[arm]
        tokens = _block_tokens_per_s(r, arm)
        assert a["units"] == 1 and abs(a["output_tokens_per_s"] - median(tokens)) < 0.02 * median(tokens), (a, tokens)
        assert abs(a["per_million_output_tokens"] - 0.8 / (a["output_tokens_per_s"] * 3600) * 1e6) < 1e-9
    assert cost["ci"][0] <= cost["ratio"] <= cost["ci"][1]
    assert r["verdict"] == "improved", (r["ratio"], r["ci"], r["blocks"])
    assert r["ci"][1] < 1
    assert flag(argv_on(local_engine.port), "--max-num-seqs") == "2", "the baseline keeps its own flags"
    # Each arm's own engine says why: a wider batch on the candidate, the queue on the baseline, and
    # every request it finished was one the advisor sent.
    server = {row["signal"]: row for row in r["server"]}
    running, waiting = server["requests_running_avg"], server["requests_waiting_avg"]
    assert running["watched"] and running["baseline"] <= 2.01 < running["candidate"], r["server"]
    assert waiting["baseline"] > waiting["candidate"], r["server"]
    for b in r["blocks"]:
        assert b["server"]["requests_counted"] == b["requests"] and b["server"]["outside_requests"] == 0, b
    assert not any(n.startswith("outside traffic") for n in r["server_notes"]), r["server_notes"]
    arms = r["manifest"]["arms"]
    assert set(arms) == {"baseline", "candidate"} and arms["candidate"]["version"] == r["manifest"]["engine_version"]
    assert arms["candidate"]["config"], "vllm:cache_config_info, as the candidate's engine reports it"
    from advisor.store import open_store

    with open_store(os.environ["ADVISOR_DB_URL"]) as store:
        runs = store.list_load_runs(limit=100)
        assert len(runs) == len(r["blocks"]) >= 10, "every block's samples are stored"


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


def test_candidate_killed_mid_run_aborts_keeps_samples_and_baseline_serves(tmp_path, local_engine, isolated_store):
    dep = write_deployment(local_engine, tmp_path / "dep.yaml")
    cport = yaml.safe_load(dep.read_text())["local"]["candidate_port"]
    proc = subprocess.Popen([sys.executable, "-m", "advisor.cli", "experiment", "--deployment", str(dep),
                             "--mechanism", "max_num_seqs", "--value", "4", "--blocks", "6", "--readout", "ttft_p50",
                             "--block-requests", "8", "--output", "json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    deadline = time.monotonic() + 400
    killed = False
    while time.monotonic() < deadline and proc.poll() is None:
        pid = listener(cport)
        if pid and healthy(f"http://127.0.0.1:{cport}"):
            time.sleep(8)  # let a block or two run on it first
            os.killpg(os.getpgid(pid), signal.SIGKILL)
            killed = True
            break
        time.sleep(1)
    out, err = proc.communicate(timeout=400)
    assert killed, err[-2000:]
    r = json.loads(out)
    assert proc.returncode == 1 and r["status"] == "aborted", err[-2000:]
    assert "candidate" in r["aborted"]
    assert r["blocks"], "the samples measured before the abort are kept"
    assert r["baseline_restored"] and healthy(local_engine.url)
    assert flag(argv_on(local_engine.port), "--max-num-seqs") == "2"


def test_advisor_killed_mid_run_is_recovered_at_next_start(tmp_path, isolated_store):
    with LocalEngine(max_num_seqs=2) as base:
        # The candidate takes the engine's port: the advisor must own the engine it found serving.
        dep = write_deployment(base, tmp_path / "dep.yaml", arms="sequential", owns_process=True)
        proc = subprocess.Popen([sys.executable, "-m", "advisor.cli", "experiment", "--deployment", str(dep),
                                 "--mechanism", "max_num_seqs", "--value", "6", "--output", "json",
                                 # A small design: the test needs the candidate up, not a verdict.
                                 "--readout", "ttft_p50", "--blocks", "4", "--block-requests", "8"],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "advisor.err", "w"),
                                env=os.environ.copy())
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            pid = listener(base.port)
            if pid and flag(psutil.Process(pid).cmdline(), "--max-num-seqs") == "6" and healthy(base.url):
                break
            time.sleep(1)
        else:
            proc.kill()
            pytest.fail("the candidate never took the port: " + (tmp_path / "advisor.err").read_text()[-3000:])
        proc.kill()  # SIGKILL: no finally, no restore; the candidate keeps the target port
        proc.wait()
        assert flag(argv_on(base.port), "--max-num-seqs") == "6"
        r = runner.invoke(app, ["recover", "--deployment", str(dep)])
        assert r.exit_code == 0, r.output
        assert "baseline restarted" in r.output
        assert healthy(base.url) and flag(argv_on(base.port), "--max-num-seqs") == "2"
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


def test_priority_scheduling_lets_the_urgent_class_overtake_the_queue(tmp_path, isolated_store):
    """scheduling_policy fcfs -> priority with two classes (interactive requests at priority 0
    among three times as many batch ones at 1, 12 in flight on 2 slots; the knob's default workload
    in shape, with shorter answers to keep CI short): the candidate derived from the baseline's
    state, and the interactive class's TTFT falls."""
    workload = tmp_path / "two-classes.yaml"
    # Seed 5 draws 4 interactive requests of the 12 (spread among the batch ones): 16 samples of the
    # urgent class per arm over 4 blocks. A fresh seed could draw 2 or fewer, 40 % of the time, and
    # the judge rightly refuses fewer than 10 samples per arm (CI saw it once: inconclusive).
    workload.write_text(yaml.safe_dump({
        "name": "two-classes", "requests": 12, "seed": 5, "arrival": {"kind": "concurrency", "concurrency": 12},
        "buckets": [{"name": "interactive", "prompt_tokens": [50, 100], "output_tokens": [8, 16], "priority": 0},
                    {"name": "batch", "prompt_tokens": [50, 100], "output_tokens": [48, 64], "weight": 3,
                     "priority": 1}]}))
    with LocalEngine(max_num_seqs=2) as base:
        dep = write_deployment(base, tmp_path / "dep.yaml")
        code, r = experiment(dep, "--mechanism", "scheduling_policy", "--workload", str(workload), "--fixed",
                             "--blocks", "4")
        assert code == 0 and r["status"] == "finished", r
        assert r["value"] == "'priority'" and r["primary_metric"] == "urgent_ttft p50"
        assert flag(r["manifest"]["candidate_argv"], "--scheduling-policy") == "priority"
        assert r["verdict"] == "improved", (r["ratio"], r["ci"], r["reason"])
        assert r["ci"][1] < 1
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
                             "--concurrency", "16", "--blocks", "4", "--block-requests", "16", "--fixed")
        assert code == 0 and r["status"] == "finished", r
        assert r["value"] == "4" and r["primary_metric"] == "tpot p50" and r["manifest"]["direction"] == "down"
        assert flag(r["manifest"]["candidate_argv"], "--max-num-seqs") == "4"
        server = {row["signal"]: row for row in r["server"]}
        running = server["requests_running_avg"]
        assert running["candidate"] <= 4.01 < running["baseline"], r["server"]
        print(f"\ndecode batch 16 -> 4: TPOT p50 ratio {r['ratio']}, CI {r['ci']}: {r['verdict']}")
        # Measured twice here: improved (ratio 0.69, 95 % CI [0.55, 0.81]); fewer sequences per decode
        # step never made TPOT worse.
        assert r["verdict"] != "regressed", (r["ratio"], r["ci"])
        lo, hi = r["ci"] or (None, None)
        if r["verdict"] == "improved":
            assert hi < 1
        if r["verdict"] != "improved":  # the engine's own signals, in the words of the knob's fails_means
            assert any(n.startswith("watched signals, baseline -> candidate:") for n in r["server_notes"]), r
        assert r["baseline_restored"] and flag(argv_on(base.port), "--max-num-seqs") == "16"


def test_a_larger_token_budget_admits_long_prompts_in_fewer_steps(tmp_path, isolated_store):
    """ADV001's prefill-admission check: max_num_batched_tokens up (x2, from the baseline's own 32)
    with prompts of 500 to 700 tokens, four in flight on four slots (no queue): each prompt is
    prefilled in chunks of the step's token budget, about 20 steps at 32 and 10 at 64, and on the tiny
    model a step's fixed cost dominates. (At 128 -> 256 the steps' fixed cost was no longer what TTFT
    was made of: ratio 1.20, 95 % CI [0.97, 1.41], inconclusive, measured on this 2-core host.)"""
    with LocalEngine(max_num_seqs=4, extra_args=["--max-num-batched-tokens", "32"]) as base:
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
    code, r = experiment(dep, "--mechanism", "speculative", "--readout", "tpot_p50", "--concurrency", "2",
                         "--blocks", "4", "--block-requests", "16", "--fixed")
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
    # Measured here: improved (TPOT p50 ratio 0.78, 95 % CI [0.59, 0.85], acceptance 0.93, every greedy
    # token the same); drafts the target verifies never made TPOT worse at two in flight.
    assert r["verdict"] != "regressed", (r["ratio"], r["ci"], acceptance)
    if r["verdict"] != "improved":
        [line] = [n for n in r["server_notes"] if n.startswith("watched signals, baseline -> candidate:")]
        assert "spec_acceptance_rate - ->" in line, line
    assert r["baseline_restored"] and "--speculative-config" not in argv_on(local_engine.port)
