"""Frequentist intervals of a win rate and of differences between win rates, clustered by vignette.

The naive iid intervals (:mod:`.iid`) and the honest ones: cluster-robust OLS with CR2 and
Satterthwaite df (:mod:`.cluster_robust`, fitted from cells in :mod:`.cells`), the wild and
pairs cluster bootstraps (:mod:`.wild_bootstrap`, :mod:`.cluster_bootstrap`), a clustered mean
with both intervals as one row (:mod:`.clustered_estimate`), the ICC and design effect reported
beside them (:mod:`.design_effect`), paired differences of two systems (:mod:`.compare`), the
transfer gap between vignette families (:mod:`.populations`), and the table of every interval
method side by side (:mod:`.winrate`, which also reads the Bayesian grid posterior).
"""
