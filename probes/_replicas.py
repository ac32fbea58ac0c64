"""Per-replica grouping. Some metrics lack a label others have (vLLM's frontend counters carry no
`engine` label), which would show as a phantom replica: fold such partial groups into the one
replica they can only belong to, and drop them where several could claim them."""

from __future__ import annotations

from probes.snapshot import Replica, Signal

Key = tuple[tuple[str, str], ...]


def fold(groups: dict[Key, dict[str, Signal]]) -> list[Replica]:
    keys = [k for k in groups if k]
    full = [k for k in keys if not any(set(k) < set(o) for o in keys)]
    out = {k: dict(groups[k]) for k in full}
    for k in keys:
        if k in out:
            continue
        owners = [f for f in full if set(k) < set(f)]
        if len(owners) == 1:
            for name, sig in groups[k].items():
                out[owners[0]].setdefault(name, sig)
    return [Replica(labels=dict(k), signals=v) for k, v in sorted(out.items())]
