"""One rule for every random function: an explicit seed or Generator in, the seed recorded out."""

from __future__ import annotations

import numpy as np

from honestci.audit.errors import InputError


def resolve_rng(rng: int | np.random.Generator) -> tuple[np.random.Generator, int | None]:
    """Return a Generator and the seed to record in a result.

    An int seed is recorded as given. For a Generator the entropy of its SeedSequence is recorded
    (``np.random.default_rng(entropy)`` recreates it as it was before any draw), or None when it
    has none.
    """
    if isinstance(rng, np.random.Generator):
        entropy = getattr(getattr(rng.bit_generator, "seed_seq", None), "entropy", None)
        return rng, int(entropy) if isinstance(entropy, (int, np.integer)) else None
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng)), int(rng)
    raise InputError(
        f"rng must be an int seed or a numpy.random.Generator, got {type(rng).__name__}.",
        fix="pass rng=<int seed> (recorded in the result) or rng=np.random.default_rng(seed).",
    )
