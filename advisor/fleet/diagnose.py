"""A diagnosis of one watched deployment, as the dashboard and the schedule run it: the same
snapshot, rules and SLOs as `advisor diagnose`, saved to the store."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.diagnosis.model import Diagnosis
from advisor.fleet.config import WatchedDeployment
from advisor.units import parse_duration


@dataclass(frozen=True)
class Saved:
    id: int
    diagnosis: Diagnosis


def diagnose(watched: WatchedDeployment, store) -> Saved:
    """Snapshot, rules, save. Raises AdvisorError (one line) when the target cannot be diagnosed."""
    from advisor import net
    from advisor.diagnosis import diagnose as run_rules
    from advisor.diagnosis import load_overrides, load_rules, load_slo, per_replica_signals
    from advisor.errors import AdvisorError
    from advisor.settings import get_settings
    from probes import probe_prometheus
    from probes.errors import BadExposition, CatalogError

    settings = get_settings()
    slo = load_slo(watched.slo or settings.slo_file)
    overrides_file = watched.rules_config or settings.rules_config
    rules = load_rules(overrides=load_overrides(overrides_file) if overrides_file else {})
    prom_url, http = net.target(watched.prom_url, "prom", f"{watched.name}.prom_url")
    try:
        snap = probe_prometheus(prom_url, window_s=parse_duration(watched.window), model=watched.model,
                                timeout=settings.timeout, per_replica=per_replica_signals(rules), http=http)
    except (BadExposition, CatalogError) as e:
        raise AdvisorError(str(e)) from None
    if not any(s.present for s in snap.signals.values()):
        raise AdvisorError(f"{snap.target} returned no data for any signal in the window: nothing to diagnose")
    from advisor.models import served_structure

    dep = None
    if watched.deployment:  # only where the model is: a spec that does not load costs the model facts only
        from advisor.experiments.deployment import load_deployment

        try:
            dep = load_deployment(watched.deployment)
        except AdvisorError:
            dep = None
    structure, why_not = served_structure(snap, dep)
    from advisor.workload.tokenize_cost import for_snapshot

    tokenization, tok_note = for_snapshot(snap, dep.baseline_url if dep else None, timeout=settings.timeout)
    result = run_rules(snap, rules, slo, model=structure, model_note=why_not, tokenization=tokenization,
                       tokenization_note=tok_note)
    from advisor.cost import diagnosis_cost, price_for

    price = price_for(None, (dep.cost if dep else None, f"deployment spec {watched.deployment}"),
                      (watched.cost, f"advisor.yaml ({watched.name})"))
    result.cost, result.cost_note = diagnosis_cost(snap, slo, price)
    return Saved(store.save_diagnosis(result, snap, deployment=watched.name), result)
