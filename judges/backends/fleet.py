"""Judging across several OpenAI-compatible endpoints serving the same judge (e.g. a fleet of vLLM servers).

Each request goes to the least-loaded endpoint (in-flight requests ÷ its ``max_concurrency``; ties
in turn) among those with room in their budgets: at most ``max_concurrency`` in flight, at most
``requests_per_minute`` requests and ``tokens_per_minute`` tokens in any sliding 60-second window.
A request's tokens are estimated before it is sent as ``prompt characters / 4 + max_tokens`` and
corrected to the ``usage`` the server reports. An endpoint that fails (timeout, connection error,
408/409/425/429, 5xx) is cooled down for ``cooldown_s`` and the request is retried on another
endpoint after the usual capped, jittered backoff; after its cool-down the endpoint gets one probe
request at a time until one succeeds. Attempts are counted across endpoints (at most
``max_retries + 1`` per judgment); when every attempt fails the judgment is recorded as
``invalid`` with the reason, as with one endpoint.

The verdict depends only on the reply text, never on which endpoint served it; the cache key holds
the judge's name, so a resumed run reuses what any endpoint finished. Which endpoint served what is
counted in :meth:`FleetBackend.endpoint_table` (the judgments table has no column for it).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import pandas as pd

from honestci.audit.errors import InputError, Problem
from honestci.judges.backends.base import BackendFatalError, Completion, JudgeRequest
from honestci.judges.backends.openai_http import OpenAICompatibleBackend, backoff_delay

#: Length of the sliding window the per-minute budgets apply to.
WINDOW_S = 60.0


@dataclass(frozen=True)
class Endpoint:
    """One OpenAI-compatible server and its budgets (None: no limit)."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 8
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None

    def validate(self, where: str) -> None:
        """Raise :class:`BackendFatalError` naming ``where`` when a budget is not positive."""
        if not self.base_url.startswith(("http://", "https://")):
            raise BackendFatalError(
                f"{where}: base_url {self.base_url!r} is not an http(s) URL.", fix="e.g. http://127.0.0.1:8000/v1"
            )
        if self.max_concurrency < 1:
            raise BackendFatalError(f"{where}: max_concurrency must be >= 1.", fix="set max_concurrency to 1 or more")
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise BackendFatalError(f"{where}: {name} must be > 0 (or absent: no limit).", fix=f"fix {name}")


def load_endpoints(
    path: str | Path, *, model: str | None = None, api_key_env: str = "OPENAI_API_KEY", max_concurrency: int = 8
) -> list[Endpoint]:
    """Endpoints from a YAML file: ``endpoints:`` a list of mappings with ``base_url`` and optionally
    ``model``, ``api_key_env``, ``max_concurrency``, ``requests_per_minute``, ``tokens_per_minute``.

    A top-level ``model``, ``api_key_env`` or ``max_concurrency`` (else the arguments) is the default
    of every endpoint. Every problem is reported with the file and the field.
    """
    import yaml

    where = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{where}: cannot read the endpoints file ({exc}).", fix="give a readable YAML file") from exc
    if not isinstance(data, dict) or not isinstance(data.get("endpoints"), list) or not data["endpoints"]:
        raise InputError(
            f"{where}: no endpoints list.",
            fix="write `endpoints:` followed by a list of mappings, each with a base_url",
        )
    defaults = {"model": model, "api_key_env": api_key_env, "max_concurrency": max_concurrency}
    problems = [
        Problem(where, None, key, "unknown top-level key", "use endpoints, model, api_key_env or max_concurrency")
        for key in data
        if key not in ("endpoints", *defaults)
    ]
    defaults.update({k: data[k] for k in defaults if data.get(k) is not None})
    known = {f.name for f in fields(Endpoint)}
    out = []
    for i, item in enumerate(data["endpoints"]):
        field_of = f"endpoints[{i}]"
        if not isinstance(item, dict):
            problems.append(Problem(where, None, field_of, "not a mapping", "give base_url: URL and any budgets"))
            continue
        spec = {**defaults, **item}
        problems += [
            Problem(where, None, f"{field_of}.{key}", "unknown key", f"use one of {sorted(known)}")
            for key in item
            if key not in known
        ]
        for key in ("base_url", "model"):
            if not isinstance(spec.get(key), str) or not spec[key]:
                problems.append(
                    Problem(where, None, f"{field_of}.{key}", "missing", f"give {key} (or --model for every endpoint)")
                )
        for key, kind in (("max_concurrency", int), ("requests_per_minute", float), ("tokens_per_minute", float)):
            value = spec.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                problems.append(
                    Problem(
                        where,
                        None,
                        f"{field_of}.{key}",
                        f"{value!r} is not a positive number",
                        "give a number > 0, or leave it out for no limit",
                    )
                )
            elif kind is int and int(value) != value:
                problems.append(
                    Problem(where, None, f"{field_of}.{key}", f"{value!r} is not a whole number", "give a whole number")
                )
        if any(p.field and p.field.startswith(field_of) for p in problems):
            continue
        out.append(Endpoint(**{k: v for k, v in spec.items() if k in known}))
    if problems:
        raise InputError(f"{where}: the endpoints are not usable.", problems)
    return out


