"""Per-step progress bars inside long steps (training, generation, probing, detection).

`showing()` is the one place that decides whether they show: on a terminal, yes; under
`lab --quiet` (which sets QUIET_VARIABLE, so a study's stages and a run's ranks inherit it), in
CI (the CI variable every CI service sets) or when stderr is not a terminal (a log file, a
study stage's log, a test's captured output), no: a bar redrawn a thousand times would make
those logs a thousand lines long."""
from __future__ import annotations

import os
import sys
from typing import Any, Iterable

QUIET_VARIABLE = "LAB_QUIET"


def showing() -> bool:
    """Whether progress bars show in this process (see the module's docstring)."""
    if os.environ.get(QUIET_VARIABLE) == "1" or os.environ.get("CI", "").lower() not in ("", "0", "false"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def quiet_libraries() -> None:
    """transformers' and the hub's own bars (writing model shards, loading weights) follow
    `showing()` too; called once per command, before it runs."""
    if showing():
        return
    # Read by the hub and by transformers when they are imported: a command that never imports
    # them (most refusals, `lab score`) does not pay their 2 s import for it, and its ranks
    # inherit it. Libraries already imported are told directly.
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def steps(iterable: Iterable[Any], description: str, total: int | None = None,
          unit: str = "batch") -> Iterable[Any]:
    """`iterable`, drawing a bar on stderr as it is consumed when `showing()`; else `iterable`
    itself. The bar disappears when done (the command's own summary line follows)."""
    if not showing():
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=description, total=total, unit=unit, leave=False,
                dynamic_ncols=True, file=sys.stderr)


def bar(total: int, description: str, initial: int = 0, unit: str = "step") -> Any:
    """A bar to advance by hand (`.update(n)`, `.close()`), or a stand-in that does nothing
    when not `showing()`."""
    if not showing():
        return _Silent()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=description, unit=unit, leave=False,
                dynamic_ncols=True, file=sys.stderr)


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass
