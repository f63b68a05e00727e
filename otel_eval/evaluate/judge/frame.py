"""The lines a judge prompt writes around span text, in one place, and the one escape that
keeps span text from writing any of them.

A judge prompt is the judges' instructions under ``#`` headings (``templates``), the run's
view (``render``: a ``[step N]`` line opens each step; ``session``: a ``Turn N`` line each
turn), the request line (``prompting``: which judges answer, for which steps) and the line
announcing the reply's shape. Every such line starts with one of ``OPENERS``. Span text
(and what the model wrote from it: rubric criteria) is placed between them; a line of it
that starts like one of them, after blanks (any whitespace or invisible format character: a
no-break or zero-width space), at any line break a model may read as one
(``\\r``, U+2028 ...), gets a backslash before it (``escape``): span content cannot write a
heading, a step or turn, a request or a reply shape the judge would read as the prompt's.
tests/judge/test_judge_frame.py builds every request and checks each line of its frame.
"""

from __future__ import annotations

import unicodedata

HEADING = "#"  # a heading of the prompt (the templates')
STEP_HEADER = "[step "  # opens a step of the run (``render``)
TURN_HEADER = "Turn "  # opens a turn of a conversation (``session``)
# The request lines (``prompting``): what the call asks for
ANSWER = "Answer: "  # the parts a combined call answers, and their steps
SCORE_STEPS = "Score LLM "  # the step judge's steps
TURNS_TO_GRADE = "Turns to grade (by the step of their LLM call): "
GRADE_RUN = "Grade the whole run."
GRADE_OUTCOME = "Grade how completely the task was accomplished."
GRADE_SESSION = "Grade the whole conversation."
CRITERIA = "Criteria to check:"
REPLY_SHAPE = "Reply with one JSON object of this shape (all keys required):"

OPENERS = (HEADING, STEP_HEADER, TURN_HEADER, ANSWER, SCORE_STEPS, TURNS_TO_GRADE,
           GRADE_RUN, GRADE_OUTCOME, GRADE_SESSION, CRITERIA,
           REPLY_SHAPE.partition(" of this shape")[0])


def _body(line: str) -> str:
    """``line`` after its leading blanks: any whitespace (a no-break, em or ideographic
    space as well as a space or tab) and invisible format characters (a zero-width space, a
    BOM), which a model reads through as it does a space."""
    i = 0
    while i < len(line) and (line[i].isspace() or unicodedata.category(line[i]) == "Cf"):
        i += 1
    return line[i:]


def opens(line: str) -> bool:
    """Whether ``line`` starts (after blanks) like a line of the frame."""
    return _body(line).startswith(OPENERS)


def escape(text: str, continued: bool = False) -> str:
    """``text`` (span text) with a backslash before each line that starts like a line of
    the frame (``opens``); ``continued``: the text goes on a line the frame opened (after
    ``  user: ``, `` result: `` ...), so its first line starts none. String methods: linear
    whatever the text."""
    if not any(opener in text for opener in OPENERS):
        return text
    lines = text.splitlines(keepends=True)
    for i in range(1 if continued else 0, len(lines)):
        line = lines[i]
        body = _body(line)
        if body.startswith(OPENERS):
            lines[i] = line[:len(line) - len(body)] + "\\" + body
    return "".join(lines)
