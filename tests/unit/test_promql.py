"""The Prometheus probe's PromQL: per-operand primitives (deduplicated), their selectors, the one
tagged-and-OR-ed query that fetches them, the POST that carries it, and the signals computed from
the rows. The HTTP side runs against a small fake Prometheus in this process that answers each
primitive from a table, the way Prometheus answers the combined query part by part."""

from __future__ import annotations

import json
import math
import re
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from probes import ProbeError, _primitives, _promql, probe_prometheus
from probes.catalog import dialects, signals_for
from probes.prometheus import PrometheusClient
from probes.snapshot import INTERPOLATED

VLLM = dialects()["vllm"]
DCGM = dialects()["dcgm"]
REPLICA = ["pod", "instance", "engine"]


def plans(dialect=VLLM, model=None, window_s=300.0, by=None, available=None):
    out = {}
    for name, sdef in signals_for(dialect).items():
        names = [dialect.resolve(o, available) for o in sdef.operands()]
        if None not in names:
            out[name] = _promql.plan_signal(name, sdef, dialect, names, model, window_s, by)
    return out


# --- building the primitives ---------------------------------------------------------------------

def test_quantiles_of_one_histogram_share_one_bucket_rate():
    p = plans()
    assert p["ttft_p50"].prims == p["ttft_p95"].prims == p["ttft_p99"].prims
    assert p["ttft_p95"].prims[0].expr == "sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[300s]))"
    assert p["ttft_p95"].prims[0].kind == "buckets"


def test_mean_and_count_rate_share_sum_and_count():
    p = plans()
    total, count = p["e2e_mean"].prims
    assert total.expr == "sum (rate(vllm:e2e_request_latency_seconds_sum[300s]))"
    assert count.expr == "sum (rate(vllm:e2e_request_latency_seconds_count[300s]))"
    assert p["request_rate"].prims == (count,)


def test_primitives_are_deduplicated_and_only_the_needed_ones():
    p = plans()
    prims = _promql.primitives(list(p.values()))
    exprs = [x.expr for x in prims]
    assert len(exprs) == len(set(exprs))
    # one bucket rate per histogram that has a quantile signal; no _bucket for a histogram without one
    buckets = sorted(re.search(r"rate\((\S+)_bucket", e).group(1) for e in exprs if "_bucket" in e)
    assert buckets == sorted({VLLM.metrics[s.sdef.metric].names[0] for s in p.values() if s.sdef.op == "quantile"})
    # itl has quantiles but no mean: neither its _sum nor its _count is fetched
    assert not [e for e in exprs if "inter_token_latency_seconds_sum" in e or "inter_token_latency_seconds_count" in e]
    # far fewer primitives than the old one query per signal
    assert len(prims) < len(p)
    # request_success_total: one primitive per matcher (all, error, abort), used by two ratios
    assert sum("vllm:request_success_total" in e for e in exprs) == 3


def test_selectors_carry_model_and_match_labels():
    p = plans(model='we"ird')
    num, den = p["error_rate"].prims
    assert num.expr == ('sum (rate(vllm:request_success_total{model_name="we\\"ird",finished_reason=~"error"}[300s]))')
    assert den.expr == 'sum (rate(vllm:request_success_total{model_name="we\\"ird"}[300s]))'
    # DCGM has no model label: the model never reaches its selectors
    g = plans(DCGM, model="m")
    assert all("model" not in x.expr for plan in g.values() for x in plan.prims)


def test_per_replica_variants_group_by_the_replica_labels():
    p = plans(by=REPLICA)
    assert p["ttft_p95"].prims[0].expr == (
        "sum by (le, pod, instance, engine) (rate(vllm:time_to_first_token_seconds_bucket[300s]))")
    assert p["request_rate"].prims[0].expr == (
        "sum by (pod, instance, engine) (rate(vllm:e2e_request_latency_seconds_count[300s]))")
    assert p["kv_cache_usage_max"].prims[0].expr == (
        "max_over_time((avg by (pod, instance, engine) (vllm:kv_cache_usage_perc))[300s:15s])")


