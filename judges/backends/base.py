"""The backend interface shared by every judge backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from honestci.audit.errors import InputError


@dataclass(frozen=True)
class JudgeRequest:
    """One ordered comparison to judge: the rendered chat messages and who is shown first."""

    vignette_id: str
    response_first: str
    response_second: str
    messages: tuple[dict, ...]
    sampling: dict


@dataclass(frozen=True)
class Completion:
    """A backend's answer to one request.

    ``text`` is the judge's reply, or None when no usable reply came back after every retry
    (``error`` says why). A replayed judgment carries its recorded verdict and prompt hash.
    """

    text: str | None
    attempts: int
    error: str | None = None
    recorded_verdict: str | None = None
    recorded_prompt_sha256: str | None = None


class BackendFatalError(InputError):
    """The backend cannot judge anything as configured (bad URL, key or model name): stop the run.

    Finished judgments stay in the cache; fix the configuration and run again to resume.
    """


class Backend(Protocol):
    """What :func:`honestci.judges.run.run_judging` needs from a backend."""

    judge_name: str
    concurrency: int

    async def complete(self, request: JudgeRequest) -> Completion: ...

    async def aclose(self) -> None: ...
