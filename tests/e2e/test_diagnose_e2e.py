"""Symptoms provoked on the real CPU engine by configuration and load, diagnosed through a real
Prometheus: the diagnosis names the symptom and ranks the right check first."""

import json

from typer.testing import CliRunner

from advisor.cli import app
from tests.e2e.conftest import settle

runner = CliRunner()


def diagnose_json(prom_url: str, *extra: str) -> tuple[int, dict]:
    r = runner.invoke(app, ["diagnose", "--prom-url", prom_url, "--window", "60s", "--output", "json", *extra])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


def test_queue_behind_max_num_seqs_is_ttft_high_with_queueing_first(local_engine, local_prometheus, background):
    # --max-num-seqs 2 (the engine's configuration) and 24 concurrent long prompts (the load).
    prom = local_prometheus([local_engine.target])
    background.start(local_engine.url, requests=10_000, duration_s=30, concurrency=24, prompt_words=800, max_tokens=32)
    assert background.join()[0].errors == 0
    settle()
    code, d = diagnose_json(prom.url, "--price-per-hour", "0.8/host")
    assert code == 1 and not d["healthy"]
    ids = [f["rule_id"] for f in d["findings"]]
    assert "ADV001" in ids, (ids, d["not_evaluated"])
    # Cost: the host's price over the tokens Prometheus counted, worked by hand. The queue breaks the
    # TTFT SLO at its p50 already, so no request is known to have met every SLO: no such figure.
    cost = d["cost"]
    tokens = float(prom.query("sum(rate(vllm:generation_tokens_total[60s]))")[0]["value"][1])
    assert cost["units"] == 1 and cost["hourly"] == 0.8 and cost["per"] == "host"
    assert abs(cost["output_tokens_per_s"] - tokens) <= 0.25 * tokens, (cost, tokens)
    assert abs(cost["per_million_output_tokens"] - 0.8 / (cost["output_tokens_per_s"] * 3600) * 1e6) < 1e-9
    assert cost["per_thousand_slo_requests"] is None and cost["slo_share_at_least"] == 0.0
    ttft = next(f for f in d["findings"] if f["rule_id"] == "ADV001")
    assert {e["signal"] for e in ttft["evidence"]} >= {"ttft_p95", "tpot_p95"}
    top = min((c for f in d["findings"] for c in f["checks"]), key=lambda c: c["rank"])
    assert (top["rule_id"], top["id"], top["mechanism"]) == ("ADV001", "queueing", "max_num_seqs"), top
    # Prefix caching is on by default: never recommended as "turn it on".
    for c in (c for f in d["findings"] for c in f["checks"] if c["mechanism"] == "prefix_caching"):
        assert c["already"] and "not recommended" in c["reason"]
    # Read from the engine itself, the served model's config.json (found from /v1/models' root):
    # the tiny model's GQA 8:2 and what a token costs in KV cache at its bfloat16.
    r = runner.invoke(app, ["diagnose", "--url", local_engine.url, "--window", "3s", "--output", "json"])
    assert r.exit_code in (0, 1), r.output
    direct = json.loads(r.stdout)
    m = direct["model_structure"]
    assert (m["attention"], m["attention_heads"], m["kv_heads"]) == ("GQA", 8, 2), (m, direct["model_note"])
    assert direct["kv_bytes_per_token"] == 2 * 4 * 2 * 32 * 2 and direct["kv_capacity_tokens"] > 0


def test_long_and_short_generations_mixed_is_a_tail_problem(local_engine, local_prometheus, background):
    # Two streams within the engine's 2 slots, so nothing queues: many short generations and a
    # few long ones. Both are bound by the engine's steps (16 and 600 tokens), so the long share
    # stays near 3% whatever the machine's speed (measured: 549 short, 18 long in 25 s). The median
    # stays fast; the P99, and the p99 of generation lengths that points at isolated pools, are
    # the long ones.
    prom = local_prometheus([local_engine.target])
    background.start(local_engine.url, requests=10_000, duration_s=25, concurrency=1, prompt_words=40, max_tokens=16, seed=1)
    background.start(local_engine.url, requests=10_000, duration_s=25, concurrency=1, prompt_words=40, max_tokens=600, seed=2)
    assert all(r.errors == 0 for r in background.join())
    settle()
    code, d = diagnose_json(prom.url)
    ids = [f["rule_id"] for f in d["findings"]]
    assert "ADV003" in ids and "ADV001" not in ids, (ids, d["not_evaluated"])
    tail = next(f for f in d["findings"] if f["rule_id"] == "ADV003")
    assert min(tail["checks"], key=lambda c: c["rank"])["id"] == "isolated-pools", \
        [(c["id"], c["rank"], [e["text"] for e in c["evidence"]]) for c in tail["checks"]]


def test_a_queue_near_the_slo_is_a_warning_with_queueing_first(local_engine, local_prometheus, background, tmp_path):
    """The queue from above, judged against an SLO that the test sets from the TTFT p95 it measures
    first, so that the p95 sits at 87.5 % of it: the SLO holds, the queue dominates, and the
    advisor warns with the queueing check first and exits 0."""
    import time

    prom = local_prometheus([local_engine.target])
    background.start(local_engine.url, requests=10_000, duration_s=30, concurrency=8, prompt_words=200, max_tokens=32)
    assert background.join()[0].errors == 0
    settle()
    at = f"{time.time():.3f}"  # both diagnoses read the same window
    slo = tmp_path / "slo.yaml"
    loose = "tpot_p95: 10\ne2e_p99: 1000\nerror_rate: 0.5\n"  # only TTFT is judged here
    slo.write_text("ttft_p95: 0.001\n" + loose)  # any TTFT breaches it: the finding shows the p95
    _, first = diagnose_json(prom.url, "--at", at, "--slo", str(slo))
    measured = next((e["value"] for f in first["findings"] if f["rule_id"] == "ADV001" for e in f["evidence"]
                     if e["signal"] == "ttft_p95"), None)
    assert measured, (first["findings"], first["not_evaluated"])
    slo.write_text(f"ttft_p95: {measured / 0.875}\n" + loose)
    code, d = diagnose_json(prom.url, "--at", at, "--slo", str(slo))
    assert code == 0 and d["healthy"] and d["summary"] == "healthy, with 1 warning", (d["summary"], d["findings"])
    [warning] = d["findings"]
    assert (warning["rule_id"], warning["severity"]) == ("ADV001", "warning")
    signals = {e["signal"] for e in warning["evidence"]}
    assert "ttft_p95 / slo:ttft_p95" in signals and signals & {"queue_time_mean / ttft_mean", "requests_waiting_avg"}
    top = min(warning["checks"], key=lambda c: c["rank"])
    assert (top["id"], top["mechanism"]) == ("queueing", "max_num_seqs"), top


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
    for name, words, concurrency, shared in (("short", 8, 6, 0), ("long", 1200, 1, 1190)):
        prom = local_prometheus([local_engine.target])
        background.start(local_engine.url, requests=10_000, duration_s=15, concurrency=concurrency,
                         prompt_words=words, shared_prefix_words=shared, max_tokens=4, seed=len(shares) + 7)
        assert background.join()[-1].errors == 0
        settle()
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
    assert costs["long"] > costs["short"] + 0.001, costs  # 1200 tokens take milliseconds to tokenize
    assert shares["long"] > shares["short"], shares
