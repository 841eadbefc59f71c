"""The judging run: contests in, both-order judgments out, resumable after any crash.

Steps: load vignettes, responses and contests (every problem reported with file, line and field)
→ schedule both orders with a seeded shuffle → skip what the SQLite cache already holds → ask the
backend for the rest with bounded concurrency, committing each judgment to the cache as it
arrives → write the judgments table atomically from the cache, in schedule order → summary of
invalid verdicts and retried calls.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from honestci.audit.errors import InputError, Problem
from honestci.audit.progress import Meter, ProgressLike, as_progress
from honestci.judges.backends.base import Backend, Completion, JudgeRequest
from honestci.judges.cache import CachedJudgment, CacheKey, JudgmentCache, canonical_json, texts_sha256
from honestci.judges.parse import parse_verdict
from honestci.judges.prompts import PairwiseTemplate
from honestci.judges.schedule import Contest, Job, Schedule, schedule_both_orders
from honestci.judges.tables import JUDGMENT_COLUMNS, read_rows, require_columns, write_table

#: Extra judgments-table columns a judging run writes (kept and ignored by the loaders).
RUN_EXTRA_COLUMNS = ("invalid_reason", "attempts", "status")
DEFAULT_SAMPLING = {"temperature": 0.0, "max_tokens": 512}


@dataclass(frozen=True)
class Texts:
    """Vignette and response texts by id, with each response's vignette."""

    vignettes: dict[str, str]
    responses: dict[str, str]
    response_vignette: dict[str, str]


def load_texts(vignettes_path: str | Path, responses_path: str | Path) -> Texts:
    """Read the vignettes and responses tables (``docs/data-formats.md``)."""
    vignette_rows = read_rows(vignettes_path)
    require_columns(vignettes_path, vignette_rows, ("vignette_id", "text"))
    response_rows = read_rows(responses_path)
    require_columns(responses_path, response_rows, ("response_id", "vignette_id"))
    problems, vignettes, responses, owner = [], {}, {}, {}
    for row in vignette_rows:
        vid = row.values["vignette_id"]
        if vid in vignettes:
            problems.append(
                Problem(
                    str(vignettes_path), row.line, "vignette_id", f"duplicate id {vid!r}", "make vignette ids unique"
                )
            )
        vignettes[vid] = row.values["text"]
    for row in response_rows:
        rid, vid = row.values["response_id"], row.values["vignette_id"]
        if rid in responses:
            problems.append(
                Problem(
                    str(responses_path), row.line, "response_id", f"duplicate id {rid!r}", "make response ids unique"
                )
            )
        if vid not in vignettes:
            problems.append(
                Problem(
                    str(responses_path),
                    row.line,
                    "vignette_id",
                    f"unknown vignette {vid!r}",
                    f"add it to {vignettes_path}",
                )
            )
        text = row.values.get("text")
        if text is None:
            problems.append(
                Problem(
                    str(responses_path),
                    row.line,
                    "text",
                    "missing",
                    "give every response a text (an empty string is allowed)",
                )
            )
        responses[rid] = text or ""
        owner[rid] = vid
    if problems:
        raise InputError("Vignettes or responses are not usable for judging.", problems)
    return Texts(vignettes, responses, owner)


def load_contests(path: str | Path, texts: Texts) -> list[Contest]:
    """Contests from a CSV/JSONL/Parquet file with columns ``vignette_id, response_a, response_b``."""
    rows = read_rows(path)
    require_columns(path, rows, ("vignette_id", "response_a", "response_b"))
    problems, contests = [], []
    for row in rows:
        vid = row.values["vignette_id"]
        if vid not in texts.vignettes:
            problems.append(
                Problem(
                    str(path), row.line, "vignette_id", f"unknown vignette {vid!r}", "add it to the vignettes table"
                )
            )
        for column in ("response_a", "response_b"):
            rid = row.values[column]
            if rid not in texts.responses:
                problems.append(
                    Problem(str(path), row.line, column, f"unknown response {rid!r}", "add it to the responses table")
                )
            elif texts.response_vignette[rid] != vid:
                problems.append(
                    Problem(
                        str(path),
                        row.line,
                        column,
                        f"response {rid!r} answers vignette {texts.response_vignette[rid]!r}, not {vid!r}",
                        "compare responses to the same vignette",
                    )
                )
        contests.append(Contest(vid, row.values["response_a"], row.values["response_b"]))
    if not rows:
        problems.append(Problem(str(path), None, None, "no contests", "list at least one contest"))
    if problems:
        raise InputError(f"{path}: contests cannot be judged.", problems)
    return contests


