"""honestci: audit LLM-judge win-rate claims about RLHF checkpoints.

One import namespace; the repository's top-level folders install beneath it:

- :mod:`honestci.audit` — the core, in floors (errors → policy → data / stats → checks → gates →
  pipeline → cli), each importing only from the floors below it;
- :mod:`honestci.judges` — pairwise judging (prompts, scheduling, parsing, backends, importers);
- :mod:`honestci.training` — reward-model and GRPO jobs (TRL) that end in the same audit;
- :mod:`honestci.reports` — renders the report model (Markdown, HTML, JSON, model card);
- :mod:`honestci.fixtures` — the embedded fixture study and its seeded simulator.

Heavy libraries (pandas, PyMC, ArviZ, torch) are imported by the modules that need them, so
``import honestci`` and the command line's ``--help`` stay fast.
"""

__version__ = "0.1.0"
