"""Pairwise judging: prompts, both-order scheduling, parsing, backends, cache, importers.

- :mod:`judges.prompts` — versioned templates; the SHA-256 of the template text is stored with every verdict.
- :mod:`judges.schedule` — both presentation orders of every contest, in a seeded interleaved order.
- :mod:`judges.parse` — reply → A / B / tie, or ``invalid`` (never guessed).
- :mod:`judges.backends` — OpenAI-compatible HTTP (vLLM, TGI, hosted), local transformers, replay.
- :mod:`judges.cache` — SQLite (WAL) cache; a killed run resumes without re-asking or losing anything.
- :mod:`judges.run` — the judging run (progress, summary of invalid and retried calls).
- :mod:`judges.importers` — AlpacaEval, PandaLM, FastChat MT-Bench, generic tables.
- :mod:`judges.cli` — ``honestci judge`` and ``honestci import``.
- :mod:`judges.stub_server` — a local OpenAI-compatible judge with fault injection (tests, bench).
"""
