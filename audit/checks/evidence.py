"""Evidence integrity: copied prompts and responses, contests judged more often than the design
says, look-alike names and other systems' rows under the policy's name, found and merged before
any interval is formed.

The data come from the people being audited (DESIGN.md, "Evidence is adversarial"). The audit
(:func:`honestci.audit.pipeline.audit_context`) calls :func:`scan_evidence` on the loaded study
before it builds a contest, and every interval and check reads the merged study it returns:

- **vignettes** whose normalised prompts are equal (:func:`~honestci.audit.checks.duplicates.normalized_text`),
  or near duplicates (word n-gram Jaccard ≥ ``evidence_near_duplicate_jaccard``, n =
  ``evidence_near_duplicate_ngram``), become one cluster under the id that comes first in the file;
- **responses** of one system on one (merged) vignette and pool with equal normalised text become
  one response (the first id), so a contest re-added under copied responses is the same contest;
- **judgments** then repeated (same judge, same two responses, same order) are *over-judged*: the
  repeats collapse to one verdict per order. Where the claim's policy is in the pair the verdict
  kept is the one least favourable to it (loss, then invalid, then tie, then win; the smallest
  preference for it): adding repeats can then never raise its score, whatever their number or
  order (a majority or the first could be outvoted or reordered by whoever adds rows). Elsewhere
  agreeing repeats keep one row and disagreeing ones become one ``invalid`` verdict (the judge
  contradicted itself on the same content), scored as the policy's ``invalid_verdicts`` says;
- human ratings and pairs follow the merged ids (a rater's repeated ratings averaged, contradicting
  labels of one pair a tie); rows merged away are counted in each table's ``dropped``.

Not merged, but found: system and judge names that are Unicode confusables of each other
(:func:`~honestci.audit.checks.duplicates.confusable_groups`; FAIL when one of them is a name the
claim reads: the audit may be reading the wrong system's rows), and a policy response whose text
is an opponent's response on the same vignette (the opponent's rows under the policy's name:
:func:`other_system_rows`), and policy responses no judgment of the claim's judges reads (contests
left out whole: :func:`unjudged_responses`); both count their contests as lost by the policy and
FAIL when that changes the bar verdict.
A text the policy shares with a third system is not a finding: checkpoints of one model share
outputs (the fixture's policy shares a fifth of its texts with its earlier version).

:func:`evidence_check` adds the bar gate's CI-low on the unmerged contests beside the merged one;
the ``evidence_intact`` gate (:func:`honestci.audit.gates.gate_evidence_intact`) reads its
findings table. A new kind of finding is one more entry of :data:`FINDING_KINDS` and one more
function in :data:`STUDY_DETECTORS` (reads the study) or :data:`CONTEST_DETECTORS` (reads the
audit context); the gate needs no change. Orders missing from a contest are the ``valid_verdicts``
gate's (:mod:`honestci.audit.checks.verdicts`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.checks.duplicates import confusable_groups, near_duplicate_pairs, normalized_text
from honestci.audit.data.io import Study
from honestci.audit.data.validation import LoadedTable
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import THRESHOLDS, VIGNETTE_POPULATIONS, Thresholds, Verdict, clears_bar

if TYPE_CHECKING:
    from honestci.audit.data.contests import ContestTable

#: Every kind of finding, with what it means; the findings table's ``kind`` is one of these.
FINDING_KINDS: Mapping[str, str] = {
    "duplicate_vignette": "vignettes with the same normalised prompt: merged into one cluster",
    "near_duplicate_vignette": "prompts that differ by a few words, a system's answers repeated: one cluster",
    "duplicate_response": "one system's responses with the same normalised text on one vignette: merged",
    "over_judged": "the same contest judged more than once in one order: one verdict kept per order",
    "confusable_names": "system or judge names that read alike (NFKC + confusable skeleton): not merged",
    "other_system_rows": "policy responses whose text is an opponent's response on the same vignette",
    "unjudged_responses": "policy responses the claim's judges never judged: contests left out whole",
}
#: How many ids a finding's ``items`` lists before it says how many more there are.
MAX_ITEMS = 8
#: A judged order's value for the policy, by verdict, when the policy was shown first.
_AS_FIRST = {"first": 1.0, "second": 0.0, "tie": 0.5}


@dataclass(frozen=True)
class Finding:
    """One row of the findings table: what was found, the items involved (ids or names), how many
    rows it concerns, what they were merged into (None when nothing was merged), and the verdict
    the finding asks of the ``evidence_intact`` gate by itself (PASS: informative; the gate adds
    its rules on merged share and on the bar verdict)."""

    kind: str
    items: tuple[str, ...]
    count: int
    merged_into: str | None
    verdict: Verdict
    detail: str

    def as_row(self) -> dict:
        return {
            "kind": self.kind,
            "items": ", ".join(self.items),
            "count": self.count,
            "merged_into": self.merged_into,
            "verdict": str(self.verdict),
            "detail": self.detail,
        }


@dataclass(frozen=True, eq=False)
class EvidenceScan:
    """What :func:`scan_evidence` found and the merged study every interval reads (``raw`` is the
    study as loaded)."""

    findings: tuple[Finding, ...]
    study: Study
    raw: Study
    #: Each loaded response's normalised text (:func:`normalized_text`), by response id: computed
    #: once here for the checks that compare answers (None where the ids repeat).
    normalized_answers: pd.Series | None = field(default=None, compare=False, repr=False)

    @property
    def merged(self) -> bool:
        """Whether merging changed any table."""
        return self.study is not self.raw


# --- the scan and the merge --------------------------------------------------------------------


def _components(n: int, pairs) -> np.ndarray:
    """Each of ``n`` items' component root (the smallest index) under the union of ``pairs``."""
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return np.array([find(i) for i in range(n)], dtype=np.int64)


