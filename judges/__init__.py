"""Pairwise judging: prompts, both-order scheduling, parsing, backends, cache, importers (to come)."""
