"""The advisor's input files, read in one place: SLOs, rule overrides, deployments, workloads (YAML)
and the text checks that traces share.

A file is read as bytes and refused unless it is UTF-8 text (a NUL or a control character means a
binary file); YAML is parsed with safe_load semantics (libyaml where PyYAML has it), duplicate keys
and self-referring anchors refused; the data is validated into a typed pydantic model in strict
mode (no "false" string for a bool, no bool for a number, no NaN or infinity where a number must be
finite), unknown keys refused with the nearest known one. Every failure is one line:

    <file>: field <a.b.c>: <problem> (line N)

raised as the caller's own error class (SLOError, RuleError, DeploymentError, WorkloadError), all of
them AdvisorError subclasses.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
import types
import typing
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, RootModel, ValidationError

from advisor.errors import AdvisorError
from advisor.units import MAX_LOAD_REQUESTS

# libyaml where PyYAML was built with it (advisor/resources.py reads the shipped files the same way).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# An input file larger than this is not a configuration file (traces are read line by line instead).
MAX_CONFIG_BYTES = 16 * 1024 * 1024
# Aliases can make a small file expand into a huge value (a "billion laughs"); nothing we read needs more.
MAX_VALUES = 200_000
_CHUNK = 1 << 20
# What YAML 1.1 calls printable, less NEL: the same set for every text input, so that a binary
# file is refused before any parser sees it. Tab, line feed and carriage return are text.
_NOT_TEXT = re.compile("[^\x09\x0a\x0d\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_MERGE_TAG = "tag:yaml.org,2002:merge"

M = TypeVar("M", bound=BaseModel)
ErrorClass = type[AdvisorError]


class InputError(AdvisorError, ValueError):
    """An input file is unreadable, not text, not valid YAML, or fails validation."""


class InputModel(BaseModel):
    """Base of every model a user's file is validated into: unknown keys and non-finite numbers
    refused. Files are validated in strict mode (`validate`); code may build these models laxly."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# ---------------------------------------------------------------------------------------------
# bytes -> text


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit // 1024} KiB"


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"


def open_input(path: Path, error: ErrorClass = InputError, limit: int | None = MAX_CONFIG_BYTES,
               where: object = None) -> BinaryIO:
    """A user's input file, opened for reading: the one way every input file is opened.

    Opened without blocking (a FIFO's open would wait for a writer, its read for data: no deadline
    covers either), then refused unless fstat says a regular file, and refused when it is already
    larger than `limit`. where: how the file is named in messages (default: its path)."""
    where = path if where is None else where
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except IsADirectoryError:
        raise error(f"{where}: is a directory, not a file") from None
    except OSError as e:
        # A socket cannot be opened at all (ENXIO): say what it is rather than "no such device".
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            raise error(f"{where}: not a regular file ({_kind_of(mode)})") from None
        raise error(f"{where}: cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{where}: is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{where}: not a regular file ({_kind_of(st.st_mode)})")
        if limit is not None and st.st_size > limit:
            raise error(f"{where}: too large for an input file (more than {_size(limit)})")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path, error: ErrorClass = InputError, limit: int | None = MAX_CONFIG_BYTES) -> bytes:
    """The file's bytes; not a regular file (open_input), a NUL anywhere (checked as it is read) or
    more than `limit` bytes (checked again as it is read: the file may grow) is refused."""
    chunks, size = [], 0
    with open_input(path, error, limit) as f:
        try:
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                nul = chunk.find(b"\0")
                if nul >= 0:
                    raise error(f"{path}: not a text file (byte 0x00 at offset {size + nul})")
                size += len(chunk)
                if limit is not None and size > limit:
                    raise error(f"{path}: too large for an input file (more than {_size(limit)})")
                chunks.append(chunk)
        except OSError as e:
            raise error(f"{path}: cannot read: {e.strerror or e}") from None
    return b"".join(chunks)


