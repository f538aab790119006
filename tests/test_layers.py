"""The package's layers, read from the code's imports (every import statement, function-level and
TYPE_CHECKING ones included): no import cycle, and no import that runs up or sideways between layers;
and the core names no plugin module even as a string (an ``importlib`` import the statements miss).

Bottom to top (docs/architecture.md, Layers):

    harness.core, harness.views      config types, data, design, metrics, signal types, errors; the query views
    harness.bounds | plugins         bounds; defenses/, attacks/, canaries/ (each only on core)
    harness.plugins, .configure      the plugins by name; a config from a preset, a defense, overrides
    harness.run                      run store, lock, runner, executors, signals computation
    harness.audit                    attack phase, headline selection, report
    leaderboard                      static site, submissions (on audit, run and core only)
    harness.tuning                   harness tune: rounds of training at a grid's settings (on run and below)
    harness (the package), .api      the Python API (report(html=True) renders the run's page)
    harness.cli                      the command line
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "defenses", "attacks", "canaries", "leaderboard")

#: (layer, its rank, the module prefixes it holds); siblings share a rank and may not import each other
LAYERS = [
    ("core", 0, ("harness.core", "harness.views")),
    ("bounds", 1, ("harness.bounds",)),
    ("defenses", 1, ("defenses",)),
    ("attacks", 1, ("attacks",)),
    ("canaries", 1, ("canaries",)),
    ("setup", 2, ("harness.plugins", "harness.defense_config")),
    ("run", 3, ("harness.run",)),
    ("audit", 4, ("harness.audit",)),
    ("leaderboard", 5, ("leaderboard",)),
    ("tuning", 5, ("harness.tuning",)),
    ("api", 6, ("harness.api", "harness")),
    ("cli", 7, ("harness.cli",)),
]


def modules() -> dict[str, Path]:
    """Every module of the packages: dotted name -> file (``pkg/__init__.py`` as ``pkg``)."""
    out = {}
    for pkg in PACKAGES:
        for f in (REPO / pkg).rglob("*.py"):
            parts = f.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules ``name`` imports anywhere in its source (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import harness.core.config.x` -> the deepest known module
                t = t.rpartition(".")[0]
            if t and t != name and t.split(".")[0] in PACKAGES:
                found.add(t)
    return found


def layer_of(module: str) -> tuple[str, int]:
    best = max((prefix for _, _, prefixes in LAYERS for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), key=len)
    return next((layer, rank) for layer, rank, prefixes in LAYERS if best in prefixes)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_every_module_has_a_layer(graph):
    """Only the facade and the API sit in the catch-all ``harness`` prefix: a new harness module
    must join a layer."""
    loose = sorted(m for m in graph if layer_of(m)[0] == "api" and m not in ("harness", "harness.api"))
    assert not loose, loose


def test_no_import_runs_up_or_sideways(graph):
    bad = []
    for module, targets in graph.items():
        layer, rank = layer_of(module)
        for t in targets:
            their, their_rank = layer_of(t)
            if their != layer and their_rank >= rank:
                bad.append(f"{module} ({layer}) imports {t} ({their})")
    assert not bad, "\n".join(sorted(bad))


def test_the_plugins_depend_on_core_only(graph):
    for module, targets in graph.items():
        layer, _ = layer_of(module)
        if layer in ("defenses", "attacks", "canaries"):
            assert {layer_of(t)[0] for t in targets} <= {layer, "core"}, (module, targets)


def test_only_the_cli_and_the_api_import_the_leaderboard(graph):
    """The API imports it once: harness.api.run_page (report(html=True), the run's page)."""
    users = {m for m, targets in graph.items() if any(layer_of(t)[0] == "leaderboard" for t in targets)}
    assert {layer_of(m)[0] for m in users} <= {"cli", "leaderboard", "api"}, sorted(users)
    assert {m for m in users if layer_of(m)[0] == "api"} <= {"harness.api"}


def test_no_import_cycles(graph):
    """Tarjan's strongly connected components: every one must be a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_the_checker_sees_a_violation():
    """The rules reject what they are meant to (a test of the test): an upward edge and a cycle."""
    assert layer_of("harness.core.config") == ("core", 0)
    assert layer_of("harness") == ("api", 6) and layer_of("harness.cli.evaluate") == ("cli", 7)
    assert layer_of("harness.plugins") == ("setup", 2)
    fake = {"harness.core.a": {"harness.run.b"}, "harness.run.b": {"harness.core.a"}}
    with pytest.raises(AssertionError):
        test_no_import_runs_up_or_sideways(fake)
    with pytest.raises(AssertionError):
        test_no_import_cycles(fake)


def test_the_core_names_no_plugin_module_not_even_for_importlib():
    """Import statements are not the only way up: a ``"defenses.hamp:HAMP"`` string that the core
    hands to importlib is a dependency too. No string constant of the core may name a module of the
    layers above, and importing every core module and building a config's parts loads none."""
    above = tuple(f"{p}." for p in ("defenses", "attacks", "canaries", "leaderboard")) + \
        ("harness.run", "harness.audit", "harness.cli", "harness.api", "harness.plugins", "harness.defense_config")
    named = []
    for f in sorted((REPO / "harness" / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(above):
                named.append(f"{f.name}:{node.lineno} {node.value!r}")
    assert not named, named
    import subprocess
    import sys

    code = ("import sys, pkgutil, importlib, harness.core as c\n"
            "for m in pkgutil.iter_modules(c.__path__): importlib.import_module('harness.core.' + m.name)\n"
            "from harness.core.config import apply_defense_preset, load_preset_mapping, validate_config\n"
            "validate_config(apply_defense_preset(load_preset_mapping('quick'), 'hamp'))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('defenses', 'attacks', 'canaries', 'leaderboard')"
            " or m.startswith(('harness.run', 'harness.audit', 'harness.cli', 'harness.api', 'harness.plugins'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]", out
