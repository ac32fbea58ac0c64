"""The ranges every input file's ports, timeouts, durations and rates are held to, as the command
line holds its options (`--port` 1..65535, ADVISOR_TIMEOUT above 0 and at most an hour): a value
outside is refused when the file is read, in one line naming the field (advisor/inputs.py), never
carried into a launch or a schedule. Imported by the input models only: nothing heavy here."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field

PORT_MIN, PORT_MAX = 1, 65535
# An engine that has not answered its health check in a day is not starting.
TIMEOUT_MAX_S = 86_400.0
# A run, a window or a report period longer than a year is a typo (or an overflow to come).
DURATION_MAX_S = 366 * 86_400.0
# Requests per second: no load generator or engine here comes near a million.
RATE_MAX = 1_000_000.0
# Blocks per arm: the planner's designs stay near 13; the sequential boundaries' Monte Carlo takes
# about 6 MB per block (400 MB at 64, measured), so 50 bounds it where a typo would exhaust memory.
BLOCKS_MAX = 50
# Unmeasured requests before an arm's first block: the warmup is built as one list.
WARMUP_MAX = 10_000
# Tokens in one prompt, answer or shared prefix: the longest context windows served are 10M tokens;
# a prompt sized past that would call the target's tokenizer until the deadline.
TOKENS_MAX = 10_000_000
# A stored id: SQLite's and PostgreSQL's BIGINT; beyond it a query overflows instead of finding nothing.
STORE_ID_MAX = 2**63 - 1

Port = Annotated[int, Field(ge=PORT_MIN, le=PORT_MAX)]
TimeoutS = Annotated[float, Field(gt=0, le=TIMEOUT_MAX_S)]
DurationS = Annotated[float, Field(gt=0, le=DURATION_MAX_S)]
Rate = Annotated[float, Field(gt=0, le=RATE_MAX)]


def duration_text(text: str, allow_zero: bool = False) -> float:
    """A duration as a file writes it (30s, 5m, 1h, 7d, or seconds), in seconds: above zero (or zero,
    where allowed) and at most DURATION_MAX_S; ValueError (the field's one-line message) otherwise."""
    from advisor.units import parse_duration

    return check_duration(parse_duration(text, allow_zero=allow_zero), text)


def check_duration(seconds: float, text: str | None = None) -> float:
    if seconds > DURATION_MAX_S:
        said = f"{text!r} is" if text is not None else f"{seconds:g} s is"
        raise ValueError(f"too long: {said} more than {DURATION_MAX_S / 86_400:g} days")
    return seconds


def url_port(url: str) -> str:
    """The URL unchanged, or ValueError when it names a port outside 1..65535. The message never
    repeats the URL: it may hold credentials."""
    try:
        port = urlsplit(url).port
    except ValueError as e:
        if "port" not in str(e).lower():
            raise ValueError("not a URL (expected e.g. http://host:9090)") from None
        raise ValueError(f"the URL's port must be a number from {PORT_MIN} to {PORT_MAX}") from None
    if port is not None and not PORT_MIN <= port <= PORT_MAX:
        raise ValueError(f"the URL's port must be a number from {PORT_MIN} to {PORT_MAX}, got {port}")
    return url
