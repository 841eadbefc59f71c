"""A stub judge for dry runs: no model, verdicts from a stated rule and an optional recorded table.

It is not a judge. It exists so the training pipeline's whole road (judging → audit → model card)
can run on a laptop without a judge server; figures judged by it say nothing about the policy, and
its name (``stub:...``) is written into every judgment, the report and the model card so that no
one mistakes it for a real judge.

An ordered pair found in the ``recorded`` judgments table (one judge's rows, see
:class:`~honestci.judges.backends.replay.ReplayBackend`) gets its recorded verdict; every other pair
gets the ``rule``'s verdict:

- ``shorter`` / ``longer``: the response with fewer / more characters wins, equal lengths tie
  (order-free, so it has no position bias by construction);
- ``first``: the first-shown response always wins (a maximally position-biased judge);
- ``hash``: the low bit of SHA-256 of the rendered messages picks A or B (deterministic noise).

With ``agreement`` q < 1 the rule's choice is kept with probability q and swapped for the other
response otherwise (a tie stays a tie), drawn independently for each ordered prompt from SHA-256 of
``seed`` and the messages: a judge with a known error rate and, for the order-free rules, no
position bias, so the audit's gates see varied verdicts rather than a judge that never errs.

Calibration: pairs replayed from ``recorded`` carry the recorded judge's verdicts, so the
``judge_calibrated`` gate then speaks for that judge on those pairs, not for the rule.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from honestci.audit.errors import InputError
from honestci.judges.backends.base import Completion, JudgeRequest

STUB_RULES = ("shorter", "longer", "first", "hash")
#: Reply text of each position, in the bracket format every template's parser reads.
_REPLY = {"first": "[[A]]", "second": "[[B]]", "tie": "[[C]]"}


class StubBackend:
    """Deterministic stand-in judge (module docstring); ``texts`` maps response id → text."""

    concurrency = 1

    def __init__(
        self,
        rule: str,
        texts: dict[str, str],
        recorded: str | Path | None = None,
        recorded_judge: str | None = None,
        agreement: float = 1.0,
        seed: int = 0,
    ):
        if rule not in STUB_RULES:
            raise InputError(f"stub judge rule {rule!r} is unknown.", fix=f"use one of {', '.join(STUB_RULES)}")
        if not 0.5 <= agreement <= 1:
            raise InputError(
                f"stub judge agreement {agreement!r} is outside [0.5, 1].",
                fix="give the probability that the stub keeps its rule's choice",
            )
        from honestci.judges.backends.replay import ReplayBackend

        self.rule = rule
        self.agreement = float(agreement)
        self.seed = int(seed)
        self._texts = texts
        self._replay = None if recorded is None else ReplayBackend(recorded, recorded_judge)
        replayed = "" if self._replay is None else f"+replay:{self._replay.judge_name}"
        noisy = "" if self.agreement == 1 else f"@{self.agreement:g}"
        self.judge_name = f"stub:{rule}{noisy}{replayed}"
        self.n_replayed = 0

    def describe(self) -> str:
        """One line for the report and the model card: what answered, in words."""
        replay = (
            ""
            if self._replay is None
            else f"recorded verdicts of {self._replay.judge_name} for the ordered pairs that table holds, and "
        )
        noisy = "" if self.agreement == 1 else f", kept with probability {self.agreement:g} (else swapped)"
        calibrated = (
            ""
            if self._replay is None
            else f"; its calibration on those pairs is {self._replay.judge_name}'s, not the rule's"
        )
        return f"a stub judge (no model): {replay}the rule '{self.rule}'{noisy} for every other pair{calibrated}"

    def _rule_verdict(self, request: JudgeRequest) -> str:
        if self.rule == "first":
            return "first"
        if self.rule == "hash":
            digest = hashlib.sha256(json.dumps(request.messages, sort_keys=True).encode()).digest()
            return "first" if digest[0] % 2 else "second"
        a, b = len(self._texts[request.response_first]), len(self._texts[request.response_second])
        if a == b:
            return "tie"
        return "first" if (a < b) == (self.rule == "shorter") else "second"

    async def complete(self, request: JudgeRequest) -> Completion:
        if self._replay is not None:
            recorded = await self._replay.complete(request)
            if recorded.recorded_verdict is not None:
                self.n_replayed += 1
                return recorded
        verdict = self._rule_verdict(request)
        if self.agreement < 1 and verdict != "tie":
            digest = hashlib.sha256(f"{self.seed}\x00{json.dumps(request.messages, sort_keys=True)}".encode()).digest()
            if int.from_bytes(digest[:8], "big") / 2**64 >= self.agreement:
                verdict = "second" if verdict == "first" else "first"
        return Completion(f"stub rule {self.rule}: {_REPLY[verdict]}", 0)

    async def aclose(self) -> None:
        return None
