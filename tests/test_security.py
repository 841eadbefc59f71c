"""Security: safe YAML only, no unsafe deserialisation anywhere in the code, model text escaped in
HTML, API keys never in logs or reports, claim data paths confined to the claim's folder, and
output faults (unwritable folder, full disk) that fail cleanly without touching the last report."""

from __future__ import annotations

import errno
import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from synthetic_study import claim_dict, study_rows, write_study

from honestci.audit.cli import main
from honestci.audit.data.claims import load_claim
from honestci.audit.errors import ClaimError, InputError

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Code that ships or runs jobs (tests are not scanned: they may build hostile inputs on purpose).
SCANNED = ("audit", "judges", "reports", "fixtures", "training", "bench", "scripts")

# --- safe YAML ---------------------------------------------------------------------------------


def test_claim_loader_uses_a_safe_loader_and_runs_nothing(tmp_path):
    from honestci.audit.data import yaml_io

    assert issubclass(yaml_io.StrictSafeLoader, yaml.SafeLoader)
    marker = tmp_path / "pwned"
    folder = write_study(tmp_path / "study").parent
    for payload in (
        f"!!python/object/apply:os.system ['touch {marker}']\n",
        f"name: !!python/object/apply:subprocess.check_output [['touch', '{marker}']]\n",
        "name: !!python/name:os.system\n",
        "name: !!python/object/new:builtins.exec ['1']\n",
    ):
        (folder / "claim.yaml").write_text(claim_yaml_without_name() + payload)
        with pytest.raises(ClaimError, match="not valid YAML"):
            load_claim(folder / "claim.yaml")
    assert not marker.exists()


def claim_yaml_without_name() -> str:
    claim = claim_dict()
    del claim["name"]
    return yaml.safe_dump(claim, sort_keys=False)


def test_merge_keys_still_work_and_duplicates_do_not(tmp_path):
    folder = write_study(tmp_path / "study").parent
    base = claim_yaml_without_name()
    (folder / "claim.yaml").write_text(base + "name: merged\nthresholds:\n  <<: {min_clusters: 6}\n")
    assert load_claim(folder / "claim.yaml").thresholds.min_clusters == 6
    (folder / "claim.yaml").write_text(base + "name: a\nname: b\n")
    with pytest.raises(ClaimError, match="duplicate key 'name'"):
        load_claim(folder / "claim.yaml")


# --- no unsafe deserialisation or evaluation in the code -----------------------------------------

#: (pattern of the call, pattern on the same line that makes it safe, what it catches).
UNSAFE_PATTERNS = (
    (
        r"\bpickle\.loads?\(|\bcPickle\.|\bdill\.loads?\(|\bjoblib\.load\(|\bread_pickle\(",
        None,
        "pickle deserialisation",
    ),
    (r"\bmarshal\.loads?\(|\bshelve\.open\(", None, "marshal/shelve deserialisation"),
    (r"\btorch\.load\(", r"weights_only\s*=\s*True", "torch.load without weights_only=True"),
    (r"\byaml\.load\(", r"Loader\s*=\s*\w*SafeLoader\b", "yaml.load without a SafeLoader"),
    (
        r"\byaml\.(unsafe_load|full_load|load_all)\(|Loader\s*=\s*yaml\.(Loader|UnsafeLoader|FullLoader)\b",
        None,
        "an unsafe YAML loader",
    ),
    (r"(?<![\w.])eval\(", None, "eval()"),
    (r"(?<![\w.])exec\(", None, "exec()"),
    (r"allow_pickle\s*=\s*True", None, "numpy allow_pickle=True"),
    (r"trust_remote_code\s*=\s*True", None, "trust_remote_code=True"),
    (r"shell\s*=\s*True", None, "subprocess with shell=True"),
)


def unsafe_calls(text: str, name: str = "<text>") -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        code = line.split("#", 1)[0]
        for pattern, unless, what in UNSAFE_PATTERNS:
            if re.search(pattern, code) and not (unless and re.search(unless, code)):
                found.append(f"{name}:{number}: {what}: {line.strip()}")
    return found


