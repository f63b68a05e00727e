"""Stage (judge, part): the HTTP client of judge calls to OpenAI-compatible servers, which
stops reading a reply at its bound.

    JudgeClient._complete: with reading(max_reply_bytes) -> litellm.acompletion(client=
        bounded_client(...)) -> openai SDK -> httpx -> _BoundedTransport: the body's bytes
        counted as they arrive; past the bound, ReplyTooLarge (litellm wraps it) and the
        connection is dropped, the call's ``Reading.cut`` set; once the request's body is
        written, ``Reading.sent`` (a call cancelled after it is billed); a gzip or deflate
        body is inflated here and its inflated bytes counted (httpx inflated it after the
        count, whole: a 40 MB reply came in 40 kB), another encoding refused

litellm reads a whole reply before the judge sees its text: a 200 MB body from the server
cost ~0.6 GB while it was read, whatever ``max_reply_bytes`` said, and litellm has no
per-request size limit. Its ``openai`` provider takes the ``AsyncOpenAI`` client to use
(``client=``), and so do the providers litellm sends through that SDK (``SDK_PROVIDERS``:
litellm_proxy, perplexity, cerebras...); this module gives them one whose transport counts.
The bound of a call and whether it was hit travel in a context variable (set by the caller
around the call; the task ``asyncio.wait_for`` makes copies it), so one client per event
loop and server serves every judge with its own bound. The providers litellm sends through
its own ``AsyncHTTPHandler`` (``HANDLER_PROVIDERS``: anthropic, bedrock, gemini, ollama...)
take one as ``client=`` too: they are handed a handler on the same client
(``bounded_handler``). Other providers are read whole, then checked as before (the reply's
text against ``max_reply_bytes``, in ``client``), and a request of theirs cancelled is taken
as not sent (nothing tells).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import weakref
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx  # what litellm hands the openai SDK (not the SDK's own httpx2)

log = logging.getLogger(__name__)

# A body holds its reply text JSON-escaped (at most 6 bytes a byte: \u00XX) in an envelope:
# the bytes of body read for ``max_reply_bytes`` of text.
ESCAPED_BYTES_PER_BYTE = 6
ENVELOPE_BYTES = 64 * 1024


@dataclass(slots=True)
class Reading:
    """One call's bound on the body read, in bytes, whether a reply went over it, and
    whether its request reached the server whole (``sent``: billed, whatever happens next);
    ``refused``: why a reply was cut for another reason than its size (an encoding not asked
    for), "" when cut for its size."""

    limit: int
    cut: bool = False
    sent: bool = False
    refused: str = ""


_READING: ContextVar[Reading | None] = ContextVar("otel_eval_judge_reading", default=None)


@contextlib.contextmanager
def reading(max_reply_bytes: int) -> Iterator[Reading]:
    """The bound of the calls made inside (a reply text of ``max_reply_bytes``, escaped)."""
    state = Reading(ESCAPED_BYTES_PER_BYTE * max_reply_bytes + ENVELOPE_BYTES)
    token = _READING.set(state)
    try:
        yield state
    finally:
        _READING.reset(token)


class ReplyTooLarge(httpx.ReadError):
    """The body went over the call's bound; what was read is dropped with the connection."""


class _Inflated:
    """A ``Content-Encoding: gzip`` or ``deflate`` body inflated here, in pieces of at most
    ``step`` bytes (zeros inflate 1000:1: one chunk of the wire could be 64 MB whole), so the
    bound counts what the body is, not what came over the wire."""

    def __init__(self, encoding: str) -> None:
        self._raw = encoding == "deflate"  # zlib-wrapped, else raw (as httpx reads it)
        self._inflate = zlib.decompressobj(
            zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS)
        self._started = False

    def pieces(self, data: bytes, step: int) -> Iterator[bytes]:
        while data:
            try:
                out = self._inflate.decompress(data, step)
            except zlib.error as e:
                if not (self._raw and not self._started):
                    raise httpx.DecodingError(f"the reply does not inflate: {e}") from e
                self._inflate, self._raw = zlib.decompressobj(-zlib.MAX_WBITS), False
                continue
            self._started = True
            data = self._inflate.unconsumed_tail
            if out:
                yield out


