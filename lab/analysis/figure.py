"""The contamination-decay figure of `lab report`: per (model, task, arm), the arm's score against
the control (and its placebo) over fine-tuning epochs, p-values on a second axis."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lab.common import LabError, atomic_file
from lab.detect.leaderboard import number
from lab.analysis.cells import Cell
from lab.analysis.report_data import train_size_order


def _panel(ax: Any, series: list[Cell], arm: str, metric: str) -> None:
    """One (model, task, arm): against the control (and its placebo arm, if the study has one)
    when there is one (with the split-half pair as thin dashed lines), else injected against
    held-out; on a second axis the Holm p of the arm's headline primary test at each epoch
    count (cells.with_primary_p), where the study has one."""
    pairs = [c for c in series if c.halves is not None]
    with_control = [c for c in series if c.control is not None]
    joined = []
    if with_control:
        epochs = [c.epochs for c in with_control]
        ax.errorbar(epochs, [c.control.mean for c in with_control],
                    yerr=[c.control.std or 0 for c in with_control], marker="o", capsize=3,
                    label="control")
        ax.errorbar(epochs, [c.mean for c in with_control],
                    yerr=[c.std or 0 for c in with_control], marker="s", capsize=3, label=arm)
        joined = [(c.epochs, c.control.mean, c.mean) for c in with_control]
        placebo = [c for c in with_control if c.placebo is not None]
        if placebo:
            ax.errorbar([c.epochs for c in placebo], [c.placebo.mean for c in placebo],
                        yerr=[c.placebo.std or 0 for c in placebo], marker="D", capsize=3,
                        color="tab:brown", label=placebo[0].placebo.arm)
        if pairs:
            ax.plot([c.epochs for c in pairs], [c.halves.injected for c in pairs], "--^", lw=0.8,
                    ms=3, color="tab:green", label=f"{arm}: injected samples")
            ax.plot([c.epochs for c in pairs], [c.halves.held_out for c in pairs], "--v", lw=0.8,
                    ms=3, color="tab:purple", label=f"{arm}: held-out samples")
    elif pairs:
        epochs = [c.epochs for c in pairs]
        ax.plot(epochs, [c.halves.injected for c in pairs], "-^", color="tab:green",
                label="injected samples")
        ax.plot(epochs, [c.halves.held_out for c in pairs], "-v", color="tab:purple",
                label="held-out samples")
        joined = [(c.epochs, c.halves.held_out, c.halves.injected) for c in pairs]
    else:  # neither a control nor a split-half pair: the arm's score alone
        ax.errorbar([c.epochs for c in series], [c.mean for c in series],
                    yerr=[c.std or 0 for c in series], marker="s", capsize=3, label=arm)
    # The trivial baselines on the same samples: the floor a model must clear. A baseline the
    # same in every cell is a horizontal line; one that is not (retrieval searches the cell's
    # fine-tuning pairs, or the whole train split at E = 0) is drawn through its value at each
    # epoch count, never averaged.
    baselines: dict[str, dict[int, float]] = {}
    for cell in series:
        for name, value in cell.baselines.items():
            baselines.setdefault(name, {})[cell.epochs] = value
    for (name, by_epoch), style in zip(sorted(baselines.items()), (":", "-.", "--")):
        if len(set(by_epoch.values())) == 1:
            ax.axhline(next(iter(by_epoch.values())), color="grey", lw=1, ls=style,
                       label=f"baseline: {name}")
        else:
            ax.plot(sorted(by_epoch), [by_epoch[e] for e in sorted(by_epoch)], color="grey",
                    lw=1, ls=style, drawstyle="steps-mid", label=f"baseline: {name}")
    for epoch, low, high in joined:
        ax.plot([epoch, epoch], [low, high], color="grey", lw=0.8, zorder=1)
    ax.set_xticks(sorted({c.epochs for c in series}))
    ax.set_xlabel("fine-tuning epochs (0 = direct inference)")
    ax.set_ylabel(metric)
    handles, labels = ax.get_legend_handles_labels()
    # errorbar handles come after plain lines: list control and arm before the split-half pair.
    order = sorted(range(len(labels)), key=lambda i: labels[i].endswith(" samples"))
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    points = [(c.epochs, c.p_primary) for c in series if c.p_primary is not None]
    if points:
        label = next(c.p_primary_label for c in series if c.p_primary is not None)
        twin = ax.twinx()
        twin.plot([e for e, _ in points], [max(p, 1e-300) for _, p in points], ":o", ms=4,
                  color="tab:red", label=label)
        alpha = series[0].alpha
        twin.axhline(alpha, color="tab:red", lw=0.6, alpha=0.6, label=f"alpha = {alpha}")
        if min(p for _, p in points) < 1e-3:  # a one-seed test over samples: a log axis
            twin.set_yscale("log")
            twin.set_ylim(max(min(min(p for _, p in points), alpha) / 10, 1e-300), 1.5)
        else:
            twin.set_ylim(0, 1.05)
        twin.set_ylabel(label, color="tab:red")
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    # Below the panel: inside, the lines of both axes would run through it.
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
              fontsize=8, frameon=False)


def plotted_cells(cells: list[Cell], metric: str) -> list[Cell]:
    """The cells of the decay figure: the contaminated arms (the control alone if that is all)."""
    chosen = [c for c in cells if c.metric == metric and c.mean is not None]
    if not chosen:
        known = ", ".join(sorted({c.metric for c in cells})) or "none"
        raise LabError(f"no finished cells with metric '{metric}' to plot (metrics: {known})")
    return [c for c in chosen if c.arm != "control"] or chosen


def save_figure(fig: Any, out_base: Path) -> list[Path]:
    """OUT_BASE.png and .svg of `fig`, then closed. The same figure gives the same bytes: the
    SVG carries no date and its element ids come from a fixed salt instead of a random one."""
    import matplotlib
    import matplotlib.pyplot as plt

    paths = [out_base.with_suffix(".png"), out_base.with_suffix(".svg")]
    # Each through a temporary sibling (atomic_file): savefig writes in place, and a full disk
    # left a truncated SVG behind.
    try:
        with matplotlib.rc_context({"svg.hashsalt": "lab"}):
            with atomic_file(paths[0]) as handle:
                fig.savefig(handle, format="png", dpi=120)
            with atomic_file(paths[1]) as handle:
                fig.savefig(handle, format="svg", dpi=120, metadata={"Date": None})
    finally:
        plt.close(fig)
    return paths


def decay_figure(cells: list[Cell], metric: str, out_base: Path) -> list[Path]:
    """Each arm's score against fine-tuning epochs, one panel per model, task and arm; PNG and
    SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = plotted_cells(cells, metric)
    sizes = len({c.train_size for c in chosen}) > 1
    panels = sorted({(c.model, c.task, c.arm, c.train_size if sizes else "")
                     for c in chosen}, key=lambda k: k[:3] + (train_size_order(k[3]),))
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.5 * columns, 5 * rows), squeeze=False,
                             layout="constrained")
    for ax, (model, task, arm, size) in zip(axes.flat, panels):
        series = sorted((c for c in chosen if (c.model, c.task, c.arm) == (model, task, arm)
                         and (not sizes or c.train_size == size)), key=lambda c: c.epochs)
        _panel(ax, series, arm, metric)
        ax.set_title(f"{model}, {task}, {arm}" + (f", train size {size or 'all'}" if sizes else ""),
                     fontsize=10)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    return save_figure(fig, out_base)


