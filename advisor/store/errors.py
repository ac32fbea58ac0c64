"""The store's one error type, and URL redaction so that no message ever carries a password."""

from __future__ import annotations

import re

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from advisor.errors import AdvisorError


class StoreError(AdvisorError):
    """A one-line, user-facing failure of the store: bad URL, unreachable database, failed write."""


# Fallback for strings that make_url cannot parse: hide whatever sits between "user:" and "@".
_USERINFO_PASSWORD = re.compile(r"(://[^:/@]*):[^@/]*@")


def redact(url: str) -> str:
    """The URL as it may be shown to a user: the password replaced by ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError, TypeError):
        return _USERINFO_PASSWORD.sub(r"\1:***@", url)


def one_line(exc: BaseException, url: str | None = None) -> str:
    """The first line of an exception's message, without the URL's password, if it slipped in."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    line = text[0].strip() if text else type(exc).__name__
    if url:
        try:
            password = make_url(url).password
        except (ArgumentError, ValueError, TypeError):
            password = None
        if password:
            line = line.replace(str(password), "***")
    return line
