"""The package's shape: one import namespace, and the core's floors enforced on every import.

Every ``import`` statement of the installed tree is read with :mod:`ast` (imports inside functions
included, since a lazy import is still a dependency), mapped to the floor it belongs to, and
checked against :data:`ALLOWED`. A new module lands in a floor by its path, so the rules need no
upkeep as the code grows.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Repository folder -> the package it installs as (pyproject.toml's package-dir mapping).
PACKAGE_DIRS = {
    "honestci": "honestci",
    "audit": "honestci.audit",
    "judges": "honestci.judges",
    "training": "honestci.training",
    "reports": "honestci.reports",
    "fixtures": "honestci.fixtures",
}
CORE = "honestci.audit"

#: The floor of a module, by the longest matching prefix of its dotted name.
FLOORS = {
    "honestci": "root",
    "honestci.__main__": "entry",
    f"{CORE}": "core-package",
    f"{CORE}.errors": "errors",
    f"{CORE}.progress": "progress",
    f"{CORE}.policy": "policy",
    f"{CORE}.data": "data",
    f"{CORE}.stats": "stats",
    f"{CORE}.checks": "checks",
    f"{CORE}.gates": "gates",
    f"{CORE}.gate_registry": "gates",
    f"{CORE}.report_model": "report_model",
    f"{CORE}.pipeline": "pipeline",
    f"{CORE}.cli": "cli",
    "honestci.judges": "judges",
    "honestci.training": "training",
    "honestci.reports": "reports",
    "honestci.fixtures": "fixtures",
}
CORE_BELOW_CLI = {"errors", "policy", "data", "stats", "checks", "gates", "report_model", "pipeline"}
#: Which floors each floor may import (itself included): each only from the floors below it.
ALLOWED = {
    "root": set(),
    "core-package": {"root"},
    # Progress lines and bars: a leaf (the standard library, rich) that every floor reports through.
    "progress": {"progress"},
    "errors": {"errors"},
    "policy": {"errors", "policy"},
    "data": {"errors", "policy", "data"},
    "stats": {"errors", "policy", "stats"},
    "checks": {"errors", "policy", "data", "stats", "checks"},
    "gates": {"errors", "policy", "data", "stats", "checks", "gates"},
    "report_model": {"errors", "policy", "report_model"},
    "pipeline": {"errors", "policy", "data", "stats", "checks", "gates", "report_model", "pipeline"},
    "cli": CORE_BELOW_CLI | {"cli", "root", "reports", "judges", "training", "fixtures"},
    "entry": {"cli"},
    # Renderers read the report model and the policy's gate records (and raise the core's input errors).
    "reports": {"errors", "policy", "report_model", "reports"},
    # Judging and training use the core's public API (never its command line), and training uses
    # the judging backends and the renderers for the model card it publishes.
    "judges": CORE_BELOW_CLI | {"judges"},
    "training": CORE_BELOW_CLI | {"training", "judges", "reports"},
    "fixtures": {"errors", "policy", "stats", "fixtures"},
}
# `honestci` itself (its __version__) imports nothing, so every floor may read it; every floor but
# the root may report progress.
for _floor in ALLOWED:
    ALLOWED[_floor].add("root")
    if _floor != "root":
        ALLOWED[_floor].add("progress")
#: Third-party modules the floors below the command line may not import.
FORBIDDEN_THIRD_PARTY = {floor: {"click"} for floor in CORE_BELOW_CLI | {"reports", "fixtures", "progress"}}
BARE_NAMES = set(PACKAGE_DIRS) - {"honestci"}


def _modules() -> dict[str, Path]:
    """Every installed module: dotted name -> file."""
    found = {}
    for folder, package in PACKAGE_DIRS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


MODULES = _modules()


def floor_of(module: str) -> str | None:
    matches = [name for name in FLOORS if module == name or module.startswith(name + ".")]
    return FLOORS[max(matches, key=len)] if matches else None


def _imports(module: str, path: Path):
    """(line, imported module, imported names) for every import in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, target] if target else base)
            yield node.lineno, target, tuple(alias.name for alias in node.names)


def _violations() -> list[str]:
    problems = []
    for module, path in MODULES.items():
        floor = floor_of(module)
        where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        for line, target, names in _imports(module, path):
            top = target.split(".")[0]
            if top in BARE_NAMES:
                problems.append(f"{where}:{line} imports the bare top-level name {target!r}")
                continue
            if top in FORBIDDEN_THIRD_PARTY.get(floor, ()):
                problems.append(f"{where}:{line}: the {floor} floor imports {top}")
            if top != "honestci":
                continue
            # `from honestci.audit import gates` imports the module honestci.audit.gates.
            targets = [f"{target}.{n}" if f"{target}.{n}" in MODULES else target for n in names] or [target]
            for imported in targets:
                imported_floor = floor_of(imported)
                if imported_floor not in ALLOWED[floor]:
                    problems.append(f"{where}:{line}: {floor} imports {imported} ({imported_floor})")
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private and target != module:
                problems.append(f"{where}:{line} imports private {private} from {target}")
    return problems


def test_every_module_has_a_floor():
    assert MODULES, "no module found: is the test run from the repository?"
    assert [m for m in MODULES if floor_of(m) is None] == []


def test_imports_respect_the_floors():
    """stats -> nothing above it; checks -> stats/data/policy; gates -> checks/policy;
    pipeline -> gates; cli -> pipeline; reports -> the report model; judges/training -> the core's
    public API; no `_private` name crosses a module boundary; no bare top-level names."""
    assert _violations() == []


def test_the_repository_folders_are_not_importable_by_their_bare_names():
    """Only `honestci.*` imports, in this process and in subprocesses (see conftest.py), so a
    bare name in a string (a template package, a mock target) fails here as it would installed."""
    import importlib.util

    assert [name for name in sorted(BARE_NAMES) if importlib.util.find_spec(name) is not None] == []
    probe = "import importlib.util as u; print([n for n in ('audit', 'reports') if u.find_spec(n)])"
    seen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert seen.stdout.strip() == "[]"


def test_the_floor_rules_catch_a_violation(tmp_path, monkeypatch):
    """The checker itself can fail: a stats module importing a gate is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from honestci.audit.gates import run_gate\nfrom honestci.audit.stats.bayesian.hierarchical import _sample\n"
    )
    monkeypatch.setitem(MODULES, "honestci.audit.stats.bad", bad)
    found = [p for p in _violations() if "bad.py" in p]
    assert any("stats imports honestci.audit.gates (gates)" in p for p in found)
    assert any("imports private ['_sample']" in p for p in found)


@pytest.mark.e2e
def test_wheel_installs_one_namespace_and_nothing_else(tmp_path):
    """The wheel's top level is `honestci/` and its dist-info; in a fresh venv with only the
    wheel installed, `import audit` fails and `import honestci` works."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("honestci-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"honestci", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for expected in (
        "honestci/audit/policy.py",
        "honestci/audit/stats/bayesian/hierarchical.py",
        "honestci/fixtures/study/claim.yaml",
        "honestci/reports/templates/report.html.j2",
        "honestci/training/configs/grpo.yaml",
    ):
        assert expected in names
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site, str(wheel)],
        check=True,
        capture_output=True,
    )
    bare = subprocess.run([python, "-c", "import audit"], capture_output=True, text=True, cwd=tmp_path)
    assert bare.returncode != 0 and "No module named 'audit'" in bare.stderr
    ours = subprocess.run(
        [python, "-c", "import honestci, honestci.audit.policy as p; print(honestci.__version__, p.DEFAULT_SEED)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ours.returncode == 0, ours.stderr
