"""The contamination-decay figure of `lab report`: per (model, task, arm), the arm's score against
the control (and its placebo) over fine-tuning epochs, p-values on a second axis."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lab.common import LabError


def train_size_order(size: str) -> tuple[int, int, str]:
    """Training-set sizes as numbers, then named ones (`all`): the order of tables and panels."""
    return (0, int(size), "") if size.isdigit() else (1, 0, size)


def _panel(ax: Any, series: list[dict[str, Any]], arm: str, metric: str) -> None:
    """One (model, task, arm): against the control (and its placebo arm, if the study has one)
    when there is one (with the split-half pair as thin dashed lines), else injected against
    held-out; p-values on a second axis."""
    pairs = [c for c in series if c.get("injected") is not None]
    with_control = [c for c in series if c.get("control") is not None]
    joined, p_key = [], None
    if with_control:
        epochs = [c["epochs"] for c in with_control]
        ax.errorbar(epochs, [c["control"] for c in with_control],
                    yerr=[c["control_std"] or 0 for c in with_control], marker="o", capsize=3,
                    label="control")
        ax.errorbar(epochs, [c["mean"] for c in with_control],
                    yerr=[c["std"] or 0 for c in with_control], marker="s", capsize=3, label=arm)
        joined = [(c["epochs"], c["control"], c["mean"]) for c in with_control]
        placebo = [c for c in with_control if c.get("placebo") is not None]
        if placebo:
            ax.errorbar([c["epochs"] for c in placebo], [c["placebo"] for c in placebo],
                        yerr=[c["placebo_std"] or 0 for c in placebo], marker="D", capsize=3,
                        color="tab:brown", label=placebo[0]["placebo_arm"])
        if pairs:
            ax.plot([c["epochs"] for c in pairs], [c["injected"] for c in pairs], "--^", lw=0.8,
                    ms=3, color="tab:green", label=f"{arm}: injected samples")
            ax.plot([c["epochs"] for c in pairs], [c["held_out"] for c in pairs], "--v", lw=0.8,
                    ms=3, color="tab:purple", label=f"{arm}: held-out samples")
        p_key, p_label = "p", "p, arm vs control"
        if pairs and all(c.get("p") is None for c in series):  # one seed: no test over seeds
            p_key, p_label = "p_within", "p, injected vs held-out"
    elif pairs:
        epochs = [c["epochs"] for c in pairs]
        ax.plot(epochs, [c["injected"] for c in pairs], "-^", color="tab:green",
                label="injected samples")
        ax.plot(epochs, [c["held_out"] for c in pairs], "-v", color="tab:purple",
                label="held-out samples")
        joined = [(c["epochs"], c["held_out"], c["injected"]) for c in pairs]
        p_key, p_label = "p_within", "p, injected vs held-out"
    else:  # neither a control nor a split-half pair: the arm's score alone
        ax.errorbar([c["epochs"] for c in series], [c["mean"] for c in series],
                    yerr=[c["std"] or 0 for c in series], marker="s", capsize=3, label=arm)
    for epoch, low, high in joined:
        ax.plot([epoch, epoch], [low, high], color="grey", lw=0.8, zorder=1)
    ax.set_xticks(sorted({c["epochs"] for c in series}))
    ax.set_xlabel("fine-tuning epochs (0 = direct inference)")
    ax.set_ylabel(metric)
    handles, labels = ax.get_legend_handles_labels()
    # errorbar handles come after plain lines: list control and arm before the split-half pair.
    order = sorted(range(len(labels)), key=lambda i: labels[i].endswith(" samples"))
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    points = [(c["epochs"], c[p_key]) for c in series if c.get(p_key) is not None] if p_key else []
    if points:
        twin = ax.twinx()
        twin.plot([e for e, _ in points], [max(p, 1e-300) for _, p in points], ":o", ms=4,
                  color="tab:red", label=p_label)
        alpha = series[0]["alpha"]
        twin.axhline(alpha, color="tab:red", lw=0.6, alpha=0.6, label=f"alpha = {alpha}")
        if p_key == "p_within":  # per-sample tests reach tiny p: a log axis keeps them visible
            twin.set_yscale("log")
            twin.set_ylim(max(min(min(p for _, p in points), alpha) / 10, 1e-300), 1.5)
        else:
            twin.set_ylim(0, 1)
        twin.set_ylabel(p_label, color="tab:red")
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    # Below the panel: inside, the lines of both axes would run through it.
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
              fontsize=8, frameon=False)


def plotted_cells(cells: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """The cells of the decay figure: the contaminated arms (the control alone if that is all)."""
    chosen = [c for c in cells if c["metric"] == metric and c.get("mean") is not None]
    if not chosen:
        known = ", ".join(sorted({c["metric"] for c in cells})) or "none"
        raise LabError(f"no finished cells with metric '{metric}' to plot (metrics: {known})")
    return [c for c in chosen if c["arm"] != "control"] or chosen


def decay_figure(cells: list[dict[str, Any]], metric: str, out_base: Path) -> list[Path]:
    """Each arm's score against fine-tuning epochs, one panel per model, task and arm; PNG and
    SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = plotted_cells(cells, metric)
    sizes = len({c["train_size"] for c in chosen}) > 1
    panels = sorted({(c["model"], c["task"], c["arm"], c["train_size"] if sizes else "")
                     for c in chosen}, key=lambda k: k[:3] + (train_size_order(k[3]),))
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.5 * columns, 5 * rows), squeeze=False,
                             layout="constrained")
    for ax, (model, task, arm, size) in zip(axes.flat, panels):
        series = sorted((c for c in chosen if (c["model"], c["task"], c["arm"]) == (model, task, arm)
                         and (not sizes or c["train_size"] == size)), key=lambda c: c["epochs"])
        _panel(ax, series, arm, metric)
        ax.set_title(f"{model}, {task}, {arm}" + (f", train size {size or 'all'}" if sizes else ""),
                     fontsize=10)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    paths = [out_base.with_suffix(".png"), out_base.with_suffix(".svg")]
    for path in paths:
        fig.savefig(path, dpi=120)
    plt.close(fig)
    return paths


# ---- entry points -------------------------------------------------------------------------