def test_gauges_and_shares():
    p = plans()
    assert p["requests_waiting_avg"].prims[0].expr == "avg_over_time((sum (vllm:num_requests_waiting))[300s:15s])"
    assert p["requests_waiting_max"].prims[0].expr == "max_over_time((sum (vllm:num_requests_waiting))[300s:15s])"
    g = plans(DCGM, window_s=60)
    used, other = g["gpu_memory_used_frac"].prims
    assert used.expr == "sum (avg_over_time(DCGM_FI_DEV_FB_USED[60s]))"
    assert other.expr == "sum (avg_over_time(DCGM_FI_DEV_FB_FREE[60s]))"
    assert g["gpu_memory_used_frac"].source == f"{used.expr} / ({used.expr} + {other.expr})"
    assert g["gpu_util_avg"].prims[0].expr == "avg_over_time((avg (DCGM_FI_DEV_GPU_UTIL))[60s:3s])"


def test_source_is_pasteable_promql_built_from_the_primitives():
    p = plans()
    assert p["ttft_p95"].source == ("histogram_quantile(0.95, sum by (le) "
                                    "(rate(vllm:time_to_first_token_seconds_bucket[300s])))")
    total, count = p["ttft_mean"].prims
    assert p["ttft_mean"].source == f"{total.expr} / {count.expr}"
    for plan in p.values():
        assert all(x.expr in plan.source for x in plan.prims), plan.name
        assert plan.source.count("(") == plan.source.count(")"), plan.name


def test_resolves_the_names_the_target_exposes():
    available = {"vllm:num_requests_running", "vllm:gpu_cache_usage_perc",
                 "vllm:time_per_output_token_seconds_bucket"}
    p = plans(available=available)
    assert set(p) == {"requests_running_avg", "requests_running_max", "kv_cache_usage_avg", "kv_cache_usage_max",
                      "itl_p50", "itl_p95", "itl_p99"}
    assert "vllm:gpu_cache_usage_perc" in p["kv_cache_usage_avg"].source
    assert "vllm:time_per_output_token_seconds_bucket" in p["itl_p95"].source


# --- one query -----------------------------------------------------------------------------------

def test_combine_tags_every_part_and_ors_them():
    q = _promql.combine([("p0", "sum (rate(a[60s]))"), ("p1", "sum by (le) (rate(b_bucket[60s]))")])
    assert q == ('label_replace(sum (rate(a[60s])), "__advisor_part", "p0", "", "") or '
                 'label_replace(sum by (le) (rate(b_bucket[60s])), "__advisor_part", "p1", "", "")')
    with pytest.raises(ValueError):
        _promql.combine([("p0", "a"), ("p0", "b")])
    assert _promql.combine([("x", "a")]) == 'label_replace(a, "__advisor_part", "x", "", "")'


def test_combine_nests_the_ors_as_a_balanced_tree():
    def t(i):
        return f'label_replace(e{i}, "__advisor_part", "p{i}", "", "")'
    parts = [(f"p{i}", f"e{i}") for i in range(5)]
    assert _promql.combine(parts) == f"(({t(0)} or {t(1)}) or {t(2)}) or ({t(3)} or {t(4)})"
    # every part once, and no deeper than log2 of the parts
    q = _promql.combine([(f"p{i}", f"e{i}") for i in range(40)])
    for i in range(40):
        assert q.count(t(i)) == 1
        q = q.replace(t(i), "x")
    depth = deepest = 0
    for c in q:
        depth += (c == "(") - (c == ")")
        deepest = max(deepest, depth)
    assert depth == 0 and deepest == 5  # 40 parts: a tree of depth ceil(log2 40) = 6, the root unbracketed


def test_info_queries():
    assert _promql.models_expr(VLLM, 60).expr == "count by (model_name) (last_over_time(vllm:num_requests_running[60s]))"
    spec = VLLM.info["cache_config"]
    assert _promql.info_expr(VLLM, spec, "m", 60).expr == 'last_over_time(vllm:cache_config_info{model_name="m"}[60s])'
    assert _promql.info_expr(VLLM, spec, None, 60).expr == "last_over_time(vllm:cache_config_info[60s])"


# --- signals from rows ---------------------------------------------------------------------------

def row(value, **labels):
    return {"metric": labels, "value": [0, str(value)]}


def test_quantile_beyond_the_last_finite_bucket_says_so():
    plan = plans()["ttft_p99"]
    rows = [row(0, le="1.0"), row(1, le="2.5"), row(10, le="+Inf")]
    (v, note), = _primitives.compute(plan, [_primitives.Answer(rows, None)]).values()
    assert v == 2.5 and note == "beyond the highest finite bucket (2.5): a lower bound"
    inside = [row(5, le="1.0"), row(10, le="2.5"), row(10, le="+Inf")]
    (v, note), = _primitives.compute(plans()["ttft_p50"], [_primitives.Answer(inside, None)]).values()
    assert v == 1.0 and note == INTERPOLATED


