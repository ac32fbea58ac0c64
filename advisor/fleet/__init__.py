"""The fleet the advisor watches (advisor.yaml), and the jobs it runs for it: a diagnosis now or on
a schedule, the weekly report. The dashboard (advisor/web) and the CLI both come through here."""

from advisor.fleet.config import FleetConfig, FleetError, WatchedDeployment, load_config

__all__ = ["FleetConfig", "FleetError", "WatchedDeployment", "load_config"]
