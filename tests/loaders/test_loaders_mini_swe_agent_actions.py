"""mini-swe-agent's action regex over a hostile reply: the same blocks as the agent's own
regex, found in linear work (no rescans of the reply's tail from every unclosed fence)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from otel_eval.receive.loaders import load_file, mini_swe_agent

# mini-swe-agent's DefaultAgent action regex, as the agent runs it
AGENT_REGEX = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
PIECES = ["```bash", "```", "\n", " ", "\t", "x", "ls", "\u00a0", "é", "`", "bash", "\n```"]


class _Scanned:
    """The action pattern, recording how many characters each search is given: the
    backtracking engine's work on an unclosed fence is that length, per fence."""

    def __init__(self) -> None:
        self.lengths: list[int] = []

    def findall(self, text: str, pos: int = 0, endpos: int | None = None) -> list[Any]:
        end = len(text) if endpos is None else min(endpos, len(text))
        self.lengths.append(end - pos)
        if end - pos > 10_000:  # today's quadratic search would take minutes: not run
            return []
        return AGENT_REGEX.findall(text, pos, end)


def test_the_blocks_are_those_of_the_agents_own_regex() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(30)))
        assert mini_swe_agent.actions(text) == AGENT_REGEX.findall(text), text


def test_unclosed_fences_after_the_block_are_not_rescanned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply whose one block is followed by 200,000 unclosed "```bash" fences (1.8 MB):
    from each of them the regex scanned the rest of the reply for a closing fence it never
    found, quadratic (hours). Now the search ends at the last closing fence."""
    scanned = _Scanned()
    monkeypatch.setattr(mini_swe_agent, "_ACTION", scanned)
    reply = "```bash\nls -la\n```" + "```bash\nx" * 200_000
    path = tmp_path / "hostile.traj.json"
    path.write_text(json.dumps({"info": {}, "instance_id": "t", "messages": [
        {"role": "user", "content": "fix it"}, {"role": "assistant", "content": reply},
        {"role": "user", "content": "<returncode>0</returncode><output>ok</output>"}]}))
    (trace,) = load_file(path)
    assert max(scanned.lengths) < 100, scanned.lengths  # the block, not the fences after it
    [tool] = [s for s in trace.spans if s.name == "execute_tool bash"]
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"command": "ls -la"}
