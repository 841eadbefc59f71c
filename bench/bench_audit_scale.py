"""The whole audit at scale: 1M contests on 5,000 vignettes, as a fresh process (run by hand).

    PYTHONPATH=. python bench/bench_audit_scale.py [--format parquet|jsonl] [--repeats 3]
    PYTHONPATH=. python bench/bench_audit_scale.py --profile      # one run under cProfile
    PYTHONPATH=. python bench/bench_audit_scale.py --no-bayes     # every stage but the Bayesian fit
    PYTHONPATH=. python bench/bench_audit_scale.py --shape realistic   # heavy-tailed sizes (issue 34)

Generates once (seeded; under ``/tmp/honestci-scale-<shape>-<format>``, never committed) a study in the
project's own input formats: 5,000 vignettes; per vignette 10 policy responses in each of 2 runs
and 10 opponent responses; every (policy, opponent) response pair of a vignette is one contest
judged in both orders by one judge (200 contests per vignette, 1,000,000 contests, 2,000,000
judgment rows), with a claim YAML. Verdicts come from a logit model with a vignette effect
N(0, 0.8), a run effect, a first-position bias, ties and 0.5% invalid outputs.

``--shape realistic`` writes instead the shape of a leaderboard-style evaluation
(:func:`honestci.fixtures.shapes.write_shaped_study`): 1,000,000 contests on 5,000 vignettes with
heavy-tailed sizes from 1 to 1,000 (:func:`~honestci.fixtures.shapes.realistic_sizes`), rows in
random order, 5% of contests judged in one order, about 20% ties, 0.2% invalid verdicts, and two
judges judging every contest (4 million judgment rows minus the one-order share).

Then runs ``honestci audit CLAIM --out DIR`` ``--repeats`` times, each a fresh process, and records
its wall time, CPU time (user + sys of the process tree, from ``RUSAGE_CHILDREN``), peak resident
memory (the largest ``ru_maxrss`` among the children: the audit is one process), the 1-minute
load average before and after, and when each milestone of the audit's progress log arrives (each
progress line is time-stamped by this driver as it arrives on standard error; the Bayesian fit
runs on a thread of its own, so its lines interleave with the main thread's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

N_VIGNETTES = 5_000
POLICY_PER_RUN, RUNS, OPPONENT_PER_VIGNETTE = 10, 2, 10
POLICY, OPPONENT, JUDGE = "policy-7b", "baseline-70b", "judge-large"
SHA = "f3009ae97693d4d88024eaa906a06c2b4cab8a9f1c06cc55824bafb73a093880"


def generate(root: Path, fmt: str, seed: int = 20261201) -> Path:
    """Write the study under ``root`` (skipped when its claim exists) and return the claim path."""
    claim = root / "claim.yaml"
    if claim.exists():
        return claim
    import numpy as np

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    G = N_VIGNETTES
    vids = np.array([f"v{g:05d}" for g in range(G)], dtype=object)
    vignettes = {
        "vignette_id": vids,
        "text": np.array(
            [f"Scenario {g}: a situation someone finds hard to reappraise." for g in range(G)], dtype=object
        ),
        "family": np.array([("interpersonal", "work", "health", "loss")[g % 4] for g in range(G)], dtype=object),
    }
    n_pol = POLICY_PER_RUN * RUNS
    p_ids = np.array([f"{v}-p{k:02d}" for v in vids for k in range(n_pol)], dtype=object)
    o_ids = np.array([f"{v}-o{k:02d}" for v in vids for k in range(OPPONENT_PER_VIGNETTE)], dtype=object)
    responses = {
        "response_id": np.concatenate([p_ids, o_ids]),
        "vignette_id": np.concatenate([np.repeat(vids, n_pol), np.repeat(vids, OPPONENT_PER_VIGNETTE)]),
        "system": np.array([POLICY] * len(p_ids) + [OPPONENT] * len(o_ids), dtype=object),
        "text": np.array(
            [f"Perhaps there is another way to see this ({i})." for i in range(len(p_ids) + len(o_ids))], dtype=object
        ),
        "run": np.array(
            [f"run-{1 + (k // POLICY_PER_RUN)}" for _ in range(G) for k in range(n_pol)] + [None] * len(o_ids),
            dtype=object,
        ),
        "sample_idx": np.concatenate(
            [np.tile(np.arange(n_pol) % POLICY_PER_RUN, G), np.tile(np.arange(OPPONENT_PER_VIGNETTE), G)]
        ),
    }
    # contests: every policy x opponent response of a vignette
    g = np.repeat(np.arange(G), n_pol * OPPONENT_PER_VIGNETTE)
    kp = np.tile(np.repeat(np.arange(n_pol), OPPONENT_PER_VIGNETTE), G)
    ko = np.tile(np.arange(OPPONENT_PER_VIGNETTE), G * n_pol)
    pol, opp = p_ids[g * n_pol + kp], o_ids[g * OPPONENT_PER_VIGNETTE + ko]
    n = len(g)
    u = rng.normal(0.4, 0.8, G)[g] + np.where(kp >= POLICY_PER_RUN, 0.1, 0.0)
    # both orders, interleaved: contest i's policy-first row, then its policy-second row
    first_is_policy = np.tile([True, False], n)
    z = np.repeat(u, 2) + np.where(first_is_policy, 0.3, -0.3) + rng.logistic(size=2 * n)
    verdict_policy = np.where(z > 0.4, "win", np.where(z < -0.4, "loss", "tie"))
    verdict = np.where(
        verdict_policy == "tie",
        "tie",
        np.where((verdict_policy == "win") == first_is_policy, "first", "second"),
    ).astype(object)
    verdict[rng.random(2 * n) < 0.005] = "invalid"
    rf = np.where(first_is_policy, np.repeat(pol, 2), np.repeat(opp, 2))
    rs = np.where(first_is_policy, np.repeat(opp, 2), np.repeat(pol, 2))
    raw = np.select([verdict == "first", verdict == "second", verdict == "tie"], ["[[A]]", "[[B]]", "[[C]]"], "???")
    judgments = {
        "judge": np.full(2 * n, JUDGE, dtype=object),
        "vignette_id": np.repeat(vids[g], 2),
        "response_first": rf,
        "response_second": rs,
        "verdict": verdict,
        "raw": raw.astype(object),
        "prompt_sha256": np.full(2 * n, SHA, dtype=object),
    }
    from honestci.fixtures.shapes import write_tables

    ext = write_tables(root, {"vignettes": vignettes, "responses": responses, "judgments": judgments}, fmt)
    claim.write_text(
        "version: 1\n"
        f'name: "{POLICY} beats {OPPONENT} at scale"\n'
        f"policy: {POLICY}\nopponent: {OPPONENT}\njudge: {JUDGE}\nmetric: winrate\nbar: 0.55\n"
        "population: new_vignettes\n"
        f"data: {{vignettes: vignettes{ext}, responses: responses{ext}, judgments: judgments{ext}}}\n"
        "claimed: {point: 0.62, n: 1000000, ci_low: 0.619, method: wilson, level: 0.95}\n"
    )
    return claim


def realistic(root: Path, fmt: str, seed: int = 20261206) -> Path:
    """The realistic shape (module doc) under ``root``, written once; its claim's path."""
    claim = root / "claim.yaml"
    if claim.exists():
        return claim
    import numpy as np

    from honestci.fixtures.shapes import realistic_sizes, write_shaped_study

    sizes = realistic_sizes(N_VIGNETTES, 1_000_000, np.random.default_rng(seed))
    return write_shaped_study(root, sizes, seed=seed, fmt=fmt)


