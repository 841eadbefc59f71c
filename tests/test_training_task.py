"""The task protocol: the answer after </think>, sentence counting, the format gate, config overrides."""

import pytest

from honestci.training.config import TrainingConfigError, parse_overrides
from honestci.training.task import count_sentences, extract_answer, format_gate, messages_for


@pytest.mark.parametrize(
    "output, answer",
    [
        ("<think>reasoning</think>\n\nMaybe they were busy.", "Maybe they were busy."),
        ("<think>a</think> first </think> second.", "second."),  # the last close tag ends the trace
        ("<think>never closed", ""),
        ("No tags at all. ", "No tags at all."),
        ("", ""),
    ],
)
def test_extract_answer(output, answer):
    assert extract_answer(output) == answer


@pytest.mark.parametrize(
    "text, n",
    [
        ("", 0),
        ("   ", 0),
        ("One sentence.", 1),
        ("One. Two!", 2),
        ("One? Two?! Three...", 3),
        ("A fragment without a stop", 1),
        ("One. And a trailing fragment", 2),
        ("It costs 3.5 dollars.", 1),
        ("Wait... really? Yes.", 3),
    ],
)
def test_count_sentences(text, n):
    assert count_sentences(text) == n


def test_format_gate_reasons():
    assert format_gate("").reason == "empty" and not format_gate("").passed
    assert format_gate("One. Two.").passed
    three = format_gate("One. Two. Three.")
    assert (three.passed, three.reason, three.n_sentences) == (False, "too_long", 3)
    assert format_gate("One. Two. Three.", max_sentences=3).passed


def test_messages_put_the_scenario_in_the_user_turn():
    messages = messages_for("My friend forgot.")
    assert [m["role"] for m in messages] == ["system", "user"] and "My friend forgot." in messages[1]["content"]


def test_overrides_parse_yaml_values_and_dotted_keys():
    assert parse_overrides(["beta=0.1", "trainer.warmup_ratio=0.05", "seeds=[1, 2]", "name=x=y"]) == {
        "beta": 0.1,
        "trainer": {"warmup_ratio": 0.05},
        "seeds": [1, 2],
        "name": "x=y",
    }
    with pytest.raises(TrainingConfigError, match="not KEY=VALUE"):
        parse_overrides(["beta"])