# ---- entry points -------------------------------------------------------------------------


ZERO_GAP = 0.6  # decades between dose 0 and the smallest dose on the dose axis


def _dose_axis(ax: Any, doses: list[float]) -> Any:
    """A log axis of copies per corpus epoch with dose 0 (the held-out level) drawn apart, left
    of a break mark: returns the function placing a dose on it (dose_figure sets the label)."""
    positive = sorted({x for x in doses if x > 0})
    zero_at = math.log10(positive[0]) - ZERO_GAP if positive else 0.0

    def place(x: float) -> float:
        return math.log10(x) if x > 0 else zero_at

    ticks = ([0.0] if any(x == 0 for x in doses) else []) + positive
    ax.set_xticks([place(x) for x in ticks], [f"{x:g}" for x in ticks])
    if positive and 0.0 in ticks:
        gap = zero_at + ZERO_GAP / 2
        ax.axvline(gap, color="grey", lw=0.6, ls=(0, (2, 2)))
        ax.text(gap, 0.02, "//", transform=ax.get_xaxis_transform(), ha="center", fontsize=8)
    return place


def dose_figure(found: dict[str, Any], metric: str, out_base: Path) -> list[Path]:
    """Per (task, arm), against the dose in copies per corpus epoch (found["dose_scale"]): the
    metric (one line per model, fine-tuning epoch count and model size, seed spread as error
    bars), the lift over dose 0 with its intervals, the monotone fit (solid), the unconstrained
    fit (dashed), their bands (the unconstrained one hatched) and the threshold, a non-monotone
    ladder marked in its legend entry; and the loss probe's AUC; PNG and SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    levels = [r for r in found["levels"] if r["metric"] == metric]
    if not levels:
        raise LabError(f"no dose-ladder levels with metric '{metric}' to plot")
    panels = sorted({(r["task"], r["arm"]) for r in levels})
    fig, axes = plt.subplots(len(panels), 3, figsize=(16, 4.6 * len(panels)), squeeze=False,
                             layout="constrained")
    styles, markers = ["-", "--", ":", "-."], ["o", "s", "^", "D"]
    fits = [Line2D([], [], color="grey", ls="-", label="monotone fit"),
            Line2D([], [], color="grey", ls="--", label="unconstrained fit")]
    for row, (task, arm) in enumerate(panels):
        mine = [r for r in levels if (r["task"], r["arm"]) == (task, arm)]
        models = sorted({r["model"] for r in mine})
        series = sorted({(r["model"], r["epochs"], r["train_size"]) for r in mine},
                        key=lambda k: (k[0], k[1], train_size_order(str(k[2]))))
        sizes = len({k[2] for k in series}) > 1
        score_ax, lift_ax, probe_ax = axes[row]
        places = [_dose_axis(ax, [r["dose"] for r in mine]) for ax in axes[row]]
        colours = {e: plt.cm.viridis(i / max(1, len({k[1] for k in series}) - 1) * 0.85)
                   for i, e in enumerate(sorted({k[1] for k in series}))}
        for model, epochs, size in series:
            points = sorted((r for r in mine if (r["model"], r["epochs"], r["train_size"])
                             == (model, epochs, size)), key=lambda r: r["dose"])
            which = models.index(model)
            label = (f"{model}, " if len(models) > 1 else "") + f"E={epochs}" + (
                f", train {size}" if sizes else "")
            colour = colours[epochs]
            score_ax.errorbar([places[0](r["dose"]) for r in points], [r["score"] for r in points],
                              yerr=[r["score_std"] or 0 for r in points],
                              ls=styles[which % len(styles)], marker="o", ms=4, capsize=3,
                              color=colour, label=label)
            cell = next((c for c in found["cells"] if (c["model"], c["task"], c["arm"], c["metric"],
                                                        c["epochs"], c["train_size"])
                         == (model, task, arm, metric, epochs, size)), {})
            lifted = [r for r in points if r.get("lift") is not None]
            low = [r["lift"] if r.get("lift_ci_low") is None else r["lift_ci_low"] for r in lifted]
            high = [r["lift"] if r.get("lift_ci_high") is None else r["lift_ci_high"] for r in lifted]
            lift_ax.errorbar([places[1](r["dose"]) for r in lifted], [r["lift"] for r in lifted],
                             yerr=[[r["lift"] - lo for r, lo in zip(lifted, low)],
                                   [hi - r["lift"] for r, hi in zip(lifted, high)]],
                             ls="none", marker=markers[which % len(markers)], ms=4, capsize=3,
                             color=colour, label=label + (" (non-monotone)"
                                                          if cell.get("non_monotone") else ""))
            _dose_curves(lift_ax, cell, places[1], colour)
        lift_ax.axhline(0, color="grey", lw=0.6)
        lift_ax.plot([places[1](0)], [0], marker="o", ms=4, color="grey")  # dose 0, the reference
        for model in models:
            probe = sorted({(r["dose"], r["probe_auc"]) for r in mine
                            if r["model"] == model and r.get("probe_auc") is not None})
            if probe:
                probe_ax.plot([places[2](x) for x, _ in probe], [a for _, a in probe],
                              styles[models.index(model) % len(styles)], marker="s",
                              color="tab:red", label=f"{model}" if len(models) > 1 else "loss probe")
        probe_ax.axhline(0.5, color="grey", lw=0.6)
        probe_ax.set_ylim(0.3, 1.02)
        for ax in axes[row]:
            ax.set_xlabel(f"{found['dose_scale']}; log, 0 = held out")
        score_ax.set_ylabel(metric)
        lift_ax.set_ylabel(f"lift over dose 0 ({metric})")
        probe_ax.set_ylabel("probe AUC vs dose 0 (pre-trained model)")
        score_ax.set_title(f"{task}, {arm}: {metric} per level", fontsize=10)
        units = sorted({c["unit"] for c in found["cells"] if c.get("unit")
                        and (c["task"], c["arm"], c["metric"]) == (task, arm, metric)})
        lift_ax.set_title(f"lift, {1 - found['cells'][0]['alpha']:.0%} CI (unit: "
                          f"{', '.join(units) or '-'}); two fits and their bands", fontsize=10)
        probe_ax.set_title("memorisation (loss) per level", fontsize=10)
        score_ax.legend(fontsize=8, frameon=False)
        lift_ax.legend(handles=lift_ax.get_legend_handles_labels()[0] + fits, fontsize=8,
                       frameon=False)
        if probe_ax.get_legend_handles_labels()[0]:  # no probe stages: only the 0.5 line
            probe_ax.legend(fontsize=8, frameon=False)
    return save_figure(fig, out_base)


def _dose_curves(ax: Any, cell: dict[str, Any], place: Any, colour: Any) -> None:
    """A ladder's two fitted curves (monotone solid, unconstrained dashed), their bands (the
    unconstrained one hatched) and its threshold on the lift axis."""
    band, curve = cell.get("band"), cell.get("curve")
    if band:
        at = [place(x) for x in band["copies_per_epoch"]]
        ax.fill_between(at, band["monotone"]["low"], band["monotone"]["high"], color=colour,
                        alpha=0.15, lw=0)
        ax.fill_between(at, band["unconstrained"]["low"], band["unconstrained"]["high"],
                        facecolor="none", edgecolor=colour, hatch="////", alpha=0.35, lw=0)
    if curve:
        at = [place(x) for x in curve["copies_per_epoch"]]
        ax.plot(at, curve["monotone"], ls="-", color=colour, lw=1.2)
        ax.plot(at, curve["unconstrained"], ls="--", color=colour, lw=1.2)
    if cell.get("threshold") is not None:
        ax.axvline(place(cell["threshold"]), color=colour, lw=0.8, ls=(0, (1, 3)))


def detect_figure(rows: list[dict[str, Any]], out_base: Path) -> list[Path]:
    """Each detector's ROC AUC on a model's own members, one row of panels per model and
    contaminated arm: against the dose (pre-trained model, a ladder's levels) and against the
    fine-tuning stage (every member); error bars are the interval over seeds, else over the
    model's samples. `rows`: the leaderboard's (lab.detect.leaderboard). [] when there is
    neither a ladder nor a fine-tuned model to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    own = [r for r in rows if r.get("comparison", "membership") == "membership"
           and r["arm"] == r["groups"] and number(r.get("auc")) is not None]
    panels = []
    for model, arm in sorted({(r["model"], r["arm"]) for r in own}):
        mine = [r for r in own if (r["model"], r["arm"]) == (model, arm)]
        pre = [r for r in mine if number(r.get("epochs")) is None]
        if {str(r["dose"]) for r in pre} - {"all"}:
            panels.append((model, arm, "dose", [r for r in pre if str(r["dose"]) != "all"]))
        if any(number(r.get("epochs")) is not None for r in mine):
            panels.append((model, arm, "stage", [r for r in mine if str(r["dose"]) == "all"]))
    if not panels:
        return []
    columns = min(2, len(panels))
    fig, axes = plt.subplots(math.ceil(len(panels) / columns), columns,
                             figsize=(6.5 * columns, 4.6 * math.ceil(len(panels) / columns)),
                             squeeze=False, layout="constrained")
    detectors = list(dict.fromkeys(r["detector"] for r in own))
    colours = {d: plt.cm.tab10(i % 10) for i, d in enumerate(detectors)}
    for ax, (model, arm, axis, chosen) in zip(axes.flat, panels):
        if axis == "dose":
            place = _dose_axis(ax, [0.0] + [float(r["dose"]) for r in chosen])
            ax.plot([place(0.0)], [0.5], marker="o", ms=4, color="grey")  # no member: 0.5
            ax.set_xlabel("copies per corpus epoch; log (0: the never-seen level)")
            position = lambda r: place(float(r["dose"]))  # noqa: E731
        else:
            stages = sorted({number(r.get("epochs")) for r in chosen},
                            key=lambda e: -1 if e is None else e)
            ax.set_xticks(range(len(stages)), ["pre-trained" if e is None else f"E={e:g}"
                                               for e in stages])
            ax.set_xlabel("fine-tuning epochs (every member)")
            position = lambda r: stages.index(number(r.get("epochs")))  # noqa: E731
        for detector in detectors:
            points = sorted((r for r in chosen if r["detector"] == detector), key=position)
            if not points:
                continue
            auc = [number(r["auc"]) for r in points]
            low = [number(r.get("auc_low")) if number(r.get("auc_low")) is not None
                   else number(r.get("auc_sample_low")) for r in points]
            high = [number(r.get("auc_high")) if number(r.get("auc_high")) is not None
                    else number(r.get("auc_sample_high")) for r in points]
            ax.errorbar([position(r) for r in points], auc,
                        yerr=[[max(0.0, a - lo) if lo is not None else 0.0
                               for a, lo in zip(auc, low)],
                              [max(0.0, hi - a) if hi is not None else 0.0
                               for a, hi in zip(auc, high)]],
                        marker="o", ms=4, capsize=3, color=colours[detector], label=detector)
        ax.axhline(0.5, color="grey", lw=0.6)
        ax.set_ylim(0.3, 1.02)
        ax.set_ylabel("ROC AUC, members vs never seen")
        ax.set_title(f"{model}, {arm}: " + ("pre-trained, per dose" if axis == "dose"
                                           else "before and after fine-tuning"), fontsize=10)
        ax.legend(fontsize=8, frameon=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    return save_figure(fig, out_base)


def timing_figure(found: dict[str, Any], metric: str, out_base: Path) -> list[Path]:
    """The forgetting curve: each timing level's lift over the held-out samples against the
    steps pre-training went on after its last exposure, one line per (model, arm, fine-tuning
    stage), error bars the interval over seeds (else over the model's samples). `found`:
    lab.analysis.timing.timing_stats. [] when nothing is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in found["levels"] if r["metric"] == metric
            and r.get("steps_since_last") is not None and r.get("lift") is not None]
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(6.8, 4.6), layout="constrained")
    lines = sorted({(r["model"], r["arm"], r["epochs"], str(r["train_size"])) for r in rows})
    for i, line in enumerate(lines):
        points = sorted((r for r in rows if (r["model"], r["arm"], r["epochs"],
                                             str(r["train_size"])) == line),
                        key=lambda r: r["steps_since_last"])
        lift = [r["lift"] for r in points]
        low = [r["lift"] - r["lift_ci_low"] if r.get("lift_ci_low") is not None else 0.0
               for r in points]
        high = [r["lift_ci_high"] - r["lift"] if r.get("lift_ci_high") is not None else 0.0
                for r in points]
        ax.errorbar([r["steps_since_last"] for r in points], lift, yerr=[low, high], marker="o",
                    ms=4, capsize=3, color=plt.cm.tab10(i % 10),
                    label=f"{line[0]} {line[1]} E={line[2]}")
        for r in points:
            ax.annotate(r["level"], (r["steps_since_last"], r["lift"]), fontsize=7,
                        xytext=(4, 4), textcoords="offset points")
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.set_xlabel("pre-training steps after the last exposure (median over samples)")
    ax.set_ylabel(f"{metric}: timing level minus held-out")
    ax.set_title("What pre-training remembers, by when it was seen")
    ax.legend(fontsize=7)
    paths = save_figure(fig, out_base)
    plt.close(fig)
    return paths
