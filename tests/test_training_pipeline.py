"""``honestci pipeline``: fails closed without the leakage check, writes model-card figures only when
every required gate passes, and on the tiny CPU setup runs end to end into an audited report."""

import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
import yaml

from honestci.audit.policy import GateResult, Verdict
from honestci.training.config import TrainingConfigError
from honestci.training.pipeline import (
    CARD_END,
    CARD_START,
    PipelineRefused,
    load_pipeline_job,
    publish_figures,
    run_pipeline,
)

pytestmark = pytest.mark.training

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "study"


def _config(tmp_path, **changes) -> Path:
    config = yaml.safe_load((ROOT / "training" / "configs" / "pipeline_cpu_tiny.yaml").read_text())
    for key in ("vignettes", "responses", "human_pairs", "human_ratings", "corpus"):
        config[key] = str(FIXTURE / f"{key}.jsonl")
    config["judge"]["recorded"] = str(FIXTURE / "judgments.jsonl")  # the stub's recorded verdicts
    config.update(output_dir=str(tmp_path / "run"), model_card=str(tmp_path / "MODEL_CARD.md"), **changes)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_pipeline_fails_closed_without_the_leakage_module(tmp_path, monkeypatch):
    # import honestci.audit.checks.leakage -> ModuleNotFoundError; the modules that import it are
    # dropped from the cache too, so they fail the same way whatever other tests imported first.
    monkeypatch.setitem(sys.modules, "honestci.audit.checks.leakage", None)
    for module in ("honestci.audit.checks.registry", "honestci.audit.gates", "honestci.audit.pipeline"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(PipelineRefused, match="leakage check .* is not installed"):
        run_pipeline(_config(tmp_path, base_model=str(tmp_path / "no-model")))
    assert not (tmp_path / "run" / "reward_model").exists() and not (tmp_path / "MODEL_CARD.md").exists()
    corpus = [json.loads(line) for line in open(tmp_path / "run" / "data" / "corpus.jsonl")]
    eval_ids = {json.loads(line)["response_id"] for line in open(tmp_path / "run" / "data" / "eval_answers.jsonl")}
    rated = {json.loads(line)["response_id"] for line in open(FIXTURE / "human_ratings.jsonl")}
    assert eval_ids and not eval_ids & rated  # held-out eval answers are never reward-model training text
    assert {d["source"] for d in corpus} >= {"task prompt", "reward-model training answer"}


@pytest.mark.parametrize("key", ["vignettes", "responses", "base_model"])
def test_a_required_path_given_as_null_is_a_config_error(tmp_path, key):
    # YAML null used to reach prepare_data as None and crash there with a TypeError.
    with pytest.raises(TrainingConfigError, match=f"{key} must be a path, not null"):
        load_pipeline_job(_config(tmp_path, **{key: None}))


@pytest.fixture(scope="module")
def fixture_verdict(passing_claim, no_length_rule):
    from honestci.audit.pipeline import run_audit
    from honestci.audit.report_model import json_safe

    result = run_audit(passing_claim, bayes=False, policy=no_length_rule)
    return json_safe(result.to_dict())


def test_figures_are_written_only_when_every_required_gate_passes(tmp_path, fixture_verdict):
    card = tmp_path / "README.md"
    card.write_text("# My model\n\nSome text.\n")
    passing = [GateResult("ci_low_clears_bar", Verdict.PASS, "ok"), GateResult("training_healthy", Verdict.PASS, "ok")]
    publish_figures(fixture_verdict, passing, ["ci_low_clears_bar", "training_healthy"], card)
    text = card.read_text()
    assert text.startswith("# My model\n\nSome text.\n") and CARD_START in text and "model-index" in text
    publish_figures(fixture_verdict, passing, ["ci_low_clears_bar", "training_healthy"], card)  # replaces, no dup
    assert card.read_text().count(CARD_START) == 1 and card.read_text().count(CARD_END) == 1
    before = card.read_text()
    for gates, required in (
        (
            [passing[0], GateResult("training_healthy", Verdict.INCONCLUSIVE, "3 steps")],
            ["ci_low_clears_bar", "training_healthy"],
        ),
        ([passing[0], GateResult("training_healthy", Verdict.WARN, "meh")], ["training_healthy"]),
        (passing, ["ci_low_clears_bar", "training_healthy", "leakage"]),
    ):  # leakage not run
        with pytest.raises(PipelineRefused, match="no figures were written"):
            publish_figures(fixture_verdict, gates, required, card)
        assert card.read_text() == before


class _HashJudge(BaseHTTPRequestHandler):
    """An OpenAI-compatible judge whose verdict is a hash of the prompt: deterministic, no taste."""

    def log_message(self, *args):
        return None

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        digest = hashlib.sha256(json.dumps(payload["messages"]).encode()).digest()[0]
        body = json.dumps(
            {
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": "Final verdict: " + ("[[A]]" if digest % 2 else "[[B]]"),
                        }
                    }
                ]
            }
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


