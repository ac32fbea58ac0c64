"""JSON as the API sends it: `<`, `>` and `&` written as \\u escapes (as Go's encoder does), so that
a model name or label holding markup is inert even where a client sniffs a response as HTML."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse

from advisor.escape import _finite


class SafeJSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        text = json.dumps(_finite(content), ensure_ascii=False, allow_nan=False, default=str, separators=(",", ":"))
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode("utf-8")
