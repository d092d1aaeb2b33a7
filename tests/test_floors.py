"""The floor plan (docs/architecture.md): every import points down or sideways, never up,
and no module reaches itself again through its imports.

Read from the source with ``ast``, ``TYPE_CHECKING`` imports included: an arrow a type
checker follows is an arrow a reader follows too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# Lowest first. A module belongs to the floor of its longest matching prefix (one ending
# in ``$`` matches that module only).
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The package root holds only ``__version__``.
    ("errors", ("hasten$", "hasten.errors")),
    ("wire", ("hasten.wire",)),
    ("config", ("hasten.config",)),
    ("values", ("hasten.apis", "hasten.values")),
    (
        "parts",
        ("hasten.cache", "hasten.upstream", "hasten.routing", "hasten.semantic", "hasten.storage"),
    ),
    ("pipeline", ("hasten.proxy",)),
    (
        "services",
        (
            "hasten.limits",
            "hasten.metrics",
            "hasten.dashboard",
            "hasten.telemetry",
            "hasten.keys",
            "hasten.fleet",
            "hasten.policy",
            "hasten.auth",
            "hasten.responses",
        ),
    ),
    (
        "shell",
        (
            "hasten.__main__",
            "hasten.gateway",
            "hasten.served",
            "hasten.app",
            "hasten.admin",
            "hasten.openapi",
            "hasten.server",
            "hasten.cli",
            "hasten.local",
            "hasten.simulator",
            "hasten.loadgen",
            "hasten.doctor",
        ),
    ),
)


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in (SRC / "hasten").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The hasten modules ``name`` imports (a name imported from a package counts as the
    package's module of that name when there is one, else as the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [f"{base}.{alias.name}" for alias in node.names]
            targets = [t if t in modules else base for t in targets]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("hasten"):
                yield target


def _floor(module: str) -> int:
    best, best_len = -1, -1
    for level, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if prefix.endswith("$"):
                is_match = module == prefix[:-1]
            else:
                is_match = module == prefix or module.startswith(prefix + ".")
            if is_match and len(prefix) > best_len:
                best, best_len = level, len(prefix)
    return best


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: set(_imported(name, path, modules)) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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


def test_every_module_has_a_floor() -> None:
    assert [m for m in _modules() if _floor(m) < 0] == []


def test_no_import_points_up() -> None:
    upward = [
        f"{module} ({FLOORS[_floor(module)][0]}) -> {target} ({FLOORS[_floor(target)][0]})"
        for module, targets in _graph().items()
        for target in sorted(targets)
        if _floor(target) > _floor(module)
    ]
    assert upward == []


def test_no_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_checks_see_a_cycle_and_an_upward_arrow() -> None:
    # The checker itself, on a made-up graph: a test that cannot fail proves nothing.
    graph = {"hasten.a": {"hasten.b"}, "hasten.b": {"hasten.a"}, "hasten.c": set()}
    assert _cycles(graph) == [["hasten.a", "hasten.b"]]
    assert _floor("hasten.proxy.handle") > _floor("hasten.upstream.client")
    assert _floor("hasten.errors") == 0
