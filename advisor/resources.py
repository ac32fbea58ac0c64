"""Where the data that ships with the package lives: rules/ and templates/.

In a wheel they sit inside the package (advisor/rules); in a source checkout, at the top level.
"""

from pathlib import Path
from typing import Any

import yaml

# libyaml where PyYAML was built with it: the rule files and catalogs are read on every command,
# and the pure-Python loader cost ~0.3 s of a diagnose (benchmarks/README.md).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_PKG = Path(__file__).parent


def data_dir(name: str) -> Path:
    inside = _PKG / name
    return inside if inside.is_dir() else _PKG.parent / name


def read_yaml(path: Path) -> Any:
    """A shipped (or user-given) YAML data file; raises yaml.YAMLError as safe_load does."""
    return yaml.load(path.read_text(), Loader=_LOADER)
