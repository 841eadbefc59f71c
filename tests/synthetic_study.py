"""A small synthetic study written into a folder, for tests that need a whole claim but not the
4 MB embedded fixture: G vignettes, k policy/opponent response pairs per vignette, one judge that
saw both orders of every contest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

POLICY, OPPONENT, JUDGE = "policy-m", "opponent-m", "judge-j"
TABLE_FILES = {"vignettes": "vignettes.jsonl", "responses": "responses.jsonl", "judgments": "judgments.jsonl"}


def study_rows(n_vignettes: int = 8, pairs: int = 4, seed: int = 7, verdicts: tuple[str, ...] | None = None):
    """Rows of the three core tables. ``verdicts`` fixes every verdict (e.g. ("tie",) for all ties);
    otherwise the policy wins each order with a vignette-specific probability."""
    rng = np.random.default_rng(seed)
    vignettes, responses, judgments = [], [], []
    for g in range(n_vignettes):
        vid = f"v{g}"
        vignettes.append({"vignette_id": vid, "text": f"Scenario {g}: a friend forgot your birthday."})
        p_win = rng.uniform(0.4, 0.9)
        for k in range(pairs):
            pol, opp = f"{vid}-p{k}", f"{vid}-o{k}"
            responses.append({"response_id": pol, "vignette_id": vid, "system": POLICY, "text": f"policy answer {k}"})
            responses.append(
                {"response_id": opp, "vignette_id": vid, "system": OPPONENT, "text": f"opponent answer {k}"}
            )
            for first, second, policy_first in ((pol, opp, True), (opp, pol, False)):
                if verdicts is not None:
                    verdict = verdicts[(g + k) % len(verdicts)]
                else:
                    policy_wins = rng.random() < p_win
                    verdict = "first" if policy_wins == policy_first else "second"
                judgments.append(
                    {
                        "judge": JUDGE,
                        "vignette_id": vid,
                        "response_first": first,
                        "response_second": second,
                        "verdict": verdict,
                    }
                )
    return {"vignettes": vignettes, "responses": responses, "judgments": judgments}


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def claim_dict(**changes) -> dict:
    claim = {
        "version": 1,
        "name": "synthetic claim",
        "policy": POLICY,
        "opponent": OPPONENT,
        "judge": JUDGE,
        "bar": 0.5,
        "population": "new_vignettes",
        "data": dict(TABLE_FILES),
    }
    claim.update(changes)
    return claim


def write_study(folder: Path, rows: dict | None = None, claim: dict | None = None, **row_options) -> Path:
    """Write the tables and ``claim.yaml`` into ``folder``; returns the claim's path."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = rows if rows is not None else study_rows(**row_options)
    for table, name in TABLE_FILES.items():
        write_jsonl(folder / name, rows[table])
    path = folder / "claim.yaml"
    path.write_text(yaml.safe_dump(claim if claim is not None else claim_dict(), sort_keys=False), encoding="utf-8")
    return path
