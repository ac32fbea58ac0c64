"""What serving costs: a price per accelerator-hour (or per host-hour, for a CPU deployment) times
the units the deployment holds, over what it serves: $ per million output tokens, and $ per thousand
requests that met every SLO.

The price comes from `--price-per-hour`, else the deployment spec's `cost:`, else the deployment's
entry in advisor.yaml (first found wins, and the source is said). No price means no cost shown,
never a zero. The unit count comes from the price (`accelerators:`), else the GPUs NVML or DCGM
sees, else one host for a host price; an accelerator price without a count is not turned into a
cost.

A diagnosis reads throughput from Prometheus (the engine's generation tokens and finished requests
per second over the window). The share of requests that met every SLO is bounded from below by the
percentiles the diagnosis measured (a latency SLO held at the 95th percentile is met by at least
95 % of requests; the misses of several SLOs are added, errors too), so its cost per thousand
SLO-meeting requests is an upper bound, and says so.

An experiment reads both arms' per-block throughput as its judgement compared it (output tokens
and goodput per second, advisor/experiments/judgement/judge.py): the candidate's cost ratio per output
token is the inverse of its throughput ratio (times the ratio of units, where the knob changes
them), with the interval inverted alike. Nothing here compares the arms again. At an offered load both arms keep up with, throughput is the load and
the ratio is 1: a cheaper candidate shows only where the load saturates the baseline.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, Field

from advisor.errors import AdvisorError
from advisor.inputs import InputModel
from advisor.verdict import interval_text

HOUR = 3600.0


class PriceSpec(InputModel):
    """`cost:` in a deployment spec or an advisor.yaml deployment."""

    per_hour: float = Field(gt=0, description="price of one unit for one hour")
    per: Literal["accelerator", "host"] = Field(default="accelerator", description="what one unit is: an "
                                                "accelerator (GPU) or, for CPU deployments, the host")
    accelerators: int | None = Field(default=None, ge=1, description="units the deployment holds; default: the "
                                     "GPUs NVML or DCGM sees, or 1 for a host price")
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")


class Price(BaseModel):
    spec: PriceSpec
    source: str  # "--price-per-hour", "deployment spec <file>", "advisor.yaml"


class Units(BaseModel):
    count: int
    source: str


class Pricing(BaseModel):
    """What an experiment's cost is computed from: the price, and the units each arm holds (the
    same, except where the knob changes them: tensor and data parallel)."""

    price: Price
    units: tuple[int, int] = Field(description="(baseline, candidate)")
    units_source: str


class PriceError(AdvisorError, ValueError):
    pass


def parse_price(text: str) -> PriceSpec:
    """`--price-per-hour`: "2.5" (per accelerator-hour), "2.5/accelerator" or "0.8/host"."""
    amount, _, per = text.strip().partition("/")
    try:
        value = float(amount)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value < float("inf")) or per not in ("", "accelerator", "host"):
        raise PriceError(f"--price-per-hour {text!r}: expected a positive number, optionally /accelerator or /host "
                         "(2.5, 0.8/host)")
    return PriceSpec(per_hour=value, per=per or "accelerator")


def price_for(cli: str | None, *specs: tuple[PriceSpec | None, str]) -> Price | None:
    """The first price given: the CLI's, then the specs in order."""
    if cli is not None:
        return Price(spec=parse_price(cli), source="--price-per-hour")
    for spec, source in specs:
        if spec is not None:
            return Price(spec=spec, source=source)
    return None


def units_for(price: Price, gpu=None) -> Units | None:
    """How many priced units serve: the spec's count, the GPUs seen, or one host."""
    if price.spec.accelerators is not None:
        return Units(count=price.spec.accelerators, source=price.source)
    if price.spec.per == "host":
        return Units(count=1, source="one host")
    if gpu is not None and getattr(gpu, "available", False) and gpu.devices:
        return Units(count=len(gpu.devices), source=f"{gpu.source}: {len(gpu.devices)} GPU(s) seen")
    return None


def _money(x: float, currency: str) -> str:
    sign = "$" if currency == "USD" else f"{currency} "
    return f"{sign}{x:,.4f}" if x < 0.01 else f"{sign}{x:,.2f}"


