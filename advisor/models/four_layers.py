"""What `advisor model inspect` says of any container, in the optimisation map's four layers: the
container, the numeric format of each tensor, the weight-encoding recipe, and the allocation
(which roles and which layers got which format, and the pattern's name), with the actual bits per
weight from byte sizes. The readers (inspect.py for safetensors, gguf_inspect.py for GGUF) fill it;
the pattern and the layer ranges are computed here once, so that both containers read alike."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from pydantic import BaseModel, Field

NOT_WEIGHTS = ("norm",)  # roles left out of the allocation pattern: 1-d tensors every recipe keeps in float


class RoleRow(BaseModel):
    role: str
    formats: dict[str, int] = Field(description="numeric format -> weights (modules) of this role in it")
    params: int = Field(description="logical weights")
    bytes: int
    bpw: float
    layers: dict[str, str] = Field(default={}, description="numeric format -> the layers of this role in it, "
                                                           "as ranges ('0-3, 6'); empty for tensors outside layers")


class Inspection(BaseModel):
    path: str
    container: str
    files: int
    metadata: dict[str, str] = {}
    quantization_config: dict | None = None
    recipe: str
    formats: dict[str, int] = Field(description="numeric format -> logical weights in it")
    roles: list[RoleRow]
    pattern: str
    params: int
    bytes: int
    bpw: float = Field(description="actual bits per weight: every tensor's bytes over the logical weights")
    name_bpw: float | None = Field(default=None, description="what the name suggests, when it says")
    calibration: str

    def text(self) -> str:
        lines = [f"{self.path}: {self.container}, {self.files} file{'s' if self.files != 1 else ''}, "
                 f"{self.params:,} weights in {self.bytes / 2**20:,.1f} MiB",
                 f"recipe: {self.recipe}", f"allocation: {self.pattern}",
                 f"bits per weight: {self.bpw:.3f} (from byte sizes)" +
                 (f"; the name suggests {self.name_bpw:g}" if self.name_bpw is not None and
                  abs(self.name_bpw - self.bpw) > 0.05 else ""),
                 f"calibration: {self.calibration}", "", f"{'role':<11} {'weights':>14} {'bpw':>7}  formats (layers)"]
        for r in self.roles:
            formats = ", ".join(f"{f} x{n}" + (f" ({r.layers[f]})" if r.layers.get(f) and len(r.formats) > 1 else "")
                                for f, n in sorted(r.formats.items(), key=lambda kv: -kv[1]))
            lines.append(f"{r.role:<11} {r.params:>14,} {r.bpw:>7.3f}  {formats}")
        return "\n".join(lines)


class ModelLayers(BaseModel):
    """An Inspection in one line per layer, without its role table: what an experiment's report
    shows of each arm's model."""

    path: str
    container: str
    formats: dict[str, float] = Field(description="numeric format -> share of the logical weights")
    recipe: str
    pattern: str
    bpw: float
    name_bpw: float | None = None
    calibration: str
    bytes: int

    @classmethod
    def of(cls, i: Inspection) -> ModelLayers:
        total = sum(i.formats.values()) or 1
        shares = {f: round(n / total, 4) for f, n in sorted(i.formats.items(), key=lambda kv: -kv[1])}
        return cls(path=i.path, container=i.container, formats=shares, recipe=i.recipe, pattern=i.pattern,
                   bpw=i.bpw, name_bpw=i.name_bpw, calibration=i.calibration, bytes=i.bytes)

    def line(self) -> str:
        claim = (f", the name says {self.name_bpw:g}" if self.name_bpw is not None
                 and abs(self.name_bpw - self.bpw) > 0.05 else "")
        return (f"{self.container}; {self.recipe}; {self.pattern}; {self.bpw:.3f} bits per weight{claim}; "
                f"calibration: {self.calibration}; {self.bytes / 2**20:,.1f} MiB")


class RoleTally:
    """Accumulates modules into role rows: formats, layers, logical weights and bytes."""

    def __init__(self) -> None:
        self._roles: dict[str, dict] = defaultdict(lambda: {"formats": Counter(), "params": 0, "bytes": 0,
                                                            "layers": defaultdict(set)})
        self.formats: Counter = Counter()

    def add(self, role: str, fmt: str, params: int, nbytes: int, layer: int | None) -> None:
        r = self._roles[role]
        r["formats"][fmt] += 1
        r["params"] += params
        r["bytes"] += nbytes
        if layer is not None:
            r["layers"][fmt].add(layer)
        self.formats[fmt] += params

    def rows(self) -> list[RoleRow]:
        return [RoleRow(role=name, formats=dict(r["formats"]), params=r["params"], bytes=r["bytes"],
                        bpw=8 * r["bytes"] / r["params"] if r["params"] else 0.0,
                        layers={f: ranges(sorted(ls)) for f, ls in r["layers"].items()})
                for name, r in sorted(self._roles.items(), key=lambda kv: -kv[1]["params"])]


def ranges(xs: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    runs: list[list[int]] = []
    for x in xs:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def pattern(rows: list[RoleRow]) -> str:
    """"uniform BF16", or "mostly Q4_K; Q6_K on attn_v, ffn_down" (the Unsloth Dynamic style): the
    format of the most modules (a count, so that a large vocabulary's embeddings do not outweigh the
    layers of a small model), then where the others are."""
    modules: Counter = Counter()
    for r in rows:
        if r.role in NOT_WEIGHTS:
            continue
        for fmt, n in r.formats.items():
            modules[fmt] += n
    if not modules:
        return "no weights"
    main = modules.most_common(1)[0][0]
    others = defaultdict(list)
    for r in rows:
        if r.role in NOT_WEIGHTS:
            continue
        for fmt in r.formats:
            if fmt != main:
                where = r.role
                if r.layers.get(fmt) and len(r.formats) > 1:
                    layers = r.layers[fmt]
                    where += f" (layer{'s' if ',' in layers or '-' in layers else ''} {layers})"
                others[fmt].append(where)
    if not others:
        return f"uniform {main}" + (" (norms kept apart)" if any(r.role in NOT_WEIGHTS for r in rows) else "")
    return f"mostly {main}; " + "; ".join(f"{fmt} on {', '.join(roles)}" for fmt, roles in others.items())


def name_bpw(name: str) -> float | None:
    """The bits per weight a file or folder name claims: '4bit', 'w4a16', 'int8', 'fp8', 'nvfp4',
    GGUF's 'Q4_K_M', 'IQ2_XXS', 'UD-Q4_K_XL', 'BF16'."""
    m = re.search(r"(?i)(?:(\d+)[-_ ]?bit|w(\d+)a\d+|\bint(\d+)\b|\bfp(\d+)\b|\bnvfp(4)\b|\bmxfp(4)\b|"
                  r"(?<![a-z0-9])i?q(\d)_(?:\d|k|[xsml]|nl)|(?<![a-z0-9])b?f(16|32)(?![a-z0-9]))", name)
    if m:
        return float(next(g for g in m.groups() if g))
    return None