def decode(data: bytes, where: object, error: ErrorClass = InputError) -> str:
    """UTF-8 text (a leading byte-order mark dropped), or one line naming the first bad byte."""
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text (byte 0x{data[bom + e.start]:02x} at offset {bom + e.start})") from None
    bad = _NOT_TEXT.search(text)
    if bad:
        offset = bom + len(text[: bad.start()].encode("utf-8"))
        raise error(f"{where}: not a text file (character U+{ord(bad.group()):04X} at offset {offset})")
    return text


def read_text(path: Path, error: ErrorClass = InputError, limit: int | None = MAX_CONFIG_BYTES) -> str:
    return decode(read_bytes(path, error, limit), path, error)


MAX_LINE_BYTES = 1 << 20
# A trace is one request a line (and a header): one load replays at most MAX_LOAD_REQUESTS of them,
# so a longer one is refused as it is read, never held.
MAX_TRACE_LINES = MAX_LOAD_REQUESTS + 1


def text_lines(path: Path, error: ErrorClass = InputError, max_line: int = MAX_LINE_BYTES,
               max_lines: int = MAX_TRACE_LINES) -> Iterator[tuple[int, str]]:
    """(line number, text with its line ending) of a line-oriented file (a trace), read as it goes:
    the same checks as `decode`, each naming the byte offset and the line; at most max_lines lines."""
    offset = 0
    f = open_input(path, error, limit=None)  # a trace is read as it goes: its length is bounded by max_lines
    with f:
        # A binary file usually shows a NUL early: say "not a text file" before any decoding complaint.
        try:
            head = f.peek(8192)[:8192]  # does not advance, so a pipe loses nothing
        except OSError:
            head = b""
        nul = head.find(b"\0")
        if nul >= 0:
            raise error(f"{path}: not a text file (byte 0x00 at offset {nul})")
        n = 0
        while True:
            try:
                raw = f.readline(max_line + 1)
            except OSError as e:
                raise error(f"{path}: cannot read: {e.strerror or e}") from None
            if not raw:
                return
            n += 1
            if n > max_lines:
                raise error(f"{path}: more than {max_lines:,} lines; a trace replays at most "
                            f"{MAX_LOAD_REQUESTS:,} requests, one a line (the ceiling on one load)")
            nul = raw.find(b"\0")
            if nul >= 0:
                raise error(f"{path}: not a text file (byte 0x00 at offset {offset + nul}, line {n})")
            if len(raw) > max_line:
                raise error(f"{path} line {n}: longer than {max_line // 1024} KiB; not a trace")
            skip = 3 if n == 1 and raw.startswith(b"\xef\xbb\xbf") else 0
            try:
                line = raw[skip:].decode("utf-8")
            except UnicodeDecodeError as e:
                at = skip + e.start
                raise error(f"{path}: not UTF-8 text (byte 0x{raw[at]:02x} at offset {offset + at}, line {n})") from None
            bad = _NOT_TEXT.search(line)
            if bad:
                at = offset + skip + len(line[: bad.start()].encode("utf-8"))
                raise error(f"{path}: not a text file (character U+{ord(bad.group()):04X} at offset {at}, line {n})")
            offset += len(raw)
            yield n, line


# ---------------------------------------------------------------------------------------------
# text -> data


class Parsed(typing.NamedTuple):
    data: Any
    node: yaml.Node | None  # the composed document, for line numbers


