from pathlib import Path

import pytest

from honestci.audit.data.claims import load_claim
from honestci.audit.errors import ClaimError

GOOD = """\
version: 1
name: test claim
policy: p
opponent: o
bar: 0.6
data: {vignettes: v.jsonl, responses: r.jsonl, judgments: j.jsonl}
claimed: {point: 0.8, n: 100, ci_low: 0.71, method: wilson}
"""


def _write(tmp_path: Path, text: str) -> Path:
    for name in ("v.jsonl", "r.jsonl", "j.jsonl"):
        (tmp_path / name).write_text("{}\n")
    path = tmp_path / "claim.yaml"
    path.write_text(text)
    return path


def test_good_claim_resolves_paths_relative_to_the_claim(tmp_path):
    claim = load_claim(_write(tmp_path, GOOD))
    assert claim.spec.population == "new_vignettes"
    assert claim.data_paths["judgments"] == (tmp_path / "j.jsonl").resolve()
    assert claim.thresholds.min_clusters == 5


@pytest.mark.parametrize(
    "text, expected",
    [
        (GOOD.replace("bar: 0.6", "bar: 1.6"), "bar"),
        (GOOD.replace("version: 1", "version: 9"), "version"),
        (GOOD + "colour: red\n", "colour"),
        (GOOD.replace("j.jsonl}", "missing.jsonl}"), "data.judgments"),
        (GOOD.replace("j.jsonl}", "../outside.jsonl}"), "outside the claim's folder"),
        (GOOD.replace(", judgments: j.jsonl", ""), "judgments"),
        (GOOD + "thresholds: {min_clusterz: 3}\n", "min_clusterz"),
        ("- just\n- a list\n", "mapping"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_claims_name_the_field(tmp_path, text, expected):
    with pytest.raises(ClaimError) as info:
        load_claim(_write(tmp_path, text))
    assert expected in str(info.value)
    assert "claim.yaml" in str(info.value)


def test_threshold_override_is_applied(tmp_path):
    claim = load_claim(_write(tmp_path, GOOD + "thresholds: {min_clusters: 8}\n"))
    assert claim.thresholds.min_clusters == 8


def test_unsafe_yaml_tags_are_refused(tmp_path):
    with pytest.raises(ClaimError):
        load_claim(_write(tmp_path, "!!python/object/apply:os.system ['echo pwned']\n"))
