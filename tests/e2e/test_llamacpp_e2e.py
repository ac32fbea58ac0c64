"""The second real engine: llama.cpp's llama-server (built by scripts/setup-llamacpp.sh) serving the
tiny model's GGUF files with --metrics. The engine probe reads its dialect off the live /metrics,
`advisor model inspect --url` reads the file it serves, with the same numbers as the file read
directly, and a quantization experiment swaps Q8_0 for Q4_K_M."""

import json
import os

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.localstack import LlamaServer, paths
from advisor.store import open_store
from probes import probe_engine

runner = CliRunner()


def test_llama_server_is_probed_in_its_own_dialect_and_its_model_inspected(background):
    with LlamaServer(model=paths.tiny_gguf("Q4_K_M"), max_num_seqs=2) as engine:
        # 6 in flight on 2 slots: a queue the slots gauge and the deferred gauge can show.
        background.start(engine.url, requests=10_000, duration_s=14, concurrency=6, prompt_words=200, max_tokens=48)
        snap = probe_engine(engine.url, window_s=10)
        results = background.join()
        assert results[0].errors == 0, results[0].first_error
        assert snap.engine.kind == "llamacpp"
        s = snap.signals
        for name in ("generation_tokens_per_s", "prompt_tokens_per_s", "requests_running_avg"):
            assert s[name].value and s[name].value > 0, (name, s[name].missing)
        assert s["requests_running_max"].value <= 2
        # llama-server has no latency histograms: said so, not zero.
        assert s["ttft_p95"].value is None and s["ttft_p95"].missing

        r = runner.invoke(app, ["model", "inspect", "--url", engine.url, "-o", "json"])
        assert r.exit_code == 0, r.output
    served = json.loads(r.stdout)
    direct = json.loads(runner.invoke(app, ["model", "inspect", str(paths.tiny_gguf("Q4_K_M")), "-o", "json"]).stdout)
    assert served == direct
    assert served["pattern"].startswith("mostly Q4_K;") and served["bpw"] > 4.5


def test_quantization_ab_swaps_the_gguf_and_reports_layers_memory_speed_and_quality(tmp_path, isolated_store):
    """Q8_0 -> Q4_K_M on a live llama-server, through the same runner as every knob: only the model
    file changes; the report holds both arms' four layers, their resident weights, TPOT and quality."""
    import psutil
    import yaml

    from advisor.engine_process import healthy
    from advisor.localstack.deployment import write_deployment
    from tests.support.servers import listener

    q8, q4 = paths.tiny_gguf("Q8_0"), paths.tiny_gguf("Q4_K_M")
    with LlamaServer(model=q8, max_num_seqs=2) as base:
        dep = write_deployment(base, tmp_path / "dep.yaml", name="local-cpu-llama")
        r = runner.invoke(app, ["experiment", "--deployment", str(dep), "--mechanism", "quantization", "--value",
                                str(q4), "--readout", "tpot_p50", "--blocks", "4", "--block-requests", "24",
                                "--concurrency", "2", "--price-per-hour", "0.5/host", "--output", "json"])
        assert r.exit_code in (0, 1), r.output
        x = json.loads(r.stdout)
        assert x["status"] == "finished" and x["baseline_restored"], x.get("aborted")
        # Only the model file changed, and the baseline serves its own again.
        base_argv, cand_argv = x["manifest"]["baseline_argv"], x["manifest"]["candidate_argv"]
        assert [a for a in cand_argv if a not in (str(q4),)] == [a for a in base_argv if a != str(q8)]
        assert healthy(base.url) and str(q8) in psutil.Process(listener(base.port)).cmdline()
        assert listener(yaml.safe_load(dep.read_text())["local"]["candidate_port"]) is None, "candidate stopped"

    # Both arms' models in the map's four layers.
    models = x["models"]
    assert models["baseline"]["pattern"].startswith("uniform Q8_0") and 8.4 < models["baseline"]["bpw"] < 8.6
    assert models["candidate"]["pattern"].startswith("mostly Q4_K;") and 4.8 < models["candidate"]["bpw"] < 5.0
    # Memory: llama-server maps its GGUF, so each arm's resident weights are its file's pages.
    m = x["memory"]
    for arm, path in (("baseline", q8), ("candidate", q4)):
        size = path.stat().st_size
        assert 0.9 * size <= m[f"{arm}_weights_bytes"] <= size + 4096, (arm, m, size)
        assert m[f"{arm}_bytes"] > m[f"{arm}_weights_bytes"]
    # Speed: TPOT judged per block; and the map's reading when the smaller weights did not decode faster.
    tpot = next(t for t in x["metrics"] if t["metric"] == "tpot")
    assert tpot["ratio"] is not None and all(b["tpot_p50"] for b in x["blocks"])
    assert (x["explanation"] is None) == (tpot["verdict"] == "improved"), (x["explanation"], tpot["verdict"])
    if x["explanation"]:
        assert x["explanation"].startswith(("dequantization ate the gain", "dequantization may have eaten the gain"))
    # Cost per million output tokens of each arm, at the host's price.
    for arm in ("baseline", "candidate"):
        a = x["cost"][arm]
        assert a["per_million_output_tokens"] == pytest.approx(0.5 / (a["output_tokens_per_s"] * 3600) * 1e6)
    # Quality on the shipped prompts, against the baseline's own tokens in the same run.
    q = x["quality"]
    assert q["prompts"] >= 200 and q["positions"] > q["prompts"]
    lo, hi = q["logprob_ci"]
    assert lo <= q["logprob_diff"] <= hi and q["verdict"] in ("within margin", "past margin", "unclear")
    assert q["exact_match"] < 1, "Q4_K_M and Q8_0 of random weights cannot agree on every greedy output"
    if q["verdict"] == "past margin":
        assert x["verdict"] == "regressed"
    if q["verdict"] == "unclear":
        assert x["verdict"] != "improved"

    # The stored experiment's markdown report carries the same readouts.
    with open_store(os.environ["ADVISOR_DB_URL"]) as store:
        [stored] = [e.id for e in store.list_experiments("local-cpu-llama") if e.key == x["id"]]
    out = tmp_path / "x.md"
    md = runner.invoke(app, ["report", "experiment", str(stored), "--out", str(out)])
    assert md.exit_code == 0, md.output
    text = out.read_text()
    for line in ("Baseline model: GGUF v3", "Candidate model: GGUF v3", "Resident memory:", "Quality guard: 240 prompts"):
        assert line in text, (line, text[:3000])


