"""The datatrove side of lab.executor, imported only when a step runs on datatrove."""
from __future__ import annotations

import sys

from datatrove.executor import LocalPipelineExecutor
from loguru import logger


class QuietLocalExecutor(LocalPipelineExecutor):
    """datatrove's local executor with every task logging to its log file only (the lab
    prints its own progress): datatrove sends the console the log of the task that has local
    rank 0, and local ranks serve nothing but logging."""

    def _run_for_rank(self, rank: int, local_rank: int = 0, node_rank: int = -1):
        return super()._run_for_rank(rank, local_rank + 1, node_rank)


def quiet_console() -> None:
    """The launching process's own datatrove messages: warnings and errors only."""
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
