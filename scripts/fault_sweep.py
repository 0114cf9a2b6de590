"""The fault table (tests/faults/table.py) outside pytest: each row's fault set up in a micro
world, its command run, its outcome judged; prints a Markdown table (case, expected, rc, message,
verdict) and one summary line, `fault table: N cases, M passed`; exits 1 if a row fails (a known
defect, marked in the table, is shown but does not fail the run unless it is fixed).

    LAB_CORPORA=../shared/corpora python scripts/fault_sweep.py [--keep DIR] [-k substring]

It builds the world first (two arms, the tokenizer, a micro GPT-2 and its E0 model: about half a
minute on two cores) in a temporary folder, or in DIR (reused when it is there). The same rows
run in the test suite as tests/faults/test_table.py.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from faults.outcomes import judge  # noqa: E402
from faults.cases import CASES  # noqa: E402
from faults.world import build_world  # noqa: E402


def cell(text: str, width: int = 140) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= width else text[: width - 3] + "..."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="Build (or reuse) the micro world here.")
    parser.add_argument("-k", default="", help="Only the rows whose name contains this.")
    args = parser.parse_args()
    if not os.environ.get("LAB_CORPORA"):
        sys.exit("set LAB_CORPORA to the folder holding the datasets (../shared/corpora here)")
    os.environ["LAB_CORPORA"] = str(Path(os.environ["LAB_CORPORA"]).resolve())
    temporary = args.keep is None
    world = (Path(tempfile.mkdtemp(prefix="lab-faults-")) / "world" if temporary
             else args.keep.resolve())
    started = time.perf_counter()
    if not (world / "e0").is_dir():
        build_world(world)
        print(f"micro world built in {time.perf_counter() - started:.0f} s: {world}\n")
    cases = [case for case in CASES if args.k in case.name]
    print("| case | expected | rc | message | verdict |\n|---|---|---|---|---|")
    passed, known, failed = 0, 0, []
    for case in cases:
        verdict = judge(case, world)
        if case.defect and not verdict.ok:
            known, shown = known + 1, "known defect (xfail)"
        elif case.defect:
            failed.append(case.name)
            shown = "FIXED? the known defect did not show: drop the row's defect="
        elif verdict.ok:
            passed, shown = passed + 1, "ok"
        else:
            failed.append(case.name)
            shown = "FAIL: " + ", ".join(verdict.problems)
        rc = "" if verdict.rc is None else verdict.rc
        print(f"| {case.name} | {case.expect} | {rc} | {cell(verdict.shown)} | {cell(shown)} |",
              flush=True)
    print(f"\nfault table: {len(cases)} cases, {passed} passed"
          + (f", {known} known defects" if known else "")
          + (f"; failed: {', '.join(failed)}" if failed else "")
          + f" ({time.perf_counter() - started:.0f} s)")
    if temporary:
        shutil.rmtree(world.parent, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