@dataclass(frozen=True)
class RunSummary:
    """What a judging run did. ``n_from_cache + n_asked == n_jobs`` always (nothing is lost).

    Counts cover the whole output, cached judgments included: ``n_invalid`` counts every invalid
    verdict (unparseable replies plus ``n_failed`` calls that got no usable reply after every
    retry); ``n_retried_calls`` counts judgments that needed more than one attempt and
    ``n_retries`` the attempts beyond the first, in all.
    """

    judge: str
    template: str
    template_sha256: str
    seed: int | None
    sampling: dict
    n_contests: int
    n_jobs: int
    n_from_cache: int
    n_asked: int
    n_invalid: int
    n_failed: int
    n_retried_calls: int
    n_retries: int
    elapsed_s: float
    out_path: str
    invalid_reasons: tuple[tuple[str, int], ...] = field(default=())

    def to_frame(self) -> pd.DataFrame:
        rows = [
            ("judge", self.judge),
            ("template", f"{self.template} ({self.template_sha256[:12]})"),
            ("seed", self.seed),
            ("contests", self.n_contests),
            ("judgments (both orders)", self.n_jobs),
            ("from cache", self.n_from_cache),
            ("asked now", self.n_asked),
            ("invalid", self.n_invalid),
            ("  of which failed calls", self.n_failed),
            ("retried calls", self.n_retried_calls),
            ("  retries in all", self.n_retries),
            ("elapsed s", round(self.elapsed_s, 2)),
            ("output", self.out_path),
        ]
        rows += [(f"  invalid: {reason}", count) for reason, count in self.invalid_reasons]
        return pd.DataFrame(rows, columns=["item", "value"])

    def __str__(self) -> str:
        return self.to_frame().to_string(index=False, header=False)


def _requests(
    schedule: Schedule, texts: Texts, template: PairwiseTemplate, judge: str, sampling: dict
) -> list[tuple[Job, CacheKey, JudgeRequest]]:
    sampling_json = canonical_json(sampling)
    out = []
    for job in schedule.jobs:
        scenario = texts.vignettes[job.vignette_id]
        first, second = texts.responses[job.response_first], texts.responses[job.response_second]
        key = CacheKey(
            judge,
            template.sha256,
            job.response_first,
            job.response_second,
            texts_sha256(scenario, first, second),
            sampling_json,
        )
        request = JudgeRequest(
            job.vignette_id,
            job.response_first,
            job.response_second,
            tuple(template.render(scenario, first, second)),
            dict(sampling),
        )
        out.append((job, key, request))
    return out


def _record(key: CacheKey, request: JudgeRequest, completion: Completion, template: PairwiseTemplate) -> CachedJudgment:
    prompt_sha = completion.recorded_prompt_sha256 or template.sha256
    if completion.recorded_verdict is not None:
        reason = None if completion.recorded_verdict != "invalid" else "recorded as invalid"
        return CachedJudgment(
            key,
            request.vignette_id,
            completion.recorded_verdict,
            completion.text,
            prompt_sha,
            "ok",
            reason,
            completion.attempts,
        )
    if completion.text is None:
        return CachedJudgment(
            key,
            request.vignette_id,
            "invalid",
            None,
            prompt_sha,
            "failed",
            completion.error or "no reply",
            completion.attempts,
        )
    parsed = parse_verdict(completion.text)
    return CachedJudgment(
        key,
        request.vignette_id,
        parsed.verdict,
        completion.text,
        prompt_sha,
        "ok",
        None if parsed.position is not None else f"unparseable: {parsed.rule}",
        completion.attempts,
    )


async def _judge_pending(
    pending, backend: Backend, cache: JudgmentCache, template: PairwiseTemplate, meter: Meter
) -> None:
    """Ask for every pending judgment with ``backend.concurrency`` workers, caching each at once.

    A backend with ``complete_many`` (the Batch API) gets every pending request in one call; each
    result is cached as soon as the batch returns.
    """
    queue: asyncio.Queue = asyncio.Queue()
    invalid = 0  # invalid verdicts among this run's judgments (workers share one event loop)
    for item in pending:
        queue.put_nowait(item)

    async def worker() -> None:
        nonlocal invalid
        while True:
            try:
                _job, key, request = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            completion = await backend.complete(request)
            record = _record(key, request, completion, template)
            cache.put(record)  # committed before anything else happens: a kill now loses nothing
            invalid += record.verdict == "invalid"
            meter.advance(invalid=invalid or None)

    complete_many = getattr(backend, "complete_many", None)
    if complete_many is not None:  # a batch backend: all pending at once, then each cached in turn
        try:
            completions = await complete_many([request for _, _, request in pending])
            for (_job, key, request), completion in zip(pending, completions, strict=True):
                record = _record(key, request, completion, template)
                cache.put(record)
                invalid += record.verdict == "invalid"
                meter.advance(invalid=invalid or None)
        finally:
            await backend.aclose()
        return
    workers = [asyncio.create_task(worker()) for _ in range(max(1, backend.concurrency))]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await backend.aclose()


