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


# --- degenerate but valid studies (issue 31): what an adversary or a real user may hand in ----------

#: A second system judged against the same opponent (the claim's ``systems:``; a selection candidate).
SECOND = "policy-b"


def _policy_wins(outcome: str, rng, p_win: float, policy_first: bool) -> str:
    """The verdict of one judged order under ``outcome``: ``random`` (the policy wins with ``p_win``),
    ``win``/``loss``/``tie``/``invalid`` (every order), ``first``/``second`` (the judge always
    picks that position)."""
    if outcome in ("first", "second", "tie", "invalid"):
        return outcome
    wins = {"win": True, "loss": False}.get(outcome)
    if wins is None:
        wins = bool(rng.random() < p_win)
    return "first" if wins == policy_first else "second"


def degenerate_rows(
    *,
    pairs: tuple[int, ...] = (4,) * 8,
    outcome: str = "random",
    equal_lengths: bool = False,
    twin_vignettes: bool = False,
    label: str | None = None,
    raters: int = 3,
    seed: int = 11,
) -> dict:
    """A small whole study whose every feature a check reads can be made degenerate.

    ``pairs[g]`` contests of each system (the policy, :data:`SECOND`) against the opponent on
    vignette g, both orders judged; the policy's and :data:`SECOND`'s responses on even vignettes
    are the selection pool, on odd ones held out; human pairs (``raters`` raters) on each
    vignette's first policy–opponent contest, labelled by the policy's true preference or all
    ``label``. ``equal_lengths``: every answer has the same length; ``twin_vignettes``: vignettes
    0 and 1 have the same text and the same answers."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {"vignettes": [], "responses": [], "judgments": [], "human_pairs": []}
    for g, k_g in enumerate(pairs):
        vid = f"v{g}"
        twin = 0 if twin_vignettes and g == 1 else g
        rows["vignettes"].append({"vignette_id": vid, "text": f"Scenario {twin}: a friend forgot your birthday."})
        pool = "heldout" if g % 4 == 3 else "selection"
        p_win = {POLICY: rng.uniform(0.4, 0.9), SECOND: rng.uniform(0.3, 0.8)}
        for k in range(k_g):
            opp = f"{vid}-o{k}"
            opp_text = "x" * 24 if equal_lengths else f"opponent answer {k} of {twin}" + "!" * (k % 3)
            rows["responses"].append({"response_id": opp, "vignette_id": vid, "system": OPPONENT, "text": opp_text})
            for system, tag in ((POLICY, "p"), (SECOND, "b")):
                rid = f"{vid}-{tag}{k}"
                text = "y" * 24 if equal_lengths else f"{system} answer {k} of {twin}" + " more" * int(rng.integers(4))
                rows["responses"].append(
                    {"response_id": rid, "vignette_id": vid, "system": system, "text": text, "pool": pool}
                )
                for first, second, policy_first in ((rid, opp, True), (opp, rid, False)):
                    verdict = _policy_wins(outcome, rng, p_win[system], policy_first)
                    rows["judgments"].append(
                        {
                            "judge": JUDGE,
                            "vignette_id": vid,
                            "response_first": first,
                            "response_second": second,
                            "verdict": verdict,
                        }
                    )
        for r in range(raters):
            truth = "a" if rng.random() < p_win[POLICY] else "b"
            rows["human_pairs"].append(
                {
                    "vignette_id": vid,
                    "response_a": f"{vid}-p0",
                    "response_b": f"{vid}-o0",
                    "label": label or truth,
                    "rater_id": f"rater{r}",
                }
            )
    return rows


def write_degenerate_study(folder: Path, rows: dict, **claim_changes) -> Path:
    """Write ``rows`` (every table it holds) and a claim naming them, with :data:`SECOND` among its
    ``systems``; returns the claim's path."""
    folder.mkdir(parents=True, exist_ok=True)
    data = {}
    for table, table_rows in rows.items():
        data[table] = f"{table}.jsonl"
        write_jsonl(folder / data[table], table_rows)
    path = folder / "claim.yaml"
    claim = claim_dict(data=data, systems=[SECOND], **claim_changes)
    path.write_text(yaml.safe_dump(claim, sort_keys=False), encoding="utf-8")
    return path
