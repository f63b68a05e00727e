"""Stage: trajectory (part). The conversation a turn belongs to, and its user, from every
convention that carries one.

A chat service sends one trace per user turn; the turns are tied together by a
conversation (session, thread) id on their spans. One reader order for every trace, the first
key found wins, over all the spans of the trace (a key earlier in the order on any span beats
a later key on the root):

1. ``gen_ai.conversation.id`` (OpenTelemetry GenAI: "the unique identifier for a conversation
   (session, thread)"; pydantic-ai, Strands and the other GenAI-native stacks);
2. ``session.id`` (OpenInference: ``using_session``; also the OpenTelemetry ``session``
   registry);
3. ``langfuse.session.id`` (Langfuse SDK);
4. Traceloop / OpenLLMetry association properties:
   ``traceloop.association.properties.session_id``, ``..conversation_id``, ``..thread_id``;
5. the Vercel AI SDK's telemetry metadata: ``ai.telemetry.metadata.sessionId``,
   ``..conversationId``, ``..threadId``.

Among equal keys, the first span in tree order (the root first) wins. A trace may carry
more than one id (a ``session.id`` on the root and a ``gen_ai.conversation.id`` on an LLM
span, or two values of one key): the turn is counted under the one picked, and the others
(``Conversation.others``, at most ``MAX_OTHER_IDS``, sorted) go on its record
(``other_session_ids``) instead of being lost without a word. The user is read the
same way: ``user.id`` (OpenInference, OpenTelemetry ``user``) > ``enduser.id`` >
``langfuse.user.id`` > ``traceloop.association.properties.user_id`` >
``ai.telemetry.metadata.userId``. Ids are text as carried (numbers as their decimal text);
empty ones and ones longer than ``MAX_ID_CHARS`` are not ids (a payload, not a key).

Cost: one ``isdisjoint`` per span (``Conversation.read``), the keys looked up only on a span
that carries one of them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CONVERSATION_KEYS", "MAX_ID_CHARS", "MAX_OTHER_IDS", "USER_KEYS", "Conversation"]

# (attribute key, convention): the reader order of the module docstring.
CONVERSATION_KEYS: tuple[tuple[str, str], ...] = (
    ("gen_ai.conversation.id", "genai"),
    ("session.id", "openinference"),
    ("langfuse.session.id", "langfuse"),
    ("traceloop.association.properties.session_id", "openllmetry"),
    ("traceloop.association.properties.conversation_id", "openllmetry"),
    ("traceloop.association.properties.thread_id", "openllmetry"),
    ("ai.telemetry.metadata.sessionId", "vercel_ai"),
    ("ai.telemetry.metadata.conversationId", "vercel_ai"),
    ("ai.telemetry.metadata.threadId", "vercel_ai"),
)
USER_KEYS: tuple[tuple[str, str], ...] = (
    ("user.id", "openinference"),
    ("enduser.id", "otel"),
    ("langfuse.user.id", "langfuse"),
    ("traceloop.association.properties.user_id", "openllmetry"),
    ("ai.telemetry.metadata.userId", "vercel_ai"),
)
MAX_ID_CHARS = 256  # longer values are no conversation (or user) id
MAX_OTHER_IDS = 8  # conversation ids besides the one picked, kept of a trace
_ALL_KEYS = frozenset(k for k, _ in CONVERSATION_KEYS + USER_KEYS)


def _id(value: Any) -> str | None:
    # ``as_str`` inlined (every key a span carries comes here): a number as its decimal text
    if type(value) is str:
        text = value
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    else:
        return None
    text = text.strip()
    return text if 0 < len(text) <= MAX_ID_CHARS else None


class _Best:
    """The best (lowest rank) id seen so far for one list of keys, and every id seen
    (``others``: at most ``MAX_OTHER_IDS`` + 1 kept)."""

    def __init__(self, keys: tuple[tuple[str, str], ...]) -> None:
        self.keys = keys
        self.ranks = {key: rank for rank, (key, _) in enumerate(keys)}
        self.keyset = frozenset(self.ranks)
        self.rank = len(keys)
        self.value: str | None = None
        self.source: str | None = None
        self.seen: set[str] = set()

    def offer(self, attrs: Any) -> None:
        # only the keys the span carries (mostly one): ranks decide, not the set's order
        for key in attrs.keys() & self.keyset:
            value = _id(attrs[key])
            if value is None:
                continue
            if len(self.seen) <= MAX_OTHER_IDS:
                self.seen.add(value)
            rank = self.ranks[key]
            if rank < self.rank:
                self.rank, self.value = rank, value
                self.source = f"{self.keys[rank][1]} {key}"

    @property
    def others(self) -> list[str]:
        """The ids seen besides the one picked, sorted (not arrival order), at most
        ``MAX_OTHER_IDS``."""
        return sorted(self.seen - {self.value})[:MAX_OTHER_IDS]


class Conversation:
    """Reads the conversation id and user of one trace, span by span in tree order."""

    def __init__(self) -> None:
        self.session = _Best(CONVERSATION_KEYS)
        self.user = _Best(USER_KEYS)

    def read(self, attrs: Any) -> None:
        if attrs.keys().isdisjoint(_ALL_KEYS):
            return
        self.session.offer(attrs)
        self.user.offer(attrs)

    @property
    def session_id(self) -> str | None:
        return self.session.value

    @property
    def sources(self) -> dict[str, str]:
        """``{"session_id": "<convention> <key>", "user_id": ...}`` of the ids read."""
        out = {}
        if self.session.source is not None:
            out["session_id"] = self.session.source
        if self.user.source is not None:
            out["user_id"] = self.user.source
        return out
