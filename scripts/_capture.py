"""What both capture scripts share: progress lines, GETs with local paths scrubbed, and writing the
captures only once every check passed."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx


def log(msg: str) -> None:
    print(f"[capture] {msg}", file=sys.stderr, flush=True)


def get(url: str, scrub) -> str:
    r = httpx.get(url, timeout=10)
    r.raise_for_status()
    return scrub(r.text)


def save(out: Path, captures: dict[str, str]) -> int:
    for name, text in captures.items():
        (out / name).write_text(text)
        log(f"wrote {out / name}")
    return 0
