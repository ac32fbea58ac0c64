"""Settings from the environment (prefix ADVISOR_) with sensible defaults."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from platformdirs import user_data_dir
from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from advisor.errors import AdvisorError


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ADVISOR_", env_file=None, extra="ignore")

    window: str = Field(default="60s", description="default probe window")
    timeout: float = Field(default=10.0, gt=0, le=3600, allow_inf_nan=False,
                           description="seconds before a data source counts as unreachable")
    data_dir: Path = Field(default_factory=lambda: Path(user_data_dir("llm-advisor")))
    db_url: str | None = Field(default=None, description="SQLAlchemy URL; default SQLite in data_dir")
    log_level: str = "WARNING"
    slo_file: Path | None = Field(default=None, description="SLO YAML used when --slo is not given")
    rules_config: Path | None = Field(default=None, description="per-rule overrides YAML")
    config: Path | None = Field(default=None, description="advisor.yaml: the fleet the dashboard and schedule watch")
    api_token: SecretStr | None = Field(default=None, description="the dashboard's token for actions (and for "
                                        "every page when bound beyond loopback)")
    # At least 1 KiB: a smaller limit (4, meant as MiB) would refuse even the login's JSON.
    max_body_bytes: int = Field(default=4 * 2**20, ge=1024, description="the largest request body advisor serve "
                                "reads; a larger one is refused with 413 before its token is checked")
    # TLS and credentials of the advisor's own requests (advisor/net.py builds them into HttpConfig).
    tls_verify: bool = Field(default=True, description="verify TLS certificates; false warns on every run")
    ca_bundle: Path | None = Field(default=None, description="PEM file (or hashed directory) of trusted CAs")
    prom_user: str | None = Field(default=None, description="Prometheus basic-auth user")
    prom_password: SecretStr | None = None
    prom_password_file: Path | None = None
    prom_token: SecretStr | None = Field(default=None, description="Prometheus bearer token")
    prom_token_file: Path | None = None
    engine_user: str | None = Field(default=None, description="engine basic-auth user")
    engine_password: SecretStr | None = None
    engine_password_file: Path | None = None
    engine_token: SecretStr | None = Field(default=None, description="engine bearer token")
    engine_token_file: Path | None = None
    # How much of a target's answer is read (advisor/net.py puts them in every HttpConfig): past a
    # cap the probe stops with one line naming it, instead of parsing for minutes.
    max_series: int = Field(default=250_000, ge=1, description="most series one Prometheus answer may hold "
                            "(a per-replica query holds about 200 per vLLM replica)")
    max_metrics_lines: int = Field(default=200_000, ge=1, description="most lines an engine's /metrics may hold "
                                   "(one vLLM engine writes about 600)")
    max_metrics_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, description="most bytes of an engine's /metrics")

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.data_dir / 'advisor.db'}"


class SettingsError(AdvisorError):
    pass


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as e:
        first = e.errors()[0]
        name = "ADVISOR_" + "_".join(str(p) for p in first["loc"]).upper()
        raise SettingsError(f"environment variable {name}: {first['msg']}") from None
