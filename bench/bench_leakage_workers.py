"""Leakage scan on Dask: speed-up in workers, and where a worker's extra CPU goes.

Uses bench/bench_leakage.py's generator (Zipf words, ~3 KB documents, 40 planted answers) for a
corpus of ``--mb`` MB in ``--dir`` (default /tmp/honestci_leakage_workers, never committed), then:

- ``serial``: :func:`scan_corpus` in a fresh process (``--repeat`` runs after a warm-up);
- ``dask-K``: :func:`scan_corpus_dask` on a ``LocalCluster`` of K worker processes with one thread
  each (``--workers 1,2``), the cluster started once and warmed up, then ``--repeat`` scans.

Per run: wall seconds, CPU seconds (user+sys: the scanning process; for Dask the client/scheduler
process plus every worker process), minor page faults, the 1-minute load average before and
after; for Dask also the CPU of the worker thread that ran the tasks (from /proc/self/task) vs the
worker's other threads. ``--worker-env KEY=VALUE`` sets the workers' environment through
``distributed.nanny.pre-spawn-environ`` (``--worker-env MALLOC_TRIM_THRESHOLD_=`` drops Dask's
default of 65536); ``--serial-env`` does the same for the serial process. Usage::

    PYTHONPATH=. python bench/bench_leakage_workers.py [--mb 400] [--repeat 3] [--workers 1,2]
        [--block-mb 64] [--only serial,dask] [--worker-env KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_leakage  # the generator and helpers of the main leakage bench


def _usage() -> dict:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": usage.ru_utime + usage.ru_stime, "sys": usage.ru_stime, "minflt": usage.ru_minflt}


def _thread_cpu() -> dict[int, float]:
    """CPU seconds of each thread of this process (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path("/proc/self/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def _delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after}


def run_serial(corpus: Path, repeat: int) -> list[dict]:
    from honestci.audit.checks.leakage import scan_corpus
    from honestci.audit.checks.ngram_index import build_index

    items, planted = bench_leakage._eval_items()
    index = build_index(items, bench_leakage.N)
    scan_corpus(index, bench_leakage.EVAL)  # loads the compiled kernels outside the timing
    runs = []
    for _ in range(repeat):
        load, before, started = os.getloadavg()[0], _usage(), time.perf_counter()
        scan = scan_corpus(index, corpus)
        runs.append(
            {
                "seconds": time.perf_counter() - started,
                **_delta(_usage(), before),
                "load_before": load,
                "load_after": os.getloadavg()[0],
                "planted_found": len(set(scan.leaked_items) & planted),
            }
        )
    return runs


def run_dask(corpus: Path, repeat: int, workers: int, block_bytes: int, worker_env: dict) -> list[dict]:
    import dask
    from distributed import Client, LocalCluster

    from honestci.audit.checks.leakage import scan_corpus_dask
    from honestci.audit.checks.ngram_index import build_index

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
    for key, value in worker_env.items():
        environ.pop(key, None)
        if value != "":
            environ[key] = value
    items, planted = bench_leakage._eval_items()
    index = build_index(items, bench_leakage.N)
    runs = []
    with (
        dask.config.set({"distributed.nanny.pre-spawn-environ": environ}),
        LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        scan_corpus_dask(index, bench_leakage.EVAL, client)  # workers load the compiled kernels
        for _ in range(repeat):
            worker_before, threads_before = client.run(_usage), client.run(_thread_cpu)
            load, before, started = os.getloadavg()[0], _usage(), time.perf_counter()
            scan = scan_corpus_dask(index, corpus, client, block_bytes=block_bytes)
            seconds = time.perf_counter() - started
            main = _delta(_usage(), before)
            worker_after, threads_after = client.run(_usage), client.run(_thread_cpu)
            worker = [_delta(worker_after[w], worker_before[w]) for w in worker_after]
            task_thread = other_threads = 0.0
            for w, after in threads_after.items():
                used = sorted((cpu - threads_before[w].get(t, 0.0) for t, cpu in after.items()), reverse=True)
                task_thread += used[0]  # the executor thread that ran the scan (by far the busiest)
                other_threads += sum(used[1:])
            runs.append(
                {
                    "seconds": seconds,
                    "cpu": main["cpu"] + sum(w["cpu"] for w in worker),
                    "sys": main["sys"] + sum(w["sys"] for w in worker),
                    "minflt": main["minflt"] + sum(w["minflt"] for w in worker),
                    "main_cpu": main["cpu"],
                    "worker_cpu": sum(w["cpu"] for w in worker),
                    "task_thread_cpu": task_thread,
                    "other_threads_cpu": other_threads,
                    "load_before": load,
                    "load_after": os.getloadavg()[0],
                    "planted_found": len(set(scan.leaked_items) & planted),
                }
            )
    return runs


def _pairs(values: list[str]) -> dict:
    return dict(value.partition("=")[::2] for value in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=400)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/honestci_leakage_workers"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--block-mb", type=float, default=64)
    parser.add_argument("--only", default="serial,dask")
    parser.add_argument("--worker-env", action="append", default=[])
    parser.add_argument("--serial-env", action="append", default=[])
    parser.add_argument("--method", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    bench_leakage.CORPUS = args.dir / "corpus.jsonl"
    bench_leakage.EVAL = args.dir / "eval.jsonl"
    if args.method:  # one contender in this fresh process
        if args.method == "serial":
            runs = run_serial(bench_leakage.CORPUS, args.repeat)
        else:
            workers = int(args.method.removeprefix("dask-"))
            runs = run_dask(
                bench_leakage.CORPUS, args.repeat, workers, int(args.block_mb * 2**20), _pairs(args.worker_env)
            )
        print(json.dumps(runs))
        return
    bench_leakage.generate(int(args.mb * 1e6))
    mb = bench_leakage.CORPUS.stat().st_size / 1e6
    print(f"corpus {bench_leakage.CORPUS} {mb:.0f} MB; {os.cpu_count()} cores, shared with other jobs", flush=True)
    methods = (["serial"] if "serial" in args.only else []) + (
        [f"dask-{k}" for k in args.workers.split(",")] if "dask" in args.only else []
    )
    for method in methods:
        env = dict(os.environ, PYTHONHASHSEED="0")
        if method == "serial":
            for key, value in _pairs(args.serial_env).items():
                env.pop(key, None)
                if value != "":
                    env[key] = value
        command = [sys.executable, __file__, "--method", method, "--dir", str(args.dir), "--repeat", str(args.repeat)]
        command += ["--block-mb", str(args.block_mb)] + [f"--worker-env={v}" for v in args.worker_env]
        out = subprocess.run(command, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            print(method, "failed:", out.stderr[-3000:], flush=True)
            continue
        runs = json.loads(out.stdout.strip().splitlines()[-1])
        for i, r in enumerate(runs):
            extra = (
                f"; main {r['main_cpu']:.2f} + workers {r['worker_cpu']:.2f} (task thread {r['task_thread_cpu']:.2f}, "
                f"other threads {r['other_threads_cpu']:.2f})"
                if "main_cpu" in r
                else ""
            )
            print(
                f"{method:8s} run {i + 1}: wall {r['seconds']:6.2f} s, CPU {r['cpu']:6.2f} s (sys {r['sys']:.2f}), "
                f"{r['minflt'] / 1e3:.0f}k minor faults, {mb / r['seconds']:6.1f} MB/s wall, "
                f"{mb / r['cpu']:6.1f} MB/CPU-s; load {r['load_before']:.2f}->{r['load_after']:.2f}; "
                f"planted {r['planted_found']}/40" + extra,
                flush=True,
            )
        walls, cpus = [r["seconds"] for r in runs], [r["cpu"] for r in runs]
        print(
            f"{method:8s} wall min/median {min(walls):.2f}/{statistics.median(walls):.2f} s; "
            f"CPU min/median {min(cpus):.2f}/{statistics.median(cpus):.2f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
