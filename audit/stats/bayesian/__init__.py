"""Bayesian models of the win rate and the machinery that fits them.

The hierarchical win-rate model (:mod:`.hierarchical`, its entry points; :mod:`.model`, its
PyMC definition; :mod:`.cells`, its data), the joint model of two systems (:mod:`.compare`), the
pooled conjugate check (:mod:`.pooled`), the bar gate's posterior by quadrature (:mod:`.grid`),
and what they share: NUTS sampling and summaries (:mod:`.sampling`), convergence diagnostics
(:mod:`.mcmc_diagnostics`), the hand-derived numba densities (:mod:`.density`,
:mod:`.logistic_kernels`), the collapsed sampler for many vignettes (:mod:`.collapsed`), the
posterior predictive check (:mod:`.predictive`) and the ArviZ-layout container of a fit
(:mod:`.posterior_groups`).
"""
