"""Benchmark of the Bayesian hierarchical win-rate fit on a fixture-like problem.

Problem: 6 vignettes x 2 orders x 3 runs, 1,440 verdicts (no ties, so that a per-row Bernoulli
model is the same model), 4 chains x (1000 tune + 1000 draws).

Contenders, each timed as a cold process (imports + compile + sample, a fresh interpreter) and,
where it makes sense, warm (a second fit on new data of the same shape in the same process):

* ``honestci``        honestci.audit.stats.bayesian.hierarchical.fit_winrate_hierarchical, sampler="auto": nutpie on the hand-derived
                      log density of audit/stats/bayesian/density.py (numba gufuncs, cached on disk)
                      through nutpie's public ``compiled_pyfunc.from_pyfunc``, 36 cells
* ``nutpie-pytensor`` nutpie on the same PyMC model compiled from its PyTensor graph (what
                      sampler="auto" did before; numba compile in every new process)
* ``honestci-pymc``   the same model with PyMC's default NUTS (C backend)
* ``bernoulli-pymc``  one Bernoulli row per verdict, PyMC default NUTS, same priors and terms
* ``bambi``           bambi ``y ~ order + (1|vignette)`` (no run term), same priors, if the
                      interpreter given by --bambi-python can import bambi
* ``bambi-binomial``  the same bambi model on the (vignette, order) cells' binomial counts,
                      ``p(wins, trials) ~ order + (1|vignette)`` (the fair peer at scale)

At scale (issue 21: 1M contests on 5,000 vignettes, both orders judged, so 2M verdicts)::

    PYTHONPATH=$PWD .venv/bin/python bench/bench_bayes.py --vignettes 5000 --runs 1 --per-cell 200 \
        --repeats 3 --contenders honestci --bambi-python /tmp/bambi/bin/python --bambi binomial --timeout 900

Posterior agreement: every contender's draws go through the same estimand code
(honestci.audit.stats.bayesian.model.winrate_estimand_draws); the table reports posterior mean and 95% interval of both
win rates. Run from the repository root:

    PYTHONPATH=$PWD /work/main/.venv/bin/python bench/bench_bayes.py [--bambi-python PATH]

The machine's cores are shared: the load average before each process and the process's CPU time
(user + sys, children included, less sensitive to load than wall time) are reported beside the
wall time.
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

REPO = Path(__file__).resolve().parents[1]
#: The problem's shape (vignettes, runs, verdicts per vignette × order × run cell); the fixture-like
#: default, or --vignettes/--runs/--per-cell (passed on to each child process).
SHAPE = {"vignettes": 6, "runs": 3, "per_cell": 40}
SETTINGS = dict(chains=4, draws=1000, tune=1000)


def simulate(seed: int) -> dict[str, np.ndarray]:
    """Per-verdict outcomes, vignette-major (vignette, order, run, verdict), from one seeded generator.

    At the fixture-like default shape the draws are the same as those the figures in bench/README.md
    were measured on (one generator, the same draw order)."""
    rng = np.random.default_rng(seed)
    n_vignettes, n_runs, per_cell = SHAPE["vignettes"], SHAPE["runs"], SHAPE["per_cell"]
    u = rng.normal(0.0, 0.5, n_vignettes)
    run_offsets = rng.normal(0.0, 0.1, n_runs)
    orders = np.array([0.5, -0.5])
    eta = 0.3 + u[:, None, None] + 0.4 * orders[None, :, None] + run_offsets[None, None, :]
    p = np.repeat((1.0 / (1.0 + np.exp(-eta))).reshape(-1), per_cell)
    outcome = (rng.random(p.size) < p).astype(float) if p.size > 100_000 else _binomial_cells(rng, p, per_cell)
    grid = np.indices((n_vignettes, 2, n_runs)).reshape(3, -1)
    return {
        "vignette": np.repeat(grid[0], per_cell),
        "order": np.repeat(orders[grid[1]], per_cell),
        "run": np.repeat(grid[2], per_cell),
        "outcome": outcome,
    }


def _binomial_cells(rng: np.random.Generator, p: np.ndarray, per_cell: int) -> np.ndarray:
    # one binomial(1, p, per_cell) call per cell, as the fixture-like figures were drawn
    return np.concatenate([rng.binomial(1, p[i], per_cell).astype(float) for i in range(0, p.size, per_cell)])


def summarise(estimands: dict[str, np.ndarray]) -> dict[str, list[float]]:
    return {
        name: [float(np.mean(d)), float(np.quantile(d, 0.025)), float(np.quantile(d, 0.975))]
        for name, d in estimands.items()
        if name.startswith("winrate")
    }


# ------------------------------------------------------------------ contenders (child side)
def fit_honestci(data, seed, sampler):
    from honestci.audit.stats.bayesian.hierarchical import fit_winrate_hierarchical

    result = fit_winrate_hierarchical(
        data["vignette"], data["order"], data["outcome"], run=data["run"], sampler=sampler, seed=seed, **SETTINGS
    )
    d = result.diagnostics
    return {
        "winrate_these": [result.winrate_these.mean, result.winrate_these.lower, result.winrate_these.upper],
        "winrate_new": [result.winrate_new.mean, result.winrate_new.lower, result.winrate_new.upper],
    }, {
        "divergences": d.divergences,
        "rhat_max": d.rhat_max,
        "ess_bulk_min": d.ess_bulk_min,
        "ess_tail_min": d.ess_tail_min,
        "sampler": result.sampler,
        "parameterization": result.parameterization,
    }


def fit_nutpie_pytensor(data, seed):
    import nutpie

    from honestci.audit.stats.bayesian.cells import aggregate_cells
    from honestci.audit.stats.bayesian.model import _build_hierarchical_model, resolve_prior, winrate_estimand_draws
    from honestci.audit.stats.bayesian.sampling import TARGET_ACCEPT

    cells = aggregate_cells(data["vignette"], data["order"], data["outcome"], run=data["run"])
    compiled = nutpie.compile_pymc_model(_build_hierarchical_model(cells, resolve_prior("halfnormal1"), True))
    idata = nutpie.sample(
        compiled,
        seed=seed,
        progress_bar=False,
        cores=min(4, os.cpu_count() or 1),
        target_accept=TARGET_ACCEPT,
        **SETTINGS,
    )
    post = idata.posterior.stack(sample=("chain", "draw"))
    estimands = winrate_estimand_draws(
        post["mu"].values, post["beta"].values, post["sigma"].values, post["u"].values.T, post["run_effect"].values.T
    )
    return summarise(estimands), {"divergences": int(idata.sample_stats["diverging"].sum())}


def fit_bernoulli_pymc(data, seed):
    import logging

    import pymc as pm

    from honestci.audit.stats.bayesian.model import winrate_estimand_draws

    logging.getLogger("pymc").setLevel(logging.WARNING)
    with pm.Model(coords={"vignette": range(SHAPE["vignettes"]), "run": range(SHAPE["runs"])}):
        mu = pm.Normal("mu", 0.0, 1.5)
        beta = pm.Normal("beta", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        u = pm.Normal("u", 0.0, sigma, dims="vignette")
        run_raw = pm.Normal("run_raw", 0.0, 1.0, dims="run")
        run_effect = pm.Deterministic("run_effect", run_raw - run_raw.mean(), dims="run")
        eta = mu + u[data["vignette"]] + beta * data["order"] + run_effect[data["run"]]
        pm.Bernoulli("y", logit_p=eta, observed=data["outcome"].astype(int))
        idata = pm.sample(
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
            cores=min(4, os.cpu_count() or 1),
            **SETTINGS,
        )
    post = idata.posterior.stack(sample=("chain", "draw"))
    offsets = post["run_effect"].values.T
    estimands = winrate_estimand_draws(
        post["mu"].values, post["beta"].values, post["sigma"].values, post["u"].values.T, offsets
    )
    return summarise(estimands), {"divergences": int(idata.sample_stats["diverging"].sum())}


def _bambi_priors(bmb):
    return {
        "Intercept": bmb.Prior("Normal", mu=0, sigma=1.5),
        "order": bmb.Prior("Normal", mu=0, sigma=1),
        "1|vignette": bmb.Prior("Normal", mu=0, sigma=bmb.Prior("HalfNormal", sigma=1)),
    }


def _fit_bambi_model(model, seed):
    from honestci.audit.stats.bayesian.model import winrate_estimand_draws

    idata = model.fit(random_seed=seed, progressbar=False, **SETTINGS)
    post = idata.posterior.stack(sample=("chain", "draw"))
    estimands = winrate_estimand_draws(
        post["Intercept"].values, post["order"].values, post["1|vignette_sigma"].values, post["1|vignette"].values.T
    )
    return summarise(estimands), {"divergences": int(idata.sample_stats["diverging"].sum())}


def fit_bambi(data, seed):
    import bambi as bmb
    import pandas as pd

    frame = pd.DataFrame(
        {"y": data["outcome"].astype(int), "order": data["order"], "vignette": pd.Categorical(data["vignette"])}
    )
    return _fit_bambi_model(
        bmb.Model("y ~ order + (1|vignette)", frame, family="bernoulli", priors=_bambi_priors(bmb)), seed
    )


def fit_bambi_binomial(data, seed):
    import bambi as bmb
    import pandas as pd

    rows = pd.DataFrame({"y": data["outcome"], "order": data["order"], "vignette": data["vignette"]})
    cells = rows.groupby(["vignette", "order"], as_index=False).agg(wins=("y", "sum"), trials=("y", "size"))
    cells["wins"], cells["vignette"] = cells["wins"].astype(int), pd.Categorical(cells["vignette"])
    model = bmb.Model("p(wins, trials) ~ order + (1|vignette)", cells, family="binomial", priors=_bambi_priors(bmb))
    return _fit_bambi_model(model, seed)


def child(contender: str, warm: bool) -> None:
    started = time.perf_counter()
    fits = {
        "honestci": lambda d, s: fit_honestci(d, s, "auto"),
        "honestci-pymc": lambda d, s: fit_honestci(d, s, "pymc"),
        "nutpie-pytensor": fit_nutpie_pytensor,
        "bernoulli-pymc": fit_bernoulli_pymc,
        "bambi": fit_bambi,
        "bambi-binomial": fit_bambi_binomial,
    }[contender]
    summary, extra = fits(simulate(1), 1)
    first = time.perf_counter() - started
    record = {"contender": contender, "first_fit_s": first, "summary": summary, **extra}
    if warm:
        t = time.perf_counter()
        _, extra_warm = fits(simulate(2), 2)
        record["warm_fit_s"] = time.perf_counter() - t
        record["warm_divergences"] = extra_warm["divergences"]
    print(json.dumps(record))


# ------------------------------------------------------------------ driver
def run_child(python: str, contender: str, warm: bool, timeout: float | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
    shape = [f"--{key.replace('_', '-')}={value}" for key, value in SHAPE.items()]
    command = [python, str(Path(__file__).resolve()), "--child", contender, *shape] + (["--warm"] if warm else [])
    load1 = os.getloadavg()[0]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"contender": contender, "error": [f"did not finish in {timeout:.0f} s (load1 before {load1:.1f})"]}
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    if completed.returncode != 0:
        return {"contender": contender, "error": completed.stderr.strip().splitlines()[-1:]}
    record = json.loads(completed.stdout.strip().splitlines()[-1])
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far
    record.update(process_wall_s=wall, process_cpu_s=cpu, load1_before=load1, peak_children_mb=peak_mb)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child")
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--bambi-python", default=None)
    parser.add_argument(
        "--bambi", choices=("bernoulli", "binomial"), default="bernoulli", help="bambi on verdicts or on cells"
    )
    parser.add_argument("--vignettes", type=int, default=SHAPE["vignettes"])
    parser.add_argument("--runs", type=int, default=SHAPE["runs"])
    parser.add_argument("--per-cell", type=int, default=SHAPE["per_cell"], help="verdicts per vignette×order×run")
    parser.add_argument("--timeout", type=float, default=None, help="seconds a contender's process may take")
    parser.add_argument("--repeats", type=int, default=2, help="cold processes per contender")
    parser.add_argument(
        "--contenders",
        default="honestci,nutpie-pytensor,honestci-pymc,bernoulli-pymc",
        help="comma-separated subset of the contenders (bambi needs --bambi-python)",
    )
    args = parser.parse_args()
    SHAPE.update(vignettes=args.vignettes, runs=args.runs, per_cell=args.per_cell)
    if args.child:
        child(args.child, args.warm)
        return
    python = sys.executable
    plan = [(python, name) for name in args.contenders.split(",") if not name.startswith("bambi")]
    if args.bambi_python:
        plan.append((args.bambi_python, "bambi" if args.bambi == "bernoulli" else "bambi-binomial"))
    print(f"shape: {SHAPE}, {args.vignettes * 2 * args.runs * args.per_cell:,} verdicts")
    print(f"load average before: {os.getloadavg()}")
    records = []
    for interpreter, contender in plan:
        for repeat in range(args.repeats):
            record = run_child(interpreter, contender, warm=repeat == args.repeats - 1, timeout=args.timeout)
            records.append(record)
            print(json.dumps(record), flush=True)
    print(
        "\n| contender | cold process wall s | CPU s | load1 | warm fit s | divergences | W_these mean [95%] | W_new mean [95%] |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in records:
        if "error" in r:
            print(f"| {r['contender']} | error: {r['error']} | | | | | | |")
            continue
        s = r["summary"]
        these, new = s["winrate_these"], s["winrate_new"]
        warm = f"{r['warm_fit_s']:.2f}" if "warm_fit_s" in r else ""
        print(
            f"| {r['contender']} | {r['process_wall_s']:.2f} | {r['process_cpu_s']:.2f} | {r['load1_before']:.2f} | "
            f"{warm} | {r['divergences']} | "
            f"{these[0]:.4f} [{these[1]:.4f}, {these[2]:.4f}] | {new[0]:.4f} [{new[1]:.4f}, {new[2]:.4f}] |"
        )


if __name__ == "__main__":
    main()