class CostFigures(BaseModel):
    """One deployment's (or one arm's) cost over what it served."""

    currency: str
    per_hour: float = Field(description="price of one unit for one hour")
    per: str
    units: int
    units_source: str
    price_source: str
    hourly: float = Field(description="per_hour x units")
    output_tokens_per_s: float | None
    per_million_output_tokens: float | None
    requests_per_s: float | None = None
    slo_share_at_least: float | None = Field(default=None, description="lower bound of the share of requests "
                                             "that met every SLO")
    per_thousand_slo_requests: float | None = Field(default=None, description="cost per thousand requests that "
                                                    "met every SLO (an upper bound where the share is a bound)")
    slo_bound: bool = Field(default=False, description="per_thousand_slo_requests is an upper bound")
    note: str | None = None

    def line(self) -> str:
        c = self.currency
        parts = [f"{_money(self.per_hour, c)} per {self.per}-hour x {self.units} ({self.units_source}) = "
                 f"{_money(self.hourly, c)}/h"]
        if self.per_million_output_tokens is not None:
            parts.append(f"{_money(self.per_million_output_tokens, c)} per million output tokens at "
                         f"{self.output_tokens_per_s:,.1f} tokens/s")
        if self.per_thousand_slo_requests is not None:
            bound = "at most " if self.slo_bound else ""
            share = (f" (at least {self.slo_share_at_least:.0%} of {self.requests_per_s:,.2f} req/s met every SLO)"
                     if self.slo_bound and self.slo_share_at_least is not None and self.requests_per_s else "")
            parts.append(f"{bound}{_money(self.per_thousand_slo_requests, c)} per thousand SLO-meeting requests"
                         + share)
        text = "; ".join(parts)
        return text + (f"; {self.note}" if self.note else "")


def _per_million(hourly: float, tokens_per_s: float | None) -> float | None:
    return hourly / (tokens_per_s * HOUR) * 1e6 if tokens_per_s and tokens_per_s > 0 else None


def _per_thousand(hourly: float, requests_per_s: float | None) -> float | None:
    return hourly / (requests_per_s * HOUR) * 1e3 if requests_per_s and requests_per_s > 0 else None


def figures(price: Price, units: Units, tokens_per_s: float | None, good_per_s: float | None = None, *,
            requests_per_s: float | None = None, share: float | None = None, bound: bool = False,
            note: str | None = None) -> CostFigures:
    hourly = price.spec.per_hour * units.count
    return CostFigures(currency=price.spec.currency, per_hour=price.spec.per_hour, per=price.spec.per,
                       units=units.count, units_source=units.source, price_source=price.source, hourly=hourly,
                       output_tokens_per_s=tokens_per_s, per_million_output_tokens=_per_million(hourly, tokens_per_s),
                       requests_per_s=requests_per_s, slo_share_at_least=share,
                       per_thousand_slo_requests=_per_thousand(hourly, good_per_s),
                       slo_bound=bound, note=note)


# SLO name -> (signal family, the percentile it is judged at); error_rate is a share.
_LATENCY = {"ttft_p95": "ttft", "tpot_p95": "tpot", "e2e_p99": "e2e"}
_PERCENTILES = (("p99", 0.99), ("p95", 0.95), ("p50", 0.50))


def slo_share_at_least(signals: dict[str, float | None], slo) -> float | None:
    """A lower bound of the share of requests that met every SLO, from the measured percentiles: for
    each latency SLO, the highest measured percentile at or under its limit (none: 0); misses add up
    (Bonferroni), and errors miss too. None when no percentile was measured at all."""
    missed, seen = 0.0, False
    for name, family in _LATENCY.items():
        limit = getattr(slo, name, None)
        if limit is None:
            continue
        met = 0.0
        for p, q in _PERCENTILES:
            v = signals.get(f"{family}_{p}")
            if v is not None:
                seen = True
                if v <= limit:
                    met = q
                    break
        missed += 1.0 - met
    errors = signals.get("error_rate")
    missed += errors or 0.0
    return max(0.0, 1.0 - missed) if seen else None


def diagnosis_cost(snapshot, slo, price: Price | None) -> tuple[CostFigures | None, str | None]:
    """(figures, None), (None, why a configured price gave none), or (None, None) without a price:
    no cost is shown then, not a zero."""
    if price is None:
        return None, None
    units = units_for(price, snapshot.gpu)
    if units is None:
        return None, ("the accelerator count is unknown (no GPU seen through NVML or DCGM): set cost.accelerators, "
                      "or per: host for a CPU deployment")
    tokens = snapshot.value("generation_tokens_per_s")
    rate = snapshot.value("request_rate")
    share = slo_share_at_least({k: snapshot.value(k) for k in snapshot.signals}, slo)
    good = rate * share if rate is not None and share else None
    note = None
    if tokens is None:
        note = "the engine's generation tokens were not measured in the window"
    elif tokens == 0:
        note = "no output tokens in the window"
    return figures(price, units, tokens, good, requests_per_s=rate, share=share, bound=True, note=note), None


