"""advisor.yaml: the deployments the advisor watches, and its weekly report's schedule.

It is also the allowlist of the dashboard and its API: they only ever query a Prometheus URL or
touch a deployment this file names. Relative paths in it are read from the file's own folder.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, Field, PrivateAttr, field_validator, model_validator

from advisor.cost import PriceSpec
from advisor.errors import AdvisorError
from advisor.fleet.cron import parse_cron
from advisor.inputs import InputModel, load_model
from advisor.ranges import BLOCKS_MAX, duration_text, url_port
from advisor import net
from advisor.settings import get_settings
from advisor.units import MAX_EXPERIMENT_S, MAX_REPORT_PERIOD_S, check_ceiling, parse_duration

ENV = "ADVISOR_CONFIG"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


class FleetError(AdvisorError):
    """advisor.yaml is missing, unreadable or invalid."""


def _as_path(value: object) -> object:
    return Path(value) if isinstance(value, str) and value else value


# A path as YAML writes it: text, made a Path before strict validation sees it.
PathText = Annotated[Path, BeforeValidator(_as_path)]


def _duration(value: object) -> object:
    if isinstance(value, str):
        duration_text(value)  # above 0, at most a year; ValueError -> the field's one-line error
    return value


class ExperimentLimits(InputModel):
    """What experiments started from the dashboard may cost this deployment (advisor experiment's
    options of the same names); unset: the advisor plans them from the measured noise."""

    blocks: int | None = Field(default=None, ge=2, le=BLOCKS_MAX, description="most blocks per arm")
    block_requests: int | None = Field(default=None, ge=1, description="requests per block")
    readout: str | None = Field(default=None, description="primary readout, e.g. ttft_p50; default: the check's")
    concurrency: int | None = Field(default=None, ge=1)
    max_duration: str | None = Field(default=None, description="guardrail: abort past this long")
    fixed: bool = Field(default=False, description="run every planned block instead of stopping early")

    @field_validator("max_duration")
    @classmethod
    def _max(cls, v: str | None) -> str | None:
        _duration(v)
        if isinstance(v, str):
            check_ceiling(parse_duration(v), MAX_EXPERIMENT_S, "the guardrail", "the longest experiment")
        return v


class CapacitySchedule(InputModel):
    """A capacity run on advisor.yaml's schedule (`advisor serve`): the deployment spec's baseline
    searched with the deployment's own traffic shape (its Prometheus), within guardrails. The target
    is a replica the advisor did not start, serving users: the search never offers it more than
    `max_rate_multiple` times the production rate Prometheus measured over `window`."""

    every: str = Field(default="7d", description="run a capacity search this often")
    slo: PathText | None = Field(default=None, description="SLO YAML; default: the deployment's slo, else the "
                                 "built-in SLOs")
    window: str = Field(default="1h", description="how much history shapes the traffic, and measures the "
                        "production rate")
    width: float = Field(default=0.10, gt=0, lt=0.5, description="stop when the interval is within +-this share")
    max_rate_multiple: float = Field(default=2.0, gt=0, le=100, description="guardrail: never more than this "
                                     "many times the production rate")
    max_duration: str = Field(default="30m", description="guardrail: stop after this long, with a partial answer")
    max_requests: int = Field(default=20_000, ge=1, description="guardrail: stop after this many requests")
    trial_requests: int | None = Field(default=None, ge=10, description="requests tallied per trial; default: "
                                       "what the strictest percentile needs")

    @field_validator("every", "window")
    @classmethod
    def _durations(cls, v: str) -> str:
        return _duration(v)

    @field_validator("max_duration")
    @classmethod
    def _max(cls, v: str) -> str:
        _duration(v)
        check_ceiling(parse_duration(v), MAX_EXPERIMENT_S, "the guardrail", "the longest experiment")
        return v


class WatchedDeployment(InputModel):
    name: str = Field(description="the id used in URLs and reports: letters, digits, '.', '_', '-'")
    prom_url: str = Field(description="the Prometheus that scrapes this deployment")
    deployment: PathText | None = Field(default=None, description="deployment spec, for experiments")
    slo: PathText | None = Field(default=None, description="SLO YAML; default: the built-in SLOs")
    rules_config: PathText | None = Field(default=None, description="per-rule overrides YAML")
    model: str | None = Field(default=None, description="only this served model's series")
    window: Annotated[str, Field(description="how far back a diagnosis looks")] = "5m"
    diagnose_every: str | None = Field(default=None, description="run a diagnosis this often (advisor serve)")
    experiments: ExperimentLimits = Field(default_factory=ExperimentLimits)
    capacity: CapacitySchedule | None = Field(default=None, description="capacity at the SLO on a schedule "
                                              "(needs deployment: its baseline is measured)")
    cost: PriceSpec | None = Field(default=None, description="price per accelerator-hour (or host-hour); the "
                                   "deployment spec's cost: wins")

    # Credentials split off prom_url by load_config, for child processes' environment only.
    _auth: object = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.fullmatch(v):
            raise ValueError("use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
        return v

    @field_validator("prom_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"https?://[^/\s]+", v):
            raise ValueError("expected an http:// or https:// URL")
        return url_port(v).rstrip("/")

    @field_validator("window", "diagnose_every")
    @classmethod
    def _durations(cls, v: str | None) -> str | None:
        return _duration(v)

    @model_validator(mode="after")
    def _capacity_target(self) -> WatchedDeployment:
        if self.capacity is not None and self.deployment is None:
            raise ValueError("capacity needs deployment: the spec whose baseline the search measures")
        return self


# Why a report's period is held to a month (advisor/units.py): said by advisor.yaml and --since alike.
REPORT_PERIOD_WHY = "the report reads Prometheus once for every hour of its period"


class WeeklyReport(InputModel):
    cron: str = Field(default="0 8 * * MON", description="when advisor serve writes it (UTC, five cron fields)")
    out_dir: PathText | None = Field(default=None, description="folder the report files are written to")
    webhook: str | None = Field(default=None, description="Slack-compatible webhook the report is posted to")
    since: str = Field(default="7d", description="the period each report covers")

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        parse_cron(v)
        return v

    @field_validator("since")
    @classmethod
    def _since(cls, v: str) -> str:
        _duration(v)
        check_ceiling(parse_duration(v), MAX_REPORT_PERIOD_S, "the period", REPORT_PERIOD_WHY)
        return v

    @field_validator("webhook")
    @classmethod
    def _webhook(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"https?://[^/\s]+", v):
            raise ValueError("expected an http:// or https:// URL")
        return v if v is None else url_port(v)


class AlertmanagerConfig(InputModel):
    """Alertmanager in (`advisor serve` answers its webhook, POST /api/alertmanager) and out
    (findings posted to its API, where `url` is set)."""
    deployment_label: str = Field(default="deployment", description="the alert label whose value names a "
                                  "deployment of this file (set it in the alerting rule or Prometheus' "
                                  "external_labels)")
    min_interval: str = Field(default="10m", description="at most one alert-started diagnosis per deployment "
                              "this often; later notifications are counted and dropped")
    url: str | None = Field(default=None, description="Alertmanager to post findings to (/api/v2/alerts); "
                            "user:password@ in it is sent as basic auth to it only")
    dashboard_url: str | None = Field(default=None, description="this advisor's dashboard as Alertmanager's "
                                      "receivers reach it: each posted finding links to its diagnosis there")
    ttl: str = Field(default="1h", description="how long a posted finding stays firing unless a later "
                     "diagnosis finds it again (a healthy one ends it at once)")

    @field_validator("min_interval", "ttl")
    @classmethod
    def _durations(cls, v: str) -> str:
        _duration(v)
        return v

    @field_validator("url", "dashboard_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"https?://[^/\s]+", v):
            raise ValueError("expected an http:// or https:// URL")
        return v

    @property
    def min_interval_s(self) -> float:
        return parse_duration(self.min_interval)

    @property
    def ttl_s(self) -> float:
        return parse_duration(self.ttl)


class FleetConfig(InputModel):
    deployments: list[WatchedDeployment] = Field(min_length=1)
    weekly_report: WeeklyReport | None = None
    alertmanager: AlertmanagerConfig = Field(default_factory=AlertmanagerConfig)

    @model_validator(mode="after")
    def _unique(self) -> FleetConfig:
        seen: set[str] = set()
        for d in self.deployments:
            if d.name in seen:
                raise ValueError(f"deployment name {d.name!r} appears twice")
            seen.add(d.name)
        return self

    def get(self, name: str) -> WatchedDeployment | None:
        return next((d for d in self.deployments if d.name == name), None)

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.deployments]


def config_path(path: Path | None) -> Path:
    """The file to read: `path`, else $ADVISOR_CONFIG, else a one-line error saying how to give one."""
    if path is not None:
        return path

    configured = get_settings().config
    if configured:
        return configured
    raise FleetError(f"no fleet configuration: give --config advisor.yaml or set {ENV} "
                     "(a list of deployments: name, prom_url, ...; see the README)")


def load_config(path: Path | None = None) -> FleetConfig:
    """advisor.yaml validated, its relative paths made relative to its folder, and each named
    file shown to exist; every problem one line naming the file and field."""
    from probes.http import split_userinfo

    path = config_path(path)
    config = load_model(path, FleetConfig, FleetError)
    base = path.resolve().parent
    for i, d in enumerate(config.deployments):
        # user:password@ in prom_url is taken out here: every page, report, log and child process
        # sees the URL without it; this process sends it to that origin only (advisor/net.py).
        clean, auth = split_userinfo(d.prom_url)
        if auth is not None:
            net.target(d.prom_url, "prom", f"deployments.{i}.prom_url")
            d.prom_url, d._auth = clean.rstrip("/"), auth
        for owner, field, where in ((d, "deployment", ""), (d, "slo", ""), (d, "rules_config", ""),
                                    (d.capacity, "slo", "capacity.")):
            value = getattr(owner, field) if owner is not None else None
            if value is None:
                continue
            full = value if value.is_absolute() else base / value
            if not full.is_file():
                raise FleetError(f"{path}: field deployments.{i}.{where}{field}: no such file: {full}")
            setattr(owner, field, full)
    if config.weekly_report and config.weekly_report.out_dir is not None:
        out = config.weekly_report.out_dir
        config.weekly_report.out_dir = out if out.is_absolute() else base / out
    return config
