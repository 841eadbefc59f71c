"""Reward models: a few optimizer steps on a tiny model built from a config move the weights; the
ensemble reward is mean − λ·sd of the standardised members; held-out accuracy is clustered by vignette."""

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("trl")

from training_support import changed_tensors, tiny_base, tiny_study

from honestci.audit.stats.frequentist.winrate import winrate_ci
from honestci.training.config import TrainingConfigError
from honestci.training.reward_models import (
    RewardEnsemble,
    RewardModelJob,
    build_reward_data,
    ensemble_reward,
    heldout_accuracy,
    train_reward_models,
)
from honestci.training.task import HONESTCI_PROMPT

pytestmark = pytest.mark.training


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return tiny_study(tmp_path_factory.mktemp("rm-study"), pairs_per_vignette=4)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_base(tmp_path_factory.getbasetemp())


def _job(base, study, out, **kw):
    return RewardModelJob(
        **{
            "base_model": base,
            "output_dir": out,
            "vignettes": study["vignettes"],
            "responses": study["responses"],
            "human_pairs": study["human_pairs"],
            "human_ratings": study["human_ratings"],
            "seeds": (0, 1),
            "max_steps": 2,
            "learning_rate": 1e-3,
            "heldout_fraction": 0.5,
            "per_device_train_batch_size": 4,
            "max_length": 512,
            "device": "cpu",
            **kw,
        }
    )


def test_ensemble_reward_is_mean_minus_lambda_sd():
    z = np.array([[1.0, 3.0, 2.0], [0.0, 0.0, 0.0], [-1.0, 1.0, 0.0]])
    scores = ensemble_reward(z, 0.5)
    expected = z.mean(axis=1) - 0.5 * np.sqrt(((z - z.mean(axis=1, keepdims=True)) ** 2).mean(axis=1))
    np.testing.assert_allclose(scores.reward, expected)
    np.testing.assert_allclose(scores.reward[:2], [2.0 - 0.5 * np.sqrt(2 / 3), 0.0])
    assert list(scores.to_frame().columns) == ["member_0", "member_1", "member_2", "mean", "std", "reward"]


def test_heldout_split_keeps_every_heldout_answer_out_of_training(study, tmp_path):
    data = build_reward_data(_job(tmp_path, study, tmp_path / "out"))
    # 4 pairs per vignette, half held out: two per vignette (less pairs whose raters tie), six clusters.
    assert len(data.pairs_heldout) + data.n_heldout_ties == 12
    assert data.pairs_heldout["vignette_id"].value_counts().max() <= 2
    heldout_texts = set(data.pairs_heldout["preferred"]) | set(data.pairs_heldout["other"])
    train_texts = (
        set(data.pairs_train["chosen"]) | set(data.pairs_train["rejected"]) | set(data.ratings_train["answer"])
    )
    assert not heldout_texts & train_texts
    assert len(data.ratings_train) <= 12 * 2  # at most the answers of the 12 training pairs (rater means)
    assert data.n_repeats_of_heldout > 0  # the fixture's templated answers repeat across ids


def test_heldout_accuracy_with_one_pair_per_vignette_is_the_singleton_cluster_cr2():
    # Singleton clusters: CR2 is still defined (it reduces to HC2 with t(G-1)); no ICC is needed.
    vignettes = [f"v{i}" for i in range(6)]
    result = heldout_accuracy("x", np.arange(6.0) - 0.5, np.zeros(6), vignettes)
    cr2 = winrate_ci(np.array([0.0, 1, 1, 1, 1, 1]), np.array(vignettes), method="cr2")
    assert result.estimate == pytest.approx(5 / 6)
    assert (result.ci_low, result.ci_high) == (pytest.approx(max(0, cr2.ci_low)), pytest.approx(min(1, cr2.ci_high)))
    assert result.iid_low is not None  # the optimistic iid interval is still shown beside it


