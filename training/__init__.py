"""Reward-model and GRPO jobs (TRL); their outputs pass the same audit gates (to come)."""
