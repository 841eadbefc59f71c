"""A command whose optional extra is not installed exits 2, names the extra and how to install it,
and writes nothing; the core audit (--no-bayes) runs with no extra at all.

Each command runs in a fresh interpreter in which a meta-path finder refuses the extra's modules
(ModuleNotFoundError, as on a core install; ``sys.modules[name] = None`` would not do: scipy looks
torch up in ``sys.modules`` and trips over the None).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from honestci.fixtures.simulate import DEFAULT_STUDY_DIR
from honestci.judges.stub_server import write_stub_study

REPO_ROOT = Path(__file__).resolve().parents[1]
CLAIM = DEFAULT_STUDY_DIR / "claim.yaml"
#: Every module an extra provides that honestci imports.
EXTRA_MODULES = {
    "bayes": ("pymc", "arviz", "nutpie"),
    "judges": ("httpx",),
    "train": ("torch", "transformers", "trl", "accelerate", "datasets"),
    "distributed": ("distributed", "dask"),
    "dev": ("statsmodels", "krippendorff"),
    "inspect": ("zstandard",),
}


def honestci_without(blocked, *args, cwd=REPO_ROOT):
    """Run the command line in a fresh interpreter in which the modules ``blocked`` cannot be imported."""
    prelude = f"""
import sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {set(blocked)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

sys.meta_path.insert(0, Blocker())
from honestci.audit.cli import main
main(sys.argv[1:], prog_name="honestci")
"""
    return subprocess.run(
        [sys.executable, "-c", prelude, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def assert_needs_extra(result, extra: str, *texts: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"needs the {extra} extra" in result.stderr
    assert f"pip install 'honestci[{extra}]'" in result.stderr
    for text in texts:
        assert text in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("missing", "flags"), [("pymc", ()), ("arviz", ("--allow-inconclusive",))])
def test_audit_without_the_bayes_extra_exits_2_before_any_verdict(tmp_path, missing, flags):
    out = tmp_path / "out"
    result = honestci_without([missing], "audit", CLAIM, "--out", out, *flags)
    assert_needs_extra(result, "bayes", "the Bayesian model", f"{missing} is not installed", "(or pass --no-bayes)")
    assert "verdict" not in result.stdout and not out.exists()


def test_demo_without_the_bayes_extra_exits_2(tmp_path):
    out = tmp_path / "demo"
    assert_needs_extra(honestci_without(["pymc"], "demo", "--out", out), "bayes", "--no-bayes")
    assert not out.exists()


def test_the_core_audit_runs_without_any_extra(tmp_path):
    # Outside the repository, as installed: the checkout's folders are not importable from there.
    blocked = [module for modules in EXTRA_MODULES.values() for module in modules]
    result = honestci_without(blocked, "audit", CLAIM, "--out", tmp_path, "--no-bayes", cwd=tmp_path)
    # Every gate runs; the card's Wilson interval WARNs (claimed_figures_reproduce), and the policy's
    # answers are longer in every contest (median 184 vs 130): length_bias is required by the
    # policy's length rule and INCONCLUSIVE (length confounded with the policy).
    assert result.returncode == 1, result.stderr
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["verdict"] == "INCONCLUSIVE" and not (tmp_path / "posterior.nc").exists()
    flagged = {g["gate"] for g in verdict["gates"] if g["verdict"] in ("WARN", "FAIL", "INCONCLUSIVE") and g["ran"]}
    assert {"claimed_figures_reproduce", "length_bias"} <= flagged
    assert {g["gate"] for g in verdict["blocking_gates"]} == {"claimed_figures_reproduce", "length_bias"}


@pytest.mark.parametrize(
    ("backend", "options", "missing", "extra"),
    [
        ("openai", ("--base-url", "http://127.0.0.1:9/v1", "--model", "m"), "httpx", "judges"),
        ("vllm", ("--base-url", "http://127.0.0.1:9/v1", "--model", "m"), "httpx", "judges"),
        ("transformers", ("--model-path", "no-model"), "torch", "train"),
    ],
)
def test_judge_backend_without_its_extra_exits_2_and_writes_nothing(tmp_path, backend, options, missing, extra):
    study = write_stub_study(tmp_path / "study", n_contests=2)
    out = tmp_path / "judgments.jsonl"
    result = honestci_without(
        [missing],
        "judge",
        study["contests"],
        "--vignettes",
        study["vignettes"],
        "--responses",
        study["responses"],
        "--out",
        out,
        "--backend",
        backend,
        *options,
    )
    assert_needs_extra(result, extra, f"{missing} is not installed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study"]  # neither OUT nor its cache


@pytest.mark.parametrize(
    ("backend", "options", "missing", "extra"),
    [
        ("vllm", ("--base-url", "http://127.0.0.1:9/v1", "--model", "m"), "httpx", "judges"),
        ("transformers", ("--model-path", "no-model"), "torch", "train"),
    ],
)
def test_generate_without_its_extra_exits_2_and_writes_nothing(tmp_path, backend, options, missing, extra):
    out = tmp_path / "responses.jsonl"
    result = honestci_without(
        [missing],
        "generate",
        "--system",
        "p",
        "--vignettes",
        DEFAULT_STUDY_DIR / "vignettes.jsonl",
        "--out",
        out,
        "--backend",
        backend,
        *options,
    )
    assert_needs_extra(result, extra)
    assert not out.exists()


@pytest.mark.parametrize(("command", "missing"), [("rm", "torch"), ("grpo", "trl")])
def test_train_without_the_train_extra_exits_2_and_writes_nothing(tmp_path, command, missing):
    config = REPO_ROOT / "training" / "configs" / ("rm_cpu_tiny.yaml" if command == "rm" else "grpo_cpu_tiny.yaml")
    out = tmp_path / "run"
    result = honestci_without([missing], "train", command, config, "--set", f"output_dir={out}")
    assert_needs_extra(result, "train", f"{missing} is not installed")
    assert not out.exists()


def test_pipeline_without_the_train_extra_exits_2_before_its_first_stage(tmp_path):
    out = tmp_path / "pipeline"
    config = REPO_ROOT / "training" / "configs" / "pipeline_cpu_tiny.yaml"
    result = honestci_without(["torch"], "pipeline", config, "--set", f"output_dir={out}")
    assert_needs_extra(result, "train", "the pipeline")
    assert not out.exists()


def test_dask_leakage_scan_without_the_distributed_extra_exits_2(tmp_path):
    out = tmp_path / "leakage"
    result = honestci_without(
        ["distributed"],
        "leakage",
        "--eval",
        DEFAULT_STUDY_DIR / "responses.jsonl",
        "--corpus",
        DEFAULT_STUDY_DIR / "corpus.jsonl",
        "--workers",
        "2",
        "--out",
        out,
    )
    assert_needs_extra(result, "distributed", "(or pass --workers 0)")
    assert not out.exists()


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="Python 3.14 reads zstd itself (compression.zstd)")
def test_import_of_a_zstd_eval_log_without_the_inspect_extra_exits_2(tmp_path):
    out = tmp_path / "judgments.jsonl"
    logs = [REPO_ROOT / "tests" / "data" / "inspect" / f"capitals_{tag}.eval" for tag in ("paris-or-tokyo", "lima")]
    result = honestci_without(
        ["zstandard"], "import", "inspect", *(f"m{i}={p}" for i, p in enumerate(logs)), "--out", out
    )
    assert_needs_extra(result, "inspect", "zstandard is not installed", "inspect log convert --to json")
    assert not out.exists()