def _listed(items: Sequence[str]) -> tuple[str, ...]:
    items = tuple(items)
    return items if len(items) <= MAX_ITEMS else (*items[:MAX_ITEMS], f"… {len(items) - MAX_ITEMS} more")


def _normalized(texts: pd.Series) -> np.ndarray:
    """:func:`normalized_text` of each text, each distinct text normalised once."""
    codes, distinct = pd.factorize(texts.astype(str))
    return np.array([normalized_text(t) for t in distinct], dtype=object)[codes] if len(codes) else np.array([])


def _shared_answers(near: list, codes: np.ndarray, ids: np.ndarray, answers: pd.DataFrame) -> list:
    """The near-duplicate prompt pairs (of distinct prompts' codes) on which some system gave the
    same normalised answer: a copy, where a template filled in differently (AlpacaEval's "recipe
    for <dish>" prompts) gets other answers."""
    code_of = dict(zip(ids.tolist(), codes.tolist()))
    keyed = answers.assign(code=answers["vignette_id"].map(code_of)).dropna(subset=["code"])
    said = keyed.groupby("code")[["system", "text"]].apply(lambda g: set(zip(g["system"], g["text"])))
    return [pair for pair in near if said.get(pair[0], set()) & said.get(pair[1], set())]


def _vignette_map(
    vignettes: pd.DataFrame, thresholds: Thresholds, answers: pd.DataFrame
) -> tuple[dict[str, str], list[Finding]]:
    """Vignettes merged into the first of their kind: the same normalised prompt, or near-duplicate
    prompts (word n-gram Jaccard) on which a system's answers repeat (``answers``: vignette_id,
    system, normalised text)."""
    ids = vignettes["vignette_id"].astype(str).to_numpy()
    norm = _normalized(vignettes["text"])
    codes, distinct = pd.factorize(norm)
    first = np.unique(codes, return_index=True)[1]  # each distinct prompt's first vignette
    pairs = [(i, int(first[c])) for i, c in enumerate(codes)]
    near = near_duplicate_pairs(
        list(distinct), thresholds.evidence_near_duplicate_ngram, thresholds.evidence_near_duplicate_jaccard
    )
    if near:
        near = _shared_answers(near, codes, ids, answers)
    pairs += [(int(first[a]), int(first[b])) for a, b, _ in near]
    roots = _components(len(ids), pairs)
    jaccard = {(int(first[a]), int(first[b])): j for a, b, j in near}
    mapping, findings = {}, []
    for root in np.unique(roots[roots != np.arange(len(ids))]).tolist():
        members = np.flatnonzero(roots == root)
        mapping.update({ids[i]: ids[root] for i in members if i != root})
        exact = len(set(codes[members].tolist())) == 1
        scores = [j for (a, b), j in jaccard.items() if roots[a] == root]
        findings.append(
            Finding(
                "duplicate_vignette" if exact else "near_duplicate_vignette",
                _listed(ids[members].tolist()),
                int(members.size),
                str(ids[root]),
                Verdict.WARN,
                "the same prompt after normalisation"
                if exact
                else f"word {thresholds.evidence_near_duplicate_ngram}-gram Jaccard {min(scores):.2f}"
                + (f" to {max(scores):.2f}" if max(scores) > min(scores) else "")
                + ", with answers repeated",
            )
        )
    return mapping, findings


