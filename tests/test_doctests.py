"""The examples in the package's docstrings run and print what they show (they are the Python
API's first documentation). Every module of the installed namespace whose source holds an example
is imported and its examples run with :mod:`doctest`."""

from __future__ import annotations

import doctest
import importlib
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Source folder → the package it installs as (pyproject.toml's package-dir).
PACKAGES = {
    folder: package
    for package, folder in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ].items()
}


def _modules_with_examples() -> list[str]:
    names = []
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ">>> " in path.read_text(encoding="utf-8"):
                parts = path.relative_to(ROOT / folder).with_suffix("").parts
                names.append(".".join((package, *parts)).removesuffix(".__init__"))
    return names


MODULES = _modules_with_examples()


def test_the_public_entry_points_have_examples():
    for module in (
        "honestci.audit.stats.frequentist.winrate",
        "honestci.audit.stats.frequentist.iid",
        "honestci.audit.policy",
    ):
        assert module in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [test for test in finder.find(module) if test.examples]
    assert tests, f"{name} has '>>> ' in its source but no example doctest finds"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
