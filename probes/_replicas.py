"""Per-replica grouping. Some metrics lack a label others have (vLLM's frontend counters carry no
`engine` label), which would show as a phantom replica: fold such partial groups into the one
replica they can only belong to, and drop them where several could claim them.

Linear in the number of groups: a key holds at most the dialect's few replica labels, so each
full key is indexed under every proper subset of its labels (2^labels, 8 for vLLM's three), and
a partial key finds its owners by one dict lookup instead of a scan of every other key."""

from __future__ import annotations

from itertools import combinations

from probes.snapshot import Replica, Signal

Key = tuple[tuple[str, str], ...]


def _proper_subsets(key: frozenset) -> list[frozenset]:
    items = sorted(key)
    return [frozenset(c) for n in range(1, len(items)) for c in combinations(items, n)]


def fold(groups: dict[Key, dict[str, Signal]]) -> list[Replica]:
    keys = [k for k in groups if k]
    sets = {k: frozenset(k) for k in keys}
    # Every label set that some key strictly contains: such a key is partial, not a replica.
    contained: set[frozenset] = set()
    for k in keys:
        contained.update(_proper_subsets(sets[k]))
    full = [k for k in keys if sets[k] not in contained]
    # The full keys that strictly contain each label set (two are enough to know it is ambiguous).
    owners: dict[frozenset, list[Key]] = {}
    for f in full:
        for sub in _proper_subsets(sets[f]):
            found = owners.setdefault(sub, [])
            if len(found) < 2:
                found.append(f)
    out = {k: dict(groups[k]) for k in full}
    for k in keys:
        if k in out:
            continue
        mine = owners.get(sets[k], [])
        if len(mine) == 1:
            for name, sig in groups[k].items():
                out[mine[0]].setdefault(name, sig)
    return [Replica(labels=dict(k), signals=v) for k, v in sorted(out.items())]
