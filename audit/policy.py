"""The auditor's policy: the verdict ladder, every threshold, the gates and the interval each
population's gate reads, the default seed and the exit codes.

This is the page an auditor reads to know the rules. Every number that decides a verdict lives
here (or in an organisation's policy file that overrides it by name); gate *rules* live in
:mod:`honestci.audit.gates`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

#: The populations a win-rate claim can be about (POPULATION_LABELS says what each means): two about
#: one checkpoint (new vignettes, these vignettes) and one about the recipe that trained it
#: (``new_seeds``: a new training seed of the recipe on new vignettes, what "seed-robust" asserts).
Population = Literal["new_vignettes", "these_vignettes", "new_seeds"]
POPULATIONS: tuple[str, ...] = get_args(Population)
#: The populations of one checkpoint's contests: the only ones a default population may name (a
#: recipe claim needs its ``seeds:``, which a claim without them cannot supply).
VIGNETTE_POPULATIONS: tuple[str, ...] = ("new_vignettes", "these_vignettes")
#: The populations the built-in policy lets a claim assert: new vignettes only.
#: ``these_vignettes`` conditions on the very prompts the claimant chose and drops the
#: between-vignette variance (on six vignettes its stratified CI-low sits far above the new-vignette
#: one), so only an auditor's policy file may allow it.
#: ``new_seeds`` (a claim about the recipe) is left out too, although its interval is the right
#: estimand: the new-seed interval's CI-low lies above the truth in up to 5.0% of seeded replications
#: at a nominal 2.5% (K = 10 seeds, G = 6 vignettes, rates near 0.7; 2.6-4.4% in the other cells of
#: K 3/5/10 x G 6/12/30; 5,000 replications a cell, MC-SE 0.22%; tests/test_seeds.py
#: ``test_new_seed_ci_low_one_sided_error``, docs/methods.md "Seeds and runs"), the same skew that ruled the
#: symmetric intervals out for new vignettes; and it is centred on the seeds' mean, not the policy's
#: seed, so a claimant whose own seed misses the bar could choose it to pass. An auditor who accepts
#: that error lists it in a policy file (``populations``); below ``min_seeds`` its gate is INCONCLUSIVE.
BUILTIN_POPULATIONS: tuple[str, ...] = ("new_vignettes",)
#: Seed of every resampling and sampling step of an audit unless ``--seed`` says otherwise.
#: Smallest KL coefficient β a GRPO job may run with (``honestci train grpo``): β only slightly above
#: 0 lets the policy drift from its reference and hack the reward model as β = 0 would; the seed
#: project's card trained with 0.04, a quarter of the way down is still a penalty that binds.
MIN_KL_BETA = 0.01
DEFAULT_SEED = 20261129
#: Exit codes of every command: release allowed, blocked by a gate, bad input or environment.
EXIT_PASS, EXIT_BLOCKED, EXIT_BAD_INPUT = 0, 1, 2


class Verdict(enum.IntEnum):
    """Ordered verdicts; the worst one decides a release."""

    PASS = 0
    WARN = 1
    INCONCLUSIVE = 2
    FAIL = 3

    def __str__(self) -> str:
        return self.name


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The most severe verdict of ``verdicts`` (PASS when there are none).

    >>> worst([Verdict.PASS, Verdict.WARN]), worst([])
    (<Verdict.WARN: 1>, <Verdict.PASS: 0>)
    """
    return max(verdicts, default=Verdict.PASS)


