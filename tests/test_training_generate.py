"""Generation for evaluation through an OpenAI-compatible server (the judges' stub server stands in
for vLLM): fresh, recorded per-sample seeds, tagged run and pool, the responses table's columns."""

import json
from pathlib import Path

import pytest

from honestci.audit.data.io import load_table
from honestci.audit.policy import DEFAULT_SEED
from honestci.judges.stub_server import StubConfig, StubJudgeServer
from honestci.training.config import TrainingConfigError
from honestci.training.generate import GenerationJob, generate_responses, sample_seeds

VIGNETTES = Path(__file__).resolve().parents[1] / "fixtures" / "study" / "vignettes.jsonl"


@pytest.mark.parametrize("backend", ["openai", "vllm"])  # generation.backend: vllm, as documented
def test_http_generation_writes_a_valid_responses_table_with_recorded_seeds(tmp_path, backend):
    with StubJudgeServer(StubConfig(fault_rates={"500": 0.2}, seed=1)) as server:
        job = GenerationJob(
            system="my-policy",
            vignettes=VIGNETTES,
            out=tmp_path / "responses.jsonl",
            backend=backend,
            base_url=server.base_url,
            model="policy",
            samples_per_vignette=3,
            run="run-2",
            seed=7,
            backoff_base_s=0.01,
        )
        run = generate_responses(job)
        logged = len(server.log)
    rows = [json.loads(line) for line in open(tmp_path / "responses.jsonl")]
    assert run.n_rows == len(rows) == 18 and run.base_seed == 7
    assert logged > 18  # injected 500s were retried, never written as empty answers
    assert [r["seed"] for r in rows] == sample_seeds(7, 18, "my-policy", "run-2", "heldout") and len(
        {r["seed"] for r in rows}
    ) == 18
    assert {(r["run"], r["pool"], r["system"]) for r in rows} == {("run-2", "heldout", "my-policy")}
    assert sorted({r["sample_idx"] for r in rows}) == [0, 1, 2] and all(r["text"] == r["raw"].strip() for r in rows)
    frame = load_table(tmp_path / "responses.jsonl", "responses").frame  # the audit's own loader accepts it
    assert len(frame) == 18 and frame["response_id"].is_unique


def test_fresh_seeds_differ_between_runs_unless_given(tmp_path):
    with StubJudgeServer() as server:
        common = dict(
            system="p",
            vignettes=VIGNETTES,
            backend="openai",
            base_url=server.base_url,
            model="m",
            samples_per_vignette=1,
        )
        a = generate_responses(GenerationJob(out=tmp_path / "a.jsonl", **common))
        b = generate_responses(GenerationJob(out=tmp_path / "b.jsonl", **common))
    assert a.base_seed != b.base_seed


def test_pools_drawn_with_one_base_seed_share_no_sample_seed():
    # `honestci generate` defaults --seed to the policy's seed: the held-out pool must still be fresh.
    selection = sample_seeds(DEFAULT_SEED, 200, "p", "run-1", "selection")
    heldout = sample_seeds(DEFAULT_SEED, 200, "p", "run-1", "heldout")
    assert not set(selection) & set(heldout)
    assert selection == sample_seeds(DEFAULT_SEED, 200, "p", "run-1", "selection")  # and reruns reproduce


def test_failed_generations_stop_the_run_and_write_nothing(tmp_path):
    from honestci.audit.errors import InputError

    with StubJudgeServer(StubConfig(fault_rates={"500": 1.0})) as server:
        job = GenerationJob(
            system="p",
            vignettes=VIGNETTES,
            out=tmp_path / "r.jsonl",
            backend="openai",
            base_url=server.base_url,
            model="m",
            samples_per_vignette=1,
            seed=0,
            max_retries=1,
            backoff_base_s=0.01,
        )
        with pytest.raises(InputError, match="got no usable reply"):
            generate_responses(job)
    assert not (tmp_path / "r.jsonl").exists()


def test_generation_config_errors():
    with pytest.raises(TrainingConfigError, match="model_path"):
        GenerationJob(system="p", vignettes=VIGNETTES, out=Path("x.jsonl"))
    with pytest.raises(TrainingConfigError, match="pool"):
        GenerationJob(system="p", vignettes=VIGNETTES, out=Path("x.jsonl"), model_path=Path("m"), pool="train")
