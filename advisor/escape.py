"""Text from a target, a file or the user, made safe for the medium it lands in.

Metric labels, model names, error bodies and rule text are untrusted: a `[/x]` would be read as
Rich markup (and crash the print), an ESC sequence from /metrics would drive the terminal, and HTML
from /version would render in a markdown report. Every renderer passes such text through one of
these functions; none of them raises, whatever it is given.
"""

from __future__ import annotations

import logging
import re

from rich.markup import escape as _rich_escape

# C0 and C1 controls and DEL, except tab and newline; ESC starts every terminal sequence.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Inline markdown that acts anywhere in a line: code, emphasis, links and images, table cells,
# strikethrough; `_` only where it can open or close emphasis (not inside a word like tpot_p95).
_MD_INLINE = re.compile(r"([\\`*\[\]|~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")
# What starts a block when it opens a line: a quote, a heading, a list item, a rule or a setext
# underline (`1.0` or `-3` is no list item, and is left alone).
_MD_BLOCK = re.compile(r"^([ \t]*)(>|#{1,6}(?=[ \t]|$)|[+*-](?=[ \t]|$)|[=-]+[ \t]*$)", re.M)
_MD_ORDERED = re.compile(r"^([ \t]*\d{1,9})([.)])(?=[ \t]|$)", re.M)
# An entity reference (&lt;) would be decoded: its `&` is escaped; a lone `&` is text already.
_MD_ENTITY = re.compile(r"&(?=#?[0-9A-Za-z]+;)")
# A `<` that could open an HTML tag, comment or autolink (`<= 2` cannot, and stays readable).
_MD_TAG = re.compile(r"<(?=[A-Za-z/!?])")
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
    """For a markdown report: shown as the text it is, never as markdown or HTML. A `<` that could
    open a tag or an autolink becomes `&lt;`, entity references are escaped, inline syntax is backslashed, and
    a line that would open a block (`#`, `>`, `-`, `+`, `=`, `1.`) has that marker backslashed.
    Characters that mean nothing where they stand (`(`, `!`, `'`, an `_` inside a word) are left as
    they are, so the raw report stays readable."""
    s = _MD_INLINE.sub(r"\\\1", plain(text))
    s = _MD_ENTITY.sub("&amp;", s)
    s = _MD_TAG.sub("&lt;", s)
    s = _MD_BLOCK.sub(r"\1\\\2", s)
    return _MD_ORDERED.sub(r"\1\\\2", s)


def html(text: object) -> str:
    return "".join(_HTML.get(c, c) for c in plain(text))


def json_text(obj: object, indent: int | None = 2) -> str:
    """Standard JSON for stdout or a file: NaN and infinities become null (no `NaN`/`Infinity`
    tokens, which strict parsers reject), and every non-ASCII character, C1 controls included, is
    written as a \\u escape, so no control sequence reaches a terminal that shows it."""
    import json

    return json.dumps(json_ready(obj), indent=indent, ensure_ascii=True, allow_nan=False, default=str)


def json_ready(obj: object) -> object:
    """`obj` with NaN and infinities as None and every key a string: what strict JSON can hold."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k if isinstance(k, str) else str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    return obj


class PlainFormatter(logging.Formatter):
    """Log records with every control character shown, never executed (a message may quote a target)."""

    def format(self, record: logging.LogRecord) -> str:
        return plain(super().format(record))