@dataclass(frozen=True)
class Thresholds:
    """Numbers that decide verdicts. Override by name in a claim's ``thresholds:`` block."""

    #: Nominal confidence level of every interval a gate reads.
    confidence_level: float = 0.95
    #: Below this many clusters (vignettes) a clustered interval is INCONCLUSIVE, not a number.
    #: CR2 with Satterthwaite df and the Webb wild bootstrap are usable from about G = 5
    #: (Pustejovsky & Tipton 2018; MacKinnon & Webb 2017); below that no variance between
    #: clusters can be estimated with any reliability.
    min_clusters: int = 5
    #: Kendall's tau test of vignette size against vignette mean (estimands.size_association): below
    #: this p-value the bar gate says the sizes are informative. The gate's interval does not depend
    #: on it: it weights vignettes equally whatever the test says (its CI-low certified on
    #: informative size laws, docs/coverage.md); the pooled share of contests is shown beside it.
    informative_sizes_alpha: float = 0.05
    #: Below this many clusters the report notes that coverage of the few-cluster intervals is
    #: only approximately nominal (see docs/coverage.md).
    few_clusters: int = 12
    #: Fewest training seeds for which the seeds check gives a new-seed interval: with fewer the
    #: between-seed variance rests on a single degree of freedom (docs/methods.md "Seeds and runs").
    min_seeds: int = 3
    #: Below this many non-leaked vignettes the composed interval (stats/judge_error/composed.py: clustered
    #: PPI++ × leakage exclusion × AKM selection) is INCONCLUSIVE: the smallest G of its seeded
    #: coverage study at which every cell was honest (docs/coverage.md, "The composed interval").
    composed_min_vignettes: int = 12
    #: Population the bar is tested on when a claim does not name one.
    default_population: Population = "new_vignettes"
    #: Rounding tolerance when matching a claimed figure (half a unit in the last stated digit
    #: is added on top of this).
    claimed_figure_tolerance: float = 0.0005
    #: Sampler diagnostics a Bayesian posterior must meet before any number from it is reported
    #: (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021: rank-normalised split R-hat <= 1.01,
    #: bulk and tail ESS >= 400, i.e. 100 per chain for 4 chains); divergent transitions signal
    #: regions the sampler could not explore, so none are allowed.
    rhat_max: float = 1.01
    ess_bulk_min: float = 400.0
    ess_tail_min: float = 400.0
    divergences_max: int = 0
    #: A judge is calibrated only if the CI-low of its agreement with the human-preferred response
    #: (judge ties counted against it) reaches this. MT-Bench (Zheng et al. 2023, sec. 4.2) measured
    #: GPT-4 at 0.85 and expert humans at 0.81 against each other on pairs without ties, 0.66/0.63
    #: with ties as a class; chance is 0.50 on decided pairs, so a judge that cannot be shown to
    #: beat 0.65 is nearer chance than human level.
    min_judge_agreement: float = 0.65
    #: A judge may not be materially below the human-human ceiling (each rater against the rest):
    #: FAIL when the CI of (judge minus ceiling) lies entirely below -this, WARN when only its point
    #: does. A judge ten points below the ceiling errs on one item in ten more often than a typical
    #: rater does: it is then materially worse than asking one more human.
    max_judge_ceiling_gap: float = 0.10
    #: Position-bias tolerance on the order effect P(policy wins | shown first) - P(policy wins |
    #: shown second), in probability points. An order effect d moves a single-order win rate by d/2
    #: from the order-balanced one, so 0.10 bounds that bias at 5 points, the width honest intervals
    #: from a few hundred contests have anyway. FAIL when the clustered CI lies entirely outside
    #: +-tolerance, WARN when it straddles a bound, PASS when inside.
    position_bias_tolerance: float = 0.10
    #: Judgments in one fixed presentation order (the policy always in the same position) cannot
    #: show position bias, and every score carries it: the position_bias gate is INCONCLUSIVE.
    #: True accepts that risk as a WARN (never a PASS). Only a policy file may set it: it loosens.
    fixed_order_position_bias_warn: bool = False
    #: Length-bias tolerance on the judge's length effect: the change in the policy's predicted win
    #: rate when its answer is one sd (of the answer-length differences) longer than the opponent's
    #: instead of equally long (audit/stats/judge_error/length_bias.py), in probability points. As for position
    #: bias, 0.10 is about the width honest intervals from a few hundred contests have anyway; a
    #: GPT-4-turbo judge on AlpacaEval 2.0 reaches 0.3-0.7 (docs/methods.md). FAIL when the
    #: clustered CI lies entirely outside +-tolerance, WARN when it straddles a bound, PASS inside.
    length_bias_tolerance: float = 0.10
    #: The ``length_bias`` gate is required (a policy rule: :func:`length_bias_required`) when the
    #: median answer lengths (characters) of the policy and the opponent over the claim's contests
    #: differ by at least this ratio, longer over shorter. A judge with a length preference moves
    #: the win rate only through a length difference, and one a fifth longer is already about one
    #: sd of the length differences of systems of like verbosity (AlpacaEval 2.0's verbosity-
    #: prompted variants differ by 2-4x); the ratio of medians, not means, so a few very long
    #: answers do not decide it. A claim may only lower it; a policy file may raise it (1e9 is
    #: "never": the gate then informs only, unless listed in ``required_gates``).
    length_bias_required_ratio: float = 1.2
    #: Missing orders (a mixed design, audit/checks/verdicts.py): WARN when more than this share of
    #: the claim's contests was judged in one order only. Each missing order moves its contest's
    #: score by at most 1/2 between its two extreme values, so a share s moves the win rate by at most
    #: s/2: 0.10 bounds that at 5 points, as position_bias_tolerance bounds the order effect's.
    missing_orders_max_share: float = 0.10
    #: Winner's curse: WARN when a selected candidate's held-out win rate falls more than this
    #: (absolute) below its selection-pool estimate (the seed project's best-of-N fell ~0.1).
    winners_curse_shrinkage_warn: float = 0.05
    #: Winner's curse: the candidates' covariance Σ (sample covariance of their vignette means,
    #: over G) is shrunk toward its diagonal (Ledoit & Wolf 2004) when K >= G - 1 candidates make
    #: it singular or nearly so, or when the condition number of their sample correlation matrix
    #: exceeds this. 1e4: a correlation matrix whose extreme eigenvalues differ by four orders of
    #: magnitude is, from a few dozen vignettes, mostly sampling noise in its smallest directions.
    winners_curse_max_condition: float = 1e4
    #: Leakage: an eval answer counts as leaked when at least this fraction of its word n-grams
    #: occurs in the training corpus (or its whole text occurs when it is shorter than n words).
    leakage_min_overlap: float = 0.5
    #: Leakage: word n-gram length of the scan (8 by default; GPT-3 used 13).
    leakage_ngram: int = 8
    #: Leakage: word-Jaccard (over windows of each document) from which a corpus passage counts
    #: as a near duplicate (paraphrase) of an eval answer: WARN. Above 1 switches it off.
    leakage_near_duplicate_jaccard: float = 0.35
    #: Evidence integrity (audit/checks/evidence.py): two vignette prompts are near duplicates (one
    #: scenario, merged into one cluster) when the Jaccard of their word n-gram sets reaches this, with
    #: n = ``evidence_near_duplicate_ngram`` (the shorter prompt whole when it has fewer words). Word
    #: bigrams at 0.75 catch a 34-word prompt with two words edited (0.78) but not the composed
    #: fixture's variants, which share a scenario and differ in a closing sentence (0.70 at most):
    #: those are distinct prompts. A short prompt with one word edited (0.56 at 8 words) is a
    #: different question ("2+2" vs "3+3"), never merged; exact copies after normalisation always are.
    evidence_near_duplicate_jaccard: float = 0.75
    evidence_near_duplicate_ngram: int = 2
    #: Evidence integrity: copies are always merged before any interval; the gate WARNs when merging
    #: removed more than this share of the claim's contests. Identical outputs recur between
    #: independent samples (short or templated answers, greedy decoding: 4 of the fixture's 720
    #: contests repeat one text pair), and a copy below the share cannot move the verdict unseen:
    #: the intervals read the merged evidence and the gate FAILs when unmerged evidence would give
    #: another bar verdict.
    evidence_merged_share_warn: float = 0.01
    # --- training health (training/health.py; read from the trainer's log_history) ---------
    # Heuristic limits for a GRPO run, not derived from a model: override them per claim.
    #: Fewer logged steps than this: the run's health cannot be judged (INCONCLUSIVE).
    training_min_steps: int = 10
    #: Share of the logged steps in the first and in the last window that are compared.
    training_window_fraction: float = 0.2
    #: Mean reward of the last window minus the first must exceed this ("reward rising").
    training_min_reward_gain: float = 0.0
    #: Largest rolling-window mean of the per-token KL to the reference policy ("KL bounded").
    training_max_kl: float = 0.5
    #: Last-window mean token entropy over the first window's must be at least this ("entropy alive").
    training_min_entropy_ratio: float = 0.25
    #: ... and the last window's mean entropy at least this many nats per token.
    training_min_entropy: float = 0.05
    #: Last-window mean within-group reward sd over the first window's must be at least this.
    training_min_reward_std_ratio: float = 0.25
    #: Last-window mean share of groups whose rewards are all equal (no GRPO signal) at most this.
    training_max_frac_zero_std: float = 0.5


