"""The OpenAI Batch API as a judge backend: every pending judgment in one batch job.

Writes one JSONL line per request (``custom_id``, ``method: POST``, ``url: /v1/chat/completions``,
``body``: the same chat-completions request the HTTP backend sends), uploads it with
``POST /files`` (purpose ``batch``), creates the job with ``POST /batches``, polls
``GET /batches/{id}`` until it ends, reads the output (and error) file with
``GET /files/{id}/content`` and maps each result back by ``custom_id``. Results go into the same
SQLite cache as any backend's: a result that is not a usable chat completion is cached as a failed
call (``--retry-failed`` asks again). A run killed while the job is running does not remember the
job: the rerun submits the unfinished judgments again (finished ones are never asked again).

The API key is read from an environment variable and sent only in the ``Authorization`` header.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from honestci.audit.errors import require_extra
from honestci.judges.backends.base import BackendFatalError, Completion, JudgeRequest
from honestci.judges.backends.openai_http import completion_content

#: Batch states after which nothing more will happen.
FINAL_STATES = frozenset({"completed", "failed", "expired", "cancelled"})


class OpenAIBatchBackend:
    """Judge through the OpenAI Batch API at ``base_url``.

    Parameters
    ----------
    base_url, model, api_key_env
        As in :class:`~honestci.judges.backends.openai_http.OpenAICompatibleBackend`.
    poll_s
        Seconds between status checks.
    max_wait_s
        Give up waiting after this long (None: wait until the job ends); the unfinished judgments
        are then cached as failed calls.
    completion_window
        Sent with the job (the Batch API accepts ``24h``).
    timeout_s
        Per-HTTP-request timeout.
    """

    concurrency = 1

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        poll_s: float = 30.0,
        max_wait_s: float | None = None,
        completion_window: str = "24h",
        timeout_s: float = 60.0,
    ):
        require_extra("judges", "httpx", needed_by="the OpenAI Batch API backend")
        import httpx

        if poll_s <= 0 or (max_wait_s is not None and max_wait_s <= 0):
            raise BackendFatalError("poll interval and maximum wait must be > 0.", fix="check --batch-poll")
        self.judge_name = model
        self.poll_s = poll_s
        self.max_wait_s = max_wait_s
        self.completion_window = completion_window
        self._base = base_url.rstrip("/")
        key = os.environ.get(api_key_env) or None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout_s))
        self.batch_ids: list[str] = []

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIBatchBackend(url={self._base!r}, model={self.judge_name!r})"

    async def _call(self, method: str, path: str, **kwargs):
        response = await self._client.request(method, self._base + path, **kwargs)
        if response.status_code != 200:
            raise BackendFatalError(
                f"The Batch API answered HTTP {response.status_code} to {method} {self._base + path}.",
                fix="check --base-url (it must offer /files and /batches), --model and the API key",
            )
        return response

    async def complete_many(self, requests: list[JudgeRequest]) -> list[Completion]:
        """Every request in one batch job; the completions in the order of ``requests``."""
        lines: list[dict[str, Any]] = [
            {
                "custom_id": f"request-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": self.judge_name, "messages": list(r.messages), **r.sampling},
            }
            for i, r in enumerate(requests)
        ]
        content = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode("utf-8")
        uploaded = await self._call(
            "POST", "/files", files={"file": ("judging.jsonl", content, "application/jsonl")}, data={"purpose": "batch"}
        )
        created = await self._call(
            "POST",
            "/batches",
            json={
                "input_file_id": uploaded.json()["id"],
                "endpoint": "/v1/chat/completions",
                "completion_window": self.completion_window,
            },
        )
        batch = created.json()
        self.batch_ids.append(batch["id"])
        started = time.monotonic()
        while batch.get("status") not in FINAL_STATES:
            if self.max_wait_s is not None and time.monotonic() - started > self.max_wait_s:
                break
            await asyncio.sleep(self.poll_s)
            batch = (await self._call("GET", f"/batches/{batch['id']}")).json()
        results: dict[str, tuple[str | None, str]] = {}
        for file_key in ("output_file_id", "error_file_id"):
            if batch.get(file_key):
                text = (await self._call("GET", f"/files/{batch[file_key]}/content")).text
                for line in filter(None, text.splitlines()):
                    item = json.loads(line)
                    results[item["custom_id"]] = _result_content(item)
        missing = (None, f"no result in batch {batch['id']} (status {batch.get('status')})")
        completions = []
        for line in lines:
            text, error = results.get(line["custom_id"], missing)
            completions.append(Completion(text, 1, error or None))
        return completions

    async def complete(self, request: JudgeRequest) -> Completion:
        return (await self.complete_many([request]))[0]

    async def aclose(self) -> None:
        await self._client.aclose()


def _result_content(item: dict) -> tuple[str | None, str]:
    """The reply text of one Batch API output line, or None and why there is none."""
    response = item.get("response") or {}
    if item.get("error"):
        return None, f"batch error: {item['error'].get('message', item['error'])}"
    status = response.get("status_code")
    if status != 200:
        return None, f"HTTP {status} (batch result)"
    return completion_content(response.get("body"))
