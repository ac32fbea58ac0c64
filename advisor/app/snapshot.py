"""One snapshot of a target, from exactly one source: a Prometheus server or an engine's /metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from advisor import interrupts
from advisor.errors import AdvisorError
from advisor.units import MAX_LOOKBACK_S, MAX_SAMPLE_WINDOW_S, check_ceiling, parse_duration, parse_time

if TYPE_CHECKING:
    from probes import Snapshot
    from probes.http import Auth

# The probes and the HTTP stack (httpx, httpcore, and trio where installed) are imported where a
# snapshot is taken: every command's --help would pay 0.3 s for them.


class SourceError(AdvisorError):
    """No source, two sources, or options that do not fit the source."""


@dataclass(frozen=True)
class Source:
    """Where a snapshot is read. `option` names the field in messages (--prom-url, or advisor.yaml's
    deployments.N.prom_url); `auth` is credentials already split off a URL (advisor.yaml's)."""

    prom_url: str | None = None
    url: str | None = None
    window: str | None = None
    model: str | None = None
    at: str | None = None
    engine: str | None = None
    auth: Auth | None = None
    prom_option: str = "--prom-url"
    window_option: str = "--window"


def probe_budget(window_s: float | None, timeout: float) -> float:
    """The most a snapshot may take, stated in --help: each request is bounded by the timeout, and
    a probe makes a few rounds of them (Prometheus: names, combined queries, split queries; an
    engine: the window's scrapes plus /version and /v1/models)."""
    return (window_s or 0.0) + 6 * timeout + 10


def take(source: Source, per_replica: bool | set[str] = True,
         progress: Callable[[str, float, float], None] | None = None) -> Snapshot:
    """The snapshot; every failure an AdvisorError of one line. per_replica: which signals
    Prometheus breaks down by replica (all, or those a caller reads). progress(url, done, total)
    while an engine's /metrics is sampled."""
    from advisor import net
    from advisor.settings import get_settings
    from probes import probe_engine, probe_prometheus

    settings = get_settings()
    if bool(source.prom_url) == bool(source.url):
        raise SourceError("give exactly one of --prom-url (a Prometheus server) or --url (an engine)")
    try:
        window_s = parse_duration(source.window or settings.window)
        said = source.window_option if source.window else "ADVISOR_WINDOW"
        if source.url:
            check_ceiling(window_s, MAX_SAMPLE_WINDOW_S, said, "--url samples /metrics for the whole window; "
                          "look further back with --prom-url")
        else:
            check_ceiling(window_s, MAX_LOOKBACK_S, said, "a longer Prometheus range only reads every sample it holds")
        when = parse_time(source.at) if source.at else None
    except ValueError as e:
        raise SourceError(str(e)) from None
    if when and source.url:
        raise SourceError("--at needs --prom-url: an engine's /metrics only tells the present")
    # Credentials in the URL are split off here: only the credential-free URL goes further.
    if source.prom_url:
        prom_url, http = net.target(source.prom_url, "prom", source.prom_option)
        if source.auth is not None:
            http = net.config("prom", auth=source.auth)
        with interrupts.budget(probe_budget(None, settings.timeout), "reading Prometheus"):
            return probe_prometheus(prom_url, window_s=window_s, model=source.model, at=when, engine=source.engine,
                                    timeout=settings.timeout, per_replica=per_replica, http=http)
    url, http = net.target(source.url, "engine", "--url")
    say = (lambda done, total: progress(url, done, total)) if progress else None
    with interrupts.budget(probe_budget(window_s, settings.timeout), f"sampling {url}"):
        return probe_engine(url, window_s=window_s, model=source.model, engine=source.engine,
                            timeout=settings.timeout, progress=say, http=http)