THRESHOLDS = Thresholds()

#: The populations an interval can be about, as reports name them.
POPULATION_LABELS = {
    "new_vignettes": "new vignettes (generalisation)",
    "these_vignettes": "these vignettes (conditional on the observed prompts)",
    "new_seeds": "a new training seed of the recipe, on new vignettes (seed-robust)",
    "iid": "contests as independent draws (fits neither population)",
}

#: Interval whose CI-low the bar gate reads, by population. New vignettes: the posterior quantile
#: of the logit-normal vignette model (audit/stats/bayesian/grid.py), the one interval whose CI-low
#: lies above the truth in at most 2.5% of replications (within Monte Carlo error) on the whole
#: coverage grid, G = 6 to 100, vignette rates up to 0.95 with logit sd 1; there CR2 on the logit
#: scale reaches 4-8% and the symmetric intervals 6-13% (docs/coverage.md).
#: New seeds: the seeds check's new-seed interval (audit/stats/selection/seeds.py: two-way seed x vignette mean
#: squares, Satterthwaite df), the one interval about a new seed of the recipe rather than the policy's
#: own seed; its one-sided lower error exceeds nominal (BUILTIN_POPULATIONS), so no built-in claim reads it.
NEW_SEED_METHOD = "new_seed"
GATE_METHOD_FOR_POPULATION = {
    "new_vignettes": "bayes_logit_normal",
    "these_vignettes": "stratified",
    "new_seeds": NEW_SEED_METHOD,
}


