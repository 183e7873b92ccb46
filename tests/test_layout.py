"""The package's two wings, read from its imports (every `import`, module-level or inside a
function): no import cycle; the library (encodings, kernels, models, attention, execution,
errors, directory_lock, kept_tensors, option_lists, toeplitz, tracing, transposed, data)
never imports the lab; a lab peer imports only the run kit (lab/runs) and the library, never
another peer."""

import ast
from pathlib import Path

import posattn

PACKAGE = Path(posattn.__file__).parent
LIBRARY = ("posattn.encodings", "posattn.kernels", "posattn.models", "posattn.data")
LIBRARY_MODULES = (
    "posattn.attention",
    "posattn.directory_lock",
    "posattn.execution",
    "posattn.errors",
    "posattn.kept_tensors",
    "posattn.option_lists",
    "posattn.toeplitz",
    "posattn.tracing",
    "posattn.transposed",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The posattn modules `path` imports (a name imported from a package counts as its
    submodule where one exists, else as the package)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("posattn")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("posattn"):
                continue
            for alias in node.names:
                child = f"{target}.{alias.name}"
                found.add(child if child in modules else target)
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imported_modules(path, set(paths)) for name, path in paths.items()}


GRAPH = import_graph()


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, nxt])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def is_library(module: str) -> bool:
    return module.startswith(LIBRARY) or module in LIBRARY_MODULES


def lab_peer(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "lab" and parts[2] != "runs":
        return parts[2]
    return None


def test_the_graph_is_read_from_the_real_imports():
    # A known edge of each kind: the test would pass vacuously on an empty graph.
    assert "posattn.models.encoder" in GRAPH["posattn.models.pretrained"]
    assert "posattn.lab.runs.trainer" in GRAPH["posattn.lab.pretraining.pretrain"]
    assert any(m.startswith("posattn.lab.") for m in GRAPH["posattn.cli"])


def test_the_package_has_no_import_cycle():
    assert find_cycle(GRAPH) is None, f"import cycle: {' -> '.join(find_cycle(GRAPH))}"


def test_find_cycle_finds_a_constructed_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_library_never_imports_the_lab():
    wrong = {
        (module, target)
        for module, targets in GRAPH.items()
        if is_library(module)
        for target in targets
        if target.startswith("posattn.lab")
    }
    assert not wrong


def test_a_lab_peer_never_imports_another_peer():
    wrong = {
        (module, target)
        for module, targets in GRAPH.items()
        if (peer := lab_peer(module))
        for target in targets
        if lab_peer(target) not in (None, peer)
    }
    assert not wrong
