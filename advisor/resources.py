"""Where the data that ships with the package lives: rules/ and templates/.

In a wheel they sit inside the package (advisor/rules); in a source checkout, at the top level.
"""

from pathlib import Path

_PKG = Path(__file__).parent


def data_dir(name: str) -> Path:
    inside = _PKG / name
    return inside if inside.is_dir() else _PKG.parent / name
