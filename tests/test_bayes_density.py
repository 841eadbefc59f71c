"""The hand-derived log densities of audit/stats/bayesian/density.py against the PyMC models they
were derived from, and the fingerprints that record which PyMC definitions those were.

Outside reference: PyMC's own ``model.compile_logp()`` / ``model.compile_dlogp()`` (log density
with normalising constants and the log-transform Jacobian, and its gradient, on the unconstrained
space) and ``model.compile_fn`` of the deterministics, at random points, for every variant of
``_build_hierarchical_model``: centred / non-centred x with / without run offsets x with /
without judge offsets x every prior in SIGMA_PRIORS; the joint model of bayes_compare; the pooled
Beta-binomial. Each of those tests ends by checking the density's recorded fingerprint
(:func:`_assert_fingerprint_current`): the density was just shown to match the PyMC model in use,
so that model's fingerprint is the one to record.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit

from honestci.audit.stats.bayesian import density as bayes_density
from honestci.audit.stats.bayesian.cells import aggregate_cells
from honestci.audit.stats.bayesian.model import SIGMA_PRIORS, _build_hierarchical_model
from honestci.audit.stats.bayesian.pooled import _build_pooled_model

REPO_ROOT = Path(__file__).resolve().parents[1]
POINTS_PER_VARIANT = 40


def _cells(rng, n_runs, n_judges):
    n = 400
    return aggregate_cells(
        rng.integers(0, 5, n),
        rng.choice([0.5, -0.5], n),
        rng.choice([0.0, 0.5, 1.0], n),  # ties: fractional wins
        rng.integers(0, n_runs, n) if n_runs > 1 else None,
        rng.integers(0, n_judges, n) if n_judges > 1 else None,
    )


def _as_points(xs, blocks, model):
    """Each row of ``xs`` as a PyMC point: the blocks by name, 0-d where PyMC's value variable is."""
    shapes = {name: np.shape(value) for name, value in model.initial_point().items()}
    return [_as_point(x, blocks, shapes) for x in xs]


def _as_point(x, blocks, shapes):
    point, position = {}, 0
    for name, size in blocks:
        point[name] = x[position : position + size].reshape(shapes[name])
        position += size
    return point


def _assert_expansion_matches(named, points, deterministics, pymc_expand):
    """The expansion of all draws at once (rows = points) against PyMC's value variables and
    deterministics at each point."""
    assert list(named) == list(points[0]) + deterministics  # PyMC's names, value variables first
    for row, point in enumerate(points):
        for name, value in point.items():
            np.testing.assert_array_equal(named[name][row], value)
        for name, reference in zip(deterministics, pymc_expand(point)):
            np.testing.assert_allclose(named[name][row], reference, rtol=1e-12, atol=1e-12)


def _assert_fingerprint_current(derivation: bayes_density.Derivation) -> None:
    current = derivation.current_fingerprint()
    assert current == derivation.fingerprint, (
        f"The PyMC definition of the {derivation.model} ({', '.join(derivation.functions)}) changed since "
        f"its density was derived. The density-vs-PyMC check above passed on the edited model, so set "
        f"{derivation.name}'s fingerprint in audit/stats/bayesian/density.py to {current!r}. (Had the log "
        "density changed, that check would have failed first: re-derive the kernel, then update the fingerprint.)"
    )


STRUCTURES = list(itertools.product([1, 3], [1, 2], [True, False]))