def estimate_tokens(request: JudgeRequest) -> int:
    """Tokens a request may use before the server says: prompt characters / 4 + ``max_tokens`` (512 if unset)."""
    chars = sum(len(str(m.get("content") or "")) for m in request.messages)
    return chars // 4 + int(request.sampling.get("max_tokens", 512))


class _Window:
    """Requests and tokens spent in the last ``WINDOW_S`` seconds (entries ``[time, tokens]``)."""

    def __init__(self) -> None:
        self.entries: deque[list[float]] = deque()

    def prune(self, now: float) -> None:
        while self.entries and self.entries[0][0] <= now - WINDOW_S:
            self.entries.popleft()

    def wait_s(self, now: float, tokens: int, rpm: float | None, tpm: float | None) -> float:
        """Seconds until one more request of ``tokens`` fits both budgets (0: it fits now).

        A request larger than the whole token budget still goes alone into an empty window, so it
        cannot wait forever.
        """
        self.prune(now)
        wait = 0.0
        if rpm is not None and len(self.entries) >= rpm:
            wait = self.entries[len(self.entries) - int(rpm)][0] + WINDOW_S - now
        if tpm is not None and self.entries:
            spent = sum(e[1] for e in self.entries)
            for when, used in self.entries:  # the oldest entries leave the window first
                if spent + tokens <= tpm:
                    break
                spent -= used
                wait = max(wait, when + WINDOW_S - now)
        return max(wait, 0.0)


class _State:
    def __init__(self, endpoint: Endpoint, backend: OpenAICompatibleBackend):
        self.endpoint = endpoint
        self.backend = backend
        self.free_slots = list(range(endpoint.max_concurrency))
        self.window = _Window()
        self.down_until = 0.0
        self.probing = False  # after a failure: one request at a time until one succeeds
        self.served = 0
        self.failed = 0
        self.tokens = 0

    @property
    def in_flight(self) -> int:
        return self.endpoint.max_concurrency - len(self.free_slots)

    def wait_s(self, now: float, tokens: int) -> float | None:
        """0 if a request may go now, seconds until it may, or None if only a finishing request frees room."""
        if now < self.down_until:
            return self.down_until - now
        if self.in_flight >= (1 if self.probing else self.endpoint.max_concurrency):
            return None
        return self.window.wait_s(now, tokens, self.endpoint.requests_per_minute, self.endpoint.tokens_per_minute)


