"""Corrections for the judge's errors and biases, and the one interval that composes them.

Prediction-powered inference on a human-labelled subset (:mod:`.ppi`), the judge's length and
style bias with length-controlled win rates (:mod:`.length_bias`), a panel of judges' agreement
and disagreement (:mod:`.panel`), and the composed interval correcting judge error, clustering,
leakage and selection at once (:mod:`.composed`).
"""