@pytest.mark.parametrize("n_runs,n_judges,centred", STRUCTURES)
def test_logp_gradient_and_expansion_match_pymc(n_runs, n_judges, centred):
    """Every structure, and within it every prior of SIGMA_PRIORS (the prior is model data)."""
    rng = np.random.default_rng(100 * n_runs + 10 * n_judges + centred)
    cells = _cells(rng, n_runs, n_judges)
    model = _build_hierarchical_model(cells, SIGMA_PRIORS["halfnormal1"], centred)
    fast_compile = dict(mode="FAST_COMPILE")  # Python backend: no C compile, exact same graph
    pymc_logp, pymc_dlogp = model.compile_logp(**fast_compile), model.compile_dlogp(**fast_compile)
    deterministics = (
        ["sigma", "u"] + (["run_effect"] if n_runs > 1 else []) + (["judge_effect"] if n_judges > 1 else [])
    )
    by_name = {variable.name: variable for variable in model.unobserved_value_vars}  # in terms of value vars
    pymc_expand = model.compile_fn(
        [by_name[name] for name in deterministics],
        inputs=model.value_vars,
        point_fn=True,
        on_unused_input="ignore",
        **fast_compile,
    )

    blocks = bayes_density.parameter_blocks(cells.n_vignettes, cells.n_runs, cells.n_judges, centred)
    assert [name for name, _ in blocks] == list(model.initial_point())  # same names, same order
    for prior in SIGMA_PRIORS.values():
        model.set_data("sigma_prior_nu", np.array(prior.student_t_nu))
        model.set_data("sigma_prior_scale", np.array(prior.scale))
        packed = bayes_density.pack(
            cells.vignette_index,
            cells.order,
            cells.run_index,
            cells.judge_index,
            cells.n,
            cells.wins,
            cells.n_vignettes,
            cells.n_runs,
            cells.n_judges,
            centred,
            prior.student_t_nu,
            prior.scale,
        )
        xs = rng.normal(0.0, 1.5, (POINTS_PER_VARIANT, bayes_density.n_parameters(packed)))
        points = _as_points(xs, blocks, model)
        for x, point in zip(xs, points):
            logp, gradient = bayes_density.logp_and_gradient(packed, x)
            reference_gradient = pymc_dlogp(point)
            assert logp == pytest.approx(pymc_logp(point), rel=1e-9), prior
            scale = max(1.0, float(np.max(np.abs(reference_gradient))))
            np.testing.assert_allclose(gradient, reference_gradient, rtol=0, atol=1e-9 * scale, err_msg=str(prior))
        _assert_expansion_matches(bayes_density.expand(xs, packed), points, deterministics, pymc_expand)
    _assert_fingerprint_current(bayes_density.HIERARCHICAL)


def test_paired_model_logp_gradient_and_expansion_match_pymc():
    """The joint two-system model of audit/stats/bayesian/compare.py against its PyMC definition."""
    from honestci.audit.stats.bayesian.compare import _cells as paired_cells
    from honestci.audit.stats.bayesian.compare import _model as paired_model

    rng = np.random.default_rng(5)

    def contests():
        n = 300
        return rng.choice([0.0, 0.5, 1.0], n), rng.choice(["a", "b", "c", "d"], n)

    labels, data = paired_cells(*contests(), *contests())
    model = paired_model(labels, data)
    fast_compile = dict(mode="FAST_COMPILE")
    pymc_logp, pymc_dlogp = model.compile_logp(**fast_compile), model.compile_dlogp(**fast_compile)
    by_name = {variable.name: variable for variable in model.unobserved_value_vars}
    deterministics = ["sigma_u", "sigma_w", "u", "w"]
    pymc_expand = model.compile_fn(
        [by_name[name] for name in deterministics],
        inputs=model.value_vars,
        point_fn=True,
        on_unused_input="ignore",
        **fast_compile,
    )
    blocks = bayes_density.paired_parameter_blocks(len(labels))
    assert [name for name, _ in blocks] == list(model.initial_point())
    packed = bayes_density.paired_pack(
        data["cell_vignette"], data["cell_order"], data["cell_system"], data["cell_n"], data["cell_wins"], len(labels)
    )
    xs = rng.normal(0.0, 1.5, (4 * POINTS_PER_VARIANT, sum(size for _, size in blocks)))
    points = _as_points(xs, blocks, model)
    for x, point in zip(xs, points):
        logp, gradient = bayes_density.paired_logp_and_gradient(packed, x)
        reference_gradient = pymc_dlogp(point)
        assert logp == pytest.approx(pymc_logp(point), rel=1e-9)
        scale = max(1.0, float(np.max(np.abs(reference_gradient))))
        np.testing.assert_allclose(gradient, reference_gradient, rtol=0, atol=1e-9 * scale)
    _assert_expansion_matches(bayes_density.paired_expand(xs, packed), points, deterministics, pymc_expand)
    _assert_fingerprint_current(bayes_density.PAIRED)


def test_pooled_model_logp_and_gradient_match_pymc():
    """The conjugate model of honestci.audit.stats.bayesian.pooled.fit_pooled_beta_binomial against its PyMC definition."""
    a, b, n, wins = 2.0, 3.5, 240.0, 131.5
    model = _build_pooled_model(a, b, n, wins)
    assert list(model.initial_point()) == ["p_logodds__"]
    pymc_logp = model.compile_logp(mode="FAST_COMPILE")
    pymc_dlogp = model.compile_dlogp(mode="FAST_COMPILE")
    packed = np.array([a, b, n, wins])
    for z in np.linspace(-6.0, 6.0, 41):
        logp, gradient = bayes_density.pooled_logp_and_gradient(packed, np.array([z]))
        assert logp == pytest.approx(pymc_logp({"p_logodds__": np.array(z)}), rel=1e-9)
        assert gradient[0] == pytest.approx(pymc_dlogp({"p_logodds__": np.array(z)})[0], rel=1e-8, abs=1e-9)
        named = bayes_density.pooled_expand(np.array([z]), packed)
        assert named["p_logodds__"] == z and named["p"] == pytest.approx(expit(z), rel=1e-12)
    _assert_fingerprint_current(bayes_density.POOLED)