class FleetBackend:
    """A :class:`~honestci.judges.backends.base.Backend` spreading requests over several endpoints.

    Parameters
    ----------
    endpoints
        The servers; all must serve the same model name (the judge: one name in the cache key and
        the ``judge`` column).
    timeout_s, max_retries, backoff_base_s, backoff_cap_s
        As in :class:`~honestci.judges.backends.openai_http.OpenAICompatibleBackend`; retries count
        attempts on any endpoint.
    cooldown_s
        How long a failing endpoint gets no requests.
    seed
        Seed of the backoff jitter (timing only; it cannot change a verdict).
    clock
        Monotonic clock in seconds (tests may pass their own).
    """

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        *,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        cooldown_s: float = 10.0,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not endpoints:
            raise BackendFatalError(
                "No endpoints to judge with.", fix="give at least one --base-url or --endpoints file"
            )
        for i, endpoint in enumerate(endpoints, 1):
            endpoint.validate(f"endpoint {i} ({endpoint.base_url})")
        models = sorted({e.model for e in endpoints})
        if len(models) > 1:
            raise BackendFatalError(
                f"The endpoints serve different models {models}; one run judges with one judge.",
                fix="serve the same model name on every endpoint (vLLM: --served-model-name), or run once per judge",
            )
        urls = [e.base_url.rstrip("/") for e in endpoints]
        if len(set(urls)) < len(urls):
            raise BackendFatalError("An endpoint is listed twice.", fix="list each base URL once")
        if cooldown_s < 0:
            raise BackendFatalError("cooldown must be >= 0 seconds.", fix="check --cooldown")
        self.judge_name = models[0]
        self.concurrency = sum(e.max_concurrency for e in endpoints)
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._jitter = random.Random(seed)
        self._states = [
            _State(
                e,
                OpenAICompatibleBackend(
                    e.base_url,
                    e.model,
                    api_key_env=e.api_key_env,
                    concurrency=e.max_concurrency,
                    timeout_s=timeout_s,
                    max_retries=max_retries,
                    seed=seed,
                ),
            )
            for e in endpoints
        ]
        self._turn = 0
        self._changed: asyncio.Condition | None = None

    def __repr__(self) -> str:
        return f"FleetBackend(model={self.judge_name!r}, endpoints={[s.endpoint.base_url for s in self._states]})"

    def _pick(self, now: float, tokens: int) -> tuple[_State | None, float | None]:
        """The least-loaded endpoint that may take a request now, else how long to wait (None: until notified)."""
        best, best_load, soonest = None, None, None
        n = len(self._states)
        for k in range(n):
            state = self._states[(self._turn + k) % n]
            wait = state.wait_s(now, tokens)
            if wait == 0.0:
                load = state.in_flight / state.endpoint.max_concurrency
                if best_load is None or load < best_load:
                    best, best_load = state, load
            elif wait is not None:
                soonest = wait if soonest is None else min(soonest, wait)
        if best is not None:
            self._turn = (self._states.index(best) + 1) % n
        return best, soonest

    async def _acquire(self, tokens: int) -> tuple[_State, int, list[float]]:
        if self._changed is None:  # created inside the running event loop
            self._changed = asyncio.Condition()
        async with self._changed:
            while True:
                now = self._clock()
                state, wait = self._pick(now, tokens)
                if state is not None:
                    entry = [now, float(tokens)]
                    state.window.entries.append(entry)
                    return state, state.free_slots.pop(), entry
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=wait)
                except TimeoutError:
                    pass  # a budget window or a cool-down has moved on: look again

    async def _release(self, state: _State, slot: int) -> None:
        assert self._changed is not None
        async with self._changed:
            state.free_slots.append(slot)
            self._changed.notify_all()

    async def complete(self, request: JudgeRequest) -> Completion:
        tokens = estimate_tokens(request)
        error = "no attempt made"
        for attempt in range(1, self.max_retries + 2):
            state, slot, entry = await self._acquire(tokens)
            try:
                payload = state.backend.payload(request)
                result = await state.backend.attempt(state.backend.client(slot), payload)
                if result.endpoint_down:  # before the slot is freed, so no waiter picks this endpoint
                    state.down_until = self._clock() + self.cooldown_s
                    state.probing = True
            finally:
                await self._release(state, slot)
            if result.usage is not None:
                entry[1] = float(result.usage)  # the server's count replaces the estimate
                state.tokens += result.usage
            if result.text is not None:
                state.served += 1
                state.probing = False
                return Completion(result.text, attempt)
            state.failed += 1
            if not result.retryable:
                return Completion(None, attempt, result.error)
            error = f"{result.error} at {state.endpoint.base_url}"
            if attempt <= self.max_retries:
                delay = backoff_delay(
                    self._jitter, attempt, result.retry_after, self.backoff_base_s, self.backoff_cap_s
                )
                await asyncio.sleep(delay)
        return Completion(None, self.max_retries + 1, f"gave up after {self.max_retries + 1} attempts; last: {error}")

    def endpoint_table(self) -> pd.DataFrame:
        """Per endpoint: judgments served, failed attempts and tokens the server reported."""
        return pd.DataFrame(
            [(s.endpoint.base_url, s.served, s.failed, s.tokens) for s in self._states],
            columns=["endpoint", "served", "failed_attempts", "reported_tokens"],
        )

    async def aclose(self) -> None:
        for state in self._states:
            await state.backend.aclose()
