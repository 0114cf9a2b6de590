"""The fault table's world (built once per session) and its summary line."""
from __future__ import annotations

from pathlib import Path

import pytest

from .world import build_world

_results: dict[str, str] = {}  # row name -> passed, failed, xfailed, xpassed or skipped


@pytest.fixture(scope="session")
def fault_world(micro_world, tmp_path_factory) -> Path:
    """tests/conftest.py's arms and tokenizer (copied: a row must not touch other tests'
    files), a micro GPT-2, its E0 model and the rows' small files."""
    return build_world(tmp_path_factory.mktemp("fault-world") / "world", arms=micro_world)


def pytest_runtest_logreport(report):
    if "faults/test_table.py::" not in report.nodeid:
        return
    name = report.nodeid.split("[", 1)[-1][:-1]
    if report.when == "call":
        expected = hasattr(report, "wasxfail")  # a strict xfail that passes is reported failed
        _results[name] = ("xfailed" if report.skipped else "xpassed") if expected else report.outcome
    elif report.outcome != "passed":  # an error or a skip in setup or teardown
        _results[name] = "skipped" if report.skipped else "failed"


def pytest_terminal_summary(terminalreporter):
    """One line, as scripts/fault_sweep.py ends: cases, passed, known defects (strict xfails),
    then the rows that failed."""
    if not _results:
        return
    count = {k: sum(v == k for v in _results.values()) for k in ("passed", "xfailed", "skipped")}
    failed = [name for name, outcome in _results.items() if outcome in ("failed", "xpassed")]
    terminalreporter.write_line(
        f"fault table: {len(_results)} cases, {count['passed']} passed"
        + (f", {count['xfailed']} known defects" if count["xfailed"] else "")
        + (f", {count['skipped']} skipped" if count["skipped"] else "")
        + (f"; failed: {', '.join(failed)}" if failed else ""))
