"""Inference when the claimed system was chosen among several: systems, seeds and the winner.

The winner's-curse intervals for the best of K estimates (:mod:`.winner`), K systems on shared
vignettes with pairwise differences, Bradley–Terry strengths, rank intervals and multiplicity
control (:mod:`.systems`), and training seeds as a level of the model (:mod:`.seeds`).
"""
