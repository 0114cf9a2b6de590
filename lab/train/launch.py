"""How a study's pre-training is launched: ranks per node, nodes, the launcher that starts them
and the DeepSpeed config (the recipe's `resources.pretrain`, PretrainResources).

Declared beside pre-training rather than in the recipe because these are the pre-training's own
settings: the number of ranks and the DeepSpeed config change what a pre-training computes (the
stage key holds them), the launcher and the checkpoint interval do not. lab.study.grid turns
them into the launch of each pre-training stage; lab pretrain itself runs one rank.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.common import LabError, default_of, param
from lab.train.pretrain import PretrainConfig

LAUNCHERS = ("torchrun", "deepspeed")


@dataclass
class PretrainResources:
    """How each pre-training runs. What can change its result is part of the stage key: the
    number of ranks (pretrain.batch_size is per rank, so the global batch grows with it) and
    the DeepSpeed config (its contents); the launcher cannot, and is not."""
    processes: int = param(1, "Ranks per node: 1 runs the pre-training in the stage's own process, "
                              "more start it under the launcher, one rank per GPU (gloo ranks "
                              "on a CPU).")
    nodes: int = param(1, "Nodes per pre-training (a SLURM job's nodes; locally 1).")
    launcher: str = param("torchrun", "What starts the ranks: " + " or ".join(LAUNCHERS) + ".")
    deepspeed: str | None = param(None, "DeepSpeed config: zero1, zero2, zero3 "
                                        "(recipes/deepspeed/) or a JSON file; null: plain DDP.")
    save_steps: int = param(default_of(PretrainConfig, "save_steps"),
                            "Checkpoint every N steps, to resume an interrupted pre-training from "
                            "(not part of the key: the weights do not depend on it).")


# recipes/deepspeed/ of the repository: the ZeRO stages a recipe names by zero1, zero2, zero3.
DEEPSPEED_CONFIGS = Path(__file__).resolve().parents[2] / "recipes" / "deepspeed"


def deepspeed_config(name: str) -> Path:
    """The DeepSpeed JSON file a recipe names: zero1/zero2/zero3 (recipes/deepspeed/) or a path."""
    path = DEEPSPEED_CONFIGS / f"{name}.json" if "/" not in name and not name.endswith(".json") \
        else Path(name)
    if not path.is_file():
        raise LabError(f"{name}: no such DeepSpeed config (zero1, zero2, zero3 or a JSON file)")
    return path

