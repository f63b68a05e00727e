"""Stage: trajectory / evaluate (part). Shell actions read with a shell lexer.

``shell_commands`` reads what a shell agent ran (mini-swe-agent's bash block, an
OpenHands-style ``execute_bash`` command) with ``shlex``: the commands (name and arguments) of
``&&`` / ``||`` / ``;`` / ``|`` / ``&`` / newline separated lists, redirections set apart (a
``>`` to a file is a write; ``2>&1`` and ``>/dev/null`` are not), here-document bodies
skipped (they are data), backslash-newline continuations joined. Quoted separators stay
inside their word (``grep "a|b" f`` is one command).

Bounded: at most ``MAX_COMMAND_CHARS`` characters, ``MAX_TOKENS`` words and ``MAX_COMMANDS``
commands are read; longer input, unterminated quotes and too many commands are reported as
a problem string, never raised. ``shlex`` is a character-by-character state machine: linear.
"""

from __future__ import annotations

import re
import shlex

__all__ = ["MAX_COMMANDS", "MAX_COMMAND_CHARS", "MAX_TOKENS", "shell_commands"]

MAX_COMMAND_CHARS = 50_000  # longer actions are not lexed (real ones are < 10 kB)
MAX_COMMANDS = 64  # shell commands read from one action
MAX_TOKENS = 4_000  # shell words read from one action
_SEPARATORS = frozenset(";&|\n")
_DELIMITER = re.compile(r"-?\s*['\"]?([\w.-]{1,64})")  # after "<<": the closing word


def _without_heredocs(text: str) -> str:
    """``text`` with here-document bodies removed (they are data, not commands). One
    here-document per line is looked at, so the scan stays linear."""
    if "<<" not in text:
        return text
    out, at = [], 0
    while (op := text.find("<<", at)) >= 0:
        eol = text.find("\n", op)
        if eol < 0:
            break
        out.append(text[at:eol + 1])
        found = _DELIMITER.match(text, op + 2, eol)
        if found is None or text.startswith("<<<", op):  # a here-string has no body
            at = eol + 1
            continue
        close = text.find(f"\n{found.group(1)}", eol)
        at = len(text) if close < 0 else close + 1 + len(found.group(1))
    out.append(text[at:])
    return "".join(out)


def shell_commands(command: str) -> tuple[list[list[str]], bool, str | None]:
    """(commands as argument lists, whether a redirection writes a file, problem) of a shell
    action; problem is ``too_large``, ``unterminated_quote`` or ``too_long`` (more than
    ``MAX_TOKENS`` words or ``MAX_COMMANDS`` commands: the rest is not read)."""
    if len(command) > MAX_COMMAND_CHARS:
        return [], False, "too_large"
    lexer = shlex.shlex(_without_heredocs(command).replace("\\\n", " "), posix=True,
                        punctuation_chars=";&|<>\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    writes, redirect, problem = False, "", None
    try:
        for count, token in enumerate(lexer):
            if count == MAX_TOKENS or len(commands) > MAX_COMMANDS:
                problem = "too_long"
                break
            if token and set(token) <= _SEPARATORS:
                if commands[-1]:
                    commands.append([])
            elif token and set(token) <= {"<", ">", "&", "|"}:
                redirect = token
                if commands[-1] and commands[-1][-1].isdigit():
                    commands[-1].pop()  # the 2 of 2>&1
            elif redirect:
                writes = writes or (">" in redirect and "&" not in redirect.replace("&>", "")
                                    and token != "/dev/null")
                redirect = ""
            else:
                commands[-1].append(token)
    except ValueError:  # no closing quotation / no escaped character
        return [c for c in commands if c], writes, "unterminated_quote"
    return [c for c in commands if c][:MAX_COMMANDS], writes, problem
