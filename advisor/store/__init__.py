"""The advisor's store: diagnoses, load runs, experiments, capacity runs and job runs in SQLite or PostgreSQL, schema by Alembic."""

from advisor.store.capacity import CapacitySummary
from advisor.store.connect import open_store
from advisor.store.errors import StoreError
from advisor.store.experiments import ExperimentSummary, StoredExperiment
from advisor.store.jobs import JobRun
from advisor.store.repository import DiagnosisSummary, FindingRecord, LoadRun, LoadRunSummary, Store

__all__ = ["CapacitySummary", "DiagnosisSummary", "ExperimentSummary", "FindingRecord", "JobRun", "LoadRun", "LoadRunSummary", "Store", "StoreError",
           "StoredExperiment", "open_store"]