def test_a_a_against_a_baseline_found_serving_compares_two_fresh_replicas(tmp_path, isolated_store):
    """The confound of a warm, long-running baseline against a cold candidate (two identical arms
    once judged 8x apart): an engine the advisor did not start has been serving the same kind of
    traffic, and `--aa` with local.baseline_port compares two fresh replicas started the same way.
    No verdict of difference; the engine found serving is neither measured nor touched."""
    import yaml

    from advisor.engine_process import healthy
    from advisor.localstack.deployment import write_deployment
    from tests.support.servers import listener

    with LlamaServer(model=paths.tiny_gguf("Q8_0"), max_num_seqs=2) as found_engine:
        found = listener(found_engine.port)
        dep = write_deployment(found_engine, tmp_path / "aa.yaml", name="local-cpu-llama", baseline_replica=True)
        local = yaml.safe_load(dep.read_text())["local"]
        r = runner.invoke(app, ["experiment", "--deployment", str(dep), "--aa", "--readout", "ttft_p50", "--fixed",
                                "--blocks", "6", "--block-requests", "24", "--concurrency", "2", "--output", "json"])
        assert r.exit_code == 0, r.output
        x = json.loads(r.stdout)
        # Judged at alpha 0.01, not the run's 0.05, so that one false alarm in twenty does not fail CI
        # (6 blocks per arm let the rank test reach it). Two identical replicas are alike, not equal:
        # on CI's 2-core host one was 5.4 % slower to the first token in all six block pairs (p 0.002),
        # a difference between two processes that the A/A run is there to measure. What is held: no
        # readout is told apart by more than 10 %.
        apart = [(m["metric"], m["statistic"], m["ratio"], m["adjusted_p"]) for m in x["metrics"]
                 if m["adjusted_p"] is not None and m["adjusted_p"] < 0.01]
        assert all(0.9 <= ratio <= 1 / 0.9 for *_, ratio, _ in apart), apart
        assert listener(found_engine.port) == found and healthy(found_engine.url), "the engine found serving is untouched"
        assert "not touched" in x["restore_note"], x["restore_note"]
        for port in (local["baseline_port"], local["candidate_port"]):
            assert listener(port) is None, f"the replica on {port} is stopped"
        # Both arms started fresh, each with its own engine's readouts (llama-server counts no finished
        # requests, so outside traffic cannot be told on it: said so, not zero).
        assert all(b["restart_s"] is not None for b in x["blocks"] if b["block"] == 0), x["blocks"]
        assert all(b["server"]["signals"]["requests_running_avg"] for b in x["blocks"]), x["blocks"]
        assert all(b["server"]["outside_requests"] is None for b in x["blocks"])


