"""Reading and editing an engine's argv as a list: find a knob's flags (every spelling, "--f v" and
"--f=v" alike), take them out with their values, leave every other element where it was.

Nothing here builds or splits a command line: argv is a list and stays one. `flag_changes` shows
what one argv changes against another, flag by flag (the dashboard's plan of an experiment).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Occurrence:
    start: int          # index of the flag element
    end: int            # one past its value (start + 1 for a switch or --f=v)
    flag: str           # the spelling as the catalog lists it
    value: str | None   # the value it sets (None for a switch)
    key: str | None = None  # --flag.key form (vLLM JSON flags): the dotted key path


def normalize(token: str, underscores: bool) -> str:
    """The flag part of a token, with underscores as dashes where the engine's parser converts them."""
    name = token.split("=", 1)[0]
    if underscores and name.startswith("--"):
        head, dot, key = name[2:].partition(".")  # vLLM converts only up to the first dot
        name = "--" + head.replace("_", "-") + dot + key
    return name


def find(args: list[str], with_value: tuple[str, ...], switches: tuple[str, ...], *, underscores: bool,
         dotted: tuple[str, ...] = ()) -> list[Occurrence]:
    """Every occurrence of the given spellings, in order."""
    wv = {normalize(f, underscores): f for f in with_value}
    sw = {normalize(f, underscores): f for f in switches}
    dot = {normalize(f, underscores): f for f in dotted}
    out: list[Occurrence] = []
    i = 0
    while i < len(args):
        token = args[i]
        if not isinstance(token, str) or not token.startswith("-"):
            i += 1
            continue
        name = normalize(token, underscores)
        has_eq = "=" in token
        base, _, key = name.partition(".")
        if name in wv or (key and base in dot):
            flag = wv.get(name) or dot[base]
            if has_eq:
                out.append(Occurrence(i, i + 1, flag, token.split("=", 1)[1], key or None))
                i += 1
            else:
                value = args[i + 1] if i + 1 < len(args) else None
                out.append(Occurrence(i, min(i + 2, len(args)), flag, value, key or None))
                i += 2
            continue
        if name in sw:
            out.append(Occurrence(i, i + 1, sw[name], None))
        i += 1
    return out


def remove(args: list[str], found: list[Occurrence]) -> list[str]:
    drop = {j for o in found for j in range(o.start, o.end)}
    return [a for j, a in enumerate(args) if j not in drop]


def _by_flag(args: list[str]) -> dict[str, str | None]:
    """--flag value, --flag=value and bare --switch, by flag (a flag followed by a word that is not
    a flag takes it as its value); positional words under their index ("#0")."""
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("-") and "=" in word:
            name, _, value = word.partition("=")
            flags[name] = value
        elif word.startswith("-"):
            takes = i + 1 < len(args) and not args[i + 1].startswith("-")
            flags[word] = args[i + 1] if takes else None
            i += takes
        else:
            flags[f"#{i}"] = word
        i += 1
    return flags


def flag_changes(baseline_argv: list[str], candidate_argv: list[str]) -> list[str]:
    """What the candidate's command line changes, one line per flag: "--max-num-seqs 2 -> 8",
    "--enable-prefix-caching (added)", "--enforce-eager (removed)". Any flag, not only the catalog's:
    it shows a plan to the person who approves it."""
    a, b = _by_flag(baseline_argv), _by_flag(candidate_argv)

    def show(name: str, value: str | None) -> str:
        return name if value is None else f"{name} {value}"

    lines = []
    for name in dict.fromkeys([*a, *b]):
        if name in a and name in b and a[name] != b[name]:
            lines.append(f"{name} {a[name] if a[name] is not None else '(set)'} -> {b[name]}")
        elif name in b and name not in a:
            lines.append(f"{show(name, b[name])} (added)")
        elif name in a and name not in b:
            lines.append(f"{show(name, a[name])} (removed)")
    return lines
