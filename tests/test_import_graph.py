"""The package's import graph: no cycle (lazy imports inside functions included), and the
command line at the top: only ``python -m otel_eval`` imports ``otel_eval.app.cli``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from otel_eval.base.pysource import parse  # one thread at a time

PACKAGE = Path(__file__).resolve().parents[1] / "otel_eval"

# Top to bottom: a module may import its own layer and those below it, never one above.
# The data flows receive -> decode -> assemble -> evaluate -> store -> outputs; the floors
# are who calls whom: decode (the OTLP codec: receivers decode with it, the spool replays
# through it, the outputs encode with it) and the store (written by evaluation, read by the
# results API, the judge's feedback and the issues job) serve several stages from below.
LAYERS = (
    "otel_eval.app",        # entry points and commands, the top-level Config
    "otel_eval.receive",    # OTLP/gRPC, OTLP/HTTP, Kafka, trace files
    "otel_eval.assemble",   # the engine, the assembler, the spool
    "otel_eval.evaluate",   # trajectory, detectors, judge, predictor
    "otel_eval.outputs",    # events, forwarding, Kafka results, recurring issues
    "otel_eval.store",      # evaluations kept: SQLite, PostgreSQL, the query
    "otel_eval.decode",     # OTLP requests in and out, bounded bodies
    "otel_eval.telemetry",  # self-metrics
    "otel_eval.base",       # the model, config checks, the loop thread, Kafka settings
)


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (never executed)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules it imports; ``type_checking``: those under
    ``if TYPE_CHECKING:`` too (never executed, but a cycle there is still a tangle)."""
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for name, path in files.items():
        tree = parse(path.read_text(encoding="utf-8"))
        skip = set() if type_checking else _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # "from pkg import sub" imports the submodule; "from mod import x" the module
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets = [s for s in subs if s in files] or [node.module]
            else:
                continue
            graph[name] |= {t for t in targets if t in files and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
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
                    out.append(sorted(component))
    return out


def test_the_import_graph_has_no_cycle() -> None:
    assert _cycles(import_graph()) == []


def test_no_cycle_either_with_the_imports_for_type_checking() -> None:
    # telemetry's metrics <-> prediction <-> workers was one (the subsystems took ``Metrics``
    # for its declaring helpers); they now take a ``Declarer``
    assert _cycles(import_graph(type_checking=True)) == []


def test_the_cycle_finder_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_only_the_entry_point_imports_the_command_line() -> None:
    importers = sorted(m for m, deps in import_graph().items() if "otel_eval.app.cli" in deps)
    assert importers == ["otel_eval.__main__"]


def layer_of(module: str) -> int:
    """Index in LAYERS (0 = top); the package root and ``__main__`` stand above them all."""
    if module in ("otel_eval", "otel_eval.__main__"):
        return -1
    for i, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return i
    raise AssertionError(f"{module} is in no layer: place it in one of {LAYERS}")


def arrows_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((m, d) for m, deps in graph.items() for d in deps
                  if layer_of(d) < layer_of(m))


def test_every_module_is_in_a_layer_and_imports_only_downward() -> None:
    graph = import_graph()
    for module in graph:
        layer_of(module)
    assert arrows_up(graph) == []


def test_the_layer_check_finds_an_import_upward() -> None:
    graph = {"otel_eval.base.model": {"otel_eval.evaluate.trajectory"},
             "otel_eval.evaluate.trajectory": {"otel_eval.base.model"}}
    assert arrows_up(graph) == [("otel_eval.base.model", "otel_eval.evaluate.trajectory")]


def test_the_top_level_config_is_imported_by_the_entry_points_alone() -> None:
    importers = {m for m, deps in import_graph().items() if "otel_eval.app.config" in deps}
    assert importers and all(m.startswith("otel_eval.app.") for m in importers), importers


def _loaded_by(module: str) -> set[str]:
    code = (f"import sys, {module}; "
            "print(' '.join(m for m in sys.modules if m.startswith('otel_eval')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PACKAGE.parent)
    return set(out.stdout.split())


def test_importing_the_assembler_loads_only_what_it_stands_on() -> None:
    # it used to load 46 modules: the top-level config pulled in every detector, the
    # conventions, the SQLite store and the predictor
    loaded = _loaded_by("otel_eval.assemble.assembler")
    assert {layer_of(m) for m in loaded} <= {-1, LAYERS.index("otel_eval.assemble"),
                                             LAYERS.index("otel_eval.base")}, sorted(loaded)
    assert "otel_eval.assemble.engine" not in loaded


def _reachable(graph: dict[str, set[str]], starts: set[str]) -> set[str]:
    seen, todo = set(starts), list(starts)
    while todo:
        for dep in graph[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_engine_knows_evaluation_and_the_store_only_by_interface() -> None:
    # assemble/ is handed an evaluation stage (evaluate.handoff) and a store-health handle:
    # neither it nor anything it imports reaches the evaluator or the store (issue 32)
    graph = import_graph()
    assemble = {m for m in graph if m.startswith("otel_eval.assemble")}
    reached = _reachable(graph, assemble)
    forbidden = sorted(m for m in reached if m == "otel_eval.evaluate.evaluator"
                       or m == "otel_eval.store" or m.startswith("otel_eval.store."))
    assert forbidden == []


def test_the_reach_check_finds_an_import_through_another_module() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert _reachable(graph, {"a"}) == {"a", "b", "c"}


def test_the_judge_imports_nothing_of_the_issue_stage() -> None:
    # the synthesizer is handed the issue stage's reply contract by the wiring (app)
    graph = import_graph()
    assert sorted((m, d) for m, deps in graph.items() if m.startswith("otel_eval.evaluate.judge")
                  for d in deps if d.startswith("otel_eval.outputs")) == [
        ("otel_eval.evaluate.judge.delivery", "otel_eval.outputs.deps"),
        ("otel_eval.evaluate.judge.stage", "otel_eval.outputs.deps")]


def test_the_issues_catalogue_connects_through_the_store() -> None:
    deps = import_graph()["otel_eval.outputs.issues.catalogue"]
    assert "otel_eval.store.postgresql" not in deps and "otel_eval.store" in deps
