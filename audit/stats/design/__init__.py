"""Designing an evaluation before it is run: how many vignettes and contests, and how well the
intervals cover.

Sample-size and power planning for the bar gate (:mod:`.planning`) and the seeded simulation
study of every win-rate interval's coverage that it rests on (:mod:`.coverage_study`).
"""
