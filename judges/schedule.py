"""Both-order scheduling: every contest is judged with each response shown first, in a seeded order.

Judging both orders is what makes position bias identifiable (Zheng et al. 2023 swap positions
for the same reason); interleaving the two orders in a random sequence keeps drift of a judge
server over a long run (load, cache, a silent model swap) from lining up with presentation order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from honestci.audit.errors import InputError, Problem


@dataclass(frozen=True)
class Contest:
    """An unordered pair of responses to one vignette (``response_a`` and ``response_b`` are just names)."""

    vignette_id: str
    response_a: str
    response_b: str


@dataclass(frozen=True)
class Job:
    """One ordered comparison: ``response_first`` is shown in position A."""

    contest_index: int
    vignette_id: str
    response_first: str
    response_second: str
    swapped: bool  # True when the contest's response_b is shown first


@dataclass(frozen=True)
class Schedule:
    """Every contest in both orders, in a seeded random sequence.

    Attributes
    ----------
    jobs
        ``2 * len(contests)`` ordered comparisons.
    seed
        The integer seed used, or the entropy of the Generator's SeedSequence when one was passed.
    """

    contests: tuple[Contest, ...]
    jobs: tuple[Job, ...]
    seed: int | None

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "position": np.arange(len(self.jobs)),
                "contest_index": [j.contest_index for j in self.jobs],
                "vignette_id": [j.vignette_id for j in self.jobs],
                "response_first": [j.response_first for j in self.jobs],
                "response_second": [j.response_second for j in self.jobs],
                "swapped": [j.swapped for j in self.jobs],
            }
        )


def _seed_of(rng: np.random.Generator | int) -> tuple[np.random.Generator, int | None]:
    if isinstance(rng, np.random.Generator):
        seed_seq = getattr(rng.bit_generator, "seed_seq", None)
        entropy = getattr(seed_seq, "entropy", None)
        return rng, int(entropy) if isinstance(entropy, (int, np.integer)) else None
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng)), int(rng)
    raise InputError(
        f"Schedule seed must be an int or numpy Generator, not {type(rng).__name__}.", fix="pass --seed INTEGER"
    )


def schedule_both_orders(contests: Sequence[Contest], rng: np.random.Generator | int) -> Schedule:
    """Both presentation orders of every contest, shuffled together with ``rng``.

    Raises :class:`InputError` for a contest of a response with itself or a contest listed twice
    (in either order): judging it twice would create duplicate judgments.
    """
    generator, seed = _seed_of(rng)
    problems: list[Problem] = []
    seen: dict[tuple[str, frozenset[str]], int] = {}
    for index, contest in enumerate(contests):
        key = (contest.vignette_id, frozenset((contest.response_a, contest.response_b)))
        if contest.response_a == contest.response_b:
            problems.append(
                Problem(
                    "contests",
                    index + 1,
                    "response_b",
                    "a response cannot be compared with itself",
                    "list two different responses",
                )
            )
        elif key in seen:
            problems.append(
                Problem(
                    "contests",
                    index + 1,
                    None,
                    f"same pair as contest {seen[key] + 1} (both orders are scheduled automatically)",
                    "list each unordered pair once",
                )
            )
        else:
            seen[key] = index
    if problems:
        raise InputError("Contests cannot be scheduled.", problems)
    jobs = []
    for index, c in enumerate(contests):
        jobs.append(Job(index, c.vignette_id, c.response_a, c.response_b, swapped=False))
        jobs.append(Job(index, c.vignette_id, c.response_b, c.response_a, swapped=True))
    order = generator.permutation(len(jobs))
    return Schedule(tuple(contests), tuple(jobs[i] for i in order), seed)
