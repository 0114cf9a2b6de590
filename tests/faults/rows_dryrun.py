"""Fault-table rows for issue 59 (dryrun): built with the constructors of table.py.

Row 14: `lab study --dry-run` exits 2 with the real run's line wherever the real run refuses
(both call lab.study.runner.check_start); a row per cause, and the real run beside some of them
to show the line is the same. Row 13: a study resumed where its data is not found says so. Rows
15 and 16: an empty recipe, a binary one. (DeepSpeed missing, a DeepSpeed config that is not
JSON and a GPU that is not there: table.py's "(dry run)" study rows.)
"""
from __future__ import annotations

import json

from .table import NO_DEEPSPEED, QUICK_RECIPE, STUDY, Case, error, ok, recipe, write
from .world import ROOT

MICRO = str(ROOT / "recipes" / "mini" / "micro.yaml")
REAL = ["study", "--out", "out-study"]  # STUDY without --dry-run
UNDERPOWERED = "underpowered: 1 of the 1 primary tests (study) can never reach alpha 0.05"
# A study begun on data in a folder this run does not look in (a shell without LAB_CORPORA).
BEGAN_ELSEWHERE = write("began-elsewhere/study.json", json.dumps({
    "study": "quickstart", "threads": 1,
    "data": {"codetrans": {"test/test.java-cs.txt.java": "0" * 64}},
    "data_folders": {"codetrans": "/data/shared/corpora/codetrans"}}))
MISSING = ("began-elsewhere/study.json: the data this study began with is missing here "
           "(codetrans test/test.java-cs.txt.java, read from /data/shared/corpora/codetrans; "
           "looked in corpora/codetrans): pass --corpora /data/shared/corpora or set "
           "LAB_CORPORA=/data/shared/corpora, and the study resumes where it stopped")


def _other_recipe(root) -> None:
    """A study folder that the micro recipe began (its recipe.json), beside the world's
    recipe.yaml (the quickstart)."""
    from lab.study.recipe import load_recipe, recipe_dict

    folder = root / "other-study"
    folder.mkdir(exist_ok=True)
    (folder / "recipe.json").write_text(json.dumps(recipe_dict(load_recipe(MICRO))))


ROWS: list[Case] = [
    # row 14
    error("study: underpowered (dry run)", [*STUDY, "bad.yaml"], UNDERPOWERED, recipe(QUICK_RECIPE)),
    error("study: underpowered", [*REAL, "bad.yaml"], UNDERPOWERED, recipe(QUICK_RECIPE)),
    ok("study: underpowered, allowed (dry run)", [*STUDY, "bad.yaml", "--allow-underpowered"],
       "(allowed: its primary table will not reach alpha)", recipe(QUICK_RECIPE)),
    error("study: DeepSpeed asked for, not installed", [*REAL, "bad.yaml"],
          "a DeepSpeed config is requested but deepspeed does not import",
          recipe(QUICK_RECIPE + "resources:\n  pretrain:\n    deepspeed: zero2\n"),
          absent=NO_DEEPSPEED),
    error("study: --corpora that does not exist (dry run)",
          [*STUDY, MICRO, "--corpora", "/nonexistent"], "--corpora /nonexistent: no such directory"),
    error("study: --corpora that does not exist", [*REAL, MICRO, "--corpora", "/nonexistent"],
          "--corpora /nonexistent: no such directory"),
    error("study: --out a folder of another recipe (dry run)",
          ["study", "--dry-run", "recipe.yaml", "--out", "other-study"],
          "other-study/recipe.json: the study directory holds another recipe", _other_recipe),
    error("study: resources.report_to unknown (dry run)", [*STUDY, "bad.yaml"],
          "bad.yaml: resources.report_to: 'wandb2': choose tensorboard, wandb, mlflow",
          recipe(QUICK_RECIPE + "resources:\n  report_to: wandb2\n")),
    # row 13: resumed in a shell without LAB_CORPORA, on data found elsewhere when it began
    error("study: resumed where its data is not found (dry run)",
          ["study", "--dry-run", "recipe.yaml", "--out", "began-elsewhere"], MISSING,
          BEGAN_ELSEWHERE, env={"LAB_CORPORA": ""}),
    error("study: resumed where its data is not found",
          ["study", "recipe.yaml", "--out", "began-elsewhere"], MISSING, BEGAN_ELSEWHERE,
          env={"LAB_CORPORA": ""}),
    # row 15
    error("study: empty recipe", [*STUDY, "bad.yaml"],
          "bad.yaml: an empty recipe (it must set at least its name:)", recipe("")),
    error("study: recipe of comments only", [*STUDY, "bad.yaml"],
          "bad.yaml: an empty recipe", recipe("# to do\n\n# later\n")),
    error("study: recipe {}", [*STUDY, "bad.yaml"], "bad.yaml: an empty recipe", recipe("{}\n")),
    # row 16 (a binary recipe): one line, naming the file
    error("study: binary recipe with NUL bytes", [*STUDY, "bad.yaml"],
          "bad.yaml: not a text file (a NUL byte at character 7)", recipe(b"name: a\x00\x01\n")),
    error("study: binary recipe, not UTF-8", [*STUDY, "bad.yaml"], "bad.yaml: not UTF-8 text",
          recipe(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")),
]
