"""Training jobs whose outputs must pass the audit's gates before anything is reported.

- :mod:`honestci.training.task`: the policy's prompts, the answer after ``</think>``, the format gate.
- :mod:`honestci.training.reward_models`: Bradley–Terry (TRL ``RewardTrainer``) and regression reward
  models from human ratings, the K-seed ensemble R = mean − λ·sd, held-out accuracy with a
  vignette-clustered CR2 interval; safetensors only.
- :mod:`honestci.training.grpo`: GRPO (TRL ``GRPOTrainer``) rewarded by the gated ensemble; vLLM rollouts
  through a server only.
- :mod:`honestci.audit.checks.training_health`: the ``training_healthy`` gate from the trainer's log.
- :mod:`honestci.training.generate`: fresh-seed generation for evaluation (transformers or an
  OpenAI-compatible server).
- :mod:`honestci.training.pipeline`: leakage check → training → generation → judging → audit → model card.
- :mod:`honestci.audit.cli.training`: ``honestci train rm|grpo``, ``honestci generate``, ``honestci pipeline``.
- :mod:`honestci.training.tiny`: tiny models built from a config, for tests and CPU dry runs.

Heavy libraries (torch, transformers, TRL) are imported inside the functions that need them.
"""