#: How the ``judge_calibrated`` gate scores ties (audit/checks/calibration.py ``TIE_POLICIES``): the
#: judge's agreement on the contests a human decided, so a judge cannot raise it by calling ties.
GATE_TIE_POLICY = "human_decided"


def clears_bar(ci_low: float, bar: float) -> bool:
    """The one bar rule, used by every gate that tests a bar (the Bayesian verdict included):
    the interval's lower bound is at or above the bar.

    >>> clears_bar(0.6, 0.6), clears_bar(0.5999, 0.6)
    (True, False)
    """
    return ci_low >= bar


@dataclass(frozen=True)
class GateResult:
    """The outcome of one gate: its verdict, a one-line reason and the figures behind it."""

    name: str
    verdict: Verdict
    message: str
    evidence: dict = field(default_factory=dict, compare=False)
    #: False when the gate could not run (its evidence, check or extra is missing): such a gate
    #: is INCONCLUSIVE, and ``--allow-inconclusive`` never lets it pass when it is required.
    ran: bool = True

    def as_row(self) -> dict:
        return {"gate": self.name, "verdict": str(self.verdict), "message": self.message, "ran": self.ran}


#: When a gate blocks by default: ``always``; ``when_evidence_given`` (its check ran because the
#: claim supplied its evidence: a claimed family, a selection pool, a corpus, a training log —
#: evidence given must pass); ``by_rule`` (a policy rule decides per claim: ``length_bias`` when the
#: answers differ in length, :func:`length_bias_required`); ``on_request`` (only a policy file's
#: ``required_gates`` makes it block).
Requirement = Literal["always", "when_evidence_given", "by_rule", "on_request"]