def run_judging(
    contests: Sequence[Contest] | str | Path,
    texts: Texts,
    backend: Backend,
    template: PairwiseTemplate,
    out_path: str | Path,
    *,
    cache_path: str | Path | None = None,
    seed: int | np.random.Generator = 0,
    sampling: dict | None = None,
    retry_failed: bool = False,
    progress: ProgressLike = True,
) -> RunSummary:
    """Judge every contest in both orders and write the judgments table to ``out_path``.

    Parameters
    ----------
    contests
        Contests, or a contests file (``vignette_id, response_a, response_b``).
    texts
        From :func:`load_texts`.
    backend
        Any :class:`~honestci.judges.backends.base.Backend`.
    out_path
        The judgments table (JSONL, CSV or Parquet), written atomically at the end.
    cache_path
        SQLite cache (default ``<out_path>.cache.sqlite``). A finished judgment is never asked again.
    seed
        Seed of the both-order shuffle (recorded in the summary).
    sampling
        Sent with every request (default ``{"temperature": 0.0, "max_tokens": 512}``); part of the
        cache key.
    retry_failed
        Ask again for judgments cached as failed calls (no usable reply after every retry).
    progress
        Where progress goes (:func:`honestci.audit.progress.as_progress`): by default standard
        error, a live bar on a terminal and otherwise a line with rate and ETA every 10 s or 10% of
        the judgments (one judgment is one order of one contest); False or None for none.
    """
    started = time.monotonic()
    if isinstance(contests, (str, Path)):
        contests = load_contests(contests, texts)
    sampling = dict(DEFAULT_SAMPLING if sampling is None else sampling)
    schedule = schedule_both_orders(contests, seed)
    judge = backend.judge_name
    requests = _requests(schedule, texts, template, judge, sampling)
    out_path = Path(out_path)
    cache_path = Path(cache_path) if cache_path is not None else out_path.with_name(out_path.name + ".cache.sqlite")
    with JudgmentCache(cache_path) as cache:
        cached = cache.get_many(key for _, key, _ in requests)
        done = {d for d, r in cached.items() if r.status == "ok" or not retry_failed}
        pending = [item for item in requests if item[1].digest not in done]
        meter = as_progress(progress).meter(
            len(requests), f"judging ({judge})", "judgments", done=len(requests) - len(pending)
        )
        try:
            if pending:
                asyncio.run(_judge_pending(pending, backend, cache, template, meter))
        finally:
            meter.close()
        finished = cache.get_many(key for _, key, _ in requests)
    missing = [job for job, key, _ in requests if key.digest not in finished]
    if missing:  # cannot happen unless the cache file was changed behind our back
        raise InputError(
            f"{len(missing)} judgment(s) missing from {cache_path} after the run.",
            fix="run the same command again to resume",
        )
    rows: list[dict[str, Any]] = []
    records = []
    for job, key, _ in requests:
        record = finished[key.digest]
        records.append(record)
        rows.append(
            {
                "judge": judge,
                "vignette_id": job.vignette_id,
                "response_first": job.response_first,
                "response_second": job.response_second,
                "verdict": record.verdict,
                "raw": record.raw,
                "prompt_sha256": record.prompt_sha256,
                "invalid_reason": record.reason,
                "attempts": record.attempts,
                "status": record.status,
            }
        )
    write_table(rows, out_path, JUDGMENT_COLUMNS + RUN_EXTRA_COLUMNS)
    reasons = Counter(_reason_kind(r.reason) for r in records if r.verdict == "invalid")
    return RunSummary(
        judge=judge,
        template=template.label,
        template_sha256=template.sha256,
        seed=schedule.seed,
        sampling=sampling,
        n_contests=len(contests),
        n_jobs=len(requests),
        n_from_cache=len(requests) - len(pending),
        n_asked=len(pending),
        n_invalid=sum(r.verdict == "invalid" for r in records),
        n_failed=sum(r.status == "failed" for r in records),
        n_retried_calls=sum(r.attempts > 1 for r in records),
        n_retries=sum(max(r.attempts - 1, 0) for r in records),
        elapsed_s=time.monotonic() - started,
        out_path=str(out_path),
        invalid_reasons=tuple(sorted(reasons.items(), key=lambda kv: -kv[1])),
    )


def _reason_kind(reason: str | None) -> str:
    """Group reasons for the summary (drop per-call detail such as attempt counts)."""
    if not reason:
        return "unknown"
    if reason.startswith("gave up"):
        return "no usable reply after retries (" + reason.split("last: ", 1)[-1] + ")"
    return reason.split(" (", 1)[0] if reason.startswith("unparseable") else reason
