"""A local serving stack for demos and tests: the CPU vLLM engine, Prometheus, and a traffic driver.

Kept apart from the CLI and web layers so tests and scripts can start real services without them.
"""

from advisor.localstack.engine import EngineError, LlamaServer, LocalEngine
from advisor.localstack.prometheus import LocalPrometheus, PrometheusError, backfill
from advisor.localstack.traffic import DriveResult, drive, drive_sync

__all__ = [
    "DriveResult",
    "EngineError",
    "LlamaServer",
    "LocalEngine",
    "LocalPrometheus",
    "PrometheusError",
    "backfill",
    "drive",
    "drive_sync",
]
