"""An import inside a function only where the start-up time needs it (ARCHITECTURE.md, "Imports").

The modules `advisor --help` loads keep what their commands need inside the commands: that is what
holds `advisor diagnose --help` near 0.3 s. Anywhere else an import inside a function hides a
dependency, and is allowed only when it defers a heavy library that the module's own top-level
imports do not already load (HEAVY: measured with `python -X importtime`). Conditional imports (under
an `if` or a `try`) are not counted: they follow a path or an optional package. Read off the ASTs;
the start-up set from a real `advisor --help`."""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Each costs 50 ms or more to import on the 2-core CI host (python -X importtime, 2026-12-04):
# pandas 540, scipy 830, matplotlib 740, alembic 530, fastapi 340, sqlalchemy 290, uvicorn 150,
# httpx 140, jinja2 90, numpy 90, pynvml 70; transformers, tokenizers, torch and gguf are
# optional and heavy where installed; starlette is fastapi's; psycopg the PostgreSQL driver.
HEAVY = {"pandas", "scipy", "matplotlib", "alembic", "fastapi", "starlette", "sqlalchemy", "uvicorn", "httpx",
         "jinja2", "numpy", "pynvml", "transformers", "tokenizers", "torch", "gguf", "psycopg", "psycopg2",
         "selenium", "prometheus_api_client"}


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_name(p): p for top in ("advisor", "probes") for p in (ROOT / top).rglob("*.py")}


def _target(node: ast.ImportFrom | ast.Import, module: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    is_pkg = MODULES.get(module, Path()).name == "__init__.py"
    package = module if is_pkg else module.rpartition(".")[0]
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    # `from pkg import sub` imports the submodule where there is one
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    return [base, *subs]


def _top_level(tree: ast.Module):
    """Import statements that run when the module loads (not under TYPE_CHECKING, not in a def)."""
    stack = list(tree.body)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            yield n
        elif isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            stack.extend(n.orelse)
        elif isinstance(n, (ast.If, ast.Try, ast.With)):
            stack.extend([*n.body, *getattr(n, "orelse", []), *getattr(n, "finalbody", []),
                          *[x for h in getattr(n, "handlers", []) for x in h.body]])


@lru_cache(maxsize=None)
def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text())


_HEAVY: dict[str, frozenset[str]] = {}


def heavy(module: str, _visiting: frozenset[str] = frozenset()) -> frozenset[str]:
    """The HEAVY libraries loading `module` loads (its packages' __init__ and its top-level imports;
    a package's __init__ importing its own submodules is walked once)."""
    if module in _HEAVY:
        return _HEAVY[module]
    if module not in MODULES:
        return frozenset({module.split(".")[0]} & HEAVY)
    visiting = _visiting | {module}
    out: set[str] = set()
    parent = module.rpartition(".")[0]
    deps = [parent] if parent else []
    for node in _top_level(_tree(module)):
        deps += [t for t in _target(node, module) if t and t != module]
    for t in deps:
        if t.split(".")[0] not in ("advisor", "probes"):
            out |= {t.split(".")[0]} & HEAVY
        elif t not in visiting:
            out |= heavy(t, visiting)
    if not _visiting:  # only a complete walk is remembered
        _HEAVY[module] = frozenset(out)
    return frozenset(out)


def _in_functions(module: str):
    """(line, target) of each unconditional import directly in a function's body."""
    for fn in ast.walk(_tree(module)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in fn.body:
                if isinstance(n, (ast.Import, ast.ImportFrom)):
                    yield n.lineno, _target(n, module)


def start_up() -> set[str]:
    """What `advisor --help` and `advisor diagnose --help` load (the commands' own modules included)."""
    names: set[str] = set()
    for args in (["--help"], ["diagnose", "--help"]):
        r = subprocess.run([sys.executable, "-X", "importtime", "-m", "advisor.cli", *args], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        names |= {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if "|" in line}
    return {n for n in names if n in MODULES}


def lazy_without_reason(startup: set[str]) -> list[str]:
    bad = []
    for module in sorted(set(MODULES) - startup):
        have = heavy(module)
        for line, targets in _in_functions(module):
            deferred = set().union(*(heavy(t) for t in targets)) - have
            if not deferred:
                bad.append(f"{module}:{line} imports {targets[0]} inside a function, deferring no heavy library")
    return bad


def test_imports_inside_functions_defer_a_heavy_library_or_keep_the_start_up_short():
    startup = start_up()
    assert {"advisor.cli", "advisor.cli.diagnose"} <= startup and "advisor.store" not in startup, startup
    assert lazy_without_reason(startup) == []


def test_the_check_sees_a_needless_lazy_import(tmp_path, monkeypatch):
    """The control: a module off the start-up path importing a light module inside a function is named;
    deferring the store (sqlalchemy) is not."""
    src = ("def f():\n    from advisor import units\n    return units\n\n"
           "def g():\n    from advisor.store import Store\n    return Store\n")
    monkeypatch.setitem(MODULES, "advisor.zz_probe", tmp_path / "zz_probe.py")
    (tmp_path / "zz_probe.py").write_text(src)
    _tree.cache_clear()
    _HEAVY.clear()
    try:
        found = [b for b in lazy_without_reason(set(MODULES) - {"advisor.zz_probe"})]
    finally:
        _tree.cache_clear()
        _HEAVY.clear()
    assert found == ["advisor.zz_probe:2 imports advisor inside a function, deferring no heavy library"], found
