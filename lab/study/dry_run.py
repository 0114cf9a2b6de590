"""What `lab study --dry-run` shows, as data: the grid's stages with their cost, the estimate's
totals and assumptions, the statistics plan (which primary tests can reach alpha at all, then
the simulated power) and the warnings. lab.study.runner.run_study(dry_run=True) makes the plan;
this module turns it into blocks (a table or a line) that the CLI prints as they come, so the
command stays a thin call and another front end (a notebook) shows the same thing."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

from lab.common import duration_text


class Block(NamedTuple):
    """A table (title and rows, columns in the first row's order) or, with no rows, a line."""
    title: str
    rows: list[dict[str, Any]] | None = None


def dry_run_blocks(plan: dict[str, Any], recipe: Any, folder: Path, smoke: bool) -> list[Block]:
    from lab.study.cost import gpu_assumptions

    estimate = plan["estimate"]
    rows = [{"stage": r["kind"], "count": r["stages"], "done": r["done"],
             "tokens": f"{r['tokens'] / 1e6:,.2f} M", "FLOPs": f"{r['flops']:.2e}",
             "est. CPU time": duration_text(r["seconds"]),
             **{f"{gpu} GPU-h": f"{hours:,.1f}" for gpu, hours in r["gpu_hours"].items()}}
            for r in estimate]
    total = sum(r["seconds"] for r in estimate)
    gpus = {gpu: sum(r["gpu_hours"][gpu] for r in estimate) for gpu in estimate[0]["gpu_hours"]}
    blocks = [Block(f"{recipe.name}: {plan['stages']} stages, {plan['done']} done -> {folder}",
                    rows),
              Block(f"estimated: {duration_text(total)} on a 2-core CPU with one worker "
                    f"({sum(r['flops'] for r in estimate):.2e} FLOPs); "
                    + ", ".join(f"{hours:,.1f} {gpu} GPU-hours" for gpu, hours in gpus.items())),
              Block(gpu_assumptions())]
    if smoke:  # a smoke run's seeds are not the study's
        blocks.append(Block("power: the real study's question (its --dry-run without --smoke)"))
    else:
        blocks += power_blocks(plan["power"], recipe.statistics.descriptive)
    blocks += [Block(f"warning: {warning}") for warning in plan["warnings"]]
    return blocks


def power_blocks(plan: dict[str, Any], descriptive: bool) -> list[Block]:
    """The statistics plan: per primary test, the smallest p the planned seeds can give, alone
    and after Holm over the family (whether it can reach alpha at all, which is not power),
    then the family's simulated power at the recipe's declared effect (per test and the whole
    family), and its sensitivity to the shape and correlation of the seed effects."""
    rows = [{"question": r["contrast"].question, "model": r["contrast"].model,
             "E": (str(r["contrast"].epochs) if r["contrast"].epochs_to is None
                   else f"{r['contrast'].epochs} -> {r['contrast'].epochs_to}"),
             "contrast": r["contrast"].label(), "unit": r["unit"],
             "smallest p": f"{r['floor']:.3g}", "after Holm": f"{r['holm_floor']:.3g}"}
            for r in plan["tests"]]
    if not rows:
        return [Block("primary tests: none declared (statistics.primary: [])")]
    reach = "none can reach" if len(plan["unreachable"]) == len(rows) else (
        f"{len(plan['unreachable'])} cannot reach" if plan["unreachable"] else "all can reach")
    # Where some cannot: the seeds with which every seed-level test could (not power: the
    # power line below gives the seeds for that).
    needed = (f"; {plan['seeds_needed']} seeds would let every one reach it"
              if plan["unreachable"] and plan.get("seeds_needed") else "")
    counts = Counter(r["question"] for r in rows)
    per_question = ("; tests per question: " + ", ".join(f"{q} {n}" for q, n in counts.items())
                    if len(counts) > 1 else "")
    blocks = [Block(f"primary tests ({plan['alternative']}, {plan['seeds']} seeds, Holm over "
                    f"{len(rows)}): {reach} alpha {plan['alpha']:g}"
                    + (f" (descriptive study{needed})" if descriptive else needed)
                    + per_question, rows)]
    if "power" in plan:
        from lab.analysis.questions import power_line, sensitivity_line

        blocks += [Block(power_line(plan["power"])), Block(sensitivity_line(plan["power"]))]
    return blocks
