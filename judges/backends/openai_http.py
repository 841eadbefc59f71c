"""OpenAI-compatible chat-completions backend (vLLM's server, TGI, SGLang, hosted APIs).

Async (httpx), with at most ``concurrency`` requests in flight, a per-request timeout, and retries
with capped exponential backoff and jitter on timeouts, connection errors, 408/409/425/429, 5xx
and malformed (non-OpenAI) replies; a ``Retry-After`` header is honoured up to the cap. When every
retry fails the judgment is recorded as ``invalid`` with the reason — it is counted, never lost
and never guessed. 401/403/404 mean the run is misconfigured, so the run stops (finished
judgments stay cached).

The API key is read from an environment variable (default ``OPENAI_API_KEY``); it is sent only in
the ``Authorization`` header and never logged, stored in the cache, or written to an output.
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass

from honestci.audit.errors import require_extra
from honestci.judges.backends.base import BackendFatalError, Completion, JudgeRequest

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
#: Connections per httpx client. httpcore's pool does bookkeeping over all of its connections on
#: every request and release (encode/httpx#3215), so one client with 32 connections ran slower
#: than one with 8 (bench/bench_judge_throughput.py); several small clients avoid that.
CONNECTIONS_PER_CLIENT = 8
FATAL_STATUS = frozenset({401, 403, 404})


@dataclass(frozen=True)
class Attempt:
    """The outcome of one POST: the reply text, or why there is none.

    ``retryable``: asking again may help; ``endpoint_down``: the server itself failed (timeout,
    connection error, 408/409/425/429, 5xx), not just this reply; ``usage``: the total tokens the
    server reported, when it did.
    """

    text: str | None
    error: str
    retryable: bool
    retry_after: str | None = None
    endpoint_down: bool = False
    usage: int | None = None


class OpenAICompatibleBackend:
    """Judge through ``POST {base_url}/chat/completions``.

    Parameters
    ----------
    base_url
        e.g. ``http://127.0.0.1:8000/v1`` for a local vLLM server.
    model
        The model name the server expects; also the ``judge`` column of the output.
    api_key_env
        Name of the environment variable holding the key; unset means no ``Authorization`` header.
    concurrency
        Maximum requests in flight.
    timeout_s
        Per-request timeout (connect, read, write and pool).
    max_retries
        Retries after the first attempt (so at most ``max_retries + 1`` attempts).
    backoff_base_s, backoff_cap_s
        Delay before retry ``k`` (1-based) is ``U(0.5, 1) * min(cap, base * 2**(k-1))``.
    seed
        Seed of the jitter (retry timing only; it cannot change a verdict).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        seed: int = 0,
    ):
        require_extra("judges", "httpx", needed_by="the OpenAI-compatible HTTP backend")
        import httpx

        if concurrency < 1 or max_retries < 0 or timeout_s <= 0:
            raise BackendFatalError(
                "concurrency must be >= 1, max_retries >= 0 and timeout > 0.",
                fix="check --concurrency, --max-retries and --timeout",
            )
        self.judge_name = model
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._jitter = random.Random(seed)
        key = os.environ.get(api_key_env) or None
        self._secret = key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        n_clients = -(-concurrency // CONNECTIONS_PER_CLIENT)
        per_client = -(-concurrency // n_clients)
        self._clients = [
            httpx.AsyncClient(
                headers=headers,
                timeout=httpx.Timeout(timeout_s),
                limits=httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client),
            )
            for _ in range(n_clients)
        ]
        # One slot per allowed request in flight; slot i always uses client i % n_clients.
        self._slots: asyncio.Queue | None = None
        self._httpx = httpx

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAICompatibleBackend(url={self._url!r}, model={self.judge_name!r}, concurrency={self.concurrency})"

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _delay(self, retry: int, retry_after: str | None) -> float:
        return backoff_delay(self._jitter, retry, retry_after, self.backoff_base_s, self.backoff_cap_s)

    async def complete(self, request: JudgeRequest) -> Completion:
        if self._slots is None:  # created inside the running event loop
            self._slots = asyncio.Queue()
            for slot in range(self.concurrency):
                self._slots.put_nowait(slot)
        slot = await self._slots.get()
        try:
            return await self._complete(self.client(slot), request)
        finally:
            self._slots.put_nowait(slot)

    async def _complete(self, client, request: JudgeRequest) -> Completion:
        payload = self.payload(request)
        error = "no attempt made"
        for attempt in range(1, self.max_retries + 2):
            result = await self.attempt(client, payload)
            if result.text is not None:
                return Completion(result.text, attempt)
            if not result.retryable:
                return Completion(None, attempt, result.error)
            error = result.error
            if attempt <= self.max_retries:
                await asyncio.sleep(self._delay(attempt, result.retry_after))
        return Completion(None, self.max_retries + 1, f"gave up after {self.max_retries + 1} attempts; last: {error}")

    def payload(self, request: JudgeRequest) -> dict:
        """The chat-completions request body for ``request``."""
        return {"model": self.judge_name, "messages": list(request.messages), **request.sampling}

    def client(self, slot: int):
        """The httpx client that request slot ``slot`` uses."""
        return self._clients[slot % len(self._clients)]

    async def attempt(self, client, payload: dict) -> Attempt:
        """One POST, classified; raises :class:`BackendFatalError` on 401/403/404."""
        try:
            response = await client.post(self._url, json=payload)
        except self._httpx.TimeoutException as exc:
            return Attempt(None, f"timeout ({type(exc).__name__})", True, endpoint_down=True)
        except self._httpx.TransportError as exc:
            return Attempt(None, f"connection error ({type(exc).__name__})", True, endpoint_down=True)
        status = response.status_code
        if status == 200:
            text, problem = _message_content(response)
            return Attempt(text, problem, text is None, usage=_total_tokens(response) if text is not None else None)
        if status in FATAL_STATUS:
            raise BackendFatalError(
                f"The judge server answered HTTP {status} for model {self.judge_name!r} at {self._url}.",
                fix="check --base-url, --model and the API key environment variable",
            )
        if status in RETRYABLE_STATUS or status >= 500:
            return Attempt(None, f"HTTP {status}", True, response.headers.get("retry-after"), endpoint_down=True)
        return Attempt(None, f"HTTP {status} (not retried): {self._scrub(response.text[:200])}", False)

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()


def _message_content(response) -> tuple[str | None, str]:
    """The first choice's message content, or None and why there is none.

    ``content: null`` (a refusal, a tool call, a truncated or filtered generation) is no verdict
    at all: the request failed and is retried, then cached as failed so ``--retry-failed`` asks
    again; it is never recorded as a reply that happens to be unparseable.
    """
    try:
        body = response.json()
    except ValueError:
        return None, "malformed reply (not an OpenAI chat completion)"
    return completion_content(body)


def completion_content(body) -> tuple[str | None, str]:
    """:func:`_message_content` of an already decoded chat-completion body (also a Batch API result's body)."""
    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None, "malformed reply (not an OpenAI chat completion)"
    if not isinstance(message, dict):
        return None, "malformed reply (not an OpenAI chat completion)"
    content = message.get("content")
    if content is None:
        return None, "reply without content (content: null)"
    if not isinstance(content, str):
        return None, "malformed reply (content is not text)"
    return content, ""


def _total_tokens(response) -> int | None:
    """``usage.total_tokens`` (or prompt + completion tokens) of a chat completion, if reported."""
    try:
        usage = response.json().get("usage") or {}
        total = usage.get("total_tokens")
        if total is None:
            total = usage["prompt_tokens"] + usage["completion_tokens"]
        return int(total)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def backoff_delay(jitter: random.Random, retry: int, retry_after: str | None, base_s: float, cap_s: float) -> float:
    """Delay before retry ``retry`` (1-based): ``U(0.5, 1) * min(cap, base * 2**(retry-1))``, at least a
    numeric ``Retry-After`` (itself capped at ``cap``)."""
    delay = jitter.uniform(0.5, 1.0) * min(cap_s, base_s * 2 ** (retry - 1))
    if retry_after:
        try:
            delay = max(delay, min(float(retry_after), cap_s))
        except ValueError:
            pass  # an HTTP-date Retry-After: keep our own backoff
    return delay