def test_the_scanner_finds_what_it_looks_for():
    # Positive control: each pattern must fire on a bad line and stay quiet on its safe form.
    bad = [
        "data = pickle.load(handle)",
        "state = torch.load(path)",
        "raw = yaml.load(text)",
        "raw = yaml.load(text, Loader=yaml.Loader)",
        "value = eval(expression)",
        "exec(code)",
        "arr = np.load(path, allow_pickle=True)",
        "m = AutoModel.from_pretrained(p, trust_remote_code=True)",
        "subprocess.run(cmd, shell=True)",
        "frame = pd.read_pickle(path)",
    ]
    safe = [
        "state = torch.load(path, weights_only=True)",
        "raw = yaml.load(f.read(), Loader=StrictSafeLoader)",
        "model.eval()",
        "raw = yaml.safe_load(text)",
        "frame = pd.read_parquet(path)",
    ]
    assert all(unsafe_calls(line) for line in bad), [line for line in bad if not unsafe_calls(line)]
    assert not any(unsafe_calls(line) for line in safe)


def test_no_unsafe_deserialisation_or_eval_in_the_code():
    files = [
        path
        for folder in SCANNED
        if (REPO_ROOT / folder).is_dir()
        for path in sorted((REPO_ROOT / folder).rglob("*.py"))
    ]
    assert len(files) > 20  # the scan really covers the package
    found = [
        hit
        for path in files
        for hit in unsafe_calls(path.read_text(encoding="utf-8"), str(path.relative_to(REPO_ROOT)))
    ]
    assert not found, "\n".join(found)


# --- model and user text is escaped in the HTML report ---------------------------------------------

PAYLOADS = ("<script>alert('xss')</script>", '"><img src=x onerror=alert(1)>', "--><svg onload=alert(2)><!--")


def _hostile_study(tmp_path: Path) -> Path:
    """A study whose texts, ids and system names carry HTML/script payloads."""
    rows = study_rows()
    for i, vignette in enumerate(rows["vignettes"]):
        vignette["text"] = f"{PAYLOADS[i % 3]} scenario {i}"
    for response in rows["responses"]:
        response["text"] = PAYLOADS[1] + response["text"]
    for table in ("vignettes", "responses", "judgments"):  # a vignette id that is markup
        for row in rows[table]:
            if row.get("vignette_id") == "v0":
                row["vignette_id"] = PAYLOADS[2]
    policy = "policy" + PAYLOADS[0]
    for response in rows["responses"]:
        if response["system"] == "policy-m":
            response["system"] = policy
    claim = claim_dict(
        policy=policy,
        name="claim " + PAYLOADS[1],
        claimed={"point": 0.7, "n": 32, "ci_low": 0.6, "method": PAYLOADS[0]},
    )
    return write_study(tmp_path / "study", rows, claim)


def _markup_counts(html: str) -> dict[str, int]:
    """Live markup a payload could create: script/img tags, and any tag with an on* handler."""
    lower = html.lower()
    return {
        "<script": lower.count("<script"),
        "<img": lower.count("<img"),
        "handler": len(re.findall(r"<[a-z][^<>]*\son\w+\s*=", lower)),
    }


def test_every_model_and_user_text_is_escaped_in_html(tmp_path):
    from honestci.audit.report_model import Report
    from honestci.reports.render import render

    result = CliRunner().invoke(
        main, ["audit", str(_hostile_study(tmp_path)), "--out", str(tmp_path / "out"), "--no-bayes"]
    )
    assert result.exit_code in (0, 1), result.output
    data = json.loads((tmp_path / "out" / "verdict.json").read_text())
    # Payloads also in free text the audit itself writes: gate messages and report sections.
    data["gates"][0]["message"] = PAYLOADS[0]
    data["sections"] = [
        {"key": "x", "title": PAYLOADS[1], "lines": [PAYLOADS[0]], "table": [{PAYLOADS[2]: PAYLOADS[1]}]}
    ]
    html = render(Report.from_dict(data), "html")
    clean = render(
        Report.from_dict(json.loads((tmp_path / "out" / "verdict.json").read_text()) | {"sections": []}), "html"
    )
    baseline = _markup_counts(render(Report.from_dict(_plain_report(data)), "html"))
    assert _markup_counts(html) == baseline, "model text reached the HTML as markup"
    assert _markup_counts(clean) == baseline
    assert "&lt;script&gt;alert(" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    written = (tmp_path / "out" / "report.html").read_text()
    assert _markup_counts(written) == baseline and "&lt;script&gt;" in written


