"""The `lab` command line: parses options and calls one entry function per command.

The commands live by room, each a thin call of its stage's entry function: data.py (corpora,
inject, audit, decontam, perturb, tokenizer), train.py (pretrain, finetune, export),
evaluation.py (evaluate, score, baseline, probe, detect, llm-eval), study.py (running a study:
study, merge) and analysis.py (reading one: stats, report); shared.py derives a command's
options from its stage's config. This module holds the app, the options before any command,
shell completion and `main`, and registers the rooms' commands in the order `lab --help` lists
them.
"""
from __future__ import annotations

import os
import sys
from typing import List, Optional

import typer

from lab.cli import analysis, data, evaluation, study, train
from lab.common import LabError

app = typer.Typer(
    help="Contamination-injection pre-training lab for code language models.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        from lab import __version__
        from lab.common import git_commit

        commit = git_commit()
        print(f"lab {__version__}" + (f" (git {commit})" if commit else ""))
        raise typer.Exit()


@app.callback()
def _everywhere(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the lab's version (and git commit) and exit."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars inside long steps "
                                                      "(also off when stderr is not a terminal "
                                                      "or in CI)."),
) -> None:
    """The options before any command (the app's help is Typer's `help`)."""
    from lab.progress import QUIET_VARIABLE, quiet_libraries

    if quiet:  # in the environment, so a study's stages and a run's ranks are quiet too
        os.environ[QUIET_VARIABLE] = "1"
    quiet_libraries()


COMPLETION_SHELLS = ("bash", "zsh", "fish", "powershell")
COMPLETE_VARIABLE = "_LAB_COMPLETE"  # set by the completion script when the shell asks


def completion(shell: str = typer.Argument(..., help=", ".join(COMPLETION_SHELLS) + ".")) -> None:
    """Print the shell's completion script (bash: eval "$(lab completion bash)" in ~/.bashrc)."""
    from typer.completion import get_completion_script

    if shell not in COMPLETION_SHELLS:
        raise LabError(f"lab completion {shell}: unknown shell; choose from "
                       f"{', '.join(COMPLETION_SHELLS)}")
    # The script asks `lab` itself for the candidates (_LAB_COMPLETE=complete_SHELL lab ...),
    # which typer answers before any command runs.
    print(get_completion_script(prog_name="lab", complete_var=COMPLETE_VARIABLE, shell=shell))


# Every command, in the order `lab --help` lists it (the order it always had, not the rooms');
# adding a command is a function in its room and a line here.
COMMANDS = (
    ("inject", data.inject),
    ("audit", data.audit),
    ("decontam", data.decontam),
    ("perturb", data.perturb),
    ("finetune", train.finetune),
    ("evaluate", evaluation.evaluate),
    ("export", train.export),
    ("probe", evaluation.probe),
    ("detect", evaluation.detect),
    ("study", study.study),
    ("stats", analysis.stats),
    ("report", analysis.report),
    ("merge", study.merge),
    ("pretrain", train.pretrain),
    ("score", evaluation.score_command),
    ("baseline", evaluation.baseline),
    ("llm-eval", evaluation.llm_eval),
    ("completion", completion),
)
for name, command in COMMANDS:
    app.command(name)(command)
del name, command
# The command groups, listed after the commands.
app.add_typer(data.corpora_app, name="corpora")
app.add_typer(data.tokenizer_app, name="tokenizer")


def main(argv: Optional[List[str]] = None) -> None:
    """Console entry point: user errors become one line on stderr and exit code 2."""
    if os.environ.get("LAB_DIE_WITH_PARENT") == "1":
        # A rank started by a study's launcher: die with the launcher (its runner's child).
        from lab.study.execution import die_with_parent

        die_with_parent()
    if COMPLETE_VARIABLE in os.environ:
        from typer.completion import completion_init

        completion_init()  # typer registers its shells' answers only for add_completion apps
    try:
        result = app(args=argv, standalone_mode=False, complete_var=COMPLETE_VARIABLE)
    except LabError as exc:
        _fail(str(exc))
    except OSError as exc:
        # The environment's faults (disk full, a read-only or immutable folder, --out under a
        # file): the file and the reason say it all; LAB_DEBUG=1 keeps the traceback.
        if os.environ.get("LAB_DEBUG") == "1":
            raise
        where = exc.filename if exc.filename is not None else type(exc).__name__
        _fail(f"{where}: {exc.strerror or exc}")
    except Exception as exc:
        # Usage errors of click (or typer's vendored click) carry exit_code 2 and a message;
        # matched by shape so the lab works with either.
        if getattr(exc, "exit_code", None) == 2 and hasattr(exc, "format_message"):
            if type(exc).__name__ == "NoArgsIsHelpError":
                sys.exit(0)
            _fail(exc.format_message())
        if type(exc).__name__ == "Abort":
            _fail("aborted")
        raise
    sys.exit(result if isinstance(result, int) else 0)


def _fail(message: str) -> None:
    print(f"lab: error: {message}", file=sys.stderr)
    sys.exit(2)