@dataclass(frozen=True)
class GateRecord:
    """One gate, everything about it but its rule (:mod:`honestci.audit.gates`) and the check that
    computes its figures (:mod:`honestci.audit.checks`). The policy's gate order, the required
    gates, the registry, the JUnit cases and the report summary's remedies all derive from
    :data:`GATE_RECORDS`; adding a gate is its record, its rule and its check."""

    name: str
    #: The key of ``AuditContext.checks`` the gate reads (None: the audit's own figures).
    reads: str | None
    required: Requirement
    #: What would turn the gate, when no figure-based sentence applies (the report summary).
    remedy: str


#: Every gate, in the order they run and are reported.
GATE_RECORDS = (
    GateRecord(
        "enough_clusters",
        None,
        "always",
        "add vignettes: the policy needs at least {min_clusters} for an interval on new vignettes",
    ),
    GateRecord("ci_low_clears_bar", None, "always", "see the gate's evidence below"),
    GateRecord(
        "valid_verdicts",
        "valid_verdicts",
        "always",
        "re-judge the contests with invalid verdicts (fix the judge's prompt or its parser) so "
        "that scoring them cannot move the CI-low across the bar",
    ),
    GateRecord(
        "sampler_converged",
        None,
        "always",
        "rerun the Bayesian fit with more tuning and draws until R-hat, ESS and divergences "
        "meet the policy, or simplify the model",
    ),
    GateRecord(
        "comparison_valid",
        None,
        "always",
        "state the comparison as a paired, vignette-clustered difference "
        "(kind: paired_difference) and let its interval exclude 0",
    ),
    GateRecord(
        "claimed_figures_reproduce",
        None,
        "always",
        "state the figures as recomputed here: a point, n, and an interval that respects "
        "the clustering by vignette (the gate's interval, or CR2)",
    ),
    GateRecord(
        "judge_calibrated",
        "calibration",
        "always",
        "use a judge whose agreement with human preferences clears the policy's minimum, "
        "or collect more human labels to narrow its interval",
    ),
    GateRecord(
        "position_bias",
        "position_bias",
        "always",
        "judge every contest in both orders with a judge whose order effect lies within the "
        "policy's tolerance; more vignettes narrow that interval",
    ),
    GateRecord(
        "evidence_intact",
        "evidence",
        "always",
        "give each vignette, response and judgment once under one id (copies are merged "
        "before any interval) and systems and judges names that cannot be read as each other",
    ),
    GateRecord("multiple_comparisons", "systems", "when_evidence_given", "see the gate's evidence below"),
    GateRecord("length_bias", "length_bias", "by_rule", "see the gate's evidence below"),
    GateRecord(
        "winners_curse",
        "winners_curse",
        "when_evidence_given",
        "evaluate the selected candidate on a fresh held-out pool that took no part in the selection",
    ),
    GateRecord(
        "leakage",
        "leakage",
        "when_evidence_given",
        "drop the leaked items from the evaluation (or retrain without them) and re-audit",
    ),
    GateRecord(
        "training_healthy",
        "training_health",
        "when_evidence_given",
        "fix the training run the log shows (reward flat, KL or entropy out of bounds) and re-evaluate",
    ),
)
GATE_ORDER = tuple(record.name for record in GATE_RECORDS)
#: Gates required by default, in the order they run.
DEFAULT_REQUIRED_GATES = tuple(record.name for record in GATE_RECORDS if record.required == "always")
#: Gate → the check whose evidence, when given, makes it required.
REQUIRED_WHEN_EVIDENCE_GIVEN: dict[str, str] = {
    record.name: record.reads
    for record in GATE_RECORDS
    if record.required == "when_evidence_given" and record.reads is not None
}
#: Gate → the check it reads, for the gates that read one.
GATE_CHECK: dict[str, str] = {record.name: record.reads for record in GATE_RECORDS if record.reads is not None}
#: Gate → what would turn it (the report summary's fallback sentence).
GATE_REMEDY = {record.name: record.remedy for record in GATE_RECORDS}