def _recode(column: pd.Series, mapping: Mapping[str, str]) -> pd.Series:
    """``column`` with its values renamed by ``mapping`` (a categorical keeps sorted categories)."""
    if not mapping:
        return column
    if isinstance(column.dtype, pd.CategoricalDtype):
        renamed = np.array([mapping.get(c, c) for c in column.cat.categories], dtype=object)
        values = renamed[column.cat.codes.to_numpy()]
        return pd.Series(pd.Categorical(values, categories=sorted(set(values.tolist()))), index=column.index)
    return column.map(lambda v: mapping.get(v, v)).astype(column.dtype)


def _table(table: LoadedTable, frame: pd.DataFrame, keep: np.ndarray | None, merged: int) -> LoadedTable:
    """``table`` with ``frame`` (its rows ``keep``), the rows merged away counted in ``dropped``."""
    lines = table.lines if keep is None else table.lines[keep]
    if keep is not None:
        frame = frame[keep].reset_index(drop=True)
    dropped = dict(table.dropped) | ({"merged_duplicates": merged} if merged else {})
    return replace(table, frame=frame, lines=lines, dropped=dropped)


def _policy_value(verdict: str, preference: float, policy_first: bool) -> tuple[float, int]:
    """Sort key of a judged order for the policy: (value, invalid), lowest least favourable."""
    if verdict == "invalid":
        return (0.0, 1)
    value = preference if np.isfinite(preference) else _AS_FIRST[verdict]
    return (value if policy_first else 1.0 - value, 0)


