"""The import rules ARCHITECTURE.md states, read off every module's AST (imports inside functions
and under TYPE_CHECKING included: they are dependencies all the same).

1. A module imports only from its own layer or a lower one (LAYERS, lowest first).
2. No circle between the units of LAYERS (a package below advisor/, or a top-level module), nor
   between two modules.
3. No module imports a private name (`_x`) or a private module of another unit.
There is no list of exceptions: a module that needs one belongs in another layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Lowest first. A unit is `probes`, or the first name below `advisor.` (a package or a module).
LAYERS: list[tuple[str, set[str]]] = [
    ("foundation", {"advisor", "probes", "errors", "units", "escape", "ranges", "inputs", "settings",
                    "option_help", "net", "cores", "resources", "verdict", "readout_vocabulary",
                    "children", "child_env", "interrupts", "manifest", "engine_process"}),
    ("domain", {"knobs", "models", "workload", "cost", "fleet"}),
    ("diagnosis", {"diagnosis"}),
    ("load", {"loadgen"}),
    ("store", {"store"}),
    ("experiments", {"experiments", "capacity"}),
    ("reports", {"reports", "alerting"}),
    ("services", {"app"}),
    ("schedule", {"schedule"}),
    ("web", {"web"}),
    ("entry points", {"cli", "localstack"}),
]
RANK = {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "probes":
        return "probes"
    if parts[0] != "advisor":
        return None
    return parts[1] if len(parts) > 1 else "advisor"


def _imports(path: Path, root: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names imported from it) for every import in the file, relative ones resolved."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [a.name for a in node.names]
            if target == "advisor":  # `from advisor import units`: each name is a module of its own
                out += [(node.lineno, f"advisor.{n}", []) for n in names]
            else:
                out.append((node.lineno, target, names))
    return out


def _modules(root: Path = ROOT) -> list[Path]:
    return sorted(p for top in ("advisor", "probes") for p in (root / top).rglob("*.py"))


def _edges(root: Path = ROOT):
    for path in _modules(root):
        src = _unit(_module_name(path, root))
        for line, target, names in _imports(path, root):
            dst = _unit(target)
            if dst is not None:
                yield path.relative_to(root), line, src, dst, target, names


def _upward(root: Path = ROOT) -> list[str]:
    return [f"{p}:{line}: {src} ({LAYERS[RANK[src]][0]}) imports {target} ({LAYERS[RANK[dst]][0]})"
            for p, line, src, dst, target, _ in _edges(root) if RANK[dst] > RANK[src]]


def test_every_unit_has_a_layer():
    units = {_unit(_module_name(p)) for p in _modules()}
    assert units - set(RANK) == set(), "add each new package or module to a layer in LAYERS"


def test_no_module_imports_from_a_higher_layer():
    assert _upward() == []


def test_no_circle_between_units():
    graph: dict[str, set[str]] = {}
    for _, _, src, dst, _, _ in _edges():
        if src != dst:
            graph.setdefault(src, set()).add(dst)

    def reaches(start: str, goal: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == goal:
                    return path + [nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
        return None

    circles = {" -> ".join(c) for u in graph for c in [reaches(u, u)] if c}
    assert circles == set()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    paths = {_module_name(p, root): p for p in _modules(root)}
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for module, path in paths.items():
        for _, target, names in _imports(path, root):
            # `from advisor.knobs import argv` depends on the module argv, not on the package's
            # __init__ (which Python has already begun by then).
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in paths]
            for dst in subs or ([target] if target in paths else []):
                if dst != module:
                    graph[module].add(dst)
    return graph


def test_no_circle_between_modules():
    assert _cycles(_module_graph()) == []


def test_the_circle_reader_sees_a_circle(tmp_path):
    (tmp_path / "advisor").mkdir()
    (tmp_path / "advisor" / "cost.py").write_text("from advisor.experiments import stats\n")
    (tmp_path / "advisor" / "experiments").mkdir()
    (tmp_path / "advisor" / "experiments" / "stats.py").write_text("from . import result\n")
    (tmp_path / "advisor" / "experiments" / "result.py").write_text("from advisor.cost import x\n")
    assert _cycles(_module_graph(tmp_path)) == [
        ["advisor.cost", "advisor.experiments.result", "advisor.experiments.stats"]]


def test_no_private_name_of_another_unit():
    bad = []
    for p, line, src, dst, target, names in _edges():
        if src == dst:
            continue
        private_module = any(part.startswith("_") and part != "__init__" for part in target.split("."))
        private_names = [n for n in names if n.startswith("_")]
        if private_module or private_names:
            bad.append(f"{p}:{line}: {target} {private_names or ''}")
    assert bad == []


def test_the_layer_reader_sees_an_upward_import(tmp_path):
    """The rule can fail: a domain module that imports the command line (relatively) is caught."""
    (tmp_path / "advisor" / "knobs").mkdir(parents=True)
    (tmp_path / "advisor" / "knobs" / "argv.py").write_text("from ..cli.main import main\n")
    (tmp_path / "advisor" / "units.py").write_text("from advisor import errors\n")
    assert _upward(tmp_path) == ["advisor/knobs/argv.py:1: knobs (domain) imports advisor.cli.main (entry points)"]


# Inside advisor/experiments, the flow of an experiment, lowest first (its __init__ says what each
# holds). `result` and `stats` are read by all four; a launcher (arms/) never reaches the judgement
# or the run, and the judgement never starts or stops an arm.
EXPERIMENT_LAYERS: list[tuple[str, set[str]]] = [
    ("base", {"experiments", "result", "stats"}),
    ("design", {"design"}),
    ("arms", {"arms"}),
    ("judgement", {"judgement"}),
    ("run", {"run"}),
]
EXPERIMENT_RANK = {part: i for i, (_, parts) in enumerate(EXPERIMENT_LAYERS) for part in parts}


def _experiment_part(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["advisor", "experiments"]:
        return None
    return parts[2] if len(parts) > 2 else "experiments"


def _experiment_upward(root: Path = ROOT) -> list[str]:
    bad = []
    for path in _modules(root):
        src = _experiment_part(_module_name(path, root))
        if src is None:
            continue
        for line, target, names in _imports(path, root):
            dst = _experiment_part(target)
            if dst is None:
                continue
            if target == "advisor.experiments" and names:  # `from advisor.experiments import stats`
                dst = _experiment_part(f"advisor.experiments.{names[0]}")
            if EXPERIMENT_RANK[dst] > EXPERIMENT_RANK[src]:
                bad.append(f"{path.relative_to(root)}:{line}: experiments.{src} imports {target} "
                           f"(experiments.{dst} is above it)")
    return bad


def test_every_part_of_experiments_has_a_layer():
    parts = {_experiment_part(_module_name(p)) for p in _modules()} - {None}
    assert parts - set(EXPERIMENT_RANK) == set(), "add each new module or sub-package of experiments to EXPERIMENT_LAYERS"


def test_experiments_import_only_downward_in_their_flow():
    assert _experiment_upward() == []


def test_the_experiment_flow_reader_sees_a_launcher_that_judges(tmp_path):
    (tmp_path / "advisor" / "experiments" / "arms").mkdir(parents=True)
    (tmp_path / "advisor" / "experiments" / "arms" / "local.py").write_text(
        "from advisor.experiments.judgement import judge\nfrom advisor.experiments import result\n")
    assert _experiment_upward(tmp_path) == [
        "advisor/experiments/arms/local.py:1: experiments.arms imports advisor.experiments.judgement "
        "(experiments.judgement is above it)"]
