"""The property test's edits (tests/test_evidence_property.py) at random: how many lift the bar gate to
PASS, and which required gates block them (docs/methods.md, "Evidence integrity").

Usage: python bench/evidence_attacks.py N   (run from the repository root; seed 20261206)
"""

import collections
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, "tests")
import numpy as np
import test_evidence_property as t

from honestci.audit.errors import HonestCIError
from honestci.audit.pipeline import run_audit
from honestci.audit.policy import Verdict

root = Path(tempfile.mkdtemp())
base = run_audit(t.write(root / "base", t.BASE, 0.5), policy=t.AUDITOR, bayes=False)
low = next(g for g in base.gates if g.name == "ci_low_clears_bar").evidence["ci_low"]
bar = low + 0.02
rng = np.random.default_rng(20261206)
EDITS = [
    lambda r: (t.drop_lost_orders, float(r.uniform(0.3, 1))),
    lambda r: (t.drop_lost_contests, float(r.uniform(0.3, 1))),
    lambda r: (t.copy_vignettes, float(r.uniform(0.2, 1)), str(r.choice(["exact", "respaced", "one_word"]))),
    lambda r: (t.copy_won_contests, int(r.integers(1, 4))),
    lambda r: (t.move_lost_to_look_alike, float(r.uniform(0.3, 1)), str(r.choice([t.POLICY, t.OPPONENT]))),
    lambda r: (t.copy_opponent_into_lost, float(r.uniform(0.3, 1))),
]
n = int(sys.argv[1])
lifted, exits, blockers = 0, collections.Counter(), collections.Counter()
for k in range(n):
    edits = [EDITS[int(rng.integers(len(EDITS)))](rng) for _ in range(int(rng.integers(1, 4)))]
    claim = t.write(root / f"e{k}", t._edited(edits, int(rng.integers(2**16))), bar)
    try:
        result = run_audit(claim, policy=t.AUDITOR, bayes=False)
    except HonestCIError:
        exits[2] += 1
        continue
    exits[result.exit_code()] += 1
    gates = {g.name: g.verdict for g in result.gates}
    if gates["ci_low_clears_bar"] == Verdict.PASS:
        lifted += 1
        blockers.update(name for name in t.AUDITOR.required_gates if gates.get(name) != Verdict.PASS)
print(
    f"base CI-low {low:.3f}, bar {bar:.3f}; {n} edited studies: bar gate lifted to PASS in {lifted}; exits {dict(exits)}; blocked by {dict(blockers)}"
)
