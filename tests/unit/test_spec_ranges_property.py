"""Every port, timeout, duration and rate in an input file is held to its range when the file is
read (advisor/ranges.py), as the command line holds its options: any value outside is refused with
one line naming the field, any value inside loads. Through the real loaders (advisor.inputs'
load_model under load_deployment, load_workload, load_slo, load_config), from YAML text written to files."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.diagnosis import load_slo
from advisor.diagnosis.slo import SLOError
from advisor.experiments.design.deployment import DeploymentError, load_deployment
from advisor.fleet.config import FleetError, load_config
from advisor.ranges import DURATION_MAX_S, PORT_MAX, RATE_MAX, TIMEOUT_MAX_S
from advisor.workload.spec import WorkloadError, load_workload

try:  # what one load takes on (advisor/units.py), tighter than a file's range: a workload file holds to both
    from advisor.units import MAX_LOAD_DURATION_S, MAX_LOAD_RATE
except ImportError:
    MAX_LOAD_DURATION_S, MAX_LOAD_RATE = DURATION_MAX_S, RATE_MAX

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

LOCAL = """\
name: t
engine: vllm
model: m
launcher: local
local:
  command: [python, -m, engine]
  arms: parallel
  port: {port}
  candidate_port: {candidate_port}
  baseline_port: {baseline_port}
  start_timeout_s: {start_timeout_s}
"""
ENDPOINTS = """\
name: t
engine: vllm
model: m
launcher: endpoints
endpoints: {{baseline: "http://127.0.0.1:{baseline}/", candidate: "http://u:secret@127.0.0.1:{candidate}"}}
prometheus: "http://127.0.0.1:{prometheus}"
guardrails: {{max_duration: {max_duration}}}
"""
WORKLOAD = """\
buckets: [{{prompt_tokens: 16, output_tokens: 4}}]
arrival: {{kind: poisson, rate: {rate}}}
duration_s: {duration_s}
warmup_s: {warmup_s}
"""
FLEET = """\
deployments:
  - name: a
    prom_url: "http://127.0.0.1:{port}"
    window: {window}