def _collapse_judgments(
    judgments: pd.DataFrame, system_of: Mapping[str, str], policy: str
) -> tuple[np.ndarray, pd.DataFrame, list[Finding]]:
    """Rows kept of the over-judged groups (module doc), the frame with verdicts set, findings."""
    key = ["judge", "response_first", "response_second"]
    repeated = judgments.duplicated(subset=key, keep=False).to_numpy()
    keep = np.ones(len(judgments), dtype=bool)
    if not repeated.any():
        return keep, judgments, []
    preference = (
        judgments["preference_first"].to_numpy(dtype=float)
        if "preference_first" in judgments
        else np.full(len(judgments), np.nan)
    )
    verdicts = judgments["verdict"].astype(object).to_numpy()
    contradicted: list[int] = []
    per_judge: dict[str, list[str]] = {}
    contradicted_by_judge: dict[str, int] = {}
    rows = np.flatnonzero(repeated)
    groups = judgments.iloc[rows].groupby(key, observed=True, sort=False).indices
    for (judge, first, second), positions in groups.items():
        members = rows[positions]
        keep[members] = False
        if system_of.get(first) == policy or system_of.get(second) == policy:
            policy_first = system_of.get(first) == policy
            chosen = min(members, key=lambda i: (_policy_value(verdicts[i], float(preference[i]), policy_first), i))
        else:
            chosen = members[0]
            same = {(verdicts[i], None if np.isnan(preference[i]) else preference[i]) for i in members}
            if len(same) > 1:
                contradicted.append(int(chosen))
                contradicted_by_judge[str(judge)] = contradicted_by_judge.get(str(judge), 0) + 1
        keep[chosen] = True
        per_judge.setdefault(str(judge), []).extend(f"{first}/{second}" for _ in members[1:])
    if contradicted:
        judgments = judgments.copy()
        values = verdicts.copy()
        values[contradicted] = "invalid"
        judgments["verdict"] = pd.Categorical(values, categories=sorted(set(values.tolist())))
        if "preference_first" in judgments:
            preference = preference.copy()
            preference[contradicted] = np.nan
            judgments["preference_first"] = preference
    findings = [
        Finding(
            "over_judged",
            _listed(sorted(set(pairs))),
            len(pairs),
            "one verdict per order",
            Verdict.PASS,
            f"judge {judge}: {len(pairs)} repeated judgment(s) of the same responses in the same order; the policy's "
            "contests keep the verdict least favourable to it"
            + (
                f", {contradicted_by_judge[judge]} contradicting repeat(s) elsewhere became invalid"
                if contradicted_by_judge.get(judge)
                else ""
            ),
        )
        for judge, pairs in per_judge.items()
    ]
    return keep, judgments, findings


def _merge_humans(study: Study, vignettes: Mapping[str, str], responses: Mapping[str, str]) -> dict:
    """The human tables with merged ids (module doc)."""
    out: dict = {}
    if study.human_ratings is not None:
        frame = study.human_ratings.frame.copy()
        frame["response_id"] = _recode(frame["response_id"], responses)
        key = ["response_id", "rater_id"]
        frame["score"] = frame.groupby(key, sort=False)["score"].transform("mean")
        keep = ~frame.duplicated(subset=key).to_numpy()
        out["human_ratings"] = _table(study.human_ratings, frame, keep, int((~keep).sum()))
    if study.human_pairs is not None:
        frame = study.human_pairs.frame.copy()
        for column, mapping in (("vignette_id", vignettes), ("response_a", responses), ("response_b", responses)):
            frame[column] = _recode(frame[column], mapping)
        a, b = frame["response_a"].astype(str), frame["response_b"].astype(str)
        swap = (a > b).to_numpy()
        label = frame["label"].astype(str).to_numpy().copy()
        label[swap] = np.where(label[swap] == "a", "b", np.where(label[swap] == "b", "a", label[swap]))
        key = pd.DataFrame({"low": np.where(swap, b, a), "high": np.where(swap, a, b), "rater": frame["rater_id"]})
        key["label"] = label
        agree = key.groupby(["low", "high", "rater"], sort=False)["label"].transform("nunique") == 1
        # contradicting labels of one pair by one rater: no preference (a tie)
        frame.loc[~agree.to_numpy(), "label"] = "tie"
        keep = (~key.duplicated(subset=["low", "high", "rater"]) & (key["low"] != key["high"])).to_numpy()
        out["human_pairs"] = _table(study.human_pairs, frame, keep, int((~keep).sum()))
    return out


def scan_evidence(
    study: Study,
    *,
    policy: str,
    opponent: str,
    judges: Sequence[str] = (),
    thresholds: Thresholds = THRESHOLDS,
) -> EvidenceScan:
    """Find copied evidence in ``study`` and merge it (module doc); ``policy``, ``opponent`` and
    ``judges`` are the names the claim reads (no judge named: every judge counts as read).

    Returns
    -------
    EvidenceScan
        The findings, the merged study (``study`` itself when nothing was merged) and ``study``.
    """
    findings: list[Finding] = []
    r = study.responses.frame
    norm = _normalized(r["text"])
    answers = pd.DataFrame(
        {"vignette_id": r["vignette_id"].astype(str), "system": r["system"].astype(str), "text": norm}
    )
    vignette_map, found = _vignette_map(study.vignettes.frame, thresholds, answers)
    findings += found
    vignette_of = _recode(r["vignette_id"], vignette_map)
    # the pool is part of the key: a held-out answer equal to a selection-pool one stays held out
    pool = r["pool"].astype(str) if "pool" in r else pd.Series("", index=r.index)
    codes, _ = pd.factorize(pd.MultiIndex.from_arrays([vignette_of.astype(str), r["system"].astype(str), pool, norm]))
    first = np.unique(codes, return_index=True)[1][codes]
    ids = r["response_id"].astype(str).to_numpy()
    copies = np.flatnonzero(first != np.arange(len(ids)))
    response_map = dict(zip(ids[copies].tolist(), ids[first[copies]].tolist()))
    systems = r["system"].astype(str).to_numpy()
    for system in sorted(set(systems[copies].tolist())):
        mine = copies[systems[copies] == system]
        findings.append(
            Finding(
                "duplicate_response",
                _listed(ids[mine].tolist()),
                int(mine.size),
                f"{np.unique(first[mine]).size} response(s)",
                Verdict.PASS,
                f"{system}: {mine.size} response id(s) repeat the text of an earlier response on the same vignette",
            )
        )
    merged = study
    if vignette_map or response_map:
        kept = np.ones(len(r), dtype=bool)
        kept[copies] = False
        frame = r.assign(vignette_id=vignette_of)
        tables: dict = {"responses": _table(study.responses, frame, kept, int(copies.size))}
        v = study.vignettes.frame
        keep_v = ~v["vignette_id"].astype(str).isin(set(vignette_map)).to_numpy()
        tables["vignettes"] = _table(study.vignettes, v, keep_v, int((~keep_v).sum()))
        j = study.judgments.frame.copy()
        j["vignette_id"] = _recode(j["vignette_id"], vignette_map)
        for column in ("response_first", "response_second"):
            j[column] = _recode(j[column], response_map)
        same = (j["response_first"].astype(str) == j["response_second"].astype(str)).to_numpy()
        system_of = dict(zip(ids.tolist(), systems.tolist()))
        keep_j, j, found = _collapse_judgments(j, system_of, policy)
        keep_j &= ~same
        if same.any():
            found.append(
                Finding(
                    "over_judged",
                    (),
                    int(same.sum()),
                    None,
                    Verdict.PASS,
                    f"{int(same.sum())} judgment(s) compared a response with a copy of itself: left out",
                )
            )
        findings += found
        tables["judgments"] = _table(study.judgments, j, keep_j, int((~keep_j).sum()))
        tables |= _merge_humans(study, vignette_map, response_map)
        merged = replace(study, **tables)
    by_id = pd.Series(norm, index=ids)
    scan = EvidenceScan(tuple(findings), merged, study, by_id if by_id.index.is_unique else None)
    extra = [f for detect in STUDY_DETECTORS for f in detect(scan, policy, opponent, tuple(judges))]
    return replace(scan, findings=(*scan.findings, *extra))


def confusable_names(scan: EvidenceScan, policy: str, opponent: str, judges: tuple[str, ...]) -> list[Finding]:
    """System and judge names of the study that read alike (:func:`confusable_groups`): FAIL when
    a name the claim reads is among them, WARN otherwise."""
    raw = scan.raw
    systems = set(raw.responses.frame["system"].astype(str))
    all_judges = set(raw.judgments.frame["judge"].astype(str))
    read = {policy, opponent, *(judges or all_judges)}
    found = []
    for group in confusable_groups(sorted(systems | all_judges)):
        claim = read & set(group)
        found.append(
            Finding(
                "confusable_names",
                group,
                len(group),
                None,
                Verdict.FAIL if claim else Verdict.WARN,
                (
                    f"the claim reads {', '.join(sorted(claim))}: the audit may be reading the wrong system's rows"
                    if claim
                    else "names that read alike in reports"
                )
                + " ("
                + "; ".join(f"{name!r} = {name.encode('unicode_escape').decode()}" for name in group)
                + ")",
            )
        )
    return found


