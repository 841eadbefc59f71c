"""What a CI system reads from an audit: a JUnit XML file with one testcase per gate, and a
GitHub Actions job summary in Markdown. Both read the report model (``verdict.json``), so they
say what the reports say.

JUnit mapping (the build goes red exactly when ``honestci audit`` exits 1):

* a gate that PASSes: a plain testcase;
* a blocking WARN or FAIL: ``<failure type="FAIL" message="reason">``;
* a blocking INCONCLUSIVE, run or not: ``<error type="INCONCLUSIVE" ...>`` (the audit could not
  decide, which blocks a release as a failure does);
* a gate that does not block (not required, or an INCONCLUSIVE that ran under
  ``--allow-inconclusive``) and does not PASS: ``<skipped message="not blocking: VERDICT: reason">``.

The element and attribute rules are those of the JUnit XML schema Jenkins reads (tests/reference/junit.xsd).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from honestci.reports.markdown import md

#: The testcase ``classname`` of every gate.
GATE_CLASS = "honestci.gates"


def _verdict_text(row: dict[str, Any]) -> str:
    """The gate's verdict, marked when the gate did not run (unless its message says so)."""
    not_run = not row.get("ran", True) and not row["message"].startswith("not run")
    return f"{row['verdict']} (not run)" if not_run else row["verdict"]


def _reason(row: dict[str, Any]) -> str:
    return f"{_verdict_text(row)}: {row['message']}"


def junit_xml(data: dict[str, Any]) -> str:
    """The report ``data`` as JUnit XML: one testsuite, one testcase per gate (see the module)."""
    claim = data["claim"]
    blocking = {row["gate"]: row for row in data.get("blocking_gates", [])}
    gates = list(data["gates"])
    # A required gate with no result at all still appears, as the error that blocked.
    gates += [row for name, row in blocking.items() if name not in {g["gate"] for g in gates}]
    suite = ET.Element("testsuite", name=f"honestci audit: {claim['name']}")
    properties = ET.SubElement(suite, "properties")
    policy = data.get("audit_policy") or {}
    for name, value in (
        ("verdict", data["verdict"]),
        ("exit_code", data.get("exit_code")),
        ("claim", claim.get("path")),
        ("bar", claim["bar"]),
        ("population", claim["population"]),
        ("gate_method", data.get("gate_method")),
        ("policy", policy.get("name")),
        ("policy_sha256", policy.get("sha256")),
    ):
        if value is not None:
            ET.SubElement(properties, "property", name=name, value=str(value))
    counts = {"failure": 0, "error": 0, "skipped": 0}
    for row in gates:
        case = ET.SubElement(suite, "testcase", name=row["gate"], classname=GATE_CLASS)
        reason = _reason(row)
        if row["gate"] in blocking:
            kind = "error" if row["verdict"] == "INCONCLUSIVE" else "failure"
        elif row["verdict"] != "PASS":
            kind, reason = "skipped", f"not blocking: {reason}"
        else:
            continue
        counts[kind] += 1
        element = ET.SubElement(case, kind, type=row["verdict"], message=reason)
        element.text = reason
    out = ET.SubElement(suite, "system-out")
    out.text = verdict_line(data)
    suite.set("tests", str(len(gates)))
    suite.set("failures", str(counts["failure"]))
    suite.set("errors", str(counts["error"]))
    suite.set("skipped", str(counts["skipped"]))
    root = ET.Element(
        "testsuites",
        name="honestci",
        tests=str(len(gates)),
        failures=str(counts["failure"]),
        errors=str(counts["error"]),
    )
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def verdict_line(data: dict[str, Any]) -> str:
    """The one line that ends the console output: the verdict, the exit code and what blocks."""
    blocking = [row["gate"] for row in data.get("blocking_gates", [])]
    tail = f"; blocked by {', '.join(blocking)}" if blocking else ""
    return f"verdict: {data['verdict']} (exit {data.get('exit_code')}){tail}"


def step_summary(data: dict[str, Any]) -> str:
    """A GitHub Actions job summary (Markdown): the verdict, and the blocking gates with their reasons."""
    claim = data["claim"]
    exit_code = data.get("exit_code")
    outcome = "release allowed" if exit_code == 0 else "release blocked"
    lines = [
        f"### honestci audit: {md(claim['name'])}: {md(data['verdict'])} ({outcome}, exit {exit_code})",
        "",
        f"Claim: {md(claim['policy'])} vs {md(claim['opponent'])}, bar {claim['bar']} on {md(claim['population'])}.",
        "",
    ]
    blocking = data.get("blocking_gates", [])
    if blocking:
        lines += ["| blocking gate | verdict | reason |", "| --- | --- | --- |"]
        lines += [f"| {md(row['gate'])} | {md(_verdict_text(row))} | {md(row['message'])} |" for row in blocking]
    else:
        lines.append("No required gate blocks the release.")
    return "\n".join(lines) + "\n\n"


__all__ = ["GATE_CLASS", "junit_xml", "step_summary", "verdict_line"]