"""


def yaml_float(v: float) -> str:
    """A float as YAML 1.1 reads it back exactly (it wants a dot in the mantissa and a signed exponent)."""
    text = repr(float(v))
    mantissa, e, exponent = text.partition("e")
    text = (mantissa if "." in mantissa else mantissa + ".0") + (e + exponent if e else "")
    assert yaml.safe_load(text) == v, text
    return text


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ranges")


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def refused(load, error, path: Path, field: str) -> str:
    with pytest.raises(error) as e:
        load(path)
    msg = str(e.value)
    assert "\n" not in msg and f"field {field}:" in msg, msg
    assert "secret" not in msg, msg
    return msg


ports_in = st.integers(min_value=1, max_value=PORT_MAX)
ports_out = st.integers(max_value=0) | st.integers(min_value=PORT_MAX + 1, max_value=10**12)
finite = dict(allow_nan=False, allow_infinity=False)
timeouts_in = st.floats(min_value=0, max_value=TIMEOUT_MAX_S, exclude_min=True, **finite)
timeouts_out = st.floats(max_value=0, **finite) | st.floats(min_value=TIMEOUT_MAX_S, exclude_min=True, **finite)
durations_in = st.floats(min_value=0, max_value=DURATION_MAX_S, exclude_min=True, **finite)
durations_out = st.floats(max_value=0, **finite) | st.floats(min_value=DURATION_MAX_S, exclude_min=True, **finite)
rates_in = st.floats(min_value=0, max_value=RATE_MAX, exclude_min=True, **finite)
rates_out = st.floats(max_value=0, **finite) | st.floats(min_value=RATE_MAX, exclude_min=True, **finite)


def local(**given) -> str:
    values = {"port": 8000, "candidate_port": 8001, "baseline_port": 8002, "start_timeout_s": "300.0", **given}
    return LOCAL.format(**values)


def others(port: int) -> tuple[int, int]:
    """Two ports other than this one, so that only the port under test can be wrong."""
    a, b = [p for p in (8000, 8001, 8002) if p != port][:2]
    return a, b


# --- the deployment spec ---------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["port", "candidate_port", "baseline_port"])
@SETTINGS
@given(port=ports_out)
def test_a_local_port_out_of_range_is_refused(folder, field, port):
    rest = {f: p for f, p in zip([f for f in ("port", "candidate_port", "baseline_port") if f != field], (8001, 8002))}
    path = write(folder, "dep.yaml", local(**{field: port, **rest}))
    msg = refused(load_deployment, DeploymentError, path, f"local.{field}")
    assert str(port) in msg


@pytest.mark.parametrize("field", ["port", "candidate_port", "baseline_port"])
@SETTINGS
@given(port=ports_in)
def test_a_local_port_in_range_loads(folder, field, port):
    a, b = others(port)
    rest = dict(zip([f for f in ("port", "candidate_port", "baseline_port") if f != field], (a, b)))
    dep = load_deployment(write(folder, "dep.yaml", local(**{field: port, **rest})))
    assert getattr(dep.local, field) == port


@SETTINGS
@given(timeout=timeouts_out)
def test_a_start_timeout_out_of_range_is_refused(folder, timeout):
    path = write(folder, "dep.yaml", local(start_timeout_s=yaml_float(timeout)))
    refused(load_deployment, DeploymentError, path, "local.start_timeout_s")


@SETTINGS
@given(timeout=timeouts_in)
def test_a_start_timeout_in_range_loads(folder, timeout):
    dep = load_deployment(write(folder, "dep.yaml", local(start_timeout_s=yaml_float(timeout))))
    assert dep.local.start_timeout_s == timeout


@pytest.mark.parametrize("field", ["baseline", "candidate", "prometheus"])
@SETTINGS
@given(port=st.integers(min_value=PORT_MAX + 1, max_value=10**12) | st.just(0))
def test_a_url_port_out_of_range_is_refused(folder, field, port):
    values = {"baseline": 8000, "candidate": 8001, "prometheus": 9090, "max_duration": "60.0", field: port}
    path = write(folder, "dep.yaml", ENDPOINTS.format(**values))
    refused(load_deployment, DeploymentError, path, "prometheus" if field == "prometheus" else f"endpoints.{field}")


@SETTINGS
@given(port=ports_in, duration=durations_in)
def test_url_ports_and_a_max_duration_in_range_load(folder, port, duration):
    text = ENDPOINTS.format(baseline=port, candidate=port, prometheus=port, max_duration=yaml_float(duration))
    dep = load_deployment(write(folder, "dep.yaml", text))
    assert dep.guardrails.max_duration_s == duration and dep.target_url.endswith(f":{port}")


@SETTINGS
@given(duration=durations_out)
def test_a_max_duration_out_of_range_is_refused(folder, duration):
    text = ENDPOINTS.format(baseline=8000, candidate=8001, prometheus=9090, max_duration=yaml_float(duration))
    refused(load_deployment, DeploymentError, write(folder, "dep.yaml", text), "guardrails.max_duration")


@pytest.mark.parametrize("text, ok", [("30m", True), ("366d", True), ("367d", False), ("0s", False), ("-5m", False)])
def test_a_max_duration_as_text_is_held_to_the_same_range(folder, text, ok):
    path = write(folder, "dep.yaml", ENDPOINTS.format(baseline=8000, candidate=8001, prometheus=9090, max_duration=text))
    if ok:
        assert load_deployment(path).guardrails.max_duration_s > 0
    else:
        refused(load_deployment, DeploymentError, path, "guardrails.max_duration")


def test_replicas_may_not_run_past_the_last_port(folder):
    text = local(port=65534, candidate_port=8001, baseline_port=8101).replace("  arms: parallel\n",
                                                                               "  arms: parallel\n  replicas: 3\n")
    msg = refused(load_deployment, DeploymentError, write(folder, "dep.yaml", text), "local")
    assert "port 65534 with replicas 3 runs past port 65535" in msg


@pytest.mark.parametrize("command, says", [
    ('"python -m vllm serve"', "program 'python -m vllm serve' not found; give the command as a list: "
                               "[python, -m, vllm, serve]"),
    ('["python -m vllm", serve, --port-x]', "program 'python -m vllm' not found; give the command as a list: "
                                           "[python, -m, vllm, serve, --port-x]"),
    ('python', "give the command as a list: [python]"),
])
def test_a_command_as_one_string_says_how_to_write_it(folder, command, says):
    path = write(folder, "dep.yaml", local().replace("[python, -m, engine]", command))
    msg = refused(load_deployment, DeploymentError, path, "local.command")
    assert says in msg


# --- the workload spec -----------------------------------------------------------------------------

def workload(**given) -> str:
    values = {"rate": "2.0", "duration_s": "10.0", "warmup_s": "0.0", **given}
    return WORKLOAD.format(**{k: yaml_float(v) if isinstance(v, float) else v for k, v in values.items()})


@pytest.mark.parametrize("field, values", [("duration_s", durations_out), ("arrival.rate", rates_out),
                                           ("warmup_s", st.floats(max_value=0, exclude_max=True, **finite)
                                            | st.floats(min_value=DURATION_MAX_S, exclude_min=True, **finite))])
@SETTINGS
@given(data=st.data())
def test_a_workload_value_out_of_range_is_refused(folder, field, values, data):
    v = data.draw(values)
    path = write(folder, "w.yaml", workload(**{field.split(".")[-1]: v}))
    refused(load_workload, WorkloadError, path, field)


@SETTINGS
@given(rate=st.floats(min_value=0, max_value=min(RATE_MAX, MAX_LOAD_RATE), exclude_min=True, **finite),
       duration=st.floats(min_value=0, max_value=min(DURATION_MAX_S, MAX_LOAD_DURATION_S), exclude_min=True, **finite),
       warmup=st.floats(min_value=0, max_value=min(DURATION_MAX_S, MAX_LOAD_DURATION_S), **finite))
def test_workload_values_in_range_load(folder, rate, duration, warmup):
    # requests bounds the run, so that rate x duration is no count of requests to plan
    text = workload(rate=rate, duration_s=duration, warmup_s=warmup) + "requests: 8\n"
    w = load_workload(write(folder, "w.yaml", text))
    assert (w.arrival.rate, w.duration_s, w.warmup_s) == (rate, duration, warmup)


# --- the SLO file and advisor.yaml ---------------------------------------------------------------------

@SETTINGS
@given(v=durations_out)
def test_an_slo_latency_out_of_range_is_refused(folder, v):
    refused(load_slo, SLOError, write(folder, "slo.yaml", f"ttft_p95: {yaml_float(v)}\n"), "ttft_p95")


@SETTINGS
@given(v=rates_out)
def test_an_slo_goodput_out_of_range_is_refused(folder, v):
    refused(load_slo, SLOError, write(folder, "slo.yaml", f"goodput_min: {yaml_float(v)}\n"), "goodput_min")


@SETTINGS
@given(ttft=durations_in, goodput=rates_in)
def test_slo_values_in_range_load(folder, ttft, goodput):
    slo = load_slo(write(folder, "slo.yaml", f"ttft_p95: {yaml_float(ttft)}\ngoodput_min: {yaml_float(goodput)}\n"))
    assert (slo.ttft_p95, slo.goodput_min) == (ttft, goodput)


@SETTINGS
@given(port=ports_out.filter(lambda p: p < 10**6 and p >= 0))
def test_a_fleet_prom_url_port_out_of_range_is_refused(folder, port):
    path = write(folder, "advisor.yaml", FLEET.format(port=port, window="5m"))
    refused(load_config, FleetError, path, "deployments.0.prom_url")


@SETTINGS
@given(port=ports_in, days=st.integers(min_value=1, max_value=366))
def test_a_fleet_entry_in_range_loads(folder, port, days):
    config = load_config(write(folder, "advisor.yaml", FLEET.format(port=port, window=f"{days}d")))
    assert config.deployments[0].prom_url.endswith(f":{port}")


@pytest.mark.parametrize("window", ["367d", "0s", "100000h"])
def test_a_fleet_window_out_of_range_is_refused(folder, window):
    refused(load_config, FleetError, write(folder, "advisor.yaml", FLEET.format(port=9090, window=window)),
            "deployments.0.window")


def test_the_ranges_are_the_command_lines():
    # ADVISOR_TIMEOUT's ceiling is an hour; an engine's start may take longer, a day at most.
    assert PORT_MAX == 65535 and TIMEOUT_MAX_S >= 3600 and math.isfinite(DURATION_MAX_S)
