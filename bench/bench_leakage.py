"""Leakage scan throughput: vectorised hashed n-grams vs a plain Python set of n-gram tuples.

Generates a synthetic JSONL corpus (default 1.1 GB, under /tmp, never committed) with eval
answers planted in a few documents, then runs each method in its own subprocess so that its
peak resident memory is its own:

- ``vectorised``: :func:`audit.leakage.scan_corpus` (one process, one core);
- ``baseline``: orjson per line, :func:`audit.leakage.normalize`, ``str.split``, and
  ``hash(tuple(tokens[i:i+n])) in index`` for every n-gram (the usual decontamination loop);
- ``dask``: :func:`audit.leakage.scan_corpus_dask` on a local cluster of ``--workers`` processes.

Reports MB/s per core (corpus bytes / wall seconds / cores used) and peak RSS, and checks that
every planted answer is found. Usage::

    PYTHONPATH=. python bench/bench_leakage.py [--gb 1.1] [--baseline-mb 256] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CORPUS = Path("/tmp/honestci_leakage_bench/corpus.jsonl")
EVAL = CORPUS.with_name("eval.jsonl")
N = 8


def generate(target_bytes: int, seed: int = 7) -> None:
    """Zipf-distributed words from a 30k vocabulary, ~3 KB documents, 40 planted eval answers."""
    if CORPUS.exists() and CORPUS.stat().st_size >= target_bytes and EVAL.exists():
        return
    CORPUS.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = np.array(["".join(rng.choice(letters, rng.integers(2, 10))) for _ in range(30_000)])
    weights = 1 / np.arange(1, vocab.size + 1) ** 1.1
    weights /= weights.sum()
    punctuation = np.array(["", "", "", "", ",", ".", "!", "?", ";"])

    def sentence(k: int) -> str:
        words = vocab[rng.choice(vocab.size, k, p=weights)]
        marks = punctuation[rng.integers(0, punctuation.size, k)]
        return " ".join(np.char.add(words, marks).tolist()).capitalize()

    paragraphs = [sentence(int(rng.integers(40, 120))) for _ in range(20_000)]
    answers = {f"ans-{i:04d}": sentence(int(rng.integers(25, 60))) for i in range(2_000)}
    planted = set(rng.choice(len(answers), 40, replace=False).tolist())
    answer_ids = list(answers)
    with EVAL.open("w") as handle:
        for rid, text in answers.items():
            handle.write(json.dumps({"response_id": rid, "text": text, "planted": answer_ids.index(rid) in planted}) + "\n")
    written, doc = 0, 0
    planted_list = sorted(planted)
    spacing = max(1, int(target_bytes / 4_000 / (len(planted_list) + 5)))  # documents are ~2.5-3 KB
    with CORPUS.open("w") as handle:
        while written < target_bytes:
            parts = [paragraphs[j] for j in rng.integers(0, len(paragraphs), int(rng.integers(3, 8)))]
            if planted_list and doc % spacing == spacing // 2:
                parts.insert(1, answers[answer_ids[planted_list.pop()]])
            line = json.dumps({"doc_id": f"doc-{doc:08d}", "text": " ".join(parts), "source": "synthetic"}) + "\n"
            handle.write(line)
            written += len(line)
            doc += 1
    if planted_list:
        raise RuntimeError("corpus too small to plant every answer")


def _eval_items():
    rows = [json.loads(line) for line in EVAL.open()]
    return {r["response_id"]: r["text"] for r in rows}, {r["response_id"] for r in rows if r["planted"]}


def run_vectorised(limit: int | None) -> dict:
    from audit.leakage import build_index, scan_corpus

    items, planted = _eval_items()
    index = build_index(items, N)
    started = time.perf_counter()
    scan = scan_corpus(index, CORPUS)
    seconds = time.perf_counter() - started
    return {"bytes": CORPUS.stat().st_size, "seconds": seconds, "cores": 1, "index_bytes": index.nbytes,
            "found_all": set(scan.leaked_items) == planted, "leaked": len(scan.leaked_items)}


def run_dask(limit: int | None, workers: int) -> dict:
    from distributed import Client, LocalCluster

    from audit.leakage import build_index, scan_corpus_dask

    items, planted = _eval_items()
    index = build_index(items, N)
    with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        started = time.perf_counter()
        scan = scan_corpus_dask(index, CORPUS, client)
        seconds = time.perf_counter() - started
        worker_rss = sum(m["memory"] for m in client.run(lambda: {"memory": _peak_rss()}).values())
        worker_cpu = sum(client.run(_cpu_seconds).values())
    return {"bytes": CORPUS.stat().st_size, "seconds": seconds, "cores": workers, "workers_peak_rss": worker_rss,
            "workers_cpu_seconds": worker_cpu,
            "found_all": set(scan.leaked_items) == planted, "leaked": len(scan.leaked_items)}


def run_baseline(limit: int | None) -> dict:
    import orjson

    from audit.leakage import normalize

    items, planted = _eval_items()
    index: dict[int, set[str]] = {}
    for rid, text in items.items():
        tokens = normalize(text).split()
        for i in range(len(tokens) - N + 1):
            index.setdefault(hash(tuple(tokens[i:i + N])), set()).add(rid)
    found, read = set(), 0
    started = time.perf_counter()
    with CORPUS.open("rb") as handle:
        for line in handle:
            read += len(line)
            tokens = normalize(orjson.loads(line)["text"]).split()
            for i in range(len(tokens) - N + 1):
                hit = index.get(hash(tuple(tokens[i:i + N])))
                if hit:
                    found |= hit
            if limit and read >= limit:
                break
    seconds = time.perf_counter() - started
    return {"bytes": read, "seconds": seconds, "cores": 1, "found_planted_in_prefix": len(found & planted)}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.1)
    parser.add_argument("--baseline-mb", type=float, default=256, help="baseline on this prefix (0: whole corpus)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--method", choices=["vectorised", "baseline", "dask"], default=None)
    args = parser.parse_args()
    if args.method:
        limit = int(args.baseline_mb * 1e6) or None
        result = {"vectorised": lambda: run_vectorised(limit), "baseline": lambda: run_baseline(limit),
                  "dask": lambda: run_dask(limit, args.workers)}[args.method]()
        result["peak_rss"] = _peak_rss()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        result["cpu_seconds_main"] = usage.ru_utime + usage.ru_stime
        print(json.dumps(result))
        return
    started = time.perf_counter()
    generate(int(args.gb * 1e9))
    print(f"corpus {CORPUS} {CORPUS.stat().st_size / 1e9:.2f} GB (generated/reused in {time.perf_counter() - started:.0f} s); "
          f"{os.cpu_count()} cores on this machine, shared with other jobs")
    for method in ("vectorised", "dask", "baseline"):
        out = subprocess.run([sys.executable, __file__, "--method", method, "--baseline-mb", str(args.baseline_mb),
                              "--workers", str(args.workers)], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONHASHSEED="0"))
        if out.returncode != 0:
            print(method, "failed:", out.stderr[-2000:])
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rate = r["bytes"] / 1e6 / r["seconds"] / r["cores"]
        cpu = r.get("workers_cpu_seconds", r["cpu_seconds_main"])
        print(f"{method:10s} {r['bytes'] / 1e6:8.0f} MB in {r['seconds']:7.1f} s on {r['cores']} core(s): "
              f"{rate:6.1f} MB/s per core (wall), {r['bytes'] / 1e6 / cpu:6.1f} MB per CPU-second; "
              f"peak RSS {r['peak_rss'] / 1e6:.0f} MB; "
              + json.dumps({k: v for k, v in r.items() if k not in ('bytes', 'seconds', 'cores', 'peak_rss')}))


if __name__ == "__main__":
    main()
