"""Judging throughput of the OpenAI-compatible backend against the local stub server.

The stub runs in its own process (so its threads do not compete with the client for the GIL) and
answers every request after a fixed artificial latency (default 50 ms), like a judge server with
spare capacity; the figure is judgments per second through the whole run (schedule, HTTP,
parsing, one SQLite commit per judgment, atomic output), at concurrency 1, 8 and 32. The ideal is
concurrency / latency.

    PYTHONPATH=. python bench/bench_judge_throughput.py [--contests 200] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from honestci.judges.backends.openai_http import OpenAICompatibleBackend
from honestci.judges.prompts import get_template
from honestci.judges.run import load_texts, run_judging
from honestci.judges.stub_server import write_stub_study

REPO_ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def stub_process(latency_s: float) -> Iterator[str]:
    """A stub judge server in its own process; yields its base URL."""
    server = subprocess.Popen(
        [sys.executable, "-m", "honestci.judges.stub_server", "--port", "0", "--latency", str(latency_s)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )
    try:
        assert server.stdout is not None
        yield server.stdout.readline().split()[3]  # "stub judge at URL (Ctrl-C to stop)"
    finally:
        server.terminate()
        server.wait()


def measure(concurrency: int, n_contests: int, latency_s: float) -> tuple[float, float, int]:
    with stub_process(latency_s) as base_url, tempfile.TemporaryDirectory() as folder:
        study = write_stub_study(Path(folder), n_contests=n_contests)
        texts = load_texts(study["vignettes"], study["responses"])
        backend = OpenAICompatibleBackend(base_url, "stub-judge", concurrency=concurrency, timeout_s=30)
        started = time.perf_counter()
        summary = run_judging(
            study["contests"], texts, backend, get_template(), Path(folder) / "out.jsonl", progress=False
        )
        elapsed = time.perf_counter() - started
    if summary.n_asked != 2 * n_contests or summary.n_invalid:
        raise RuntimeError(f"unexpected run: {summary}")
    return summary.n_jobs / elapsed, elapsed, summary.n_jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contests", type=int, default=200, help="contests (x2 orders = judgments)")
    parser.add_argument("--latency", type=float, default=0.05, help="stub latency per reply, seconds")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    args = parser.parse_args()
    print(f"stub latency {args.latency * 1000:.0f} ms; {2 * args.contests} judgments per run")
    print(f"{'concurrency':>11} {'judgments/s':>12} {'ideal/s':>8} {'seconds':>8}")
    for concurrency in args.concurrency:
        rate, elapsed, _ = measure(concurrency, args.contests, args.latency)
        print(f"{concurrency:>11} {rate:>12.1f} {concurrency / args.latency:>8.0f} {elapsed:>8.2f}")


if __name__ == "__main__":
    main()
