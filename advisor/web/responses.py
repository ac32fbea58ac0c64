"""JSON as the API sends it: `<`, `>` and `&` written as \\u escapes (as Go's encoder does), so that
a model name or label holding markup is inert even where a client sniffs a response as HTML; and
DEL and the C1 controls too (json.dumps escapes only C0 ones), so that a label holding a raw CSI
(\\x9b) cannot drive the terminal of someone who curls the API."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi.responses import JSONResponse

from advisor.escape import json_ready

_UNSAFE = re.compile("[<>&\x7f-\x9f]")


class SafeJSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        text = json.dumps(json_ready(content), ensure_ascii=False, allow_nan=False, default=str, separators=(",", ":"))
        return _UNSAFE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text).encode("utf-8")
