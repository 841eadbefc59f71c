"""A crash-safe SQLite cache of finished judgments.

Key: (judge model, template SHA-256, ordered pair of response ids, SHA-256 of the texts shown,
sampling parameters as canonical JSON). Every finished judgment is committed the moment it
arrives (autocommit, WAL journal), so a run killed at any point — even with SIGKILL — keeps every
judgment it had finished and, on restart, asks only for the others. In WAL mode with
``synchronous=NORMAL`` a committed transaction survives a process crash; only an operating-system
crash or power loss can roll back the last few, which are then asked again (never lost silently).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SCHEMA_VERSION = 1


def canonical_json(value) -> str:
    """Sorted keys, no whitespace: equal parameters give equal text (and equal keys)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def texts_sha256(scenario: str, first_text: str, second_text: str) -> str:
    """SHA-256 of exactly what the judge is shown besides the template."""
    return hashlib.sha256(canonical_json([scenario, first_text, second_text]).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CacheKey:
    """Everything that determines a judge's answer to one ordered comparison."""

    judge: str
    template_sha256: str
    response_first: str
    response_second: str
    texts_sha256: str
    sampling_json: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(
            canonical_json(
                [
                    self.judge,
                    self.template_sha256,
                    self.response_first,
                    self.response_second,
                    self.texts_sha256,
                    self.sampling_json,
                ]
            ).encode("utf-8")
        ).hexdigest()


@dataclass(frozen=True)
class CachedJudgment:
    """One finished judgment. ``status`` is ``ok`` (the judge replied) or ``failed`` (no usable reply
    after every retry; ``verdict`` is then ``invalid`` and ``reason`` says why)."""

    key: CacheKey
    vignette_id: str
    verdict: str
    raw: str | None
    prompt_sha256: str
    status: str
    reason: str | None
    attempts: int


class JudgmentCache:
    """SQLite store of finished judgments (WAL mode, one commit per judgment)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: autocommit, each INSERT is its own committed transaction.
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            """CREATE TABLE IF NOT EXISTS judgments (
                digest TEXT PRIMARY KEY, judge TEXT NOT NULL, template_sha256 TEXT NOT NULL,
                response_first TEXT NOT NULL, response_second TEXT NOT NULL, texts_sha256 TEXT NOT NULL,
                sampling_json TEXT NOT NULL, vignette_id TEXT NOT NULL, verdict TEXT NOT NULL, raw TEXT,
                prompt_sha256 TEXT NOT NULL, status TEXT NOT NULL, reason TEXT, attempts INTEGER NOT NULL,
                finished_at REAL NOT NULL)"""
        )
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def put(self, record: CachedJudgment) -> None:
        """Store (or replace, when re-asking a failed one) a finished judgment, committed at once."""
        k = record.key
        self._db.execute(
            "INSERT OR REPLACE INTO judgments VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                k.digest,
                k.judge,
                k.template_sha256,
                k.response_first,
                k.response_second,
                k.texts_sha256,
                k.sampling_json,
                record.vignette_id,
                record.verdict,
                record.raw,
                record.prompt_sha256,
                record.status,
                record.reason,
                record.attempts,
                time.time(),
            ),
        )

    def get_many(self, keys: Iterable[CacheKey]) -> dict[str, CachedJudgment]:
        """The finished judgments among ``keys``, by digest."""
        by_digest = {k.digest: k for k in keys}
        found: dict[str, CachedJudgment] = {}
        digests = list(by_digest)
        for start in range(0, len(digests), 500):
            chunk = digests[start : start + 500]
            rows = self._db.execute(
                "SELECT digest, vignette_id, verdict, raw, prompt_sha256, status, reason, attempts "
                f"FROM judgments WHERE digest IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            for digest, vignette_id, verdict, raw, prompt_sha, status, reason, attempts in rows:
                found[digest] = CachedJudgment(
                    by_digest[digest], vignette_id, verdict, raw, prompt_sha, status, reason, attempts
                )
        return found

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM judgments").fetchone()[0]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> JudgmentCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
