"""The advisor's store: diagnoses (and later experiments) in SQLite or PostgreSQL, schema by Alembic."""

from advisor.store.connect import open_store
from advisor.store.errors import StoreError
from advisor.store.repository import DiagnosisSummary, FindingRecord, Store

__all__ = ["DiagnosisSummary", "FindingRecord", "Store", "StoreError", "open_store"]