def _clean_corpus(tmp_path) -> str:
    """The fixture corpus without its planted leaks (truth.json lists them)."""
    truth = json.loads((FIXTURE / "truth.json").read_text())["leakage"]
    planted = {leak["doc_id"] for kind in ("verbatim", "paraphrase") for leak in truth[kind]}
    kept = [line for line in open(FIXTURE / "corpus.jsonl") if json.loads(line)["doc_id"] not in planted]
    path = tmp_path / "clean_corpus.jsonl"
    path.write_text("".join(kept))
    return str(path)


def test_pipeline_refuses_the_fixture_corpus_with_its_planted_leaks(tmp_path):
    with pytest.raises(PipelineRefused, match="leakage gate FAIL"):
        run_pipeline(_config(tmp_path, base_model=str(tmp_path / "no-model")))
    assert not (tmp_path / "run" / "reward_model").exists() and not (tmp_path / "MODEL_CARD.md").exists()


def _tiny_route_policy(tmp_path) -> list[str]:
    """The documented tiny route's auditor policy (near-duplicate WARN off on the fixture's texts)."""
    return ["--policy", str(ROOT / "training" / "configs" / "policy_tiny_fixture.yaml")]


@pytest.mark.e2e
def test_a_stale_calibration_record_stops_the_run_before_training(tmp_path):
    from click.testing import CliRunner

    from honestci.audit.cli.training import pipeline_command
    from honestci.judges.prompts import get_template
    from honestci.judges.run import load_texts
    from honestci.training.pipeline import _calibration_bindings, write_calibration_record

    paths = {"human_pairs": FIXTURE / "human_pairs.jsonl", "human_ratings": FIXTURE / "human_ratings.jsonl"}
    texts = load_texts(FIXTURE / "vignettes.jsonl", FIXTURE / "responses.jsonl")
    # Recorded by another judge (the fixture's llama) with the same template and human data.
    bindings = _calibration_bindings("llama-3.1-70b", get_template().sha256, paths, texts)
    record = write_calibration_record(tmp_path / "record.json", bindings, pd.DataFrame([{"judge": "llama-3.1-70b"}]))
    config = _config(tmp_path, base_model=str(tmp_path / "no-model"), corpus=None)
    settings = yaml.safe_load(config.read_text())
    settings["judge"]["calibration_record"] = str(record)
    config.write_text(yaml.safe_dump(settings))
    outcome = CliRunner().invoke(pipeline_command, [str(config), *_tiny_route_policy(tmp_path)])
    assert outcome.exit_code == 2, outcome.output
    assert "is stale: judge is 'llama-3.1-70b' there, 'stub:shorter@0.95+replay:llama-3.1-70b' here" in outcome.output
    assert "template_sha256" not in outcome.output  # only what differs is named
    assert not (tmp_path / "run" / "reward_model").exists() and not (tmp_path / "MODEL_CARD.md").exists()


@pytest.mark.slow
@pytest.mark.e2e
def test_the_documented_tiny_route_is_length_hacked_and_blocked_by_length_bias(tmp_path):
    # Issue 31: the documented route's stub judge prefers the shorter answer and its policy's answers
    # (8 tokens) are far shorter than gpt-4-0314's, so it wins by length. It used to publish; the
    # policy now requires length_bias (median lengths differ by >= 1.2x), which is INCONCLUSIVE
    # because the policy's answer is the shorter in every contest (length confounded with quality).
    pytest.importorskip("trl")
    from click.testing import CliRunner
    from training_support import tiny_base

    from honestci.audit.cli.training import pipeline_command

    # The config as documented (stub judge, no extra corpus), with this test's folders; the answers'
    # seed is pinned (the config draws a fresh one per run) so the test is deterministic.
    tiny = yaml.safe_load((ROOT / "training" / "configs" / "pipeline_cpu_tiny.yaml").read_text())
    config = _config(
        tmp_path, base_model=str(tiny_base(tmp_path)), corpus=None, generation={**tiny["generation"], "seed": 0}
    )
    outcome = CliRunner().invoke(pipeline_command, [str(config), *_tiny_route_policy(tmp_path)])
    assert outcome.exit_code == 1, outcome.output  # blocked (docs: exit 1), not a crash (exit 2)
    assert "no figures were written" in outcome.output and "length_bias INCONCLUSIVE" in outcome.output
    assert "shorter one in every contest" in outcome.output
    assert not (tmp_path / "MODEL_CARD.md").exists()
    run = tmp_path / "run"
    record = json.loads((run / "pipeline.json").read_text())
    assert not record["published"] and record["judge"] == "stub:shorter@0.95+replay:llama-3.1-70b"
    gates = {g["gate"]: g for g in record["gates"]}
    blocking = {g for g, gate in gates.items() if gate["required"] and gate["verdict"] != "PASS"}
    # length_bias blocks whatever the answers' seed; position_bias (the stub's 5% order-dependent
    # swaps, 32 contests per vignette) straddles its tolerance at some seeds (WARN at this one).
    assert "length_bias" in blocking and blocking <= {"length_bias", "position_bias"}
    assert gates["length_bias"]["verdict"] == "INCONCLUSIVE"
    assert {"judge_calibrated", "position_bias", "leakage", "training_healthy", "ci_low_clears_bar"} <= {
        g for g in gates if gates[g]["required"]
    }
    # Why it is required and why it cannot pass: the policy's answers are a fraction of the opponent's.
    verdict = json.loads((run / "report" / "verdict.json").read_text())
    assert verdict["exit_code"] == 1
    evidence = next(g for g in verdict["gates"] if g["gate"] == "length_bias")["evidence"]
    assert evidence["median_length_policy"] * 3 < evidence["median_length_opponent"]
    assert evidence["n_policy_longer"] == 0 and evidence["n_policy_shorter"] == 6 * 32
    assert "length_bias_required_ratio" in evidence["required_because"]
    # judge_calibrated was decided on the human-labelled pairs the stub judged in this run (both orders).
    judging = next(s for s in record["stages"] if s["stage"] == "judging")
    n_pairs = len(
        {
            tuple(sorted((p["response_a"], p["response_b"])))
            for p in map(json.loads, open(FIXTURE / "human_pairs.jsonl"))
        }
    )
    assert judging["calibration_judgments"] == 2 * n_pairs and "stub judge" in judging["stub"]
    calibration = json.loads((run / "data" / "calibration_record.json").read_text())
    assert calibration["judge"] == record["judge"] and len(calibration["judgments"]) == 2 * n_pairs