def test_heldout_accuracy_uses_cr2_clustered_by_vignette():
    preferred = np.array([1.0, 2.0, 0.5, 3.0, 1.0, 0.0, 2.0, 1.0, 1.0, 4.0, 0.1, 2.0])
    other = np.array([0.0, 3.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 2.0, 0.0, 0.0, 1.0])
    vignettes = np.repeat(["v1", "v2", "v3", "v4", "v5", "v6"], 2)
    result = heldout_accuracy("x", preferred, other, vignettes)
    correct = np.array([1, 0, 1, 1, 0.5, 0, 1, 1, 0, 1, 1, 1])
    cr2 = winrate_ci(correct, vignettes, method="cr2")
    assert result.estimate == pytest.approx(correct.mean())
    assert (result.ci_low, result.ci_high) == (pytest.approx(max(0, cr2.ci_low)), pytest.approx(min(1, cr2.ci_high)))
    assert result.n_clusters == 6 and result.n_pairs == 12


def test_bradley_terry_ensemble_trains_and_saves_safetensors(base, study, tmp_path):
    lines: list[str] = []
    run = train_reward_models(_job(base, study, tmp_path / "rm"), lines.append)
    assert [m.steps for m in run.members] == [2, 2]
    for member in run.members:  # progress in a log: step k/N with the loss and accuracy logged
        seed = member.path.removeprefix("member-seed")
        steps = [line for line in lines if line.startswith(f"reward model seed {seed} ")]
        assert steps[0] == f"reward model seed {seed} 0/2 steps (0%)"
        assert steps[1].startswith(f"reward model seed {seed} 1/2 steps (50%) ") and " loss=" in steps[1]
        assert steps[-1].startswith(f"reward model seed {seed} done: 2/2 steps in ")
    for member in run.members:
        folder = tmp_path / "rm" / member.path
        assert (folder / "model.safetensors").is_file() and not list(folder.glob("*.bin"))
        changed, compared = changed_tensors(base / "model.safetensors", folder / "model.safetensors")
        assert compared > 0 and changed > 0, "two optimizer steps must move the backbone"
        assert any("loss" in row and row.get("grad_norm", 0) > 0 for row in member.log_history)
    manifest = json.loads((tmp_path / "rm" / "ensemble.json").read_text())
    assert manifest["ensemble_lambda"] == 0.5 and len(manifest["members"]) == 2
    ensemble_row = run.accuracy[-1]
    assert ensemble_row.name.startswith("ensemble") and ensemble_row.n_clusters == 6
    # The saved ensemble reproduces the held-out scores behind the reported accuracy.
    ensemble = RewardEnsemble(tmp_path / "rm")
    heldout = build_reward_data(_job(base, study, tmp_path / "rm")).pairs_heldout
    preferred = ensemble.score(list(heldout["scenario"]), list(heldout["preferred"])).reward
    other = ensemble.score(list(heldout["scenario"]), list(heldout["other"])).reward
    again = heldout_accuracy("again", preferred, other, heldout["vignette_id"])
    assert again.estimate == pytest.approx(ensemble_row.estimate)


@pytest.mark.slow
def test_regression_ensemble_regresses_the_mean_rating(base, study, tmp_path):
    run = train_reward_models(_job(base, study, tmp_path / "reg", kind="regression"))
    member = tmp_path / "reg" / run.members[0].path
    changed, _ = changed_tensors(base / "model.safetensors", member / "model.safetensors")
    assert changed > 0
    assert json.loads((member / "config.json").read_text())["problem_type"] == "regression"
    scores = RewardEnsemble(tmp_path / "reg").score(["a scenario"], ["Maybe they were busy."])
    assert scores.member_z.shape == (1, 2)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"seeds": ()}, "seeds"),
        ({"seeds": (1, 1)}, "repeats"),
        ({"ensemble_lambda": -1}, "ensemble_lambda"),
        ({"kind": "dpo"}, "kind"),
        ({"heldout_fraction": 1.0}, "heldout_fraction"),
        ({"human_pairs": None}, "Bradley-Terry model trains on pairs"),
    ],
)
def test_config_errors_name_the_field(study, tmp_path, change, message):
    with pytest.raises(TrainingConfigError, match=message):
        _job(tmp_path, study, tmp_path, **change)


