"""URL credentials shown as `***` in text that leaves the advisor (errors, logs, reports): the one
place that knows how, and light enough for every command's start-up (no HTTP stack)."""

from __future__ import annotations

import re

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)([^/?#]*)(.*)$", re.S)
# User info ends at the last "@" before the host; it never spans a quote or a space (JSON, prose).
_USERINFO_IN_TEXT = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s/?#\"'<>\\]*@")


def redact_url(url: object, hide_path: bool = False) -> str:
    """The URL with any user info shown as `***`; with hide_path, its path, query and fragment too
    (a webhook URL's path is its secret). Never raises."""
    s = url if isinstance(url, str) else str(url)
    m = _SCHEME.match(s)
    if not m:
        return redact_text(s)
    scheme, netloc, rest = m.groups()
    userinfo, at, hostport = netloc.rpartition("@")
    shown = f"{scheme}{'***@' if at else ''}{hostport}"
    if hide_path:
        return shown + ("/***" if rest.strip("/") else rest)
    return shown + redact_text(rest)


def redact_text(text: object) -> str:
    """Free text with the user info of every URL in it shown as `***`. Never raises."""
    s = text if isinstance(text, str) else str(text)
    return _USERINFO_IN_TEXT.sub(r"\1***@", s)
