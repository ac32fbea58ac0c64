"""Bad files and bad options through the real command line (a subprocess, as a user runs it): each
ends in exit 2 with one line naming the file, the field and the problem, no traceback, and before
anything starts (the targets below are closed ports: reaching one would be a different error)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, run_cli

DEPLOYMENT = """\
name: test
engine: vllm
model: tiny
launcher: endpoints
endpoints: {baseline: "http://127.0.0.1:%(port)d", candidate: "http://127.0.0.1:%(port)d"}
"""
LOCAL = """\
name: test
engine: vllm
model: tiny
launcher: local
local:
  command: [python, -m, engine]
  port: %(port)d
"""
WORKLOAD = """\
buckets: [{prompt_tokens: 16, output_tokens: 4}]
arrival: {kind: poisson, rate: 2}
requests: 8
"""
TRACE = '{"timestamp": 0, "prompt_tokens": 16, "output_tokens": 4}\n{"timestamp": 1, "prompt_tokens": 16, "output_tokens": 4}\n'


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def env(tmp_path):
    """Files for a case, and the CLI runner with an isolated data dir."""
    port = closed_port()

    class Env:
        prom = f"http://127.0.0.1:{port}"
        target = f"http://127.0.0.1:{port}"

        @staticmethod
        def file(name: str, content: str | bytes) -> str:
            path = tmp_path / name
            path.write_bytes(content.encode() if isinstance(content, str) else content)
            return str(path)

        @staticmethod
        def deployment(extra: str = "", local: bool = False) -> str:
            return Env.file("dep.yaml", (LOCAL if local else DEPLOYMENT) % {"port": port} + extra)

        @staticmethod
        def run(*args: str, **kw):
            kw.setdefault("data_dir", tmp_path / "data")
            return run_cli(*args, **kw)

    return Env


# (family, file name, content, contains) -> run through the command that reads that kind of file.
SLO_CASES = [
    ("binary", b"ttft_p95: 1\x00\x01\x02", "not a text file (byte 0x00 at offset 11)"),
    ("non-utf8", b"ttft_p95: 0.5 # caf\xe9\n", "not UTF-8 text (byte 0xe9 at offset 19)"),
    ("control character", "ttft_p95: 0.5 \x1b[31m\n", "not a text file (character U+001B"),
    ("wrong type", "ttft_p95: fast\n", "slo.yaml: field ttft_p95: Input should be a valid number (got 'fast') (line 1)"),
    ("bool for a number", "tpot_p95: true\n", "field tpot_p95: Input should be a valid number (got True)"),
    ("NaN", "ttft_p95: .nan\n", "field ttft_p95: Input should be a finite number (got nan)"),
    (".inf", "e2e_p99: .inf\n", "field e2e_p99: Input should be a finite number (got inf)"),
    ("unknown key", "ttft_p59: 1\n", "field ttft_p59: unknown key (did you mean 'ttft_p95'?)"),
    ("duplicate key", "ttft_p95: 1\nttft_p95: 2\n", "field ttft_p95: duplicate key (line 2, first at line 1)"),
    ("not YAML", "ttft_p95: [1\n", "not valid YAML"),
    ("not a mapping", "- 1\n", "expected a mapping"),
    ("bad date", "ttft_p95: 2024-13-01\n", "not valid YAML: month must be in 1..12"),
]


@pytest.mark.parametrize("family, content, contains", SLO_CASES, ids=[c[0] for c in SLO_CASES])
def test_bad_slo_file(env, family, content, contains):
    r = env.run("diagnose", "--prom-url", env.prom, "--slo", env.file("slo.yaml", content))
    assert_one_line_error(r, contains=contains)


def test_bad_slo_file_from_the_environment(env):
    r = env.run("diagnose", "--prom-url", env.prom, env={"ADVISOR_SLO_FILE": env.file("slo.yaml", "ttft_p95: .inf\n")})
    assert_one_line_error(r, contains="slo.yaml: field ttft_p95: Input should be a finite number")


def test_slo_file_that_is_a_directory_or_missing(env, tmp_path):
    assert_one_line_error(env.run("diagnose", "--prom-url", env.prom, "--slo", str(tmp_path)), contains="is a directory")
    assert_one_line_error(env.run("diagnose", "--prom-url", env.prom, "--slo", str(tmp_path / "nope.yaml")),
                          contains="cannot read: No such file or directory")


RULES_CASES = [
    ("enabled as text", 'ADV001: {enabled: "false"}\n', "field ADV001.enabled: Input should be a valid boolean (got 'false')"),
    ("typo'd key", "ADV001: {enabeld: false}\n", "field ADV001.enabeld: unknown key (did you mean 'enabled'?)"),
    ("NaN threshold", "ADV001:\n  severity: {thresholds: {critical: .nan}}\n",
     "field ADV001.severity.thresholds.critical: Input should be a finite number (got nan) (line 2)"),
    ("unknown level", "ADV001: {severity: {thresholds: {severe_: 3}}}\n", "unknown severity level (did you mean 'severe'?)"),
    ("unknown parameter", "ADV007: {params: {max_preemtions: 2}}\n",
     "field ADV007.params.max_preemtions: unknown parameter of ADV007 (did you mean 'max_preemptions'?)"),
    ("parameter as text", "ADV007: {params: {max_preemptions: lots}}\n", "field ADV007.params.max_preemptions: Input should be a valid number"),
    ("unknown rule", "ADV07: {enabled: false}\n", "field ADV07: unknown rule (did you mean 'ADV007'?)"),
    ("thresholds out of order", "ADV007: {severity: {thresholds: {low: 1000}}}\n", "field ADV007.severity.thresholds: the levels must stay in order"),
    ("non-utf8", b"ADV001: {enabled: f\xc3\x28lse}\n", "not UTF-8 text (byte 0xc3 at offset 19)"),
    ("binary", b"\x7fELF\x02\x01\x01\x00", "not a text file"),
]


@pytest.mark.parametrize("family, content, contains", RULES_CASES, ids=[c[0] for c in RULES_CASES])
def test_bad_rules_override_file(env, family, content, contains):
    r = env.run("diagnose", "--prom-url", env.prom, "--rules-config", env.file("rules.yaml", content))
    assert_one_line_error(r, contains=contains)


def test_bad_rules_override_file_from_the_environment(env):
    r = env.run("diagnose", "--prom-url", env.prom,
                env={"ADVISOR_RULES_CONFIG": env.file("rules.yaml", "ADV009: {enabled: 0}\n")})
    assert_one_line_error(r, contains="field ADV009.enabled: Input should be a valid boolean (got 0)")


DEPLOYMENT_CASES = [
    ("non-utf8", None, b"\xff\xfe", "not UTF-8 text (byte 0xff at offset"),
    ("binary", None, b"\x00\x00\x00\x18ftypmp42", "not a text file (byte 0x00 at offset 0)"),
    (".inf", "local", "  start_timeout_s: .inf\n", "field local.start_timeout_s: Input should be a finite number (got inf) (line 8)"),
    ("bool as text", "local", '  isolate_engine_core: "false"\n', "field local.isolate_engine_core: Input should be a valid boolean (got 'false')"),
    ("port as text", None, "", None),  # replaced below: the port is written as text
    ("unknown key", "local", "  candidate_prot: 8001\n", "field local.candidate_prot: unknown key (did you mean 'candidate_port'?)"),
    ("mapping in argv", "local", "  args: [--x, {a: 1}]\n", "field local.args.1: Input should be a valid string"),
    ("bool in argv", "local", "  args: [--enforce-eager, true]\n", "field local.args.1: Input should be a valid string (got True; quote it if you mean text)"),
    ("unknown top-level key", None, "lanucher: local\n", "field lanucher: unknown key (did you mean 'launcher'?)"),
    ("empty", None, "", None),
    ("candidate port out of range", "local", "  candidate_port: 70000\n",
     "field local.candidate_port: Input should be less than or equal to 65535 (got 70000) (line 8)"),
    ("negative start timeout", "local", "  start_timeout_s: -1\n",
     "field local.start_timeout_s: Input should be greater than 0 (got -1) (line 8)"),
    ("endpoint port out of range", None, "prometheus: http://127.0.0.1:99999\n",
     "field prometheus: the URL's port must be a number from 1 to 65535 (line 6)"),
    ("command as one string", None, LOCAL.replace("[python, -m, engine]", '"python -m vllm serve"').encode() % {b"port": 8000},
     "field local.command: program 'python -m vllm serve' not found; give the command as a list: [python, -m, vllm, serve]"),
]


@pytest.mark.parametrize("family, kind, content, contains", DEPLOYMENT_CASES, ids=[c[0] for c in DEPLOYMENT_CASES])
def test_bad_deployment_file(env, family, kind, content, contains):
    if family == "port as text":
        path = env.file("dep.yaml", LOCAL.replace("port: %(port)d", 'port: "8000"'))
        contains = "field local.port: Input should be a valid integer (got '8000')"
    elif family == "empty":
        path, contains = env.file("dep.yaml", ""), "the file is empty"
    elif isinstance(content, bytes):
        path = env.file("dep.yaml", content)
    else:
        path = env.deployment(content, local=kind == "local")
    r = env.run("experiment", "--deployment", path, "--mechanism", "max_num_seqs", "--value", "4", "--dry-run")
    assert_one_line_error(r, contains=contains)


def test_bad_deployment_is_refused_by_diagnose_before_probing(env):
    r = env.run("diagnose", "--prom-url", env.prom, "--deployment", env.deployment("prometheus: 9090\n"))
    assert_one_line_error(r, contains="field prometheus: Input should be a valid string (got 9090; quote it if you mean text)")


WORKLOAD_CASES = [
    ("non-utf8", b"name: caf\xe9\n", "not UTF-8 text (byte 0xe9 at offset 9)"),
    ("wrong type", WORKLOAD.replace("rate: 2", "rate: fast"), "field arrival.rate: Input should be a valid number (got 'fast') (line 2)"),
    ("NaN", WORKLOAD.replace("rate: 2", "rate: .nan"), "field arrival.rate: Input should be a finite number (got nan)"),
    (".inf", WORKLOAD + "duration_s: .inf\n", "field duration_s: Input should be a finite number (got inf) (line 4)"),
    ("unknown key", WORKLOAD + "duraton_s: 5\n", "field duraton_s: unknown key (did you mean 'duration_s'?) (line 4)"),
    ("bool for a count", WORKLOAD.replace("requests: 8", "requests: true"), "field requests: Input should be a valid integer (got True)"),
    # 2,000,000,000 tokens made `advisor load` call the target's tokenizer until it was killed (1 GB).
    ("prompt past the ceiling", WORKLOAD.replace("prompt_tokens: 16", "prompt_tokens: 2000000000"),
     "prompt_tokens 2,000,000,000 is above the ceiling of 10,000,000 tokens"),
    ("float for a count", WORKLOAD.replace("requests: 8", "requests: 8.5"), "field requests: Input should be a valid integer (got 8.5)"),
    ("range of three", WORKLOAD.replace("prompt_tokens: 16", "prompt_tokens: [1, 2, 3]"), "field buckets.0.prompt_tokens: Tuple should have at most 2 items"),
    ("rate above any", WORKLOAD.replace("rate: 2", "rate: 2.0e+7"), "field arrival.rate: Input should be less than or equal to 1000000"),
    ("negative warmup", WORKLOAD + "warmup_s: -1\n", "field warmup_s: Input should be greater than or equal to 0 (got -1) (line 4)"),
]


@pytest.mark.parametrize("family, content, contains", WORKLOAD_CASES, ids=[c[0] for c in WORKLOAD_CASES])
def test_bad_workload_file(env, family, content, contains):
    path = env.file("w.yaml", content)
    assert_one_line_error(env.run("load", "--target", env.target, "--workload", path), contains=contains)
    r = env.run("experiment", "--deployment", env.deployment(), "--mechanism", "max_num_seqs", "--value", "4",
                "--workload", path, "--dry-run")
    assert_one_line_error(r, contains=contains)


TRACE_CASES = [
    ("binary", "t.jsonl", TRACE.encode() + b"\x00\x01", "not a text file (byte 0x00 at offset %d)" % len(TRACE)),
    ("binary after 8 KiB", "t.jsonl", TRACE.encode() * 200 + b"\x00", "not a text file (byte 0x00 at offset %d, line 401)" % (len(TRACE) * 200)),
    ("binary from the start", "t.jsonl", b"\x89PNG\r\n\x1a\n\x00\x00", "not a text file (byte 0x00 at offset 8)"),
    ("non-utf8", "t.jsonl", TRACE.encode() + b'{"timestamp": 2, "prefix_id": "\xff"}\n', "not UTF-8 text (byte 0xff at offset"),
    ("wrong type", "t.jsonl", TRACE + '{"timestamp": 2, "prompt_tokens": "many", "output_tokens": 4}\n',
     "line 3: field prompt_tokens: expected a positive integer, got 'many'"),
    ("NaN", "t.jsonl", TRACE + '{"timestamp": NaN, "prompt_tokens": 16, "output_tokens": 4}\n', "line 3: field timestamp"),
    ("huge integer", "t.jsonl", TRACE + '{"timestamp": 2, "prompt_tokens": 1%s, "output_tokens": 4}\n' % ("0" * 400),
     "line 3: field prompt_tokens: "),
    ("bool for a length", "t.jsonl", TRACE + '{"timestamp": 2, "prompt_tokens": true, "output_tokens": 4}\n',
     "line 3: field prompt_tokens: expected a positive integer, got True"),
    ("nested too deeply", "t.jsonl", TRACE + "[" * 100_000 + "\n", "line 3: not valid JSON"),
    ("csv wrong type", "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,12,x\n",
     "line 2: field GeneratedTokens: expected a positive integer, got 'x'"),
    ("csv bad time", "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,12,3\n", "line 2: field TIMESTAMP"),
]


@pytest.mark.parametrize("family, name, content, contains", TRACE_CASES, ids=[c[0] for c in TRACE_CASES])
def test_bad_trace_file(env, family, name, content, contains):
    r = env.run("load", "--target", env.target, "--from-trace", env.file(name, content))
    assert_one_line_error(r, contains=contains)


def _ok_deployment_args(env) -> list[str]:
    return ["experiment", "--deployment", env.deployment(), "--mechanism", "max_num_seqs", "--value", "4"]


OPTION_CASES = [
    ("experiment", ["--blocks", "1"], "Invalid value for '--blocks'"),
    ("experiment", ["--block-requests", "0"], "Invalid value for '--block-requests'"),
    ("experiment", ["--warmup", "-1"], "Invalid value for '--warmup'"),
    ("experiment", ["--concurrency", "0"], "Invalid value for '--concurrency'"),
    ("experiment", ["--blocks", "many"], "Invalid value for '--blocks'"),
    # Past the ceilings: 100,000 blocks asked the boundaries' Monte Carlo for 149 GiB (an internal
    # error), a trillion warmup requests grew past 1 GB before the first block.
    ("experiment", ["--blocks", "100000"], "Invalid value for '--blocks': Input should be less than or equal to 50"),
    ("experiment", ["--warmup", "1000000000000"], "Invalid value for '--warmup': Input should be less than or equal to 10000"),
    ("experiment", ["--diagnosis", "99999999999999999999999"], "Invalid value for '--diagnosis'"),
    ("load", ["--rate", "0"], "Invalid value for '--rate': must be a finite number above 0"),
    ("load", ["--rate", "-2"], "Invalid value for '--rate': must be a finite number above 0"),
    ("load", ["--rate", "nan"], "Invalid value for '--rate': must be a finite number above 0, got nan"),
    ("load", ["--rate", "inf"], "Invalid value for '--rate': must be a finite number above 0, got inf"),
    ("load", ["--concurrency", "0"], "Invalid value for '--concurrency'"),
    ("load", ["--duration", "0s"], "not a duration: '0s'"),
    ("load", ["--duration", "9" * 400], "not a duration"),
    ("load", ["--warmup", "-1s"], "not a duration: '-1s'"),
    ("diagnose", ["--experiment", "-1"], "Invalid value for '--experiment'"),
    ("diagnose", ["--at", "1e300"], "not a time: '1e300'"),
]


@pytest.mark.parametrize("command, args, contains", OPTION_CASES, ids=[f"{c[0]} {' '.join(c[1])[:20]}" for c in OPTION_CASES])
def test_out_of_range_options_are_one_line_before_anything_starts(env, command, args, contains):
    if command == "experiment":
        argv = [*_ok_deployment_args(env), *args]
    elif command == "load":
        argv = ["load", "--target", env.target, "--from-trace", env.file("t.jsonl", TRACE), *args]
    else:
        argv = ["diagnose", "--prom-url", env.prom, *args]
    assert_one_line_error(env.run(*argv), contains=contains)


@pytest.mark.parametrize("kind", ["diagnosis", "experiment"])
@pytest.mark.parametrize("id_", ["99999999999999999999999", "0"])
def test_a_report_id_outside_the_stores_range_is_one_line(env, kind, id_):
    """Beyond SQLite's integer range the query overflowed (internal error) instead of finding nothing."""
    assert_one_line_error(env.run("report", kind, id_), contains=f"Invalid value for '{kind}_id'")


