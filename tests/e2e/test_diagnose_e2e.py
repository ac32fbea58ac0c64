"""Symptoms provoked on the real CPU engine by configuration and load, diagnosed through a real
Prometheus: the diagnosis names the symptom, ranks the right check first, and proves it with an
experiment. Only what needs the live engine's timing is here; the symptoms that need only their
metrics' shape (a tail of long generations, a queue near its SLO, and every row of the map) are
backfilled into a real Prometheus in tests/integration/test_scenarios.py."""

import json
import os
from datetime import datetime
from statistics import median

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.localstack.deployment import write_deployment
from advisor.localstack.traffic import drive_sync
from tests.e2e.conftest import settle

pytestmark = pytest.mark.timeout(1500)

runner = CliRunner()


def diagnose_json(prom_url: str, *extra: str) -> tuple[int, dict]:
    r = runner.invoke(app, ["diagnose", "--prom-url", prom_url, "--window", "60s", "--output", "json", *extra])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


def test_diagnose_experiment_proves_the_queue_check_on_a_live_queue(local_engine, local_prometheus, background,
                                                                   tmp_path, isolated_store):
    """The path a user runs most, from the command line: `advisor diagnose --experiment 1` on a live
    queue (--max-num-seqs 2, the engine's configuration, and 24 requests in flight, the load; the
    real Prometheus scraping it). The diagnosis names the queue and ranks the queueing check first;
    its experiment replays the traffic read from Prometheus against the real engine (the candidate
    on a port of its own, with more slots) and comes back with a verdict; the baseline serves as
    it was found and the candidate is stopped."""
    import yaml

    from advisor.engine_process import healthy
    from tests.support.cli import run_cli
    from tests.support.servers import argv_on, flag, listener

    prom = local_prometheus([local_engine.target])
    prom.wait_scraped()  # the counters need a sample from before the load
    # Short prompts and longer answers: the requests are bound by decode steps, which a wider batch
    # shares, so the slots are what they queue for (with 16-token answers the API server and the
    # load generator's CPU were, and a busy host swamped the effect). The experiment replays this
    # traffic: a block of 67 requests takes seconds. The load fills the whole diagnosis window (20 s).
    background.start(local_engine.url, requests=10_000, duration_s=24, concurrency=24, prompt_words=50,
                     max_tokens=48)
    assert background.join()[0].errors == 0
    settle(prom)
    dep = write_deployment(local_engine, tmp_path / "dep.yaml")
    candidate_port = yaml.safe_load(dep.read_text())["local"]["candidate_port"]
    slo = tmp_path / "slo.yaml"
    slo.write_text("ttft_p95: 0.05\n")  # tight: this CPU's queue breaks it, whatever the machine's speed
    # At most 6 blocks per arm (the planner asks for 13 here): the run's time is bounded, and an
    # undecided run is still judged at the design's error rate.
    r = run_cli("diagnose", "--experiment", "1", "--blocks", "6", "--deployment", str(dep), "--prom-url", prom.url,
                "--window", "20s", "--slo", str(slo), "--price-per-hour", "0.8/host", "--output", "json", timeout=1200)
    assert r.code == 1, r.stderr[-3000:]
    d = json.loads(r.stdout)
    assert not d["healthy"]
    ids = [f["rule_id"] for f in d["findings"]]
    assert "ADV001" in ids, (ids, d["not_evaluated"])
    ttft = next(f for f in d["findings"] if f["rule_id"] == "ADV001")
    assert {e["signal"] for e in ttft["evidence"]} >= {"ttft_p95", "tpot_p95"}
    # Cost: the host's price over the tokens Prometheus counted in the diagnosis' window, worked by
    # hand. The queue breaks the TTFT SLO at its p50 already: no request is known to have met it.
    cost = d["cost"]
    at = datetime.fromisoformat(d["taken_at"]).timestamp()
    tokens = float(prom.query("sum(rate(vllm:generation_tokens_total[20s]))", at=at)[0]["value"][1])
    assert cost["units"] == 1 and cost["hourly"] == 0.8 and cost["per"] == "host"
    assert abs(cost["output_tokens_per_s"] - tokens) <= 0.25 * tokens, (cost, tokens)
    assert abs(cost["per_million_output_tokens"] - 0.8 / (cost["output_tokens_per_s"] * 3600) * 1e6) < 1e-9
    assert cost["per_thousand_slo_requests"] is None and cost["slo_share_at_least"] == 0.0
    checks = sorted((c for f in d["findings"] for c in f["checks"]), key=lambda c: c["rank"])
    top = checks[0]
    assert (top["rule_id"], top["id"], top["mechanism"]) == ("ADV001", "queueing", "max_num_seqs"), top
    # Prefix caching is on by default: never recommended as "turn it on".
    for c in (c for c in checks if c["mechanism"] == "prefix_caching"):
        assert c["already"] and "not recommended" in c["reason"]

    # The top check's experiment: more slots, judged on the check's readout, to a verdict.
    # The check names its experiment; the result itself is the one in the output's "experiments".
    ref = top["verdict"]
    [v] = [x for x in d["experiments"] if x["id"] == ref["experiment"]]
    assert ref["verdict"] == v["verdict"]
    print(f"\ndiagnose --experiment 1: {v.get('value')} {v.get('primary_metric')} ratio {v.get('ratio')}, "
          f"CI {v.get('ci')}: {v.get('verdict')}; {v.get('stop_reason')}")
    assert v["status"] == "finished" and v["primary_metric"] == "ttft p95", v
    assert int(v["value"]) > 2 and "telemetry" in (v["manifest"]["workload"]["source"] or ""), v["manifest"]
    # The replay runs the baseline at the rate it served (its capacity), so its queue, and its TTFT
    # p95, vary widely from block to block: alone here decisive at the first look (ratio 0.017-0.019),
    # and so in most fresh-clone runs, but after 13 blocks on this 2-core host also 0.23 [0.03, 1.87],
    # 0.67 [0.19, 2.36] and once 1.01 [0.30, 3.47]. How far the candidate gains, even
    # whether it does at this load, is the host's; what is held is that the run is judged at the
    # design's error rate (never a false "regressed") and an "improved" has its interval below 1.
    assert v["verdict"] in ("improved", "inconclusive"), (v["ratio"], v["ci"], v["reason"], v["looks"])
    assert v["ratio"] is not None and v["ci"] is not None, (v["ratio"], v["ci"], v["reason"])
    if v["verdict"] == "improved":
        lo, hi = v["ci"]
        assert lo <= v["ratio"] <= hi < 1
    else:
        assert "planned maximum" in (v.get("stop_reason") or ""), v.get("stop_reason")
    assert v["baseline_restored"] and healthy(local_engine.url)
    assert flag(argv_on(local_engine.port), "--max-num-seqs") == "2"
    assert listener(candidate_port) is None, "the candidate was stopped"
    # The experiment as the store keeps it, whole: each arm's cost per output token from the median of
    # its blocks' tokens/s, worked by hand from the stored samples; each arm's own engine says why (the
    # queue on the baseline, none on the candidate), and every request it finished was one the
    # advisor sent.
    from advisor.store import open_store

    with open_store(os.environ["ADVISOR_DB_URL"]) as store:
        [stored] = [e for e in store.list_experiments() if e.key == ref["experiment"]]
        x = store.get_experiment(stored.id).result_document
        printed = ("verdict", "ratio", "ci", "looks", "status", "value")
        assert {k: x[k] for k in printed} == {k: v[k] for k in printed} and len(x["blocks"]) == len(v["blocks"]), \
            "the stored result is the one the command printed"
        runs = store.list_load_runs(limit=100)
        for arm in ("baseline", "candidate"):
            a = x["cost"][arm]
            tokens = _block_tokens_per_s(store, x, arm)
            assert a["units"] == 1 and abs(a["output_tokens_per_s"] - median(tokens)) < 0.02 * median(tokens), (a, tokens)
            assert abs(a["per_million_output_tokens"] - 0.8 / (a["output_tokens_per_s"] * 3600) * 1e6) < 1e-9
    # The cost ratio's interval is the throughput readout's, which 3 blocks per arm cannot give at the
    # first look's level: shown when there is one.
    assert x["cost"]["ratio"] > 0 and (x["cost"]["ci"] is None or x["cost"]["ci"][0] <= x["cost"]["ratio"] <= x["cost"]["ci"][1])
    assert len(runs) == len(x["blocks"]) >= 6, "every block's samples are stored"
    server = {row["signal"]: row for row in x["server"]}
    running, waiting = server["requests_running_avg"], server["requests_waiting_avg"]
    # At the replayed load the candidate needs no more than two slots on average either; the queue
    # that the baseline's two make is what it lacks.
    assert running["watched"] and running["baseline"] <= 2.01 and running["candidate"] <= 8.01, x["server"]
    # The replay at its capacity queues behind the baseline's 2 slots, and the candidate's 8 leave no
    # queue. How long the baseline's is depends on how fast this host's load generator keeps up: a
    # mean of 0.33-0.43 waiting in two runs, over 0.5 in the others; it is the difference that is held.
    assert waiting["baseline"] > 0.1 and waiting["baseline"] > 3 * waiting["candidate"], x["server"]
    for b in x["blocks"]:
        assert b["server"]["requests_counted"] == b["requests"] and b["server"]["outside_requests"] == 0, b
    assert not any(n.startswith("outside traffic") for n in x["server_notes"]), x["server_notes"]
    arms = x["manifest"]["arms"]
    assert set(arms) == {"baseline", "candidate"} and arms["candidate"]["version"] == x["manifest"]["engine_version"]
    assert arms["candidate"]["config"], "vllm:cache_config_info, as the candidate's engine reports it"
    # Only the top check ran: the others say why not.
    assert all("skipped" in c["verdict"] for c in checks[1:] if c.get("verdict")), [c.get("verdict") for c in checks]

    # Read from the engine itself, the served model's config.json (found from /v1/models' root):
    # the tiny model's GQA 8:2 and what a token costs in KV cache at its bfloat16.
    r = runner.invoke(app, ["diagnose", "--url", local_engine.url, "--window", "3s", "--output", "json"])
    assert r.exit_code in (0, 1), r.output
    direct = json.loads(r.stdout)
    m = direct["model_structure"]
    assert (m["attention"], m["attention_heads"], m["kv_heads"]) == ("GQA", 8, 2), (m, direct["model_note"])
    assert direct["kv_bytes_per_token"] == 2 * 4 * 2 * 32 * 2 and direct["kv_capacity_tokens"] > 0