def length_bias_required(
    median_policy: float | None, median_opponent: float | None, thresholds: Thresholds = THRESHOLDS
) -> str | None:
    """Why the ``length_bias`` gate is required (None when this rule does not require it): the
    policy's and the opponent's median answer lengths over the claim's contests differ by a ratio
    (longer over shorter) of at least ``length_bias_required_ratio``. A policy rule: the claim
    cannot switch it off (only a policy file, by raising the ratio); an empty answer counts as
    one character, so an empty side against a non-empty one differs.
    """
    if median_policy is None or median_opponent is None or median_policy == median_opponent:
        return None
    short, long = sorted((max(median_policy, 1.0), max(median_opponent, 1.0)))
    ratio = long / short
    limit = thresholds.length_bias_required_ratio
    if ratio < limit:
        return None
    return (
        f"the answers differ in length: median {median_policy:.0f} (policy) vs {median_opponent:.0f} "
        f"(opponent) characters, a ratio of {ratio:.2f} >= length_bias_required_ratio {limit:g}"
    )


# --- the policy: what decides, and what a claim may change -----------------------------------

#: Which way each threshold tightens the audit: "higher" (a larger value is stricter) or "lower".
#: A claim may move a threshold only that way; the thresholds missing here have no strict
#: direction (a population default, a window share) and only a policy file may change them.
TIGHTENS = {
    "confidence_level": "higher",
    "min_clusters": "higher",
    "min_seeds": "higher",
    "few_clusters": "higher",
    "composed_min_vignettes": "higher",
    "claimed_figure_tolerance": "lower",
    "rhat_max": "lower",
    "ess_bulk_min": "higher",
    "ess_tail_min": "higher",
    "divergences_max": "lower",
    "min_judge_agreement": "higher",
    "max_judge_ceiling_gap": "lower",
    "position_bias_tolerance": "lower",
    "length_bias_tolerance": "lower",
    # a lower ratio requires the length_bias gate on smaller length differences
    "length_bias_required_ratio": "lower",
    "missing_orders_max_share": "lower",
    "winners_curse_shrinkage_warn": "lower",
    # A smaller overlap share, shorter n-grams or a lower Jaccard flag more answers as leaked.
    "leakage_min_overlap": "lower",
    "leakage_ngram": "lower",
    "leakage_near_duplicate_jaccard": "lower",
    # A lower Jaccard merges more prompts; a lower share WARNs on fewer merged contests. A shorter
    # n-gram raises every Jaccard of an edited copy (module of the check), so it also flags more.
    "evidence_near_duplicate_jaccard": "lower",
    "evidence_near_duplicate_ngram": "lower",
    "evidence_merged_share_warn": "lower",
    "training_min_steps": "higher",
    "training_min_reward_gain": "higher",
    "training_max_kl": "lower",
    "training_min_entropy_ratio": "higher",
    "training_min_entropy": "higher",
    "training_min_reward_std_ratio": "higher",
    "training_max_frac_zero_std": "lower",
}
#: How an invalid verdict (unparseable, refused, empty) scores a contest order: against the claim
#: (the policy loses that order: the conservative default), as a tie, or left out (then the
#: ``valid_verdicts`` gate bounds what leaving it out could change).
InvalidScoring = Literal["against_claim", "tie", "exclude"]
INVALID_SCORING: tuple[str, ...] = get_args(InvalidScoring)
#: How a contest judged in one order only counts in a mixed design (some contests judged in both
#: orders, some in one): its missing order scored as a loss for the policy (the default: leaving an
#: order unjudged can never raise the win rate), or the contest left out (counted; the interval then
#: rests on the contests someone chose to complete, so the evidence gate tests that choice).
MissingOrders = Literal["against_claim", "exclude"]
MISSING_ORDERS: tuple[str, ...] = get_args(MissingOrders)
#: How a panel's verdicts on one contest become one score (audit/data/contests.py ``panel_score``):
#: the average of the judges' contest scores, or the majority of their verdicts (tie without one).
PANEL_RULES: tuple[str, ...] = ("mean", "majority")
#: How a family of claimed comparisons ("beats all three baselines", "best of 8 checkpoints") is
#: corrected: Holm's family-wise step-down, the max-|t| wild cluster bootstrap (family-wise,
#: simultaneous over every pair of the systems) or Benjamini–Hochberg (false discovery rate, weaker).
Multiplicity = Literal["holm", "maxt", "bh"]
MULTIPLICITY: tuple[str, ...] = get_args(Multiplicity)
#: The corrections a policy file may choose: those whose seeded error rate held at nominal
#: (docs/methods.md, K systems). max-t measured about 6% family-wise error at a nominal 5%, so no
#: gate reads it; `honestci compare --simultaneous maxt` still shows it.
CERTIFIED_MULTIPLICITY: tuple[str, ...] = ("holm", "bh")
#: Intervals the coverage study certifies honest for each population's bar gate
#: (docs/coverage.md); a policy may choose among these, a claim never.
#: "composed" (audit/stats/judge_error/composed.py: judge error, clustering, leakage and selection corrected at
#: once; its rate on non-leaked vignettes): one-sided error within 2.5% + 3 MC-SE in every cell of its
#: grid (docs/coverage.md, "The composed interval"); INCONCLUSIVE below composed_min_vignettes.
CERTIFIED_GATE_METHODS = {
    "new_vignettes": ("bayes_logit_normal", "composed"),
    "these_vignettes": ("stratified",),
    "new_seeds": (NEW_SEED_METHOD,),
}


