"""Every import format: a malformed row makes ``honestci import`` exit 2 with a message naming the
file, the row's line (a JSON list's 1-based position, a JSONL/CSV line, an inspect_ai sample's
position) and the field, and nothing is written."""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from inspect_support import rewrite_eval

from honestci.audit.cli.judges import import_command

DATA = Path(__file__).parent / "data"


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _alpaca(tmp: Path):
    good = {
        "instruction": "Say hi.",
        "output_1": "hi",
        "output_2": "hello",
        "generator_1": "base",
        "generator_2": "model",
        "annotator": "gpt4",
        "preference": 2,
    }
    path = tmp / "annotations.json"
    path.write_text(json.dumps([good, {**good, "instruction": "Say bye.", "preference": "maybe"}]))
    return ["alpaca_eval", str(path)], path, 2, "preference"


def _pandalm(tmp: Path):
    item = {"idx": 0, "instruction": "Add 1 and 2.", "input": "", "cmp_key": "a_b", "response1": "3", "response2": "4"}
    testset = tmp / "testset-v1.json"
    testset.write_text(json.dumps([item, {**item, "idx": "one"}]))
    return ["pandalm", str(testset)], testset, 2, "idx"


def _pandalm_judge(tmp: Path):
    item = {"idx": 0, "instruction": "Add 1 and 2.", "input": "", "cmp_key": "a_b", "response1": "3", "response2": "4"}
    testset = tmp / "testset-v1.json"
    testset.write_text(json.dumps([item]))
    judge = tmp / "gpt-4-testset-v1.json"
    judge.write_text(json.dumps([{"idx": 0, "gpt-4_result": "maybe"}]))
    return ["pandalm", str(testset), "--judge-file", str(judge)], judge, 1, "gpt-4_result"


def _mtbench(tmp: Path):
    row = {"question_id": 81, "model_1": "a", "model_2": "b", "g1_winner": "model_1", "g2_winner": "tie"}
    row["judge"] = ["gpt-4", "pair-v2"]
    path = _jsonl(tmp / "gpt-4_pair.jsonl", [row, {**row, "question_id": 82, "g1_winner": "model_3"}])
    return ["mtbench", str(path)], path, 2, "g1_winner"


def _arena(tmp: Path):
    path = tmp / "clean_battle.json"
    battles = json.loads((DATA / "arena" / "clean_battle_20230501.json").read_text())
    battles[2]["winner"] = "both"
    path.write_text(json.dumps(battles))
    return ["arena", str(path)], path, 3, "winner"


def _lm_eval(tmp: Path):
    paths = []
    for model in ("pythia-160m", "pythia-410m"):
        (src,) = (DATA / "lm_eval" / model).glob("*.jsonl")
        paths.append(tmp / model / src.name)
        paths[-1].parent.mkdir()
        shutil.copy(src, paths[-1])
    lines = paths[1].read_text().splitlines()
    record = json.loads(lines[2])
    record["acc"] = "high"
    lines[2] = json.dumps(record)
    paths[1].write_text("\n".join(lines) + "\n")
    return ["lm_eval", *map(str, paths), "--metric", "acc"], paths[1], 3, "acc"


def _inspect_json(tmp: Path):
    log = json.loads((DATA / "inspect" / "capitals_lima.json").read_text())
    del log["samples"][3]["id"]
    path = tmp / "lima.json"
    path.write_text(json.dumps(log))
    return ["inspect", f"a={DATA / 'inspect' / 'capitals_paris-or-tokyo.json'}", f"b={path}"], path, 4, "samples[3].id"


def _inspect_eval(tmp: Path):
    def no_epoch(sample):
        sample["epoch"] = "two"
        return sample

    path = rewrite_eval(
        DATA / "inspect" / "pairwise.eval", tmp / "pairwise.eval", {"samples/q05_epoch_1.json": no_epoch}
    )
    return ["inspect", str(path)], path, 5, "samples/q05_epoch_1.json:epoch"


def _generic_csv(tmp: Path):
    path = tmp / "mine.csv"
    path.write_text("q,left,right,winner\nv1,r1,r2,A\nv1,r2,r1,Z\n")
    args = ["generic", str(path), "--judge", "j", "--verdict-map", "A=first"]
    args += ["--map", "vignette_id=q", "--map", "response_first=left", "--map", "response_second=right"]
    return [*args, "--map", "verdict=winner"], path, 3, "winner"


def _generic_jsonl(tmp: Path):
    path = _jsonl(tmp / "mine.jsonl", [{"q": "v1", "left": "r1", "right": "r2", "winner": "first"}, {"q": "v1"}])
    args = ["generic", str(path), "--judge", "j", "--map", "vignette_id=q"]
    args += ["--map", "response_first=left", "--map", "response_second=right", "--map", "verdict=winner"]
    return args, path, 2, "left"


CASES = {
    "alpaca_eval": _alpaca,
    "pandalm testset": _pandalm,
    "pandalm judge file": _pandalm_judge,
    "mtbench": _mtbench,
    "arena": _arena,
    "lm_eval": _lm_eval,
    "inspect json": _inspect_json,
    "inspect eval": _inspect_eval,
    "generic csv": _generic_csv,
    "generic jsonl": _generic_jsonl,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_row_exits_2_naming_file_line_and_field(tmp_path, case):
    args, path, line, field = CASES[case](tmp_path)
    out = tmp_path / "out" / "judgments.jsonl"
    result = CliRunner().invoke(import_command, [*args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"{path}, line {line}, field '{field}'" in result.output, result.output
    assert "Traceback" not in result.output and not out.exists()
