"""Text from a target, a file or the user, made safe for the medium it lands in.

Metric labels, model names, error bodies and rule text are untrusted: a `[/x]` would be read as
Rich markup (and crash the print), an ESC sequence from /metrics would drive the terminal, and HTML
from /version would render in a markdown report. Every renderer passes such text through one of
these functions; none of them raises, whatever it is given.
"""

from __future__ import annotations

import re

from rich.markup import escape as _rich_escape

# C0 and C1 controls and DEL, except tab and newline; ESC starts every terminal sequence.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}


def plain(text: object) -> str:
    """The text with every control character shown as a visible escape (\\x1b), never executed."""
    s = text if isinstance(text, str) else str(text)
    return _CONTROLS.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), s)


def one_line(text: object, limit: int = 300) -> str:
    """For an error line: controls shown, line breaks folded, length bounded."""
    s = " ".join(plain(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def markup(text: object) -> str:
    """For a string interpolated into Rich markup: shown literally, brackets included."""
    return _rich_escape(plain(text))


def markdown(text: object) -> str:
    """For a markdown report: HTML entities escaped and markdown syntax made literal."""
    return html(_MD_SPECIAL.sub(r"\\\1", plain(text)))


def html(text: object) -> str:
    return "".join(_HTML.get(c, c) for c in plain(text))