def _plain_report(data: dict) -> dict:
    """The same report with every payload removed (the template's own markup, for comparison)."""
    text = json.dumps(data)
    for payload in PAYLOADS:
        text = text.replace(json.dumps(payload)[1:-1], "plain")
    return json.loads(text)


# --- secrets never in logs or reports --------------------------------------------------------------

SECRET = "sk-honestci-marker-3f9c2a7e-never-log"


def test_api_key_is_never_in_audit_output_or_report(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    result = CliRunner().invoke(
        main, ["audit", str(write_study(tmp_path / "study")), "--out", str(tmp_path / "out"), "--no-bayes"]
    )
    assert result.exit_code in (0, 1), result.output
    assert SECRET not in result.output and SECRET not in result.stderr
    for path in (tmp_path / "out").iterdir():
        assert SECRET.encode() not in path.read_bytes(), path


def test_api_key_is_never_in_judge_command_logs_or_files(tmp_path, monkeypatch):
    # The library-level check (run_judging, cache, repr) is in test_judges_http.py; this one runs
    # the `honestci judge` command, so its stdout/stderr (the logs) are covered too.
    from honestci.judges.stub_server import StubConfig, StubJudgeServer, write_stub_study

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    study = write_stub_study(tmp_path / "in", n_contests=4)
    with StubJudgeServer(StubConfig(fault_rates={"500": 0.3}, seed=3)) as server:
        result = CliRunner().invoke(
            main,
            [
                "judge",
                str(study["contests"]),
                "--vignettes",
                str(study["vignettes"]),
                "--responses",
                str(study["responses"]),
                "--out",
                str(tmp_path / "out" / "judgments.jsonl"),
                "--base-url",
                server.base_url,
                "--model",
                "stub-judge",
                "--max-retries",
                "4",
                "--backoff-base",
                "0.001",
                "--backoff-cap",
                "0.01",
                "--timeout",
                "2",
                "--no-progress",
            ],
        )
        assert server.authorizations == {f"Bearer {SECRET}"}  # the key was used...
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output and SECRET not in result.stderr  # ...but never logged
    for path in (tmp_path / "out").iterdir():
        assert SECRET.encode() not in path.read_bytes(), path


# --- data paths stay in the claim's folder -------------------------------------------------------


def test_data_outside_the_folder_needs_the_flag(tmp_path):
    elsewhere = write_study(tmp_path / "elsewhere").parent
    claim = claim_dict(data={t: str(elsewhere / f"{t}.jsonl") for t in ("vignettes", "responses", "judgments")})
    path = tmp_path / "claims" / "claim.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(claim))
    with pytest.raises(ClaimError, match="resolves outside the claim's folder"):
        load_claim(path)
    assert load_claim(path, allow_outside=True).data_paths["judgments"] == elsewhere / "judgments.jsonl"
    result = CliRunner().invoke(
        main, ["audit", str(path), "--out", str(tmp_path / "out"), "--no-bayes", "--allow-outside-data"]
    )
    assert result.exit_code in (0, 1), result.output


def test_symlinks_are_judged_by_their_target(tmp_path):
    # Decision (docs/claims.md): a data path is resolved, symlinks included, before the check; a
    # link inside the folder to a file inside it is fine, a link that leads outside is refused.
    folder = write_study(tmp_path / "study").parent
    (folder / "data").mkdir()
    (folder / "judgments.jsonl").rename(folder / "data" / "judgments.jsonl")
    (folder / "judgments.jsonl").symlink_to(folder / "data" / "judgments.jsonl")
    assert load_claim(folder / "claim.yaml").data_paths["judgments"] == (folder / "data" / "judgments.jsonl")
    (folder / "judgments.jsonl").unlink()
    (folder / "judgments.jsonl").symlink_to(Path("/etc/hostname"))
    with pytest.raises(ClaimError, match="'judgments.jsonl' resolves outside the claim's folder"):
        load_claim(folder / "claim.yaml")
    (folder / "linked-folder").symlink_to(tmp_path, target_is_directory=True)
    (folder / "claim.yaml").write_text(
        yaml.safe_dump(
            claim_dict(
                data={
                    "vignettes": "linked-folder/study/vignettes.jsonl",
                    "responses": "responses.jsonl",
                    "judgments": "linked-folder/../../etc/passwd",
                }
            )
        )
    )
    with pytest.raises(ClaimError) as info:
        load_claim(folder / "claim.yaml")
    assert "linked-folder/../../etc/passwd' resolves outside" in str(info.value)


# --- output faults ----------------------------------------------------------------------------------


def test_output_folder_under_a_file_is_a_clean_exit_2(tmp_path):
    # Permission bits do not stop root, so an unwritable folder is simulated by a parent that is a file.
    (tmp_path / "blocker").write_text("a file where a folder should be")
    result = CliRunner().invoke(
        main, ["audit", str(write_study(tmp_path / "study")), "--out", str(tmp_path / "blocker" / "out"), "--no-bayes"]
    )
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Cannot write into" in result.stderr and "blocker" in result.stderr
    assert "Traceback" not in result.output


def test_full_disk_is_a_clean_exit_2_and_the_previous_report_stays(tmp_path, monkeypatch):
    from honestci.reports import writing

    claim = str(write_study(tmp_path / "study"))
    out = tmp_path / "out"
    assert CliRunner().invoke(main, ["audit", claim, "--out", str(out), "--no-bayes"]).exit_code in (0, 1)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (Path(claim).parent / "claim.yaml").write_text(yaml.safe_dump(claim_dict(bar=0.2)))

    def full_disk(*_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writing.os, "fsync", full_disk)
    result = CliRunner().invoke(main, ["audit", claim, "--out", str(out), "--no-bayes"])
    assert result.exit_code == 2, result.output
    assert "No space left on device" in result.stderr and "Traceback" not in result.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no temporaries, nothing replaced


def test_a_failure_on_the_last_file_replaces_none_of_them(tmp_path, monkeypatch):
    from honestci.reports import writing

    targets = {tmp_path / name: f"old {name}" for name in ("verdict.json", "report.md", "report.html")}
    writing.atomic_write_texts(targets)
    real_fsync, calls = writing.os.fsync, []

    def fsync_failing_third(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(writing.os, "fsync", fsync_failing_third)
    with pytest.raises(InputError, match="No space left on device"):
        writing.atomic_write_texts({path: "new" for path in targets})
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {p.name: t for p, t in targets.items()}


def test_a_renderer_that_fails_touches_no_file(tmp_path, monkeypatch):
    from honestci.audit.report_model import Report
    from honestci.reports import render as render_module

    result = CliRunner().invoke(
        main, ["audit", str(write_study(tmp_path / "study")), "--out", str(tmp_path / "out"), "--no-bayes"]
    )
    assert result.exit_code in (0, 1)
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    report = Report.from_json(tmp_path / "out" / "verdict.json")
    real = render_module.render

    def html_breaks(report, fmt, posterior=None):
        if fmt == "html":
            raise RuntimeError("renderer bug")
        return "changed " + real(report, fmt, posterior)

    monkeypatch.setattr(render_module, "render", html_breaks)
    with pytest.raises(RuntimeError):
        render_module.write_report(report, tmp_path / "out")
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