class ArmCost(BaseModel):
    units: int
    output_tokens_per_s: float | None = Field(description="median of the arm's valid blocks")
    per_million_output_tokens: float | None
    goodput_per_s: float | None = Field(description="median of the arm's valid blocks: requests that met every SLO")
    per_thousand_slo_requests: float | None


class ExperimentCost(BaseModel):
    """Both arms' cost at the experiment's load, and the candidate's ratio with its interval."""

    currency: str
    per_hour: float
    per: str
    price_source: str
    units_source: str
    baseline: ArmCost
    candidate: ArmCost
    ratio: float | None = Field(description="candidate / baseline cost per output token")
    ci: tuple[float, float] | None = Field(description="interval of `ratio`: the throughput ratio's, inverted")
    level: float | None = None
    slo_ratio: float | None = Field(default=None, description="candidate / baseline cost per SLO-meeting request")
    slo_ci: tuple[float, float] | None = None
    note: str

    def line(self) -> str:
        c = self.currency
        b, k = self.baseline, self.candidate

        def per_m(a: ArmCost) -> str:
            return "-" if a.per_million_output_tokens is None else _money(a.per_million_output_tokens, c)

        ratio = "" if self.ratio is None else f"; candidate/baseline {self.ratio:.3f}"
        ci = f", {100 * (self.level or 0.95):.3g}% CI {interval_text(self.ci)}" if self.ci else ""
        return (f"{_money(self.per_hour, c)} per {self.per}-hour: baseline {per_m(b)} per million output tokens "
                f"({b.units} units), candidate {per_m(k)} ({k.units} units){ratio}{ci}")


def cost_text(cost: CostFigures | ExperimentCost | None, note: str | None) -> str | None:
    """A report's cost line: the figures, or why a configured price gave none; None without a price."""
    if cost is not None:
        return cost.line()
    return f"not shown: {note}" if note else None


def _inverse(ci: tuple[float, float] | None, units_ratio: float) -> tuple[float, float] | None:
    if ci is None or ci[0] <= 0 or ci[1] <= 0:
        return None
    return (units_ratio / ci[1], units_ratio / ci[0])


class Comparison(Protocol):
    """A throughput readout as the experiment's judgement compared it (a MetricResult): each arm's
    median block rate, and the candidate/baseline ratio with its interval at `level`."""

    baseline_value: float | None
    candidate_value: float | None
    ratio: float | None
    ci: tuple[float, float] | None
    level: float


def experiment_cost(pricing: Pricing, throughput: Comparison | None, goodput: Comparison | None) -> ExperimentCost:
    """Both arms' cost from the output tokens and the goodput per second compared by the judgement."""
    units = pricing.units
    units_ratio = units[1] / units[0]
    arms = {}
    for i, arm in enumerate(("baseline", "candidate")):
        hourly = pricing.price.spec.per_hour * units[i]
        tok = _arm_value(throughput, i)
        good = _arm_value(goodput, i)
        arms[arm] = ArmCost(units=units[i], output_tokens_per_s=tok,
                            per_million_output_tokens=_per_million(hourly, tok), goodput_per_s=good,
                            per_thousand_slo_requests=_per_thousand(hourly, good))
    spec = pricing.price.spec
    return ExperimentCost(currency=spec.currency, per_hour=spec.per_hour, per=spec.per,
                          price_source=pricing.price.source, units_source=pricing.units_source,
                          baseline=arms["baseline"], candidate=arms["candidate"],
                          ratio=units_ratio / throughput.ratio if throughput is not None and throughput.ratio else None,
                          ci=_inverse(throughput.ci, units_ratio) if throughput is not None else None,
                          level=throughput.level if throughput is not None else None,
                          slo_ratio=units_ratio / goodput.ratio if goodput is not None and goodput.ratio else None,
                          slo_ci=_inverse(goodput.ci, units_ratio) if goodput is not None else None,
                          note="at the experiment's offered load: where both arms keep up, throughput is the load and "
                               "the ratio is near 1; a cheaper candidate shows where the load saturates the baseline")


def _arm_value(c: Comparison | None, arm: int) -> float | None:
    if c is None:
        return None
    return c.baseline_value if arm == 0 else c.candidate_value


__all__ = ["ArmCost", "Comparison", "CostFigures", "ExperimentCost", "Price", "PriceError", "PriceSpec", "Pricing",
           "Units", "cost_text", "diagnosis_cost", "experiment_cost", "figures", "parse_price", "price_for",
           "slo_share_at_least", "units_for"]
