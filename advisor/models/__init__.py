"""The served model: its structure from config.json (models/structure.py) and where to find it
(models/locate.py)."""

from advisor.models.locate import config_path, model_args
from advisor.models.served import kv_capacity_tokens, served_structure
from advisor.models.structure import ModelConfigError, ModelStructure, parse, read

__all__ = ["ModelConfigError", "ModelStructure", "config_path", "kv_capacity_tokens", "model_args", "parse", "read",
           "served_structure"]
