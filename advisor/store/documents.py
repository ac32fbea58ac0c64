"""How the store writes a document (a typed model or a free-form dict) into a JSON column, and the
filters its listings share: valid JSON on every backend, no URL's credentials, no NaN."""

from __future__ import annotations

import json
import math
from typing import Any, Protocol

from pydantic import BaseModel

from probes.http import redact_text


class Document(Protocol):
    """A typed model the store keeps whole (a pydantic model)."""

    def model_dump_json(self) -> str: ...


def document(model: Document) -> dict[str, Any]:
    # model_dump(mode="json") keeps NaN/Inf as floats, which PostgreSQL's JSON types reject;
    # pydantic's JSON serialiser writes them as null, so documents are valid JSON everywhere.
    # No URL's user info is ever stored, whatever put it there.
    return json.loads(redact_text(model.model_dump_json()))


def plain(value: Any) -> Any:
    """A free-form document as plain JSON: NaN/Inf as null, anything else json cannot write as its str()."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, BaseModel):
        return document(value)
    return str(value)


def finite(value: float | None) -> float | None:
    """A number for a Float column: None where it is NaN or infinite."""
    return value if value is not None and math.isfinite(value) else None


def equal(table: Any, **values: Any) -> list:
    """column == value for each value given (None: no filter)."""
    return [getattr(table, name) == value for name, value in values.items() if value is not None]
