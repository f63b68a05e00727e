"""Loop rule (g), circling: steps whose actions change only in form and whose observations
add nothing new."""

from __future__ import annotations

import pytest
from detector_factory import bash, kinds, tool, traj

from otel_eval.base.steps import Step
from otel_eval.evaluate.detectors import loop
from otel_eval.evaluate.detectors.calls import Context, calls
from otel_eval.evaluate.detectors.circling import error_class, program
from otel_eval.evaluate.detectors.config import DetectorsConfig, LoopConfig

TREE = ("Execution logs:\nsrc/\n  pkg/\n    __init__.py\n    core.py\n    utils.py\n"
        "tests/\n  test_core.py\nsetup.py\nREADME.md\n")
FILES = ["Execution logs:\nclass Parser:\n    def parse(self, text): ...\n",
         "Execution logs:\ndef tokenize(line):\n    return line.split()\n",
         "Execution logs:\nimport re\nPATTERN = re.compile(r'[a-z]+')\n",
         "Execution logs:\n[tool.setuptools]\npackages = ['pkg']\n"]
LISTINGS = ["import os\nfor root, dirs, files in os.walk('.'):\n    print(root, files)",
            "import os\nfor r, d, f in os.walk('.'):\n    print(r, f)",
            "import os\nfor root, _, names in os.walk('./'):\n    print(root, names)",
            "import os\nfor dirpath, dirnames, filenames in os.walk('.'):\n"
            "    print(dirpath, filenames)"]
READS = [f"print(open('{p}').read())" for p in ("a.py", "b.py", "c.py", "setup.cfg")]
MISSING = "<returncode>1</returncode>\n<output>\ncat: {p}: No such file or directory\n</output>"


NO_RESULTS = "Execution logs:\nNo results found."


def code(source: str, result: str | None) -> Step:
    return tool("python_interpreter", {"code": source}, result)


CASES: list[tuple[str, list[Step], list[str]]] = [
    ("the same tree printed by three rewritten blocks",
     [code(c, TREE) for c in LISTINGS[:3]], ["loop/circling"]),
    ("twice is a check, not a circle", [code(c, TREE) for c in LISTINGS[:2]], []),
    ("blocks reading new files make progress",
     [code(c, r) for c, r in zip(READS, FILES, strict=True)], []),
    ("identical blocks are rules (a)/(b)",
     [code(LISTINGS[0], TREE)] * 3, ["loop/repeated_action"]),
    ("the same 'not found' for three spellings of a path",
     [bash(f"cat {p}", MISSING.format(p=p)) for p in
      ("src/pkg/parser.py", "src/parser.py", "pkg/parser.py")], ["loop/circling"]),
    ("a search that finds nothing for different names is exploring",
     [bash(f'grep -rn "class {c}" src/', "<returncode>1</returncode>\n<output>\n</output>")
      for c in ("Lexer", "Parser", "Token")], []),
    ("re-running failing tests is iterating, not circling (a test run is no read)",
     [bash(f"pytest tests/test_core.py -x -k {k}", "<returncode>1</returncode>\n<output>\n"
           "FAILED tests/test_core.py::test_parse - assert 1 == 2\n</output>")
      for k in ("parse", "parse_line", "parse_all")], []),
    ("writing a file between re-reads is progress",
     [bash("cat src/a.py", "<returncode>0</returncode>\n<output>\n" + TREE + "</output>"),
      bash("sed -i 's/a/b/' src/a.py"),
      bash("cat ./src/a.py", "<returncode>0</returncode>\n<output>\n" + TREE + "</output>"),
      bash("echo x > src/b.py"),
      bash("cat src//a.py", "<returncode>0</returncode>\n<output>\n" + TREE + "</output>")],
     []),
    ("observations not recorded: unknown, not nothing",
     [code(c, None) for c in LISTINGS[:3]], []),
    ("a 'search(' inside a string is no call: not the same program",
     [code("print(search('parser module'))", NO_RESULTS),
      code('print("the search(query) tool returned nothing for every spelling I tried")',
           NO_RESULTS),
      code("results = search(query='parser.py')\nprint(results)", NO_RESULTS)], []),
    ("different work with alike observations is not circling",
     [code("x = 1\nprint(x)", TREE), tool("web_search", {"query": "python packaging"}, "x"),
      code("import json\njson.dumps({})", "Execution logs:\n{}")], []),
]


@pytest.mark.parametrize(("steps", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_circling_cases(steps: list[Step], expected: list[str]) -> None:
    found = loop.detect(traj(*steps), DetectorsConfig(), Context())
    assert kinds(found) == expected


def test_finding_points_at_the_first_and_last_step() -> None:
    steps = [code(c, TREE) for c in LISTINGS]
    t = traj(code(READS[0], FILES[0]), *steps)
    (f,) = loop.detect(t, DetectorsConfig(), Context())
    circle = t.steps[2:]
    assert f.span_ids == [circle[0].span_id, circle[-1].span_id]
    assert f.step_indexes == [s.index for s in circle]
    assert f.attributes["count"] == 4 and f.severity == "warning"  # loop.circling_severity


def test_other_agents_steps_do_not_join_the_circle() -> None:
    steps = [code(c, TREE) for c in LISTINGS[:3]]
    for i, s in enumerate(steps):
        s.node = f"agent{i}"
    assert loop.detect(traj(*steps), DetectorsConfig(), Context()) == []


def test_window_bounds_the_comparisons() -> None:
    """A circle whose steps are further apart than the window is not seen (bounded work)."""
    fillers = [[code(READS[k % 4] + f"  # {i}{k}", FILES[k % 4] + str(i * 10 + k))
                for k in range(3)] for i in range(3)]
    steps = [s for i in range(3) for s in (code(LISTINGS[i], TREE), *fillers[i])]
    narrow = DetectorsConfig(loop=LoopConfig(circling_window=2))
    assert kinds(loop.detect(traj(*steps), narrow, Context())) == []
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == ["loop/circling"]


def test_thousands_of_steps_stay_linear() -> None:
    steps = [code(f"print({i})", f"Execution logs:\n{i}\n" + "x" * 3000) for i in range(3000)]
    found = loop.detect(traj(*steps), DetectorsConfig(), Context())
    assert all(f.kind != "circling" or f.attributes["count"] >= 3 for f in found)


@pytest.mark.parametrize(("text", "expected"), [
    ("cat: a.py: No such file or directory", "no such file or directory"),
    ("NameError: name 'x' is not defined", "nameerror"),
    ("FAILED tests/test_a.py::test_x - assert 1 == 2", None),
    ("3 files", None),
])
def test_error_class(text: str, expected: str | None) -> None:
    assert error_class(text) == expected


PROGRAMS = [
    ("called names from the call nodes", "import os\nfor r, d, f in os.walk('.'):\n    print(r)",
     "py:os.walk,print"),
    ("a name( in a string or a comment is no call",
     "print('search(x)')  # then search(y)", "py:print"),
    ("a method of a call's result", "open('a').read()", "py:open,read"),
    ("code that does not parse: unknown", "print(search('x'", None),
    ("no call at all", "x = 1", None),
]


@pytest.mark.parametrize(("source", "expected"), [p[1:] for p in PROGRAMS],
                         ids=[p[0] for p in PROGRAMS])
def test_program_of_a_python_block(source: str, expected: str | None) -> None:
    t = traj(code(source, "x"))
    (call,) = calls(t, DetectorsConfig().loop, DetectorsConfig().tool_call)
    assert program(call) == expected