def test_a_usage_error_is_one_line(env):
    assert_one_line_error(env.run("probe", "--no-such-option"), contains="No such option: --no-such-option")


EXPORT_CASES = [
    ("missing folder", "missing/records.jsonl", "the folder", "does not exist"),
    ("unknown suffix", "records.txt", "unknown format '.txt'", None),
    ("a directory", "", "unknown format '(no suffix)'", None),
    ("folder is a file", "trace.jsonl/records.csv", "is not a directory", None),
    ("unwritable folder", "/proc/records.csv", "cannot write in /proc", None),
]


@pytest.mark.parametrize("family, dest, contains, also", EXPORT_CASES, ids=[c[0] for c in EXPORT_CASES])
def test_export_destination_is_checked_before_the_run(env, tmp_path, family, dest, contains, also):
    trace = env.file("trace.jsonl", TRACE)
    target = dest if dest.startswith("/") else str(tmp_path / dest)
    r = env.run("load", "--target", env.target, "--from-trace", trace, "--export", target)
    line = assert_one_line_error(r, contains=contains)
    assert "--export" in line and (also is None or also in line)
    assert "unreachable" not in r.stderr  # refused before the target was asked anything


@pytest.mark.parametrize("data_dir", ["file", "/proc/advisor-data"])
def test_unwritable_data_dir_is_one_line_before_anything_starts(env, tmp_path, data_dir):
    if data_dir == "file":
        data_dir = env.file("not-a-dir", "x")
    runs = {
        "load --save": ("load", "--target", env.target, "--from-trace", env.file("t.jsonl", TRACE), "--save"),
        "diagnose --save": ("diagnose", "--prom-url", env.prom, "--save"),
        "experiment": tuple(_ok_deployment_args(env)),
        "recover": ("recover", "--deployment", env.deployment()),
    }
    for name, argv in runs.items():
        r = env.run(*argv, data_dir=Path(data_dir))
        assert_one_line_error(r, contains=data_dir)
        assert "unreachable" not in r.stderr, name


def test_dry_run_json_is_standard(env):
    r = env.run(*_ok_deployment_args(env), "--dry-run", "--output", "json")
    assert r.code == 0, r.stderr

    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    assert json.loads(r.stdout, parse_constant=refuse)["dry_run"] is True
