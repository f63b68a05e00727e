"""Stage: trajectory / evaluate (part). Shell actions read with a shell lexer.

``shell_commands`` reads what a shell agent ran (mini-swe-agent's bash block, an
OpenHands-style ``execute_bash`` command) with ``shlex``: the commands (name and arguments) of
``&&`` / ``||`` / ``;`` / ``|`` / ``&`` / newline separated lists, redirections set apart (a
``>`` to a file is a write; ``2>&1`` and ``>/dev/null`` are not), here-document bodies
skipped (they are data), backslash-newline continuations joined. Quoted separators stay
inside their word (``grep "a|b" f`` is one command).

Bounded: at most ``MAX_COMMAND_CHARS`` characters, ``MAX_TOKENS`` words and ``MAX_COMMANDS``
commands are read; longer input, unterminated quotes and too many commands are reported as
a problem string, never raised. ``shlex`` is a character-by-character state machine
(linear, but slow in Python): commands without escapes or comments, most of them, are split
into the same tokens by one regular expression whose alternatives each start with a
different character (linear, C speed; tested against ``shlex`` on random text).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

__all__ = ["MAX_COMMANDS", "MAX_COMMAND_CHARS", "MAX_TOKENS", "shell_commands"]

MAX_COMMAND_CHARS = 50_000  # longer actions are not lexed (real ones are < 10 kB)
MAX_COMMANDS = 64  # shell commands read from one action
MAX_TOKENS = 4_000  # shell words read from one action
_SEPARATORS = frozenset(";&|\n")
_NEEDS_LEXER = re.compile(r"[\\\\#]")  # escapes, comments: left to shlex
# a token (operators, or a word of unquoted runs and quoted strings), or blanks
_PLAIN_TOKEN = re.compile(r"([;&|<>\n]+|(?:[^ \t\r;&|<>\n'\"]|'[^']*'|\"[^\"]*\")+)|[ \t\r]+")
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")
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


def _plain(text: str) -> list[str] | None:
    """The tokens of ``text`` without escapes or comments, by one regular expression (C
    speed, linear: each alternative starts with a different character); None when some
    character is in no token, i.e. a quote is not closed (then ``shlex`` reports it)."""
    tokens, at = [], 0
    for match in _PLAIN_TOKEN.finditer(text):
        if match.start() != at:
            return None
        at = match.end()
        token = match.group(1)
        if token is not None:
            tokens.append(_QUOTED.sub(_unquote, token) if ("'" in token or '"' in token)
                          else token)
    return tokens if at == len(text) else None


def _unquote(match: re.Match[str]) -> str:
    return match.group(1) if match.group(1) is not None else match.group(2)


def _tokens(text: str) -> Iterator[str]:
    """Words and operator runs of ``text``, as ``shlex`` (POSIX, punctuation ``;&|<>`` and
    newline) splits them. Text without escapes or comments (most commands) is split by
    ``_plain``, the rest by ``shlex`` (a character-by-character Python state machine)."""
    if not _NEEDS_LEXER.search(text):
        plain = _plain(text)
        if plain is not None:
            return iter(plain)
    lexer = shlex.shlex(text.replace("\\\n", " "), posix=True, punctuation_chars=";&|<>\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    return iter(lexer)


def shell_commands(command: str) -> tuple[list[list[str]], bool, str | None]:
    """(commands as argument lists, whether a redirection writes a file, problem) of a shell
    action; problem is ``too_large``, ``unterminated_quote`` or ``too_long`` (more than
    ``MAX_TOKENS`` words or ``MAX_COMMANDS`` commands: the rest is not read)."""
    if len(command) > MAX_COMMAND_CHARS:
        return [], False, "too_large"
    commands: list[list[str]] = [[]]
    writes, redirect, problem = False, "", None
    try:
        for count, token in enumerate(_tokens(_without_heredocs(command))):
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
