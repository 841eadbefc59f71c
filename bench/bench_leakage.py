"""Leakage scan throughput: honestci's compiled scan vs a Python set of n-gram tuples vs datatrove.

Generates a synthetic JSONL corpus (default 1.1 GB, under /tmp, never committed) with eval
answers planted in a few documents, then runs each contender in its own subprocess so that its
peak resident memory is its own:

- ``honestci``: :func:`honestci.audit.checks.leakage.scan_corpus` (one process, one core);
- ``dask``: :func:`honestci.audit.checks.leakage.scan_corpus_dask` on a local cluster of ``--workers`` processes;
- ``baseline``: orjson per line, :func:`honestci.audit.checks.ngram_index.normalize`, ``str.split``, and
  ``hash(tuple(tokens[i:i+n])) in index`` for every n-gram (the usual decontamination loop);
- ``datatrove-split`` / ``datatrove-spacy``: datatrove's ``NGramsDecontFilter`` with a
  ``str.split`` tokenizer / its default English tokenizer (spaCy ``blank("en")``), run by
  ``bench/datatrove_decont.py`` under ``/tmp/dt/bin/python`` when that venv exists (skipped
  otherwise; see that script for how its index is built without lighteval).

Per contender: MB per CPU-second of the scan (corpus bytes / user+sys CPU seconds of the scan,
workers included for Dask: the per-core figure, robust to other jobs sharing the cores), MB/s of
wall time, the load average before/after, peak RSS of the process(es), and the planted answers
found (in the prefix read, for contenders run on a prefix). Usage::

    PYTHONPATH=. python bench/bench_leakage.py [--gb 1.1] [--baseline-mb 200] [--datatrove-mb 150]
        [--spacy-mb 40] [--workers 2] [--only honestci,dask,...]
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
            handle.write(
                json.dumps({"response_id": rid, "text": text, "planted": answer_ids.index(rid) in planted}) + "\n"
            )
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


DATATROVE_PYTHON = Path("/tmp/dt/bin/python")


def _planted_in_prefix(limit: int | None) -> set[str]:
    """The planted answers whose document lies in the first ``limit`` bytes of the corpus."""
    items, planted = _eval_items()
    needles = {rid: json.dumps(items[rid])[1:-1].encode() for rid in planted}  # as written in the JSON line
    found, read = set(), 0
    with CORPUS.open("rb") as handle:
        for line in handle:
            read += len(line)
            found |= {rid for rid, needle in needles.items() if needle in line}
            if limit and read >= limit:
                break
    return found


def run_honestci(limit: int | None) -> dict:
    from honestci.audit.checks.leakage import scan_corpus
    from honestci.audit.checks.ngram_index import build_index

    items, planted = _eval_items()
    corpus = CORPUS
    if limit:  # the first whole lines of at least `limit` bytes, as a file of their own (peak memory vs size)
        corpus = CORPUS.with_name(f"prefix-{limit}.jsonl")
        with CORPUS.open("rb") as source, corpus.open("wb") as prefix:
            while prefix.tell() < limit and (line := source.readline()):
                prefix.write(line)
        planted = planted & _planted_in_prefix(limit)
    index = build_index(items, N)
    scan_corpus(index, EVAL)  # loads the compiled kernels (cached on disk) outside the timing
    cpu, started = _cpu_seconds(), time.perf_counter()
    scan = scan_corpus(index, corpus)
    return {
        "bytes": corpus.stat().st_size,
        "seconds": time.perf_counter() - started,
        "cpu_seconds": _cpu_seconds() - cpu,
        "index_bytes": index.nbytes,
        "planted_found": len(set(scan.leaked_items) & planted),
        "planted_in_data": len(planted),
        "other_leaked": len(set(scan.leaked_items) - planted),
    }


def run_dask(limit: int | None, workers: int) -> dict:
    from distributed import Client, LocalCluster

    from honestci.audit.checks.leakage import scan_corpus_dask
    from honestci.audit.checks.ngram_index import build_index

    items, planted = _eval_items()
    index = build_index(items, N)
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        scan_corpus_dask(index, EVAL, client)  # workers load the compiled kernels outside the timing
        workers_cpu = sum(client.run(_cpu_seconds).values())
        cpu, started = _cpu_seconds(), time.perf_counter()
        scan = scan_corpus_dask(index, CORPUS, client)
        seconds = time.perf_counter() - started
        main_cpu = _cpu_seconds() - cpu
        workers_cpu = sum(client.run(_cpu_seconds).values()) - workers_cpu
        worker_rss = sum(client.run(_peak_rss).values())
    return {
        "bytes": CORPUS.stat().st_size,
        "seconds": seconds,
        "cpu_seconds": main_cpu + workers_cpu,
        "main_cpu_seconds": main_cpu,
        "workers_cpu_seconds": workers_cpu,
        "workers": workers,
        "workers_peak_rss": worker_rss,
        "planted_found": len(set(scan.leaked_items) & planted),
        "planted_in_data": len(planted),
        "other_leaked": len(set(scan.leaked_items) - planted),
    }


def run_baseline(limit: int | None) -> dict:
    import orjson

    from honestci.audit.checks.ngram_index import normalize

    items, planted = _eval_items()
    index: dict[int, set[str]] = {}
    for rid, text in items.items():
        tokens = normalize(text).split()
        for i in range(len(tokens) - N + 1):
            index.setdefault(hash(tuple(tokens[i : i + N])), set()).add(rid)
    found, read = set(), 0
    cpu, started = _cpu_seconds(), time.perf_counter()
    with CORPUS.open("rb") as handle:
        for line in handle:
            read += len(line)
            tokens = normalize(orjson.loads(line)["text"]).split()
            for i in range(len(tokens) - N + 1):
                hit = index.get(hash(tuple(tokens[i : i + N])))
                if hit:
                    found |= hit
            if limit and read >= limit:
                break
    return {
        "bytes": read,
        "seconds": time.perf_counter() - started,
        "cpu_seconds": _cpu_seconds() - cpu,
        "planted_found": len(found & planted),
        "planted_in_data": len(_planted_in_prefix(limit)),
        "other_answers_with_a_match": len(found - planted),
    }


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.1)
    parser.add_argument("--baseline-mb", type=float, default=200, help="baseline on this prefix (0: whole corpus)")
    parser.add_argument("--datatrove-mb", type=float, default=150, help="datatrove (str.split) on this prefix")
    parser.add_argument("--spacy-mb", type=float, default=40, help="datatrove (spaCy tokenizer) on this prefix")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", default="honestci,dask,baseline,datatrove-split,datatrove-spacy")
    parser.add_argument("--method", choices=["honestci", "baseline", "dask"], default=None)
    parser.add_argument("--limit-mb", type=float, default=0)
    args = parser.parse_args()
    if args.method:
        limit = int(args.limit_mb * 1e6) or None
        result = {
            "honestci": lambda: run_honestci(limit),
            "baseline": lambda: run_baseline(limit),
            "dask": lambda: run_dask(limit, args.workers),
        }[args.method]()
        result["peak_rss"] = _peak_rss()
        print(json.dumps(result))
        return
    started = time.perf_counter()
    generate(int(args.gb * 1e9))
    print(
        f"corpus {CORPUS} {CORPUS.stat().st_size / 1e9:.2f} GB (generated/reused in {time.perf_counter() - started:.0f} s); "
        f"{os.cpu_count()} cores on this machine, shared with other jobs"
    )
    commands = {
        "honestci": [sys.executable, __file__, "--method", "honestci"],
        "dask": [sys.executable, __file__, "--method", "dask", "--workers", str(args.workers)],
        "baseline": [sys.executable, __file__, "--method", "baseline", "--limit-mb", str(args.baseline_mb)],
    }
    if DATATROVE_PYTHON.exists():
        script = str(Path(__file__).with_name("datatrove_decont.py"))
        for tokenizer, mb in (("split", args.datatrove_mb), ("spacy", args.spacy_mb)):
            commands[f"datatrove-{tokenizer}"] = [
                str(DATATROVE_PYTHON),
                script,
                "--corpus",
                str(CORPUS),
                "--eval",
                str(EVAL),
                "--n",
                str(N),
                "--limit-mb",
                str(mb),
                "--tokenizer",
                tokenizer,
            ]
    else:
        print(f"datatrove skipped: {DATATROVE_PYTHON} not found (see bench/datatrove_decont.py)")
    for name in args.only.split(","):
        if name not in commands:
            continue
        load_before = os.getloadavg()[0]
        out = subprocess.run(commands[name], capture_output=True, text=True, env=dict(os.environ, PYTHONHASHSEED="0"))
        load_after = os.getloadavg()[0]
        if out.returncode != 0:
            print(name, "failed:", out.stderr[-2000:])
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if "planted_in_data" not in r:  # datatrove: the planted answers in the prefix it read
            r["planted_in_data"] = len(_planted_in_prefix(r["bytes"]))
        mb = r["bytes"] / 1e6
        print(
            f"{name:16s} {mb:6.0f} MB: {mb / r['cpu_seconds']:6.1f} MB per CPU-second ({r['cpu_seconds']:.1f} CPU s), "
            f"{mb / r['seconds']:6.1f} MB/s wall ({r['seconds']:.1f} s); load {load_before:.1f}->{load_after:.1f}; "
            f"peak RSS {r['peak_rss'] / 1e6:.0f} MB; planted found {r['planted_found']}"
            + (f"/{r['planted_in_data']}" if "planted_in_data" in r else "")
            + "; "
            + json.dumps(
                {
                    k: v
                    for k, v in r.items()
                    if k not in ("bytes", "seconds", "cpu_seconds", "peak_rss", "planted_found", "planted_in_data")
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