def test_one_replica_against_two_with_the_advisor_s_client_spreading_the_requests(tmp_path, isolated_store):
    """replicas 1 -> 2 (the candidate derived from the spec's count): two llama-server processes of one
    thread and one slot each, on a 2-core host, against the one found serving; 8 requests in flight
    queue for the single slot, and the second replica takes half the queue. llama-server starts in
    two seconds, a vLLM replica in forty. vLLM CPU replicas need a worker core and a spare core each
    (4 for two): on a 2-core host they are refused before anything starts, with that reason
    (tests/unit/test_launchers.py), as `scripts/run-local.sh --experiments 3` shows."""
    import yaml

    from advisor.engine_process import healthy
    from advisor.localstack.deployment import write_deployment
    from tests.support.servers import listener

    with LlamaServer(model=paths.tiny_gguf("Q8_0"), max_num_seqs=1, threads=1) as base:
        found = listener(base.port)
        dep = write_deployment(base, tmp_path / "dep.yaml", name="local-cpu-llama", candidate_replicas=2)
        cport = yaml.safe_load(dep.read_text())["local"]["candidate_port"]
        # TTFT p50 rather than the knob's p95: a p95 needs 50 requests per block to be judged at all.
        r = runner.invoke(app, ["experiment", "--deployment", str(dep), "--mechanism", "replicas", "--blocks", "4",
                                "--block-requests", "16", "--readout", "ttft_p50", "--fixed", "--output", "json"])
        assert r.exit_code in (0, 1), r.output
        x = json.loads(r.stdout)
        assert x["status"] == "finished", x.get("aborted")
        assert x["value"] == "2" and x["manifest"]["replicas"] == {"baseline": 1, "candidate": 2}
        assert x["primary_metric"] == "ttft p50"
        assert x["verdict"] == "improved", (x["ratio"], x["ci"], x["reason"], x["blocks"])
        assert x["ci"][1] < 0.8
        # Each arm's engines said why: one slot busy on the baseline, up to two on the candidate, whose
        # second replica generates beside the first (gauges are sampled: a block of a second has two
        # samples, so one run read a median of 1.0 running on the candidate, another a queue per
        # replica as long as the baseline's; the engines' own token counters are integrated).
        server = {row["signal"]: row for row in x["server"]}
        running, tokens = server["requests_running_avg"], server["generation_tokens_per_s"]
        assert running["baseline"] <= 1.01 and running["candidate"] <= 2.01, x["server"]
        assert tokens["candidate"] > tokens["baseline"], x["server"]
        assert listener(base.port) == found and healthy(base.url), "the engine found serving is untouched"
        assert listener(cport) is None and listener(cport + 1) is None, "both candidate replicas stopped"


def test_an_engine_the_launcher_starts_has_none_of_the_advisor_s_secrets_and_a_forged_journal_stops_nothing(
        tmp_path, monkeypatch, request):
    """The real llama-server, twice: one started by this test and named in a forged journal with its
    true identity (recover leaves it serving), and one started by the local launcher with the
    advisor's secrets set (its environment, read back from /proc, has none of them, only the mark)."""
    import psutil

    from advisor.experiments.design.deployment import load_deployment
    from advisor.experiments.arms.journal import Journal
    from advisor.experiments.arms.local import LocalLauncher
    from advisor.engine_process import healthy
    from advisor.experiments.arms.ownership import MARK_VARIABLE, Ownership
    from advisor.experiments.arms.processes import ProcessRecord
    from advisor.experiments.arms.recovery import recover
    from advisor.localstack.deployment import write_deployment
    from tests.support.servers import listener

    from advisor.settings import get_settings

    secrets = {"ADVISOR_API_TOKEN": "e2e-api-token-42", "ADVISOR_PROM_PASSWORD": "e2e-prom-password-42"}
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    get_settings.cache_clear()  # read with the secrets set, and cleared again at the end
    request.addfinalizer(get_settings.cache_clear)
    with LlamaServer(model=paths.tiny_gguf("Q8_0"), max_num_seqs=1, threads=1) as stranger:
        dep = load_deployment(write_deployment(stranger, tmp_path / "dep.yaml", name="local-cpu-llama"))
        pid = listener(stranger.port)
        journal = Journal(tmp_path / "state")
        Ownership(journal.path.parent).mark("an-earlier-experiment")
        journal.write("forged", "begin", found_serving=True)
        journal.write("forged", "starting", arm="candidate", **{**ProcessRecord.of(pid).entry(), "session": True})
        note = recover(dep, journal, tmp_path / "logs")
        assert f"left pid {pid} alone: it does not carry the advisor's mark" in note, note
        assert listener(stranger.port) == pid and healthy(stranger.url), "the engine the advisor did not start serves"

        lau = LocalLauncher(dep, list(dep.local.args), {}, journal, "e-env", tmp_path / "logs")
        assert dep.local.arms == "parallel"
        lau.bring_up("candidate")
        try:
            env = psutil.Process(lau.started["candidate"].pid).environ()
            assert not {k for k in env if k.startswith("ADVISOR_")} - {MARK_VARIABLE}, sorted(env)
            assert not set(secrets.values()) & set(env.values())
            assert all(p.stat().st_mode & 0o077 == 0 for p in (tmp_path / "logs").iterdir())
        finally:
            lau.take_down("candidate")
        assert listener(stranger.port) == pid