def parse_yaml(text: str, where: object, error: ErrorClass = InputError) -> Parsed:
    """safe_load, keeping the composed node; duplicate keys, anchor cycles and alias bombs refused."""
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return Parsed(None, None)
        _no_duplicate_keys(node, where, error)
        data = loader.construct_document(node)
    except AdvisorError:
        raise
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise error(f"{where}: not valid YAML: {e.problem or e.context}{at}") from None
    except yaml.YAMLError as e:
        raise error(f"{where}: not valid YAML: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise error(f"{where}: not valid YAML: nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as e:
        # PyYAML's constructors raise these for values that look like a type but are not one
        # (a timestamp 2024-13-01, say).
        raise error(f"{where}: not valid YAML: {e}") from None
    finally:
        loader.dispose()
    _bounded(data, where, error)
    return Parsed(data, node)


def _no_duplicate_keys(root: yaml.Node, where: object, error: ErrorClass) -> None:
    stack: list[tuple[yaml.Node, tuple]] = [(root, ())]
    seen_nodes: set[int] = set()
    while stack:
        node, loc = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for k, v in node.value:
                if k.tag == _MERGE_TAG:
                    continue
                if isinstance(k, yaml.ScalarNode):
                    if k.value in first:
                        raise error(f"{where}: field {_dotted(loc + (k.value,))}: duplicate key "
                                    f"(line {k.start_mark.line + 1}, first at line {first[k.value]})")
                    first[k.value] = k.start_mark.line + 1
                stack.append((v, loc + ((k.value if isinstance(k, yaml.ScalarNode) else "?"),)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, loc + (i,)) for i, v in enumerate(node.value))


def _bounded(data: Any, where: object, error: ErrorClass) -> None:
    """Refuse a value that refers to itself or expands (through aliases) to too many values."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(x: Any) -> int:
        if not isinstance(x, (dict, list)):
            return 1
        key = id(x)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise error(f"{where}: not valid YAML: an anchor refers to itself")
        open_.add(key)
        items = list(x.keys()) + list(x.values()) if isinstance(x, dict) else x
        total = 1
        for item in items:
            total += size(item)
            if total > MAX_VALUES:
                raise error(f"{where}: too large: aliases expand it to more than {MAX_VALUES:,} values")
        open_.discard(key)
        sizes[key] = total
        return total

    try:
        size(data)
    except RecursionError:
        raise error(f"{where}: not valid YAML: nested too deeply") from None


def load_yaml(path: Path, error: ErrorClass = InputError) -> Parsed:
    return parse_yaml(read_text(path, error), path, error)


# ---------------------------------------------------------------------------------------------
# data -> model


def validate(model: type[M], data: Any, where: object, error: ErrorClass = InputError,
             node: yaml.Node | None = None, prefix: tuple = ()) -> M:
    """model.model_validate(data, strict=True), its first error as one line. `prefix` is the
    location of `data` inside the file (for a section of a larger document)."""
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as e:
        raise error(describe(e, model, where, node, prefix)) from None
    except RecursionError:
        raise error(f"{where}: nested too deeply") from None


def describe(e: ValidationError, model: type[BaseModel], where: object, node: yaml.Node | None = None,
             prefix: tuple = ()) -> str:
    errors = e.errors(include_url=False)
    # An unknown key first: a typo'd key also makes its real one "missing", and the typo is the news.
    err = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
    loc = tuple(p for p in err["loc"] if not _is_tag(p))
    in_key = "[key]" in err["loc"]
    if err["type"] == "extra_forbidden":
        problem = unknown_key(str(loc[-1]), known_keys(model, loc[:-1]))
    else:
        problem = _message(err)
        if in_key:
            problem = f"the key {loc[-1]!r}: {problem}"
            loc = loc[:-1]
    return field_error(where, prefix + loc, problem, node)


def field_error(where: object, loc: tuple, problem: str, node: yaml.Node | None = None) -> str:
    """'<file>: field a.b.c: problem (line N)'; the top level is named as such."""
    line = line_of(node, loc) if loc else None
    return f"{where}: field {_dotted(loc) or '(top level)'}: {problem}{f' (line {line})' if line else ''}"


def suggest(key: object, known) -> str:
    """' (did you mean 'x'?)' for the nearest known name, else ' (known: a, b, ...)'."""
    known = [str(k) for k in known]
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    listed = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
    return f" (known: {listed or 'none'})"


def unknown_key(key: str, known: list[str] | None, what: str = "key") -> str:
    """'unknown key (did you mean 'x'?)': the field path before it names the key itself."""
    return f"unknown {what}{suggest(key, known)}" if known else f"unknown {what}"


def known_keys(model: type[BaseModel], loc: tuple) -> list[str] | None:
    """The field names of the model found at loc inside `model`, if it is one."""
    cur: Any = model
    for part in loc:
        cur = _unwrap(cur)
        if isinstance(cur, type) and issubclass(cur, RootModel):
            cur = _unwrap(cur.model_fields["root"].annotation)
        if isinstance(cur, type) and issubclass(cur, BaseModel) and isinstance(part, str):
            field = cur.model_fields.get(part)
            if field is None:
                return None
            cur = field.annotation
            continue
        origin, args = typing.get_origin(cur), typing.get_args(cur)
        if origin in (list, tuple, set, frozenset) and isinstance(part, int) and args:
            cur = args[0] if origin is not tuple or len(args) == 2 and args[1] is Ellipsis else (
                args[part] if part < len(args) else None)
        elif origin is dict and len(args) == 2:
            cur = args[1]
        else:
            return None
    cur = _unwrap(cur)
    if isinstance(cur, type) and issubclass(cur, BaseModel) and not issubclass(cur, RootModel):
        return list(cur.model_fields)
    return None


def _unwrap(t: Any) -> Any:
    """Optional[X] / X | None / Annotated[X, ...] -> X (the first model among a union's members)."""
    while True:
        origin = typing.get_origin(t)
        if origin is typing.Annotated:
            t = typing.get_args(t)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(t) if a is not type(None)]
            models = [a for a in members if isinstance(a, type) and issubclass(a, BaseModel)]
            t = (models or members or [None])[0]
        else:
            return t


_TAG = re.compile(r"^[a-z][a-z-]*\[|^\[key\]$")


def _is_tag(part: object) -> bool:
    # pydantic puts validator and type tags into error locations: function-after[...], tuple[...].
    return isinstance(part, str) and bool(_TAG.match(part))


def _message(err: dict) -> str:
    msg = str(err["msg"])
    for lead in ("Value error, ", "Assertion failed, "):
        if msg.startswith(lead):
            msg = msg[len(lead):]
    if err["type"] in ("missing", "value_error", "assertion_error"):
        return msg
    value = err.get("input")
    if isinstance(value, (str, int, float, bool)) or value is None:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        hint = "; quote it if you mean text" if isinstance(value, (bool, int, float)) and err["type"].startswith("string") else ""
        return f"{msg} (got {shown}{hint})"
    return msg


_PLAIN_KEY = re.compile(r"[\w-]+")


def _dotted(loc: tuple) -> str:
    # A key with spaces, dots or control characters is shown quoted, so the line stays one line.
    return ".".join(str(p) if isinstance(p, int) or _PLAIN_KEY.fullmatch(str(p)) else repr(str(p)) for p in loc)


def line_of(node: yaml.Node | None, loc: tuple) -> int | None:
    """The 1-based line of the YAML node at loc (the deepest one that exists); a mapping entry is
    placed on its key's line."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(key)), None)
            if pair is None:
                break
            node, line = pair[1], pair[0].start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line


# ---------------------------------------------------------------------------------------------
# the whole way


def load_model(path: Path, model: type[M], error: ErrorClass = InputError, *, empty: Any = ...,
               prepare: Callable[[dict], dict] | None = None,
               check: Callable[[M], tuple[tuple, str] | None] | None = None) -> M:
    """Read, parse and validate a YAML file whose top level is a mapping.

    empty: what an empty file means (default: an error); prepare: adjusts the mapping before
    validation (expanding variables, say); check: (field, problem) of a valid model that is still
    refused (a ceiling), said like a validation error, with the field's line."""
    data, node = load_yaml(path, error)
    if data is None:
        if empty is ...:
            raise error(f"{path}: the file is empty; expected a mapping at the top level")
        data = empty
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping at the top level, got {_kind(data)}")
    if prepare is not None:
        data = prepare(data)
    got = validate(model, data, path, error, node)
    found = check(got) if check is not None else None
    if found is not None:
        raise error(field_error(path, found[0], found[1], node))
    return got


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "text"
    return "a " + type(value).__name__
