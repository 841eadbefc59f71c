"""Judging throughput across 1, 2 and 4 OpenAI-compatible endpoints (judges/backends/fleet.py).

Each endpoint is a stub judge server in its own process answering after a fixed latency (default
50 ms) with a fixed concurrency per endpoint (default 8), so the ideal rate is
endpoints x concurrency / latency. The figure is judgments per second through the whole run
(schedule, HTTP, parsing, one SQLite commit per judgment, atomic output); min and median of
``--runs`` runs per size. The client is one Python process: on a small machine it, not the
servers, is the limit at the larger sizes.

    PYTHONPATH=. python bench/judging_endpoints.py [--contests 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench_judge_throughput import stub_process

from honestci.judges.backends.fleet import Endpoint, FleetBackend
from honestci.judges.prompts import get_template
from honestci.judges.run import load_texts, run_judging
from honestci.judges.stub_server import write_stub_study


def measure(urls: list[str], concurrency: int, n_contests: int) -> float:
    """Judgments per second of one run over ``urls``."""
    with tempfile.TemporaryDirectory() as folder:
        study = write_stub_study(Path(folder), n_contests=n_contests)
        texts = load_texts(study["vignettes"], study["responses"])
        fleet = FleetBackend([Endpoint(url, "stub-judge", max_concurrency=concurrency) for url in urls], timeout_s=30)
        started = time.perf_counter()
        summary = run_judging(
            study["contests"], texts, fleet, get_template(), Path(folder) / "out.jsonl", progress=False
        )
        elapsed = time.perf_counter() - started
    if summary.n_asked != 2 * n_contests or summary.n_invalid:
        raise RuntimeError(f"unexpected run: {summary}")
    return summary.n_jobs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contests", type=int, default=200, help="contests (x2 orders = judgments)")
    parser.add_argument("--latency", type=float, default=0.05, help="stub latency per reply, seconds")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight per endpoint")
    parser.add_argument("--endpoints", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"stub latency {args.latency * 1000:.0f} ms, concurrency {args.concurrency} per endpoint, "
        f"{2 * args.contests} judgments per run, {args.runs} runs"
    )
    print(f"{'endpoints':>9} {'min/s':>7} {'median/s':>9} {'ideal/s':>8}")
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(stub_process(args.latency)) for _ in range(max(args.endpoints))]
        for n in args.endpoints:
            rates = [measure(urls[:n], args.concurrency, args.contests) for _ in range(args.runs)]
            ideal = n * args.concurrency / args.latency
            print(f"{n:>9} {min(rates):>7.1f} {statistics.median(rates):>9.1f} {ideal:>8.0f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
