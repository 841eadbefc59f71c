"""A judging run killed with SIGKILL at random points and restarted: zero lost, zero re-asked."""

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from honestci.judges.stub_server import StubConfig, StubJudgeServer, preferred_position, write_stub_study
from honestci.judges.tables import read_rows

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[1]


def _finished_pairs(cache: Path) -> set[tuple[str, str]]:
    if not cache.exists():
        return set()
    with sqlite3.connect(cache) as db:
        return set(db.execute("SELECT response_first, response_second FROM judgments"))


def test_sigkill_at_random_points_then_resume_loses_nothing_and_reasks_nothing(tmp_path):
    rng = random.Random(20261129)
    study = write_stub_study(tmp_path, n_contests=50)
    out, cache = tmp_path / "judgments.jsonl", tmp_path / "judgments.jsonl.cache.sqlite"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    with StubJudgeServer(StubConfig(latency_s=0.05, fault_rates={"429": 0.05}, seed=4)) as server:
        command = [
            sys.executable,
            "-m",
            "honestci",
            "judge",
            str(study["contests"]),
            "--vignettes",
            str(study["vignettes"]),
            "--responses",
            str(study["responses"]),
            "--out",
            str(out),
            "--base-url",
            server.base_url,
            "--model",
            "stub-judge",
            "--concurrency",
            "4",
            "--max-retries",
            "8",
            "--backoff-base",
            "0.01",
            "--backoff-cap",
            "0.05",
            "--timeout",
            "5",
            "--seed",
            "7",
            "--no-progress",
        ]
        finished_before: list[set] = []
        log_marks: list[int] = []
        for round_number in range(5):
            process = subprocess.Popen(
                command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            if round_number % 2 == 0:  # kill after a random number of requests, mid-flight
                target = len(server.log) + rng.randint(5, 60)
                while len(server.log) < target and process.poll() is None:
                    time.sleep(0.002)
                time.sleep(rng.uniform(0, 0.03))
            else:  # kill at a random time: start-up, cache opening, judging
                time.sleep(rng.uniform(0.3, 2.5))
            process.send_signal(signal.SIGKILL)
            process.wait()
            log_marks.append(len(server.log))
            finished_before.append(_finished_pairs(cache))
        result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        log = list(server.log)
    assert result.returncode == 0, result.stderr
    # The kills did interrupt work in progress: some finished, some not.
    assert sum(0 < len(done) < 100 for done in finished_before) >= 2
    # Zero re-asked: after each kill, nothing already finished was requested again.
    for mark, finished in zip(log_marks, finished_before):
        reasked = [(e.first, e.second) for e in log[mark:] if (e.first, e.second) in finished]
        assert reasked == []
    # Zero lost: every ordered pair is in the output exactly once, with the judge's verdict.
    rows = [row.values for row in read_rows(out)]
    pairs = Counter((r["response_first"], r["response_second"]) for r in rows)
    assert len(rows) == 100 and set(pairs.values()) == {1}
    assert all(r["verdict"] == preferred_position(r["response_first"], r["response_second"]) for r in rows)
    assert _finished_pairs(cache) == set(pairs)