#: Detectors run on the study (after the merge): (scan, policy, opponent, judges) -> findings.
STUDY_DETECTORS: tuple[Callable[[EvidenceScan, str, str, tuple[str, ...]], list[Finding]], ...] = (confusable_names,)


def _gate_interval(context: AuditContext) -> tuple[str, str]:
    """The interval the check compares: the bar gate's (the policy seed's new-vignette one for a
    claim about new seeds; ``bayes_logit_normal`` where the gate reads one the win-rate table does
    not give, such as ``composed``)."""
    from honestci.audit.stats.frequentist.winrate import ALL_METHODS

    population = context.claim.spec.population
    method, population = context.contest_method, population if population in VIGNETTE_POPULATIONS else "new_vignettes"
    if method not in ALL_METHODS:
        return "bayes_logit_normal", "new_vignettes"
    return method, population


def _verdict_if_lost(
    context: AuditContext, given: ContestTable, rest: ContestTable, lost_vignettes: np.ndarray, share: float
) -> tuple[Verdict, str, bool]:
    """What counting one lost contest per entry of ``lost_vignettes`` (beside ``rest``, the claim's
    contests ``given`` without them) does to the bar gate: FAIL when its verdict changes from the
    one on ``given`` (they alone could decide the release), WARN when ``share`` is above
    ``evidence_merged_share_warn``, PASS otherwise; with the method and CI-low said, and whether
    they decide."""
    thresholds, bar = context.claim.thresholds, context.claim.spec.bar
    method, population = _gate_interval(context)
    as_given = _claim_row(context, method, population) if given is context.contests else None
    if as_given is None:
        as_given = _gate_row(given, context, method, population)
    as_lost = _gate_row(rest, context, method, population, (np.zeros(lost_vignettes.size), lost_vignettes))

    def low(row) -> float | None:
        return None if row is None or not row.reportable else float(row.ci_low)

    low_given, lost = low(as_given), low(as_lost)
    decides = low_given is not None and lost is not None and clears_bar(low_given, bar) != clears_bar(lost, bar)
    verdict = (
        Verdict.FAIL if decides else Verdict.WARN if share > thresholds.evidence_merged_share_warn else Verdict.PASS
    )
    shown = "none" if lost is None else f"{lost:.3f}"
    said = f"{method} CI-low {shown} with each counted as a contest lost by the policy (bar {bar:g})"
    return verdict, said + (": they alone could decide the release" if decides else ""), decides


def _claim_responses(context: AuditContext) -> np.ndarray:
    """Which rows of the responses are the claim's policy's (in its pool and families, when it
    names them)."""
    spec, r = context.claim.spec, context.study.responses.frame
    mine = (r["system"].astype(str) == spec.policy).to_numpy()
    if spec.pool is not None and "pool" in r:
        mine = mine & (r["pool"].astype(str) == spec.pool).to_numpy()
    if spec.vignette_families is not None:
        v = context.study.vignettes.frame
        chosen = (
            set(v.loc[v["family"].isin(spec.vignette_families), "vignette_id"].astype(str)) if "family" in v else set()
        )
        mine = mine & r["vignette_id"].astype(str).isin(chosen).to_numpy()
    return mine


def unjudged_responses(context: AuditContext) -> list[Finding]:
    """The claim's policy responses that no judgment of the claim's judges reads. Left out whole, a
    contest the policy lost leaves no trace in the judgments (no missing order to count), but its
    response stays in the generation record. Each counts as one contest lost by the policy on its
    vignette (:func:`_verdict_if_lost`). A response judged against another system counts as
    judged: what a contest was for is not in the data."""
    contests, study = context.contests, context.study
    if contests is None:
        return []
    r = study.responses.frame
    j = study.judgments.frame
    read = j[j["judge"].astype(str).isin(set(contests.panel or (contests.judge,))).to_numpy()]
    judged = set(read["response_first"].astype(str)) | set(read["response_second"].astype(str))
    ids = r["response_id"].astype(str)
    unjudged = _claim_responses(context) & ~ids.isin(judged).to_numpy()
    if not unjudged.any():
        return []
    count = int(unjudged.sum())
    share = count / (len(contests.frame) + count)
    vignettes = r.loc[unjudged, "vignette_id"].astype(str).to_numpy()
    verdict, said, decides = _verdict_if_lost(context, contests, contests, vignettes, share)
    return [
        Finding(
            "unjudged_responses",
            _listed(ids[unjudged].tolist()),
            count,
            None,
            verdict,
            f"{count} response(s) of {context.claim.spec.policy} ({share:.1%} of its contests with them) judged by "
            f"none of {', '.join(contests.panel or (contests.judge,))}: {said}" + ("; judge them" if decides else ""),
        )
    ]


