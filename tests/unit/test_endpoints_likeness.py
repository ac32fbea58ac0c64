"""The endpoints launcher cannot start a fresh baseline replica, so an A/B between two endpoints is
only as good as their likeness: an A/A run between the same two URLs measures it first, and the A/B's
report says how far apart it found them, or that it is unmeasured."""

from datetime import datetime, timezone

from advisor.experiments.design import calibration
from advisor.experiments.design.calibration import Apart, Calibration
from advisor.experiments.design.deployment import Deployment
from advisor.experiments.run.setup import design

WHEN = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)


def cal(apart: Apart | None) -> Calibration:
    return Calibration(experiment="x-aa", deployment="d", measured_at=WHEN, workload="w", requests_per_block=16,
                       readouts=[], apart=apart)


def test_an_a_a_run_between_the_same_two_endpoints_says_how_far_apart_they_were():
    c = cal(Apart(baseline="http://a:8000", candidate="http://***@b:8000", readout="ttft p50", ratio=1.034,
                  ci=(0.97, 1.10), verdict="no change"))
    assert c.likeness("http://a:8000/", "http://user:secret@b:8000") == (
        "the two endpoints' environments, both serving the baseline's configuration (A/A calibration x-aa "
        "(2026-12-01 09:30 UTC)): ttft p50 ratio 1.034, 95% CI [0.970, 1.100]: no change")


def test_a_calibration_of_other_endpoints_or_none_leaves_the_likeness_unmeasured():
    other = cal(Apart(baseline="http://a:8000", candidate="http://c:8000", readout="ttft p50", ratio=1.0,
                      ci=None, verdict="inconclusive"))
    assert "did not compare these two endpoints: how alike their environments are is unmeasured" in \
        other.likeness("http://a:8000", "http://b:8000")
    assert "unmeasured" in cal(None).likeness("http://a:8000", "http://b:8000")
    assert calibration.no_calibration_note().startswith("no A/A calibration of these two endpoints")


def test_an_a_a_design_accepts_a_second_endpoint_serving_the_baseline_s_configuration():
    dep = Deployment.model_validate({"name": "e", "engine": "vllm", "model": "m", "launcher": "endpoints",
                                     "endpoints": {"baseline": "http://127.0.0.1:9", "candidate": "http://127.0.0.1:10"}})
    d = design(dep, None, None, None, aa=True, blocks=2, block_requests=8)
    assert d.aa and d.candidate_args == d.baseline_args
