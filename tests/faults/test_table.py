"""Every row of the fault table (table.py) on the micro world: its fault set up, the command
run in this process (a real one for the kill rows), the outcome it expects judged
(outcomes.py). `pytest tests/faults -k NAME` runs some; scripts/fault_sweep.py prints them all
as a Markdown table."""
from __future__ import annotations

import os

import pytest

from .outcomes import judge
from .cases import CASES

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")


@pytest.mark.parametrize("case", [
    pytest.param(case, id=case.name,
                 marks=[pytest.mark.xfail(strict=True, reason=case.defect)] if case.defect else [])
    for case in CASES])
def test_row(case, fault_world):
    verdict = judge(case, fault_world)
    assert verdict.ok, f"{case.name}: {'; '.join(verdict.problems)} (shown: {verdict.shown})"
