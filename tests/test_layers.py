"""The package's layers, read from its own imports (every import statement, at module level or
inside a function): data flows one way, so no module imports another that imports it back, and
the analysis layer names none of the layers above it nor IPython or matplotlib."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "npumagic"
# what analysis may never import: the layers that use it, and the shells' libraries
ABOVE_ANALYSIS = ("npumagic.render", "npumagic.session", "npumagic.named_runs", "npumagic.recorder",
                  "npumagic.run_files", "npumagic.history", "npumagic.writers", "npumagic.capture", "npumagic.magics",
                  "npumagic.cli", "npumagic.mcp_server", "npumagic.on_demand", "npumagic.raw_parse",
                  "npumagic.demo", "npumagic.ab_run", "npumagic.records", "IPython", "matplotlib", "ipywidgets",
                  "anywidget")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "bootstrap" not in p.parts}


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The modules ``path`` imports, resolved: ``from . import x`` is module ``x`` where x is one."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {m for m in imports(path, known) if m in known and m != name} for name, path in known.items()}


def test_the_analysis_layer_imports_nothing_above_it():
    known = modules()
    offending = sorted(f"{name} imports {m}" for name, path in known.items() if name.startswith("npumagic.analysis")
                       for m in imports(path, known) if m.startswith(ABOVE_ANALYSIS))
    assert offending == []


def test_no_module_imports_one_that_imports_it_back(graph):
    # Tarjan's strongly connected components: any component of two or more modules is a circle
    index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert circles == []


SHELLS = ("npumagic.magics", "npumagic.cli", "npumagic.mcp_server")


def test_the_shells_reach_the_history_only_through_the_session(graph):
    # errors live in errors.py and DB_NAME in names.py: a shell naming the store itself would
    # bypass the session's naming and locking
    assert sorted(f"{s} imports {m}" for s in graph if s.startswith(SHELLS) for m in graph[s]
                  if m == "npumagic.history") == []


def _dynamic_imports(path: Path) -> list[str]:
    """The first argument of each ``importlib.import_module`` call, as source text."""
    tree = ast.parse(path.read_text(), str(path))
    return [ast.unparse(node.args[0]) for node in ast.walk(tree) if isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module") and node.args]


def test_the_one_import_by_name_upwards_is_the_renderer_registry():
    """presentation.py (imported by the analysis layer's data classes) loads the renderer by
    name, as pandas its plotting backend: that edge points at the registry and nowhere else,
    and the registry imports presentation (it registers; it is not called by analysis)."""
    import npumagic.presentation as presentation

    known = modules()
    assert _dynamic_imports(known["npumagic.presentation"]) == ["RENDERER"]
    assert presentation.RENDERER == "npumagic.render.display" and presentation.RENDERER in known
    assert "npumagic.presentation" in imports(known[presentation.RENDERER], known)
    # the package's lazy attributes, the tracker plugins and the rule families are the only other names imported by name
    others = {name: _dynamic_imports(path) for name, path in known.items() if name != "npumagic.presentation"}
    assert {name: found for name, found in others.items() if found} == {
        "npumagic": ["f'.{_WHERE[name]}'"], "npumagic.render": ["f'.{_WHERE[name]}'"], "npumagic.trackers": ["tracker"],
        "npumagic.analysis.rules": ["f'{__name__}.{_family}'"]}  # the families of registry.FAMILIES, its own modules


def test_capture_imports_nothing_of_analysis():
    """Collecting never needs the analysis: the A/B test's runner (ab_run.py) joins the two."""
    known = modules()
    offending = sorted(f"{name} imports {m}" for name, path in known.items() if name.startswith("npumagic.capture")
                       for m in imports(path, known) if m.startswith("npumagic.analysis"))
    assert offending == []


def test_the_job_reader_is_above_the_readers_and_tables():
    """analysis/job.py reads through the readers and summarises with the tables: none of the
    analysis modules imports it (the shells, the session and the CLI do)."""
    known = modules()
    offending = sorted(f"{name} imports it" for name, path in known.items()
                       if name.startswith("npumagic.analysis") and "npumagic.analysis.job" in imports(path, known))
    assert offending == []
    assert "npumagic.analysis.sources" in imports(known["npumagic.analysis.job"], known)
