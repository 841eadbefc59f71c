"""Importers of FastChat's formats: MT-Bench pairwise judgments (with its questions and model answers)
and Chatbot Arena battles (formats ``mtbench`` and ``arena``, :mod:`honestci.judges.importers`).
"""

from __future__ import annotations

from pathlib import Path

from honestci.audit.errors import InputError
from honestci.judges.importers import Collector, ImportedTables, is_missing, json_or_jsonl_records, jsonl_records

_G1 = {"model_1": "first", "model_2": "second", "tie": "tie", "error": "invalid"}
_G2 = {"model_2": "first", "model_1": "second", "tie": "tie", "error": "invalid"}


def import_mtbench(
    path: str | Path, questions: str | Path | None = None, answers_dir: str | Path | None = None
) -> ImportedTables:
    """FastChat pairwise judgments → judgments (both games), plus vignettes and responses when the
    question file (``question.jsonl``) and answer folder (``model_answer/``) are given."""
    path = Path(path)
    out = Collector()
    for number, rec in jsonl_records(path, out):
        where = (path, number)
        missing = [
            k
            for k in ("question_id", "model_1", "model_2", "g1_winner", "g2_winner", "judge")
            if is_missing(rec.get(k))
        ]
        for key in missing:
            out.problem(path, number, key, "missing", "pass an unchanged FastChat *_pair.jsonl file")
        if missing:
            continue
        if isinstance(rec["judge"], list) and not (rec["judge"] and isinstance(rec["judge"][0], str)):
            out.problem(path, number, "judge", f"{rec['judge']!r} does not start with the judge's name")
            continue
        judge = rec["judge"][0] if isinstance(rec["judge"], list) else str(rec["judge"])
        template = rec["judge"][1] if isinstance(rec["judge"], list) and len(rec["judge"]) > 1 else None
        turn = rec.get("turn", 1)
        if isinstance(turn, bool) or not isinstance(turn, int):
            out.problem(path, number, "turn", f"{turn!r} is not an integer", "FastChat numbers turns 1 and 2")
            continue
        vid = str(rec["question_id"])
        ids = {m: f"{vid}:{rec[m]}:turn{turn}" for m in ("model_1", "model_2")}
        for game, mapping, first, second in (("g1", _G1, "model_1", "model_2"), ("g2", _G2, "model_2", "model_1")):
            verdict = mapping.get(rec[f"{game}_winner"])
            if verdict is None:
                out.problem(
                    path, number, f"{game}_winner", f"{rec[f'{game}_winner']!r} is not model_1, model_2, tie or error"
                )
                continue
            out.judgment(
                {
                    "judge": judge,
                    "vignette_id": vid,
                    "response_first": ids[first],
                    "response_second": ids[second],
                    "verdict": verdict,
                    "raw": rec.get(f"{game}_judgment"),
                    "prompt_sha256": None,
                    "judge_template": template,
                    "turn": turn,
                },
                where,
            )
    if questions is not None:
        for number, rec in jsonl_records(Path(questions), out):
            if is_missing(rec.get("question_id")):
                out.problem(questions, number, "question_id", "missing", "pass FastChat's question.jsonl")
                continue
            turns = rec.get("turns") or []
            text = "\n\n".join(turns) if isinstance(turns, list) else str(turns)
            out.vignette(str(rec["question_id"]), text, rec.get("category"), (Path(questions), number))
    if answers_dir is not None:
        _mtbench_answers(Path(answers_dir), out)
    return out.result("mtbench", "The MT-Bench judgments cannot be imported.", ("judge_template", "turn"))


def _mtbench_answers(folder: Path, out: Collector) -> None:
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not files:
        raise InputError(f"{folder}: no model answer files (*.jsonl).", fix="pass FastChat's model_answer/ folder")
    for path in files:
        for number, rec in jsonl_records(path, out):
            try:
                turns = rec["choices"][0]["turns"]
                vid, model = str(rec["question_id"]), rec["model_id"]
            except (KeyError, IndexError, TypeError):
                out.problem(path, number, "choices", "not a FastChat answer record (question_id, model_id, choices)")
                continue
            for turn, text in enumerate(turns, start=1):
                out.response(f"{vid}:{model}:turn{turn}", vid, model, text, (path, number))


_ARENA_WINNER = {"model_a": "first", "model_b": "second", "tie": "tie", "tie (bothbad)": "tie"}


def _conversation_text(conversation, role: str) -> str | None:
    """The ``role`` turns of a FastChat conversation (list of {role, content}) joined; None if absent."""
    if not isinstance(conversation, list):
        return None
    parts = [m.get("content") for m in conversation if isinstance(m, dict) and m.get("role") == role]
    return "\n\n".join(p for p in parts if isinstance(p, str)) if parts else None


def import_arena(path: str | Path) -> ImportedTables:
    """FastChat Chatbot Arena battles (``clean_battle_*.json``, a JSON list, or JSON Lines) → judgments.

    Each battle is one judged order as shown: ``model_a`` first. ``winner`` ``model_a`` → first,
    ``model_b`` → second, ``tie`` and ``tie (bothbad)`` → tie (the original word is kept in ``raw``).
    Vignette (cluster) = ``question_id``; responses are per (question, model, turn). When a battle
    carries ``conversation_a``/``conversation_b`` (lists of {role, content}), vignettes (the user
    turns) and responses (the assistant turns) are written too.
    """
    path = Path(path)
    out = Collector()
    for number, rec in json_or_jsonl_records(path, out, "battles"):
        where = (path, number)
        missing = [k for k in ("question_id", "model_a", "model_b", "winner", "judge") if is_missing(rec.get(k))]
        for key in missing:
            out.problem(path, number, key, "missing", "pass an unchanged FastChat battle file")
        if missing:
            continue
        verdict = _ARENA_WINNER.get(rec["winner"])
        if verdict is None:
            out.problem(path, number, "winner", f"{rec['winner']!r} is not model_a, model_b, tie or tie (bothbad)")
            continue
        turn = rec.get("turn", 1)
        if isinstance(turn, bool) or not isinstance(turn, int):
            out.problem(path, number, "turn", f"{turn!r} is not an integer", "FastChat numbers turns with integers")
            continue
        if rec["model_a"] == rec["model_b"]:
            out.problem(path, number, "model_b", f"the same model {rec['model_a']!r} on both sides")
            continue
        vid = str(rec["question_id"])
        ids = {side: f"{vid}:{rec[side]}:turn{turn}" for side in ("model_a", "model_b")}
        question = _conversation_text(rec.get("conversation_a"), "user")
        if question is not None:
            out.vignette(vid, question, rec.get("category") or rec.get("language"), where)
            for side, conversation in (("model_a", "conversation_a"), ("model_b", "conversation_b")):
                answer = _conversation_text(rec.get(conversation), "assistant")
                if answer is None:
                    out.problem(
                        path, number, conversation, "has no assistant turn while conversation_a has a user turn"
                    )
                else:
                    out.response(ids[side], vid, rec[side], answer, where)
        out.judgment(
            {
                "judge": str(rec["judge"]),
                "vignette_id": vid,
                "response_first": ids["model_a"],
                "response_second": ids["model_b"],
                "verdict": verdict,
                "raw": rec["winner"],
                "prompt_sha256": None,
                "turn": turn,
            },
            where,
        )
    return out.result("arena", "The Arena battles cannot be imported.", ("turn",))