def other_system_rows(context: AuditContext) -> list[Finding]:
    """The claim's policy responses whose normalised text is an opponent response on the same
    vignette. Independent models do give the same answer (a quotation, a one-word extraction,
    ``<noinput>``: 2 of PandaLM's 111 llama-7b/bloom-7b contests, 3 of AlpacaEval 2.0's 805 for one
    pair), and so does a copy of the opponent's rows under the policy's name, which turns the
    policy's losses into ties. Their contests count as lost by the policy
    (:func:`_verdict_if_lost`): FAIL only when that changes the bar verdict."""
    contests, spec = context.contests, context.claim.spec
    if contests is None:
        return []
    r = context.study.responses.frame

    known = None if context.evidence is None else context.evidence.normalized_answers

    def side(rows: np.ndarray) -> pd.DataFrame:
        ids = r.loc[rows, "response_id"].astype(str).to_numpy()
        text = _normalized(r.loc[rows, "text"]) if known is None else known.reindex(ids).to_numpy()
        return pd.DataFrame(
            {"vignette_id": r.loc[rows, "vignette_id"].astype(str).to_numpy(), "text": text, "response_id": ids}
        )

    theirs = side((r["system"].astype(str) == spec.opponent).to_numpy())
    both = side(_claim_responses(context)).merge(theirs[["vignette_id", "text"]].drop_duplicates())
    hit = contests.frame["policy_response"].astype(str).isin(set(both["response_id"])).to_numpy()
    if not hit.any():
        return []
    rows = contests.frame.loc[hit, ["vignette_id", "policy_response", "opponent_response"]].astype(str)
    lost = rows.drop_duplicates(["policy_response", "opponent_response"])["vignette_id"].to_numpy()
    ids = set(rows["policy_response"])  # those the claim's contests read
    rest = contests.where(lambda frame: ~frame["policy_response"].astype(str).isin(ids).to_numpy(), "other_system_rows")
    share = lost.size / max(len(contests.frame), 1)
    verdict, said, _ = _verdict_if_lost(context, contests, rest, lost, share)
    return [
        Finding(
            "other_system_rows",
            _listed(sorted(ids)),
            len(ids),
            None,
            verdict,
            f"{len(ids)} response(s) of {spec.policy} repeat a response of {spec.opponent} on the same vignette "
            f"({lost.size} contest(s), {share:.1%}): {said}",
        )
    ]


#: Detectors run on the audit context (its contests built from the merged study) -> findings; the
#: place for one that reads the contests.
CONTEST_DETECTORS: tuple[Callable[[AuditContext], list[Finding]], ...] = (other_system_rows, unjudged_responses)


