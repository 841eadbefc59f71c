import json
import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Tests import the installed `honestci` only. `python -m pytest` run from the repository puts the
# repository on sys.path, where the bare folders `audit`, `reports`, ... would import too and hide
# a reference to a top-level name that an installed wheel does not have; drop it, and keep
# subprocesses from adding their working folder (PYTHONSAFEPATH, Python >= 3.11).
sys.path[:] = [entry for entry in sys.path if Path(entry or os.curdir).resolve() != REPO_ROOT]
os.environ["PYTHONSAFEPATH"] = "1"
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The real public data beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent (it ships beside the checkout in CI, not in a user's clone)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def study():
    """The embedded fixture study, loaded through the headline claim (tests may override locally)."""
    from honestci.audit.data.claims import load_claim
    from honestci.audit.data.io import load_study

    return load_study(load_claim(REPO_ROOT / "fixtures" / "study" / "claim.yaml").data_paths)


@pytest.fixture(scope="session")
def truth():
    """The fixture study's ground truth (truth.json)."""
    return json.loads((REPO_ROOT / "fixtures" / "study" / "truth.json").read_text())


@pytest.fixture(scope="session")
def passing_claim(tmp_path_factory) -> Path:
    """The headline claim as an honest card states it: its point alone, in a copy of the study.

    The fixture's card labels its interval ``method: wilson``, an iid interval on 6 vignettes, so
    ``claimed_figures_reproduce`` WARNs on it (issue 15); tests of what only a PASS does use this.
    """
    import re
    import shutil

    folder = tmp_path_factory.mktemp("passing") / "study"
    shutil.copytree(REPO_ROOT / "fixtures" / "study", folder)
    claim = folder / "claim.yaml"
    text, count = re.subn(r"^claimed: \{.*\}$", "claimed: {point: 0.843}", claim.read_text(), flags=re.MULTILINE)
    assert count == 1
    claim.write_text(text)
    return claim


@pytest.fixture(scope="session")
def no_length_rule():
    """An auditor's policy with the length rule off: the fixture's policy answers are 1.42x longer
    than the opponent's in every contest, so the built-in policy requires length_bias and it cannot
    pass (length confounded with the policy); tests of what only a PASS does audit under this."""
    from dataclasses import replace

    from honestci.audit.policy import THRESHOLDS, Policy

    return Policy(thresholds=replace(THRESHOLDS, length_bias_required_ratio=1e9))


@pytest.fixture(scope="session")
def bayes_audit():
    """The headline claim audited with the Bayesian model (one NUTS fit, ~5-10 s, shared by every
    test that needs a converged fit's report or posterior)."""
    pytest.importorskip("pymc")
    pytest.importorskip("arviz")
    from honestci.audit.pipeline import run_audit

    return run_audit(REPO_ROOT / "fixtures" / "study" / "claim.yaml", bayes=True)
