"""The package's modules import one another without a circle: the registry is a leaf that the env
classes read, and nothing it imports constructs envs (issue 47). Every import counts, those inside
functions too (a lazy import hides a circle; it does not remove it)."""

import ast
from pathlib import Path

import gpu_marl_envs

PACKAGE = Path(gpu_marl_envs.__file__).parent


def module_name(path: Path) -> str:
    parts = ("gpu_marl_envs", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from package import submodule`` names the
    submodule; the package itself only where a name of its ``__init__`` is imported)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    targets.add(submodule if submodule in modules else node.module)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def circle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path of imports from ``start`` back to it, if there is one (depth-first)."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for target in sorted(graph[node]):
            if target == start:
                return [*path, start]
            if target not in seen:
                seen.add(target)
                stack.append((target, [*path, target]))
    return None


def test_no_import_circle():
    graph = imports()
    assert "gpu_marl_envs.registration" in graph and graph["gpu_marl_envs.parallel_env"], "the graph is empty"
    circles = [circle for name in graph if (circle := circle_through(graph, name)) is not None]
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_registry_constructs_nothing():
    graph = imports()
    assert not graph["gpu_marl_envs.registration"] & {
        "gpu_marl_envs.parallel_env",
        "gpu_marl_envs.vector_env",
        "gpu_marl_envs.single_env",
        "gpu_marl_envs.pettingzoo_env",
    }