class _Counted(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, state: Reading,
                 inflated: _Inflated | None = None) -> None:
        self._inner, self._state, self._inflated = inner, state, inflated

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._inner:
            for piece in (self._inflated.pieces(chunk, self._state.limit + 1)
                          if self._inflated is not None else (chunk,)):
                read += len(piece)
                if read > self._state.limit:
                    self._state.cut = True
                    raise ReplyTooLarge(f"the reply is over {self._state.limit} bytes")
                yield piece

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        state = _READING.get()
        if state is not None:  # told when the request's body was written (httpcore's trace)
            request.headers["Accept-Encoding"] = "gzip, deflate"  # those inflated here
            request.extensions = {**request.extensions, "trace": _marking(
                state, request.extensions.get("trace"))}
        response = await self._inner.handle_async_request(request)
        if state is None:  # not inside ``reading``: as read by httpx
            return response
        assert isinstance(response.stream, httpx.AsyncByteStream)
        headers, inflated = response.headers, None
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("gzip", "deflate"):  # inflated and counted here, not after by httpx
            headers = httpx.Headers([(k, v) for k, v in headers.multi_items() if k.lower()
                                     not in ("content-encoding", "content-length")])
            inflated = _Inflated(encoding)
        elif encoding != "identity":  # none other is asked for (Accept-Encoding, httpx's)
            state.cut = True
            state.refused = (f"the reply is encoded {encoding[:40]!r}, not asked for "
                             "(gzip or deflate; not read)")
            await response.aclose()
            raise ReplyTooLarge(state.refused)
        return httpx.Response(response.status_code, headers=headers,
                              stream=_Counted(response.stream, state, inflated),
                              extensions=response.extensions, request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


Trace = Callable[[str, dict[str, Any]], Awaitable[None]]


def _marking(state: Reading, inner: Trace | None) -> Trace:
    """httpcore's ``trace`` extension that sets ``state.sent`` once the request's body is
    written (HTTP/1.1 or 2), then calls the one it replaces, if any."""
    async def trace(name: str, info: dict[str, Any]) -> None:
        if name.endswith(".send_request_body.complete"):
            state.sent = True
        if inner is not None:
            await inner(name, info)
    return trace


def _with_certificate(verify: Any) -> Any:
    """``verify`` (litellm's TLS setting: its context, or False) carrying the client
    certificate litellm is given (``SSL_CERTIFICATE`` or ``litellm.ssl_certificate``: one
    file, certificate and key), as litellm's handler's httpx client loads it (into the same
    context): a server asking for one (mutual TLS) refused every judge call without it."""
    import litellm

    cert = os.getenv("SSL_CERTIFICATE", litellm.ssl_certificate)
    if not cert:
        return verify
    if not isinstance(verify, ssl.SSLContext):  # verification off (SSL_VERIFY=False)
        verify = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        verify.check_hostname, verify.verify_mode = False, ssl.CERT_NONE
    try:
        verify.load_cert_chain(cert)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError; a server asking for
        # one refuses the call, an error as any other (not an exception out of the judge)
        log.warning("judge: SSL_CERTIFICATE %s not loaded (%s)", cert[:200], e)
    return verify


def _http_client(verify: Any) -> httpx.AsyncClient:
    """An httpx client on the bounded transport, through the proxy the environment names
    (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY) as litellm's and the SDK's own clients go:
    httpx reads none from the environment for a client given its transport, so each proxy
    is mounted here, bounded too; with litellm's client certificate (``_with_certificate``).
    It keeps no cookie, as litellm's handler's clients keep none (``blocked_cookie_jar``):
    shared by every judge on the loop, it sent each cookie a server set back on every later
    call, the jar growing with each new name. It sends litellm's User-Agent, as litellm's
    handler does (``get_default_headers``: litellm/VERSION, or LITELLM_USER_AGENT), not
    httpx's; the openai SDK sets its own over it."""
    from litellm.llms.custom_httpx.http_handler import (
        AsyncHTTPHandler,
        blocked_cookie_jar,
        get_default_headers,
    )

    verify = _with_certificate(verify)
    inner = httpx.AsyncHTTPTransport(verify=verify)
    proxies = AsyncHTTPHandler.create_httpx_proxy_mounts(inner, verify=verify, cert=None) or {}
    mounts = {pattern: None if proxy is None else _BoundedTransport(proxy)
              for pattern, proxy in proxies.items()}
    return httpx.AsyncClient(transport=_BoundedTransport(inner), mounts=mounts, verify=verify,
                             cookies=blocked_cookie_jar(), follow_redirects=True, timeout=None,
                             headers=get_default_headers())


# event loop -> (api_base, api_key) -> client: an httpx client belongs to the loop it runs on
# (``_HANDLER``: the litellm handler of the other providers)
_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], Any]] = (
    weakref.WeakKeyDictionary())