@dataclass(frozen=True)
class Policy:
    """The auditor's rules: every number and choice that decides a verdict.

    The built-in defaults are ``Policy()``; an organisation's policy file
    (:func:`honestci.audit.data.policy_file.load_policy`) overrides them by name, and a claim may
    only tighten the result (:meth:`tightened`). Its :attr:`sha256` goes into every report.
    """

    name: str = "built-in"
    thresholds: Thresholds = THRESHOLDS
    #: (population, method) pairs: the interval whose CI-low the bar gate reads.
    gate_methods: tuple[tuple[str, str], ...] = tuple(GATE_METHOD_FOR_POPULATION.items())
    required_gates: tuple[str, ...] = DEFAULT_REQUIRED_GATES
    invalid_verdicts: InvalidScoring = "against_claim"
    #: How a mixed design's single-order contests count (:data:`MISSING_ORDERS`).
    missing_orders: MissingOrders = "against_claim"
    #: Panel rules a claim may name (:data:`PANEL_RULES`); the policy decides, not the claim.
    panel_rules: tuple[str, ...] = PANEL_RULES
    #: The correction of a family of claimed comparisons (:data:`MULTIPLICITY`).
    multiplicity: Multiplicity = "holm"
    #: The populations a claim may assert (:data:`POPULATIONS`): the population decides which
    #: interval the bar gate reads, so the auditor allows them, never the claim
    #: (:data:`BUILTIN_POPULATIONS` says why ``these_vignettes`` needs a policy file).
    populations: tuple[str, ...] = BUILTIN_POPULATIONS
    #: Where each deviation from the built-in defaults came from ("policy file PATH", "claim PATH").
    sources: tuple[tuple[str, str], ...] = ()

    def gate_method(self, population: str) -> str:
        """The interval the bar gate reads for ``population``."""
        return dict(self.gate_methods)[population]

    def contest_method(self, population: str) -> str:
        """The interval the checks recompute on parts of the policy's own contests (per family, per
        judge, invalid verdicts scored either way): the bar gate's for a vignette population; for
        ``new_seeds``, whose gate reads every seed, the policy seed's new-vignette interval."""
        return self.gate_method("new_vignettes" if population not in VIGNETTE_POPULATIONS else population)

    def content(self) -> dict:
        """Everything that decides a verdict, as plain data (what :attr:`sha256` hashes)."""
        return {
            "thresholds": dict(self.thresholds.__dict__),
            "gate_methods": dict(self.gate_methods),
            "required_gates": list(self.required_gates),
            "invalid_verdicts": self.invalid_verdicts,
            "missing_orders": self.missing_orders,
            "panel_rules": list(self.panel_rules),
            "multiplicity": self.multiplicity,
            "populations": list(self.populations),
        }

    @property
    def sha256(self) -> str:
        import hashlib
        import json

        return hashlib.sha256(json.dumps(self.content(), sort_keys=True).encode()).hexdigest()

    def deviations(self) -> tuple[dict, ...]:
        """Every setting that differs from the built-in defaults: key, default, value, source."""
        sources = dict(self.sources)
        default, mine = _flat(Policy().content()), _flat(self.content())
        return tuple(
            {"key": key, "default": default.get(key), "value": value, "source": sources.get(key, self.name)}
            for key, value in mine.items()
            if default.get(key) != value
        )


