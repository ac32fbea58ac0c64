"""The second real engine: llama.cpp's llama-server (built by scripts/setup-llamacpp.sh) serving the
tiny model's Q4_K_M GGUF with --metrics. The engine probe reads its dialect off the live /metrics, and
`advisor model inspect --url` reads the file it serves, with the same numbers as the file read
directly."""

import json

from typer.testing import CliRunner

from advisor.cli import app
from advisor.localstack import LlamaServer, paths
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
