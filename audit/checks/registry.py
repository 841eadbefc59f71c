"""The checks of the audit, explicitly and in order (evidence integrity, invalid verdicts, calibration, position bias,
panel of judges, length bias, populations by vignette family, systems compared, training seeds, winner's curse,
leakage, composed interval, training health).

The audit runs every check of :data:`CHECKS` on the
:class:`honestci.audit.checks.context.AuditContext`, stores the results in ``context.checks[key]``
for the gates of :mod:`honestci.audit.gates` to read, and puts each result's ``report_section()``
into the report in this order. A check that does not apply to a claim (its inputs are absent)
returns ``None`` and its gate reports INCONCLUSIVE ("not run: needs …").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from honestci.audit.checks.calibration import calibration_check
from honestci.audit.checks.composed import composed_check
from honestci.audit.checks.context import AuditContext, CheckFailed
from honestci.audit.checks.evidence import evidence_check
from honestci.audit.checks.leakage import leakage_check
from honestci.audit.checks.length_bias import length_bias_check
from honestci.audit.checks.panel import panel_check
from honestci.audit.checks.populations import populations_check
from honestci.audit.checks.position_bias import position_bias_check
from honestci.audit.checks.seeds import seeds_check
from honestci.audit.checks.selection import winners_curse_check
from honestci.audit.checks.systems import systems_check
from honestci.audit.checks.training_health import training_health_check
from honestci.audit.checks.verdicts import valid_verdicts_check
from honestci.audit.errors import EstimationError

#: (key in ``context.checks``, check); the order is the order of the report's sections.
CHECKS: tuple[tuple[str, Callable[[AuditContext], Any]], ...] = (
    ("evidence", evidence_check),
    ("valid_verdicts", valid_verdicts_check),
    ("calibration", calibration_check),
    ("position_bias", position_bias_check),
    ("panel", panel_check),
    ("length_bias", length_bias_check),
    ("populations", populations_check),
    ("systems", systems_check),
    ("seeds", seeds_check),
    ("winners_curse", winners_curse_check),
    ("leakage", leakage_check),
    # after winners_curse and leakage: it reads both
    ("composed", composed_check),
    ("training_health", training_health_check),
)


def run_checks(context: AuditContext) -> dict[str, Any]:
    """Run every check of :data:`CHECKS` in order; the value is None where a check does not apply,
    and a :class:`CheckFailed` where the data admit no trustworthy estimate (its gate then did not
    run). Any other exception is a bug and propagates."""
    results: dict[str, Any] = {}
    for key, check in CHECKS:
        try:
            results[key] = check(context)
        except EstimationError as error:
            results[key] = CheckFailed(key, str(error))
        context.checks[key] = results[key]  # a later check may read an earlier one (composed)
    return results