def _flat(content: dict) -> dict:
    """``{"thresholds": {"x": 1}}`` as ``{"thresholds.x": 1}``; lists as tuples (comparable)."""
    flat: dict = {}
    for key, value in content.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{inner}": v for inner, v in value.items()})
        else:
            flat[key] = tuple(value) if isinstance(value, list) else value
    return flat


def threshold_problem(name: str, value) -> str | None:
    """Why ``value`` cannot override the threshold ``name`` (None if it can): it must have the
    default's type (an integer where the default is one), and a level must lie in (0, 1)."""
    default = getattr(THRESHOLDS, name)
    if isinstance(default, bool):
        return None if isinstance(value, bool) else f"{value!r} is not true or false"
    if name == "default_population":
        return (
            None
            if value in VIGNETTE_POPULATIONS
            else f"{value!r} is not one of {list(VIGNETTE_POPULATIONS)} (a recipe claim names its population and seeds)"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value!r} is not {'an integer' if isinstance(default, int) else 'a number'}"
    if isinstance(default, int) and not isinstance(value, int):
        return f"{value!r} is not an integer"
    if value != value or value in (float("inf"), float("-inf")):
        return f"{value!r} is not a finite number"
    if name.endswith("_level") and not 0 < value < 1:
        return f"{value!r} is not between 0 and 1"
    if name == "min_clusters" and value < 2:
        return f"{value!r} is below 2: no variance between vignettes can be estimated from fewer"
    if name == "evidence_near_duplicate_ngram" and value < 1:
        return f"{value!r} is below 1: an n-gram has at least one word"
    if name == "min_seeds" and value < 2:
        return f"{value!r} is below 2: no variance between seeds can be estimated from fewer"
    return None


def known_gates(names):
    """``names`` unchanged when every one is a gate (None allowed); else ValueError naming the rest."""
    unknown = sorted(set(names or ()) - set(GATE_ORDER))
    if unknown:
        raise ValueError(f"unknown gate(s) {unknown}; known gates: {list(GATE_ORDER)}")
    return names


def known_thresholds(values: dict) -> dict:
    """``values`` unchanged when every key names a threshold; else ValueError naming the rest."""
    known = set(Thresholds.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown threshold(s) {unknown}; known: {sorted(known)}")
    return values


def with_values(thresholds: Thresholds, values: Mapping[str, float | int | str]) -> Thresholds:
    """``thresholds`` with ``values`` set by name; each value checked by :func:`threshold_problem`.

    Raises
    ------
    ValueError
        Naming the first value that cannot be used (loaders check every value first and report
        all problems as input errors).
    """
    changes: dict[str, Any] = {}
    for name, value in values.items():
        problem = threshold_problem(name, value)
        if problem is not None:
            raise ValueError(f"threshold {name}: {problem}")
        changes[name] = value
    return replace(thresholds, **changes)


def loosening(thresholds: Thresholds, name: str, value: float | int | str) -> str | None:
    """Why setting threshold ``name`` to ``value`` would loosen ``thresholds`` (None when it
    tightens them or leaves them as they are)."""
    current = getattr(thresholds, name)
    if value == current:
        return None
    direction = TIGHTENS.get(name)
    if direction is None:
        return f"{name} has no stricter direction: only a policy file may change it"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value!r} is not a number"
    if (direction == "higher" and value < current) or (direction == "lower" and value > current):
        return f"{value!r} loosens the policy's {current!r} (a claim may only set it {direction})"
    return None
