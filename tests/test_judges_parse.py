"""The verdict parser on real-looking judge replies: decided ones, and ambiguous ones that must be invalid."""

import pytest

from honestci.judges.parse import parse_verdict

DECIDED = [
    # Bare tokens.
    ("A", "A"),
    ("B", "B"),
    ("b", "B"),
    ("  A.  ", "A"),
    ("**B**", "B"),
    ("C", "tie"),
    ("Tie", "tie"),
    ("tie.", "tie"),
    ("1", "A"),
    ("2", "B"),
    ("(a)", "A"),
    # MT-Bench format (FastChat pair-v2 prompt), including after a long explanation.
    ("[[A]]", "A"),
    ("[[B]]", "B"),
    ("[[C]]", "tie"),
    ("[[ b ]]", "B"),
    (
        "Assistant A acknowledges the person's frustration and offers a concrete reframe, while Assistant B "
        "mostly restates the problem.\n\nFinal verdict: [[A]]",
        "A",
    ),
    ("Both reappraisals validate the emotion. B gives a more realistic alternative explanation.\n[[B]]", "B"),
    ('Following the format "[[A]]" if A is better: my verdict is [[B]]', "B"),
    # Labels used by other benchmarks.
    ("Response 1", "A"),
    ("Response 2", "B"),
    ("response 2.", "B"),
    ("Output (a)", "A"),
    ("Output (b)", "B"),
    ("Assistant B", "B"),
    ("Reappraisal A", "A"),
    ("The second one.", "B"),
    # JSON replies.
    ('{"winner": "A"}', "A"),
    ('{"winner": "B", "reason": "more specific"}', "B"),
    ('```json\n{"verdict": "tie", "explanation": "both equally helpful"}\n```', "tie"),
    ('{"preference": 2}', "B"),
    ('{"better_response": "Response 1"}', "A"),
    ('{"Winner": "Output (b)"}', "B"),
    # Labelled final statements.
    ("Final verdict: B", "B"),
    ("Final answer: Response 1", "A"),
    ("My choice: A.", "A"),
    ("Verdict - tie", "tie"),
    ("Winner: Output (a), because it names the feeling.", "A"),
    ("After weighing empathy and realism, the final verdict is B", "B"),
    ("**Final Answer:** **A**", "A"),
    # A verdict stated after reasoning.
    (
        "Reappraisal A reframes the rejection as information, which is helpful. Reappraisal B is generic. "
        "Therefore, Reappraisal A is more effective.",
        "A",
    ),
    ("Both are kind, but Response B is more likely to reduce the person's anxiety because it is concrete.", "B"),
    ("I would choose Response 2 since it validates the feeling before reframing.", "B"),
    (
        "Response A is better at validation, but Response B offers a more believable reinterpretation. "
        "Overall, Response B is better.",
        "B",
    ),
    ("The better response is Response 1.", "A"),
    ("Both reappraisals are equally effective.", "tie"),
    ("It's a tie: neither adds anything the other lacks.", "tie"),
    # Reasoning models: the trace is ignored, the answer after it counts.
    ("<think>A seems warmer... but wait, B is more concrete. Hmm, [[A]]? No.</think>\n[[B]]", "B"),
    ("<think>Let me compare.</think>Final verdict: [[C]]", "tie"),
    # Headings that review each response before the verdict are not verdicts.
    ("Response A:\n- validates the feeling\nResponse B:\n- dismissive\n\nFinal verdict: [[A]]", "A"),
    ("### Reappraisal B\nToo long.\n\n[[A]]", "A"),
    # First line is the answer, explanation follows.
    ("B\n\nReappraisal B helps the person see the event as temporary.", "B"),
]

INVALID = [
    "",
    "   ",
    None,
    "I cannot decide.",
    "Both responses have strengths and weaknesses.",
    "Neither.",
    "As an AI language model, I can't judge emotional effectiveness.",
    # Two different final answers.
    "[[A]]\n[[B]]",
    "Final answer: A\nFinal answer: B",
    '{"winner": "A"} ... on reflection {"winner": "B"}',
    "Final verdict: [[A]]. Actually, final verdict: [[B]].",
    "[[A]] or [[C]]",
    # Conflicting statements with no conclusion to break the tie.
    "Response A is better for validation. Response B is better for reframing.",
    "I prefer A. I prefer B.",
    "Overall, A is better. Overall, B is better.",
    # Unfinished reasoning: the reply ended inside <think>.
    "<think>Reappraisal A is better because",
    "<think>thinking</think>",
    # An echoed instruction is not a verdict.
    'Output your final verdict by strictly following this format: "[[A]]" if assistant A is better, '
    '"[[B]]" if assistant B is better, and "[[C]]" for a tie.',
    # Ordinary words that are not labels.
    "My answer is a little hesitant here.",
    "The result is a more balanced view.",
    '{"score_a": 7, "score_b": 6}',
    "Response 3",
]


@pytest.mark.parametrize("reply, expected", DECIDED)
def test_decided_replies(reply, expected):
    parsed = parse_verdict(reply)
    assert parsed.position == expected, parsed.rule


@pytest.mark.parametrize("reply", INVALID)
def test_unparseable_or_ambiguous_replies_are_invalid(reply):
    parsed = parse_verdict(reply)
    assert parsed.position is None, f"guessed {parsed.position} via {parsed.rule}"
    assert parsed.verdict == "invalid"


@pytest.mark.parametrize(
    "position, verdict", [("[[A]]", "first"), ("[[B]]", "second"), ("[[C]]", "tie"), ("nonsense", "invalid")]
)
def test_position_maps_to_first_second(position, verdict):
    assert parse_verdict(position).verdict == verdict
