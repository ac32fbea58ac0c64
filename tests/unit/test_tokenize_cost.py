"""Timing the target's /tokenize at the deployment's prompt lengths, against a stand-in /tokenize
whose answer takes a fixed 2 ms plus a cost per token (httpx.MockTransport) on a simulated clock,
so that no result depends on how busy the machine is."""

import json

import httpx
import pytest

from advisor.workload import tokenize_cost
from advisor.workload.tokenize_cost import TokenizationNotMeasured, for_snapshot, measure
from probes import Snapshot
from probes.snapshot import EngineInfo, Signal

URL = "http://engine.test"


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(tokenize_cost, "_clock", c)
    return c


def tokenizer(per_token_s: float, fail_after: int | None = None):
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        if fail_after is not None and len(calls) > fail_after:
            return httpx.Response(503, text="overloaded")
        n = len(body["prompt"].split())
        tokenize_cost._clock.now += 0.002 + per_token_s * n  # the answer takes this long
        return httpx.Response(200, json={"count": n, "tokens": list(range(n)), "max_model_len": 8192})

    return httpx.MockTransport(handler), calls


def snapshot(**signals) -> Snapshot:
    return Snapshot(target=URL, via="engine", window_s=300, model="m", engine=EngineInfo(models=["m"], max_model_len=8192),
                    signals={k: Signal(name=k, value=v, unit="", source="test") for k, v in signals.items()})


def test_cost_grows_with_length_and_excludes_the_one_token_round_trip():
    transport, calls = tokenizer(per_token_s=20e-6)
    cost = measure(URL, "m", {"prompt_len_mean": 200, "prompt_len_p95": 1000}, rounds=5, transport=transport)
    mean, p95 = cost.point("prompt_len_mean"), cost.point("prompt_len_p95")
    assert (mean.prompt_tokens, p95.prompt_tokens) == (200, 1000)
    # 20 us per token: 4 ms at 200 tokens, 20 ms at 1000, over a 2 ms round trip every call pays
    # (the one-token call's 20 us included).
    assert mean.cost_s == pytest.approx(0.004 - 20e-6) and p95.cost_s == pytest.approx(0.02 - 20e-6)
    assert cost.base_s == pytest.approx(0.00202) and mean.round_trip_s == pytest.approx(0.006)
    assert cost.endpoint == f"POST {URL}/tokenize" and cost.rounds == 5
    timed = [c for c in calls if c.get("add_special_tokens") is None]
    assert len(timed) >= 3 * 5


def test_share_is_the_mean_lengths_cost_over_the_mean_ttft():
    transport, _ = tokenizer(per_token_s=20e-6)
    cost, why = for_snapshot(snapshot(prompt_len_mean=500, prompt_len_p95=1500, ttft_mean=0.1), URL,
                             transport=transport)
    assert why is None and cost.ttft_mean_s == 0.1
    assert cost.share == pytest.approx(cost.point("prompt_len_mean").cost_s / 0.1)
    assert cost.share == pytest.approx((0.01 - 20e-6) / 0.1)
    assert "of the mean TTFT" in cost.summary() and f"POST {URL}/tokenize" in cost.summary()


def test_reasons_when_it_cannot_be_measured():
    transport, _ = tokenizer(per_token_s=0)
    assert for_snapshot(snapshot(prompt_len_mean=100), None)[1].startswith("no engine URL")
    assert "prompt lengths were not measured" in for_snapshot(snapshot(ttft_mean=0.1), URL, transport=transport)[1]
    nothing = httpx.MockTransport(lambda r: httpx.Response(404, json={"detail": "Not Found"}))
    cost, why = for_snapshot(snapshot(prompt_len_mean=100), URL, transport=nothing)
    assert cost is None and "has no /tokenize" in why
    cost, why = for_snapshot(snapshot(prompt_len_mean=100, ttft_mean=0.1), URL, transport=tokenizer(0, fail_after=10)[0])
    assert cost is None and "HTTP 503" in why
    with pytest.raises(TokenizationNotMeasured):
        measure(URL, "m", {"prompt_len_mean": 100}, transport=tokenizer(0, fail_after=10)[0])
    # Without a mean TTFT there is a cost but no share.
    cost, why = for_snapshot(snapshot(prompt_len_mean=100), URL, transport=transport)
    assert why is None and cost.share is None and "TTFT not measured" in cost.summary()
