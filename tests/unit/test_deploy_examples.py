"""deploy/: the examples cannot run here, so they are parsed and checked against the advisor itself
(the commands they run exist, the cron times agree), with systemd-analyze where it is installed."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner

from advisor.cli import app
from advisor.fleet.config import load_config
from advisor.fleet.cron import parse_cron
from tests.support.servers import ROOT

DEPLOY = ROOT / "deploy"


def _runs(args: list[str]) -> None:
    """The command line parses as an advisor command (its --help answers)."""
    words = [a for a in args if not a.startswith("-")][:2]
    r = CliRunner().invoke(app, [*words, "--help"])
    assert r.exit_code == 0, (args, r.output)
    for option in (a for a in args if a.startswith("--")):
        assert option in r.output, (option, words)


def test_kubernetes_cronjob_runs_the_weekly_report():
    job = yaml.safe_load((DEPLOY / "kubernetes" / "weekly-report-cronjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "CronJob")
    parse_cron(job["spec"]["schedule"])
    [container] = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["args"][:2] == ["report", "weekly"]
    _runs(container["args"])
    mounts = {m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"] for v in job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"]}
    assert mounts == volumes


def test_docker_compose_runs_serve_on_postgresql():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    advisor = compose["services"]["advisor"]
    assert advisor["environment"]["ADVISOR_DB_URL"].startswith("postgresql+psycopg://")
    assert advisor["environment"]["ADVISOR_DB_URL"].split("@")[1].startswith("postgres:5432/")
    assert "postgres" in compose["services"] and "postgres" in advisor["depends_on"]
    assert "ADVISOR_API_TOKEN" in advisor["environment"], "it binds beyond loopback: a token is required"
    assert advisor["ports"] == ["127.0.0.1:8080:8080"]
    assert advisor["command"][0] == "advisor"
    _runs(advisor["command"][1:])
    dockerfile = (ROOT / advisor["build"] / "Dockerfile").read_text()
    for copied in ("advisor", "probes", "rules", "templates", "pyproject.toml"):
        assert f"COPY {copied}" in dockerfile
    if shutil.which("docker-compose"):
        done = subprocess.run(["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                              capture_output=True, text=True, env={"ADVISOR_API_TOKEN": "x", "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr


def test_systemd_timer_and_service(tmp_path):
    service = configparser.ConfigParser(interpolation=None)
    service.read(DEPLOY / "systemd" / "advisor-weekly-report.service")
    timer = configparser.ConfigParser(interpolation=None)
    timer.read(DEPLOY / "systemd" / "advisor-weekly-report.timer")
    exec_start = service["Service"]["ExecStart"].split()
    assert exec_start[0].endswith("/advisor")
    _runs(exec_start[1:])
    assert timer["Timer"]["OnCalendar"].startswith("Mon ")
    analyze = shutil.which("systemd-analyze")
    if analyze:
        # Verified as installed: ExecStart pointed at this checkout's own `advisor`.
        advisor = Path(sys.executable).parent / "advisor"
        text = (DEPLOY / "systemd" / "advisor-weekly-report.service").read_text()
        (tmp_path / "advisor-weekly-report.service").write_text(text.replace(exec_start[0], str(advisor)))
        shutil.copy(DEPLOY / "systemd" / "advisor-weekly-report.timer", tmp_path)
        done = subprocess.run([analyze, "verify", "advisor-weekly-report.timer", "advisor-weekly-report.service"],
                              cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        cal = subprocess.run([analyze, "calendar", timer["Timer"]["OnCalendar"]], capture_output=True, text=True)
        assert cal.returncode == 0 and "Next elapse: Mon" in cal.stdout, cal.stdout


def test_example_advisor_yaml_loads(tmp_path):
    text = (DEPLOY / "advisor.example.yaml").read_text()
    for name in ("deploy.yaml", "slo.yaml"):
        (tmp_path / name).write_text("x: 1\n")
    (tmp_path / "advisor.yaml").write_text(text)
    cfg = load_config(tmp_path / "advisor.yaml")
    assert cfg.deployments[0].diagnose_every == "15m" and cfg.weekly_report.cron == "0 8 * * MON"