def test_density_stays_finite_in_the_tails_and_rejects_points_beyond_them():
    cells = aggregate_cells(["a", "a", "b", "b"], [0.5, -0.5, 0.5, -0.5], [1, 0, 1, 1])
    packed = bayes_density.pack(
        cells.vignette_index,
        cells.order,
        cells.run_index,
        cells.judge_index,
        cells.n,
        cells.wins,
        2,
        1,
        1,
        False,  # non-centred: eta = mu + sigma u_std
        0.0,
        1.0,
    )
    limit = bayes_density.MAX_ABS_COORDINATE
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's floating-point warnings included: none may occur
        for value in (limit, -limit):
            # eta = +-e^5 * 300 ~ +-4e4 would overflow a naive log(1 + e^eta); the stable form stays finite
            logp, gradient = bayes_density.logp_and_gradient(packed, np.array([0.0, 0.0, 5.0, value, -value]))
            assert np.isfinite(logp) and np.all(np.isfinite(gradient))
        for x in ([0.0, 0.0, limit + 1.0, 1.0, -1.0], [0.0, 0.0, 0.0, np.nan, 0.0], [-1e300, 0.0, 0.0, 0.0, 0.0]):
            logp, gradient = bayes_density.logp_and_gradient(packed, np.array(x))
            assert logp == -np.inf and np.all(gradient == 0.0)  # rejected before any arithmetic


def test_a_new_process_reuses_the_disk_cache_and_never_imports_pymc(tmp_path):
    """A second process loads every kernel from numba's on-disk cache instead of compiling it (as
    numba's own NUMBA_DEBUG_CACHE log says), and the default fit (sampler="auto") runs without
    importing pymc or pytensor."""
    script = (
        "import json, sys, numpy as np, honestci.audit.stats.bayesian.density as b\n"
        "packed = b.pack([0, 1], [.5, -.5], [0, 0], [0, 0], [1., 1.], [1., 0.], 2, 1, 1, True, 0., 1.)\n"
        "b.logp_and_gradient(packed, np.zeros(5))\n"
        "if sys.argv[1] == 'fit':\n"
        "    from honestci.audit.stats.bayesian.hierarchical import fit_winrate_hierarchical\n"
        "    sampler = fit_winrate_hierarchical(['a', 'a', 'b', 'b'] * 20, [.5, -.5] * 40, [1., 0., 1., 1.] * 20,\n"
        "                                       chains=2, draws=50, tune=50, seed=1).sampler\n"
        "else:\n"
        "    sampler = None\n"
        "print(json.dumps({'sampler': sampler, 'imported': sorted(m for m in ('pymc', 'pytensor') if m in sys.modules)}))\n"
    )
    env = dict(
        os.environ, PYTHONPATH=str(REPO_ROOT), NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"), NUMBA_DEBUG_CACHE="1"
    )
    runs = []
    for mode in ("compile", "fit"):
        stdout = subprocess.run(
            [sys.executable, "-c", script, mode], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
        ).stdout
        cache_log = re.findall(r"^\[cache\] data (saved|loaded) .*/density\.(\w+)-\d+", stdout, re.MULTILINE)
        runs.append(
            (
                {kernel for event, kernel in cache_log if event == "saved"},
                {kernel for event, kernel in cache_log if event == "loaded"},
                json.loads(stdout.splitlines()[-1]),
            )
        )
    kernels = {"logp_and_gradient", "paired_logp_and_gradient", "pooled_logp_and_gradient"}
    assert kernels <= runs[0][0]  # empty cache: compiled and written
    saved, loaded, outcome = runs[1]
    assert saved == set() and kernels <= loaded
    assert outcome == {"sampler": "nutpie", "imported": []}


_COLD_IMPORT = (
    "import numpy as np, honestci.audit.stats.bayesian.density as b\n"
    "packed = b.pack([0, 1], [.5, -.5], [0, 0], [0, 0], [1., 1.], [1., 0.], 2, 1, 1, True, 0., 1.)\n"
    "print(float(b.logp_and_gradient(packed, np.zeros(5))[0]))\n"
)


