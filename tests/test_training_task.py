"""The task protocol: prompts and their presets, the answer after </think>, sentence counting, the format
gate, config overrides."""

import hashlib
import re
from pathlib import Path

import pytest

from honestci.audit.errors import InputError
from honestci.training.config import TrainingConfigError, parse_overrides
from honestci.training.task import (
    CARD_PROMPT,
    HONESTCI_PROMPT,
    PROMPT_PRESETS,
    Prompt,
    count_sentences,
    extract_answer,
    format_gate,
    messages_for,
    prompt_from_record,
    resolve_prompt,
)

MODEL_CARD = Path(__file__).resolve().parents[2] / "shared" / "context" / "model-card.md"


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


def test_card_preset_is_the_model_cards_prompt_verbatim():
    assert resolve_prompt("card") is CARD_PROMPT and resolve_prompt("honestci") is HONESTCI_PROMPT
    assert set(PROMPT_PRESETS) == {"honestci", "card"}
    # The card's user turn, as its "## Prompting" section gives it (\\n there is a newline).
    assert CARD_PROMPT.user("S") == (
        "SCENARIO:\nS\n\nWrite a reappraisal of this scenario in two sentences maximum, addressing the person "
        "in second person."
    )
    if not MODEL_CARD.is_file():
        pytest.skip(f"{MODEL_CARD} is not in this checkout: the verbatim comparison needs it")
    card = MODEL_CARD.read_text(encoding="utf-8")
    system = re.search(r"trained with this system prompt:\n```\n(.*?)\n```", card, re.S)
    user = re.search(r"The user turn is `(.*?)`", card, re.S)
    assert system and user
    assert CARD_PROMPT.system == system.group(1)
    # Inline code wraps across the markdown line (rendered as a space); \n in it is a newline.
    assert CARD_PROMPT.user_template == user.group(1).replace("\n", " ").replace("\\n", "\n")


def test_a_custom_prompt_builds_the_chat_and_hashes_its_text():
    prompt = resolve_prompt({"system": "Be kind.", "user_template": "Story: {scenario} -- {{reply}}"})
    assert prompt == Prompt("Be kind.", "Story: {scenario} -- {{reply}}", "custom")
    assert messages_for("A forgot B.", prompt) == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Story: A forgot B. -- {reply}"},
    ]
    assert prompt.sha256 == hashlib.sha256(b"Be kind.\x00Story: {scenario} -- {{reply}}").hexdigest()
    assert prompt.sha256 != HONESTCI_PROMPT.sha256 != CARD_PROMPT.sha256
    # The default chat is the honestci preset's.
    assert messages_for("x") == messages_for("x", HONESTCI_PROMPT)


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ("cards", "prompt"),
        (3, "prompt"),
        ({"system": "s", "user_template": "{scenario}", "extra": 1}, "prompt"),
        ({"system": " ", "user_template": "{scenario}"}, "prompt.system"),
        ({"user_template": "{scenario}"}, "prompt.system"),
        ({"system": "s", "user_template": "no field"}, "prompt.user_template"),
        ({"system": "s", "user_template": "{scenario} and {scenario}"}, "prompt.user_template"),
        ({"system": "s", "user_template": "{scenario} {name}"}, "prompt.user_template"),
        ({"system": "s", "user_template": "{}"}, "prompt.user_template"),
        ({"system": "s", "user_template": "{scenario!r}"}, "prompt.user_template"),
        ({"system": "s", "user_template": "{scenario"}, "prompt.user_template"),
        ({"system": "s", "user_template": "{scenario}", "name": "card"}, "prompt.name"),
    ],
)
def test_bad_prompts_are_refused_naming_the_key(spec, key):
    with pytest.raises(TrainingConfigError) as info:
        resolve_prompt(spec)
    assert [p.field for p in info.value.problems] == [key]


def test_a_prompt_record_round_trips_and_a_missing_or_edited_one_is_refused():
    assert prompt_from_record(CARD_PROMPT.record(), "x") == CARD_PROMPT
    with pytest.raises(InputError, match="records no prompt"):
        prompt_from_record(None, "ensemble.json")
    edited = {**CARD_PROMPT.record(), "system": "Something else."}
    with pytest.raises(InputError, match="does not hash"):
        prompt_from_record(edited, "ensemble.json")