def test_quantile_per_replica_groups_by_the_replica_labels():
    plan = plans(by=REPLICA)["ttft_p50"]
    rows = [row(1, le="1.0", pod="a"), row(2, le="+Inf", pod="a"), row(0, le="1.0", pod="b"), row(2, le="+Inf", pod="b")]
    got = _primitives.compute(plan, [_primitives.Answer(rows, REPLICA)])
    assert set(got) == {(("pod", "a"),), (("pod", "b"),)}
    assert got[(("pod", "a"),)][0] == 1.0  # rank 1 of 2 sits at the top of the first bucket


def test_divisions_match_one_to_one_and_zero_over_zero_is_nan():
    plan = plans(by=REPLICA)["error_rate"]
    num = [row(1, pod="a"), row(0, pod="b"), row(0, pod="c")]
    den = [row(4, pod="a"), row(0, pod="b")]
    got = _primitives.compute(plan, [_primitives.Answer(num, REPLICA), _primitives.Answer(den, REPLICA)])
    assert got[(("pod", "a"),)][0] == 0.25
    assert math.isnan(got[(("pod", "b"),)][0])
    assert (("pod", "c"),) not in got  # no denominator series: no result, as `a / b` in PromQL


# --- HTTP: a fake Prometheus that answers each primitive from a table ------------------------------

PART = re.compile(r'label_replace\((.*?), "__advisor_part", "([^"]+)", "", ""\)')


class FakeProm:
    def __init__(self, names: list[str], table: dict[str, list[dict]]):
        self.names, self.table = names, table
        self.seen: list[tuple[str, str, dict]] = []  # method, url query string, form
        self.refuse = lambda method, query: None  # -> (status, body) to refuse a request
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                url = urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                form = {k: v[0] for k, v in parse_qs(body if self.command == "POST" else url.query).items()}
                fake.seen.append((self.command, url.query, form))
                if url.path.endswith("/label/__name__/values"):
                    return self._send(200, {"status": "success", "data": fake.names})
                refused = fake.refuse(self.command, form.get("query", ""))
                if refused:
                    return self._send(*refused)
                return self._send(200, {"status": "success",
                                        "data": {"resultType": "vector", "result": fake.evaluate(form["query"])}})

            do_GET = do_POST = _answer

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def evaluate(self, query: str) -> list[dict]:
        parts = list(PART.finditer(query))
        if not parts:
            return list(self.table.get(query, []))
        return [{**r, "metric": {**r["metric"], "__advisor_part": m.group(2)}}
                for m in parts for r in self.table.get(m.group(1), [])]

    def queries(self) -> list[str]:
        return [f.get("query") for _, _, f in self.seen if "query" in f]


@pytest.fixture
def fake():
    made = []

    def make(names, table):
        made.append(FakeProm(names, table))
        return made[-1]

    yield make
    for f in made:
        f.server.shutdown()
        f.server.server_close()


E2E = "vllm:e2e_request_latency_seconds"
NAMES = ["vllm:num_requests_running", f"{E2E}_bucket", f"{E2E}_count", f"{E2E}_sum", "vllm:cache_config_info"]


def table(window="60s"):
    b = f"rate({E2E}_bucket[{window}])"
    return {
        f"sum by (le) ({b})": [row(0, le="1.0"), row(2, le="5.0"), row(3, le="+Inf")],
        f"sum by (le, pod, instance, engine) ({b})": [row(0, le="1.0", pod="a"), row(2, le="5.0", pod="a"),
                                                      row(2, le="+Inf", pod="a"), row(0, le="5.0", pod="b"),
                                                      row(1, le="+Inf", pod="b")],
        f"sum (rate({E2E}_count[{window}]))": [row(3)],
        f"sum (rate({E2E}_sum[{window}]))": [row(12)],
        f"sum by (pod, instance, engine) (rate({E2E}_count[{window}]))": [row(2, pod="a"), row(1, pod="b")],
        f"sum by (pod, instance, engine) (rate({E2E}_sum[{window}]))": [row(6, pod="a"), row(6, pod="b")],
        f"avg_over_time((sum (vllm:num_requests_running))[{window}:3s])": [row(7)],
        f"count by (model_name) (last_over_time(vllm:num_requests_running[{window}]))": [row(1, model_name="m")],
        f"last_over_time(vllm:cache_config_info[{window}])": [
            row(1, __name__="vllm:cache_config_info", pod="a", block_size="16", enable_prefix_caching="True")],
    }