# --- the check -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvidenceCheck:
    """The findings table and the bar gate's CI-low on merged and on unmerged evidence.

    ``method``/``population``: the interval compared (the policy's gate interval, or
    ``bayes_logit_normal`` when the gate reads one the win-rate table does not give). A CI-low is
    None where that interval has no honest bound; ``n_clusters_*`` say how many vignettes each had.
    """

    findings: tuple[Finding, ...]
    method: str
    population: str
    bar: float
    n_contests_merged: int
    n_contests_unmerged: int
    n_clusters_merged: int
    n_clusters_unmerged: int
    ci_low_merged: float | None
    ci_low_unmerged: float | None

    @property
    def merged_share(self) -> float:
        """Share of the claim's unmerged contests that merging removed."""
        removed = self.n_contests_unmerged - self.n_contests_merged
        return removed / self.n_contests_unmerged if self.n_contests_unmerged else 0.0

    def to_frame(self) -> pd.DataFrame:
        """The findings table: kind, items, count, merged_into, verdict, detail."""
        return pd.DataFrame(
            [f.as_row() for f in self.findings], columns=["kind", "items", "count", "merged_into", "verdict", "detail"]
        )

    def report_section(self) -> ReportSection:
        def low(value: float | None) -> str:
            return "none" if value is None else f"{value:.3f}"

        lines = (
            f"{len(self.findings)} finding(s); the claim's contests: {self.n_contests_unmerged} as given, "
            f"{self.n_contests_merged} merged ({self.n_clusters_unmerged} and {self.n_clusters_merged} vignettes)",
            f"{self.method} ({self.population}) CI-low: {low(self.ci_low_unmerged)} as given, "
            f"{low(self.ci_low_merged)} merged (bar {self.bar:g}); every interval of the audit reads the merged evidence",
        )
        return ReportSection("evidence", "Evidence integrity", lines, tuple(f.as_row() for f in self.findings))


def _gate_row(
    contests: ContestTable,
    context: AuditContext,
    method: str,
    population: str,
    added: tuple[np.ndarray, np.ndarray] | None = None,
):
    """The ``method`` interval of ``contests`` (None when it cannot be estimated), with the
    contests ``added`` (their scores, their vignettes) scored beside them."""
    from honestci.audit.stats.frequentist.winrate import winrate_table

    scored = contests.scores("both_orders", invalid=context.claim.policy.invalid_verdicts)
    values, clusters = scored.values, scored.clusters
    if added is not None:
        values = np.concatenate([values, added[0]])
        clusters = np.concatenate([clusters.astype(object), added[1].astype(object)])
    thresholds = context.claim.thresholds
    try:
        table = winrate_table(
            values,
            clusters,
            methods=(method,),
            level=thresholds.confidence_level,
            seed=context.seed,
            thresholds=thresholds,
            trials_per_contest=contests.trials_per_contest,
        )
        return table.get(method, population)
    except (EstimationError, InputError, KeyError):
        return None


def _claim_row(context: AuditContext, method: str, population: str):
    """The ``method`` interval of the claim's contests as the audit computed it (None where its
    table lacks it): no check computes it again."""
    try:
        return None if context.intervals is None else context.intervals.get(method, population)
    except KeyError:
        return None


def evidence_check(context: AuditContext) -> EvidenceCheck | None:
    """The findings of the audit's :class:`EvidenceScan` and of :data:`CONTEST_DETECTORS`, with the
    bar gate's CI-low on the merged and the unmerged contests (None before anything is judged)."""
    scan, contests = context.evidence, context.contests
    if scan is None or contests is None:
        return None
    method, population = _gate_interval(context)
    unmerged = context.unmerged_contests if context.unmerged_contests is not None else contests
    merged_row = _claim_row(context, method, population)
    if merged_row is None:
        merged_row = _gate_row(contests, context, method, population)
    unmerged_row = merged_row if unmerged is contests else _gate_row(unmerged, context, method, population)

    def low(row) -> float | None:
        return None if row is None or not row.reportable else float(row.ci_low)

    findings = (*scan.findings, *(f for detect in CONTEST_DETECTORS for f in detect(context)))
    return EvidenceCheck(
        findings,
        method,
        population,
        context.claim.spec.bar,
        n_contests_merged=len(contests.frame),
        n_contests_unmerged=len(unmerged.frame),
        n_clusters_merged=int(contests.frame["vignette_id"].nunique()),
        n_clusters_unmerged=int(unmerged.frame["vignette_id"].nunique()),
        ci_low_merged=low(merged_row),
        ci_low_unmerged=low(unmerged_row),
    )