def one_audit(claim: Path, out: Path, profile: Path | None = None, extra: tuple[str, ...] = ()) -> dict:
    """One ``honestci audit`` in a fresh process: wall, CPU, peak RSS, load, per-stage wall times."""
    shutil.rmtree(out, ignore_errors=True)
    exe = [sys.executable, "-m", "honestci"]
    if profile is not None:
        exe = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "honestci"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*exe, "audit", str(claim), "--out", str(out), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stages: list[tuple[float, str]] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        stages.append((time.perf_counter() - start, line.rstrip()))
    rc = proc.wait()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    steps = []
    for (t0, label), (t1, _) in zip(stages, [*stages[1:], (wall, "end")]):
        steps.append({"stage": label, "start_s": round(t0, 3), "wall_s": round(t1 - t0, 3)})
    return {
        "rc": rc,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        # ru_maxrss of RUSAGE_CHILDREN is the largest child's peak (kB on Linux)
        "peak_mb": round(after.ru_maxrss / 1024, 1),
        "load1_before": round(load_before, 2),
        "load1_after": round(os.getloadavg()[0], 2),
        "stages": steps,
    }


def _milestone(line: str) -> str | None:
    """A progress line as a milestone: the main thread's steps ("… step") and the start and end of
    the Bayesian fit's sampler (its meter's first and last lines); None for the meter's others."""
    if line.startswith("…"):
        return line
    if " 0/" in line:
        return "the fit's sampler starts (background thread)"
    if " done:" in line:
        return "the fit's sampler is done, its vignette effects drawn (background thread)"
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", choices=("parquet", "jsonl"), default="parquet")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--root", type=Path, default=None, help="study folder (default /tmp/honestci-scale-SHAPE-FORMAT)"
    )
    parser.add_argument("--profile", action="store_true", help="one run under cProfile (/tmp/honestci-scale.prof)")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's record here")
    parser.add_argument("--no-bayes", action="store_true", help="pass --no-bayes to the audit")
    parser.add_argument("--shape", choices=("equal", "realistic"), default="equal", help="vignette sizes (module doc)")
    args = parser.parse_args()
    root = args.root or Path(f"/tmp/honestci-scale-{args.shape}-{args.format}")
    t = time.perf_counter()
    claim = generate(root, args.format) if args.shape == "equal" else realistic(root, args.format)
    print(f"study at {root} ({time.perf_counter() - t:.1f} s to generate or find)")
    if args.profile:
        run = one_audit(
            claim,
            root / f"out-{os.getpid()}",
            profile=Path("/tmp/honestci-scale.prof"),
            extra=("--no-bayes",) if args.no_bayes else (),
        )
        print(json.dumps(run, indent=1))
        return
    extra = ("--no-bayes",) if args.no_bayes else ()
    runs = [one_audit(claim, root / f"out-{os.getpid()}", extra=extra) for _ in range(args.repeats)]
    for i, run in enumerate(runs, 1):
        print(
            f"run {i}: rc {run['rc']}, wall {run['wall_s']:.2f} s, CPU {run['cpu_s']:.2f} s, "
            f"peak {run['peak_mb']:.0f} MB, load1 {run['load1_before']:.2f} -> {run['load1_after']:.2f}"
        )
    walls, cpus, peaks = ([r[k] for r in runs] for k in ("wall_s", "cpu_s", "peak_mb"))
    print(
        f"wall min {min(walls):.2f} / median {statistics.median(walls):.2f} s; CPU min {min(cpus):.2f} / median "
        f"{statistics.median(cpus):.2f} s; peak RSS max {max(peaks):.0f} MB"
    )
    # The Bayesian fit runs on a thread of its own beside the intervals and the checks, so the
    # progress lines are milestones of two timelines, not consecutive stages.
    print("milestones (median seconds from the start over runs):")
    starts: dict[str, list[float]] = {}
    for run in runs:
        for stage in run["stages"]:
            label = _milestone(stage["stage"])
            if label is not None:
                starts.setdefault(label, []).append(stage["start_s"])
    for label, values in sorted(starts.items(), key=lambda item: statistics.median(item[1])):
        print(f"  {statistics.median(values):7.2f}  {label}")
    print(f"  {statistics.median(walls):7.2f}  end of the process")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