def test_query_is_posted_as_a_form_body(fake):
    prom = fake(NAMES, {"up": [row(1)]})
    client = PrometheusClient(prom.url, timeout=5)
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert client.query("up", at) == [row(1)]
    method, url_query, form = prom.seen[-1]
    assert method == "POST" and url_query == ""  # nothing in the URL: a long query fits
    assert form == {"query": "up", "time": f"{at.timestamp():.3f}"}
    assert client.queries == 1


def test_one_combined_query_per_breakdown(fake):
    prom = fake(NAMES, table())
    snap = probe_prometheus(prom.url, window_s=60)
    queries = prom.queries()
    # metric names, then the engine's aggregate (with its info) and per-replica queries: 3 requests
    assert len(prom.seen) == snap.queries == 3
    assert len(queries) == 2 and all(" or " in q and PART.search(q) for q in queries)
    assert all(m == "POST" for m, _, f in prom.seen if "query" in f)
    s = snap.signals
    assert s["request_rate"].value == 3 and s["e2e_mean"].value == 4
    assert s["request_rate"].source == f"sum (rate({E2E}_count[60s]))"
    assert s["e2e_p50"].value == pytest.approx(1 + 4 * (1.5 / 2)) and s["e2e_p50"].note == INTERPOLATED
    assert s["e2e_p99"].value == 5.0 and "beyond the highest finite bucket (5)" in s["e2e_p99"].note
    assert s["e2e_p99"].source == f"histogram_quantile(0.99, sum by (le) (rate({E2E}_bucket[60s])))"
    assert s["requests_running_avg"].value == 7
    assert s["requests_running_max"].missing == "no series in the window"
    assert s["ttft_p95"].missing == "not exposed by the target (vllm:time_to_first_token_seconds)"
    rep = {r.labels["pod"]: r.signals for r in snap.replicas}
    assert rep["a"]["request_rate"].value == 2 and rep["a"]["e2e_mean"].value == 3
    assert rep["b"]["e2e_p50"].value == 5.0 and "lower bound" in rep["b"]["e2e_p50"].note
    assert snap.engine.models == ["m"] and snap.engine.config == {"block_size": "16", "enable_prefix_caching": "True"}
    assert snap.engine.config_source == "Prometheus: last_over_time(vllm:cache_config_info[60s])"
    assert not snap.problems


def test_refused_combined_query_is_asked_one_primitive_at_a_time(fake):
    prom = fake(NAMES, table())
    prom.refuse = lambda method, q: (400, {"status": "error", "errorType": "bad_data",
                                          "error": "parse error"}) if " or " in q else None
    snap = probe_prometheus(prom.url, window_s=60, per_replica=False)
    singles = [q for q in prom.queries() if " or " not in q]
    assert len(prom.seen) == snap.queries == 1 + 1 + len(singles)
    assert len(singles) == 7  # 3 e2e primitives, 2 running gauges, models, cache config
    assert snap.signals["e2e_mean"].value == 4 and snap.signals["request_rate"].value == 3
    assert snap.engine.models == ["m"]
    assert any("refused the combined vllm aggregate query of 7 expressions (HTTP 400: parse error)" in p
               for p in snap.problems)


def test_forbidden_is_not_asked_again_part_by_part(fake):
    prom = fake(NAMES, table())
    prom.refuse = lambda method, q: (403, {"status": "error", "error": "forbidden"})
    with pytest.raises(ProbeError, match=r"rejected a query \(HTTP 403: forbidden\)"):
        probe_prometheus(prom.url, window_s=60, per_replica=False)
    assert len(prom.seen) == 2  # the metric names, then the combined query: no query per primitive


def test_post_refused_goes_by_get(fake):
    prom = fake(NAMES, table())
    prom.refuse = lambda method, q: (405, {"error": "method not allowed"}) if method == "POST" else None
    snap = probe_prometheus(prom.url, window_s=60, per_replica=False)
    assert [m for m, _, _ in prom.seen] == ["GET", "POST", "GET"]
    assert snap.queries == 3 and snap.signals["e2e_mean"].value == 4
    assert any("refused a POST (HTTP 405)" in p for p in snap.problems)


def test_retries_count_as_requests(fake):
    prom = fake(NAMES, {"up": [row(1)]})
    failures = iter([(503, {"status": "error", "error": "busy"})])
    prom.refuse = lambda method, q: next(failures, None)
    client = PrometheusClient(prom.url, timeout=5)
    assert client.query("up", None) == [row(1)]
    assert len(prom.seen) == client.queries == 2