_HANDLER = ("", "\0handler")  # no api_key is a NUL


def _openai_base(api_base: str) -> str:
    """The server litellm sends an ``openai/`` model to: ``api_base``, else
    ``litellm.api_base``, OPENAI_BASE_URL, OPENAI_API_BASE (litellm reads both; the SDK, the
    first only), else "" (the SDK's default, OpenAI's)."""
    import litellm

    return (api_base or litellm.api_base or os.getenv("OPENAI_BASE_URL")
            or os.getenv("OPENAI_API_BASE") or "")


def bounded_client(api_base: str, api_key: str) -> Any | None:
    """This loop's ``AsyncOpenAI`` client for ``api_base`` (litellm's for an ``openai/``
    model when empty, ``_openai_base``), or None when the SDK cannot make one (no API key
    anywhere: litellm then says so itself)."""
    from openai import AsyncOpenAI, OpenAIError  # with litellm, which needs it

    api_base = _openai_base(api_base)
    clients = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
    found = clients.get((api_base, api_key))
    if found is None:
        # as litellm makes the openai SDK's client (its TLS settings, redirects followed), on
        # an httpx transport; retries and the whole call's deadline are the judge's
        from litellm.llms.custom_httpx.http_handler import get_ssl_configuration

        verify = get_ssl_configuration()
        http = _http_client(verify)
        try:
            found = AsyncOpenAI(base_url=api_base or None, api_key=api_key or None,
                                max_retries=0, http_client=http)  # type: ignore[arg-type]
        except OpenAIError:
            return None
        clients[(api_base, api_key)] = found
    return found


# litellm's providers that send through the litellm ``AsyncHTTPHandler`` they are handed
# (``client=``) at the pinned litellm (1.110.2): each checked against the scripted server
# (tests/judge/test_judge_http_client.py). The providers on the openai SDK refuse a handler:
# they take an ``AsyncOpenAI`` client (``SDK_PROVIDERS``). The others are left to their own
# client: some take no client (cohere), some were not checked (vertex_ai: Google auth;
# databricks: its credentials).
HANDLER_PROVIDERS = frozenset((
    "anthropic", "azure_ai", "bedrock", "deepseek", "fireworks_ai", "gemini",
    "groq", "hosted_vllm", "huggingface", "mistral", "ollama", "ollama_chat", "openrouter",
    "together_ai", "xai"))

# litellm's providers that send through the openai SDK client they are handed: each is handed
# ``bounded_client`` on the server and key litellm resolves for it (its own base URL and key,
# not OpenAI's), checked the same way.
SDK_PROVIDERS = frozenset((
    "cerebras", "dashscope", "deepinfra", "friendliai", "github", "lambda_ai", "litellm_proxy",
    "lm_studio", "moonshot", "nebius", "novita", "nscale", "nvidia_nim", "perplexity",
    "sambanova"))


def bounded_handler() -> Any:
    """This loop's litellm ``AsyncHTTPHandler`` on the bounded client (``_http_client``), for
    the ``HANDLER_PROVIDERS``."""
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler, get_ssl_configuration

    clients = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
    found = clients.get(_HANDLER)
    if found is None:
        found = AsyncHTTPHandler(transport=_BoundedTransport(httpx.AsyncHTTPTransport()))
        found.client = _http_client(get_ssl_configuration())  # its own, closed with ours
        clients[_HANDLER] = found
    return found


async def close_bounded_clients() -> None:
    """Close the running loop's clients (call on it, at shutdown)."""
    for key, client in _CLIENTS.pop(asyncio.get_running_loop(), {}).items():
        with contextlib.suppress(Exception):
            await (client.client.aclose() if key == _HANDLER else client.close())
