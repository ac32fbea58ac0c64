"""The advisor's store: diagnoses and load runs (and later experiments) in SQLite or PostgreSQL, schema by Alembic."""

from advisor.store.connect import open_store
from advisor.store.errors import StoreError
from advisor.store.repository import DiagnosisSummary, FindingRecord, LoadRun, LoadRunSummary, Store

__all__ = ["DiagnosisSummary", "FindingRecord", "LoadRun", "LoadRunSummary", "Store", "StoreError", "open_store"]