@pytest.mark.slow
def test_pipeline_runs_end_to_end_on_cpu_and_is_refused_when_a_gate_fails(tmp_path):
    pytest.importorskip("trl")
    from click.testing import CliRunner
    from training_support import tiny_base

    from honestci.audit.cli.training import pipeline_command

    server = ThreadingHTTPServer(("127.0.0.1", 0), _HashJudge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = tiny_base(tmp_path)
        # The fixture's texts are composed from shared fragment banks, so every rated answer is a
        # near duplicate of some held-out one: the auditor's policy switches the near-duplicate WARN
        # off (a job's own thresholds may only tighten) and the verbatim n-gram leak check stays on.
        policy = tmp_path / "policy.yaml"
        policy.write_text("version: 1\nname: tiny-route\nthresholds: {leakage_near_duplicate_jaccard: 1.01}\n")
        tiny = yaml.safe_load((ROOT / "training" / "configs" / "pipeline_cpu_tiny.yaml").read_text())
        config = _config(
            tmp_path,
            base_model=str(base),
            corpus=_clean_corpus(tmp_path),
            # 3 GRPO steps (training_healthy needs 10) and 4 answers per vignette: refused, quickly.
            grpo={**tiny["grpo"], "max_steps": 3},
            generation={**tiny["generation"], "samples_per_vignette": 4, "max_tokens": 24},
            judge={
                "backend": "vllm",
                "base_url": f"http://127.0.0.1:{server.server_address[1]}/v1",
                "model": "hash-judge",
            },
        )
        outcome = CliRunner().invoke(pipeline_command, [str(config), "--policy", str(policy)])
    finally:
        server.shutdown()
    assert outcome.exit_code == 1, outcome.output
    assert "no figures were written" in outcome.output and "training_healthy" in outcome.output
    assert not (tmp_path / "MODEL_CARD.md").exists()
    run = tmp_path / "run"
    record = json.loads((run / "pipeline.json").read_text())
    assert [s["stage"] for s in record["stages"]] == [
        "leakage check",
        "reward models",
        "GRPO",
        "generation",
        "judging",
        "audit",
    ]
    gates = {g["gate"]: g for g in record["gates"]}
    assert gates["leakage"]["verdict"] == "PASS" and gates["training_healthy"]["verdict"] == "INCONCLUSIVE"
    # The hash judge has no taste: on the human-labelled pairs it judged here it cannot be calibrated.
    assert gates["judge_calibrated"]["verdict"] == "FAIL" and gates["judge_calibrated"]["required"]
    assert gates["training_healthy"]["required"] and gates["leakage"]["required"]
    report = (run / "report" / "report.md").read_text()
    assert "Training health" in report and "tiny-grpo" in report
    assert (run / "report" / "training_health.svg").read_text().startswith("<svg")
    policy = [json.loads(line) for line in open(run / "data" / "policy_responses.jsonl")]
    assert (
        len(policy) == 6 * 4 and {r["pool"] for r in policy} == {"heldout"} and len({r["seed"] for r in policy}) == 24
    )
    judgments = [json.loads(line) for line in open(run / "data" / "judgments.jsonl")]
    n_pairs = len(
        {
            tuple(sorted((p["response_a"], p["response_b"])))
            for p in map(json.loads, open(FIXTURE / "human_pairs.jsonl"))
        }
    )
    assert len(judgments) == 2 * 24 + 2 * n_pairs  # both orders of every contest and human-labelled pair