def _blocked_flock_waiters(lock: Path) -> set[int]:
    """PIDs waiting (``->`` lines of /proc/locks) for an flock on ``lock``'s inode."""
    inode = str(lock.stat().st_ino)
    waiters = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and fields[fields.index("->") + 1] == "FLOCK":
            pid, device_inode = fields[fields.index("->") + 4], fields[fields.index("->") + 5]
            if device_inode.rsplit(":", 1)[-1] == inode:
                waiters.add(int(pid))
    return waiters


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads waiting locks from Linux's /proc/locks")
def test_gufuncs_compile_into_a_cold_cache_one_process_at_a_time(tmp_path):
    """numba issue #10128: a gufunc's kernel and wrapper written by two processes segfault on load.
    While another process holds the compile lock, a process importing the kernels into a cold
    cache waits for it, writing nothing; once released it compiles, saves and computes."""
    import fcntl
    import time

    from honestci.audit.stats.numba_cache import LOCK_NAME

    cache = tmp_path / "numba-cache"
    cache.mkdir()
    lock = cache / LOCK_NAME
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), NUMBA_CACHE_DIR=str(cache))
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        child = subprocess.Popen(
            [sys.executable, "-c", _COLD_IMPORT], env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 120
            while child.pid not in _blocked_flock_waiters(lock):
                assert child.poll() is None, "the cold import finished without waiting for the compile lock"
                assert time.monotonic() < deadline, "the cold import never asked for the compile lock"
                time.sleep(0.05)
            assert not list(cache.rglob("*.nbc"))
        except BaseException:
            child.kill()
            raise
    stdout, _ = child.communicate(timeout=300)
    assert child.returncode == 0
    assert np.isfinite(float(stdout.split()[-1]))
    assert any(path.name.startswith("guf-") for path in cache.rglob("*.nbc"))


@pytest.mark.slow
def test_concurrent_cold_imports_leave_a_cache_every_process_loads(tmp_path):
    """Three processes fill one cold cache at once (how parallel test workers start on a fresh
    clone); all succeed, and a fourth loads every kernel from what they left."""
    for round_ in range(2):
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), NUMBA_CACHE_DIR=str(tmp_path / f"cache-{round_}"))
        children = [
            subprocess.Popen([sys.executable, "-c", _COLD_IMPORT], env=env, cwd=tmp_path, stdout=subprocess.PIPE)
            for _ in range(3)
        ]
        assert [child.wait(timeout=300) for child in children] == [0, 0, 0]
        warm = subprocess.run([sys.executable, "-c", _COLD_IMPORT], env=env, cwd=tmp_path, capture_output=True)
        assert warm.returncode == 0, warm.stderr


FINGERPRINTED_SOURCE = '''
def build(x, scale: float = 1.5):
    """The model."""
    y = x + scale  # a comment
    return y * 2
'''


@pytest.mark.parametrize(
    "edit,changes",
    [
        (lambda source: source.replace("# a comment", "# reworded"), False),
        (lambda source: source.replace('"""The model."""', '"""The model, documented."""'), False),
        (lambda source: source.replace("return y * 2", "return (\n        y * 2\n    )"), False),
        (lambda source: source.replace("scale: float = 1.5", "scale: int = 1.5"), False),
        (lambda source: source.replace("= 1.5", "= 1.0"), True),
        (lambda source: source.replace("y * 2", "2 * y"), True),
        (lambda source: source.replace('"""The model."""', '"""The model."""\n    x = abs(x)'), True),
    ],
)
def test_fingerprint_follows_code_not_comments_docstrings_or_layout(tmp_path, edit, changes):
    def fingerprint_of(source, name):
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return bayes_density.model_fingerprint([module.build])

    original = fingerprint_of(FINGERPRINTED_SOURCE, "original")
    assert (fingerprint_of(edit(FINGERPRINTED_SOURCE), "edited") != original) is changes


def test_a_definition_without_source_is_refused(monkeypatch):
    from honestci.audit.errors import DensityMismatchError
    from honestci.audit.stats.bayesian import model as bayes_model

    namespace: dict = {}
    exec("def quasi_binomial_loglik(eta, n, wins):\n    return 0.0\n", namespace)  # no file: no source
    monkeypatch.setattr(bayes_model, "quasi_binomial_loglik", namespace["quasi_binomial_loglik"])
    with pytest.raises(DensityMismatchError, match=r"fingerprint unknown \(OSError") as refused:
        bayes_density.POOLED.check()
    assert "POOLED" in str(refused.value) and "What to do" in str(refused.value)


def test_fused_softplus_and_expit_are_the_separate_functions_to_the_last_bit():
    # the kernels take both from one exp: the values (and so every posterior draw) must not move
    from honestci.audit.stats.bayesian.density import _expit, _log1pexp, _log1pexp_and_expit

    rng = np.random.default_rng(7)
    xs = [0.0, -0.0, 5e-324, -5e-324, 1e-300, -1e-300, 36.0, -36.0, 710.0, -745.0, 800.0, -800.0, float("nan")]
    xs += list(rng.normal(0, 3, 2000)) + list(rng.normal(0, 40, 500))
    for x in xs:
        fused = _log1pexp_and_expit(x)
        separate = (_log1pexp(x), _expit(x))
        assert np.array_equal(np.array(fused), np.array(separate), equal_nan=True), x