def _block_tokens_per_s(store, r: dict, arm: str) -> list[float]:
    """Each valid block's output tokens per second, worked out again from the store's samples: the
    ok requests' tokens over the block's first send to its last token."""
    out = []
    for b in r["blocks"]:
        if b["arm"] == arm and b["generator_valid"]:
            s = store.load_samples(b["run_id"])
            sent = s[s["sent_s"].notna()]
            ends = sent["sent_s"] + sent["e2e"].fillna(sent["ttft"]).fillna(0.0)
            ok = sent[sent["status"] == "ok"]
            out.append(float(ok["output_tokens"].sum()) / float(ends.max() - sent["sent_s"].min()))
    return out


def test_tokenization_is_timed_and_its_share_of_ttft_grows_with_the_prompts(local_engine, local_prometheus,
                                                                             background, tmp_path):
    """Short prompts, then long ones, each read by its own Prometheus: the advisor times the
    engine's /tokenize at each deployment's own prompt lengths, and the check's share of TTFT is
    larger for the long prompts. Tokenizing grows with the text (the short prompts' is within the
    one-token round trip); TTFT is set apart on purpose, so that timing noise cannot swap the two:
    the short prompts queue (6 in flight, 2 slots), the long ones share all but their last words,
    which the prefix cache serves, so their prefill is short."""
    slo = tmp_path / "slo.yaml"
    slo.write_text("ttft_p95: 0.001\ntpot_p95: 10\ne2e_p99: 1000\nerror_rate: 0.5\n")  # ADV001 fires on any TTFT
    shares = {}
    costs = {}
    # A count of requests, not a duration: the means the check reads need a few dozen requests.
    for name, words, concurrency, shared, requests in (("short", 8, 6, 0, 48), ("long", 1200, 1, 1190, 16)):
        seed = len(shares) + 7
        if shared:  # the shared words into the prefix cache first, before the window: no cold prefill in it
            assert drive_sync(local_engine.url, requests=1, prompt_words=words, shared_prefix_words=shared,
                              max_tokens=4, seed=seed).errors == 0
        prom = local_prometheus([local_engine.target])
        prom.wait_scraped()
        background.start(local_engine.url, requests=requests, concurrency=concurrency, prompt_words=words,
                         shared_prefix_words=shared, max_tokens=4, seed=seed)
        assert background.join()[-1].errors == 0
        settle(prom)
        dep = tmp_path / f"{name}.yaml"
        host, port = local_engine.target.split(":")
        dep.write_text(f"name: e2e-{name}\nengine: vllm\nmodel: tiny-llama\nlauncher: local\n"
                       f"local: {{command: [vllm, serve], host: '{host}', port: {port}}}\n")
        _, d = diagnose_json(prom.url, "--slo", str(slo), "--deployment", str(dep))
        tok = d["tokenization"]
        assert tok is not None, d["tokenization_note"]
        finding = next(f for f in d["findings"] if f["rule_id"] == "ADV001")
        check = next(c for c in finding["checks"] if c["id"] == "tokenization")
        [ev] = [e for e in check["evidence"] if e["signal"] == "tokenization_share"]
        assert ev["source"].startswith(f"POST {local_engine.url}/tokenize"), ev
        assert ev["value"] == tok["share"] and check["mechanism"] == "api_server_count"
        shares[name] = tok["share"]
        costs[name] = next(p["cost_s"] for p in tok["points"] if p["length_of"] == "prompt_len_mean")
        print(f"\n{name} prompts: {tok['points']}, base {tok['base_s'] * 1000:.2f} ms, TTFT mean "
              f"{tok['ttft_mean_s'] * 1000:.1f} ms, share {tok['share'] * 100:.2f} %")
    # 1200 tokens take about a millisecond to tokenize here (1.00 ms against 0.02 ms in one CI run, which
    # a bound of 1 ms over the short prompts' failed by 17 microseconds): held to a third of that.
    assert costs["long"] > costs["short"] + 0.0003, costs
    assert shares["long"] > shares["short"], shares
