"""Pairwise judging: prompts, both-order scheduling, parsing, backends, cache, importers.

- :mod:`honestci.judges.prompts` — versioned templates; the SHA-256 of the template text is stored with every verdict.
- :mod:`honestci.judges.schedule` — both presentation orders of every contest, in a seeded interleaved order.
- :mod:`honestci.judges.parse` — reply → A / B / tie, or ``invalid`` (never guessed).
- :mod:`honestci.judges.backends` — OpenAI-compatible HTTP (vLLM, TGI, hosted), local transformers, replay.
- :mod:`honestci.judges.cache` — SQLite (WAL) cache; a killed run resumes without re-asking or losing anything.
- :mod:`honestci.judges.run` — the judging run (progress, summary of invalid and retried calls).
- :mod:`honestci.judges.importers` — what the importers share; one module per format family beside it:
  AlpacaEval and PandaLM (``importers_alpaca``), FastChat MT-Bench and Arena (``importers_fastchat``),
  lm-evaluation-harness (``importers_lm_eval``), inspect_ai (``importers_inspect``), generic tables
  (``importers_generic``).
- :mod:`honestci.audit.cli.judges` — ``honestci judge`` and ``honestci import``.
- :mod:`honestci.judges.stub_server` — a local OpenAI-compatible judge with fault injection (tests, bench).
"""