def test_ensemble_refuses_folders_without_safetensors(tmp_path):
    from honestci.audit.errors import InputError

    (tmp_path / "member").mkdir()
    (tmp_path / "member" / "pytorch_model.bin").write_bytes(b"not loaded")
    (tmp_path / "ensemble.json").write_text(
        json.dumps(
            {
                "ensemble_lambda": 0.5,
                "prompt": HONESTCI_PROMPT.record(),
                "members": [{"path": "member", "mean": 0, "std": 1}],
            }
        )
    )
    with pytest.raises(InputError, match="safetensors"):
        RewardEnsemble(tmp_path)


def test_regression_head_with_three_dimensions_and_their_ensemble(base, study, tmp_path):
    """Three rating dimensions: the head has 3 outputs, the MSE loss averages all n x 3 standardised
    errors, and a member's score is the mean of its 3 outputs, standardised on the training answers,
    before the ensemble's mean − λ·sd (as RewardEnsemble documents)."""
    import pandas as pd
    import torch

    from honestci.training.reward_models import _train_regression, raw_scores

    ratings = pd.read_json(study["human_ratings"], lines=True, dtype=False)
    ratings = ratings.assign(empathy=8 - ratings["score"], clarity=(ratings["score"] * 7) % 5)  # 3 distinct columns
    ratings_path = tmp_path / "ratings3.jsonl"
    ratings.to_json(ratings_path, orient="records", lines=True)
    columns = ("score", "empathy", "clarity")
    job = _job(base, study, tmp_path / "reg3", kind="regression", human_ratings=ratings_path, rating_columns=columns)
    job = dataclasses.replace(job, seeds=(0, 1), max_steps=1)
    data = build_reward_data(job)

    trainer, model, _, _ = _train_regression(job, data, 0, tmp_path / "head", "cpu")
    assert model.config.num_labels == 3 and model.config.problem_type == "regression"
    labels = np.array(trainer.train_dataset["labels"])
    assert labels.shape == (len(trainer.train_dataset), 3)
    np.testing.assert_allclose(labels.mean(axis=0), 0.0, atol=1e-9)  # standardised per dimension
    np.testing.assert_allclose(labels.std(axis=0), 1.0, atol=1e-9)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    with torch.no_grad():
        output = model(**batch)
    assert output.logits.shape == (4, 3) and output.loss.shape == ()
    # transformers' regression loss: MSE over every (example, dimension) entry.
    expected = torch.nn.functional.mse_loss(output.logits, batch["labels"].to(output.logits.dtype))
    assert output.loss.item() == pytest.approx(expected.item(), rel=1e-6)

    run = train_reward_models(job)
    assert [m.steps for m in run.members] == [1, 1]
    manifest = json.loads((tmp_path / "reg3" / "ensemble.json").read_text())
    assert manifest["rating_columns"] == list(columns)
    assert manifest["prompt"] == HONESTCI_PROMPT.record()  # the default prompt, recorded for GRPO's check
    ensemble = RewardEnsemble(tmp_path / "reg3")
    assert ensemble.prompt == HONESTCI_PROMPT
    scenarios, answers = ["a scenario"] * 3, ["Maybe they were busy.", "They hate me.", "It is unclear."]
    scores = ensemble.score(scenarios, answers)
    z = []
    for (member_model, tokenizer, mean, std), meta in zip(ensemble.members, manifest["members"]):
        raw = raw_scores(
            member_model, tokenizer, scenarios, answers, max_length=ensemble.max_length, prompt=ensemble.prompt
        )
        assert raw.shape == (3, 3)  # n answers x 3 dimensions
        assert (mean, std) == (meta["mean"], meta["std"])
        z.append((raw.mean(axis=1) - mean) / std)
    z = np.column_stack(z)
    np.testing.assert_allclose(scores.member_z, z, rtol=1e-6)
    np.testing.assert_allclose(scores.reward, z.mean(axis=1) - 0.5 * z.std(axis=1), rtol=1e-6)

    # The gated reward: the ensemble's R for answers that pass the format gate, the penalty otherwise.
    from honestci.training.grpo import GatedEnsembleReward

    gated = GatedEnsembleReward(ensemble, max_sentences=2, penalty=-3.0)
    long_answer = "One. Two. Three."
    rewards = gated(None, [answers[0], long_answer, ""], scenario=scenarios)
    assert rewards[0] == pytest.approx(float(scores.reward[0]), rel=1e-6)
    assert rewards[1:] == [-3.0, -3.0]
