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
