"""The fleet the advisor watches: advisor.yaml's deployments, their SLOs, experiment limits and
schedule. The services (advisor/app) run its jobs; advisor/schedule.py times them."""

from advisor.fleet.config import FleetConfig, FleetError, WatchedDeployment, load_config

__all__ = ["FleetConfig", "FleetError", "WatchedDeployment", "load_config"]
