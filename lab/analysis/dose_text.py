"""The dose-response table as text (lab.analysis.dose computes it): per level of each ladder, the
lift with its interval, Holm p, the pooled description, the contrast with the control, the probe,
and below each ladder its fits and trend, in Markdown for the report and in CSV for every
metric's levels.
"""
from __future__ import annotations

import csv
import io
from typing import Any

from lab.common import LabError
from lab.stats import CLIPPED_LEGEND, DEFAULT_DOSE_TREND, effect_text, starred_p
from lab.analysis.dose import DISAGREES, DOSE_SCALE, TREND_X
from lab.analysis.questions import SAMPLE_UNIT, SEED_UNIT


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _with_interval(value: float | None, low: float | None, high: float | None, seeds: int,
                   over_samples: bool = False, cut: str | None = None) -> str:
    """The lift and its interval, a cut bound marked, or why it has none
    (lab.stats.INTERVAL_RULE)."""
    return effect_text(value, low, high, seeds, over_samples, cut=cut)


def _describe_fits(cell: dict[str, Any]) -> str:
    monotone, free = cell.get("monotone_fit"), cell.get("unconstrained_fit")
    if not monotone or not free:
        return "; no fit"
    turn = ("no turn above dose 0" if free["turning_point"] is None
            else f"turns at {free['turning_point']:.3g} copies/epoch")
    flag = {True: "NON-MONOTONE", False: "monotone", None: "monotony not judged (no intervals)"}
    steps = "".join(f", {kind}: " + ", ".join(f"{a}->{b}" for a, b in cell[kind])
                    for kind in ("rises", "falls") if cell[kind])
    return (f"; monotone fit: top {monotone['top']:+.1f}, midpoint {monotone['midpoint']:.3g} "
            f"copies/epoch, slope {monotone['slope']:.2f}, rmse {monotone['rmse']:.2f}; "
            f"unconstrained fit: linear {free['linear']:+.2f}, quadratic {free['quadratic']:+.2f} "
            f"({turn}), rmse {free['rmse']:.2f}; {flag[cell['non_monotone']]}{steps}")


def _describe_trend(cell: dict[str, Any], alpha: float) -> str:
    """'rising trend; slope +12.3 per ln(1 + copies per corpus epoch), two-sided p 0.0001,
    Holm 0.0006*' (trend_verdict first), with 'not testable here' and the floor where the
    metric's trend tests cannot reach alpha."""
    verdict = cell.get("trend_verdict")
    if cell.get("trend_p_holm") is None:
        return f"{verdict}; trend not tested" if verdict else "trend not tested"
    text = (f"{verdict}; slope {cell['trend_slope']:+.3g} per {TREND_X}, "
            f"{cell.get('trend_side', DEFAULT_DOSE_TREND)} p {cell['trend_p']:.2g}, "
            f"Holm {starred_p(cell['trend_p_holm'], cell['trend_slope'], alpha, '.2g')}")
    if cell["trend_p_holm_floor"] > alpha:
        text += (f" (not testable here: {cell['trend_seeds']} seeds, smallest Holm p "
                 f"{cell['trend_p_holm_floor']:.3g})")
    return text


def dose_table(found: dict[str, Any], metric: str) -> dict[str, str]:
    """The dose-response table of one metric (Markdown) and every metric's levels (CSV)."""
    levels = [r for r in found["levels"] if r["metric"] == metric]
    if not levels:
        raise LabError(f"no dose-ladder levels with metric '{metric}'")
    alpha = found["cells"][0]["alpha"]
    header = ["model", "arm", "E", f"dose: {DOSE_SCALE}", "times seen", "token share", "seeds",
              "samples", "score", f"lift [{1 - alpha:.0%} CI]", "p (Holm)",
              "pooled p (description)", "vs control (p Holm)", "probe AUC"]
    lines = []
    for r in levels:
        versus = _with_interval(r.get("lift_vs_control"), r.get("lift_vs_control_ci_low"),
                                r.get("lift_vs_control_ci_high"), r["seeds"],
                                cut=r.get("lift_vs_control_ci_clipped"))
        if r.get("p_vs_control_holm") is not None:
            p_holm = starred_p(r["p_vs_control_holm"], r["lift_vs_control"], alpha, ".2g")
            versus += f" (p {p_holm}{' ' + DISAGREES if r.get('disagrees_vs_control') else ''})"
        lines.append([r["model"], r["arm"], str(r["epochs"]), str(r["dose"]),
                      _fmt(r.get("times_seen"), "g"), _fmt(r.get("token_share"), ".1%"),
                      str(r["seeds"]), str(r["samples"]), _fmt(r.get("score"), ".2f"),
                      _with_interval(r.get("lift"), r.get("lift_ci_low"), r.get("lift_ci_high"),
                                     len(r.get("seed_lifts") or {}),
                                     r.get("unit") == SAMPLE_UNIT, r.get("lift_ci_clipped")),
                      starred_p(r.get("p_holm"), r.get("lift"), alpha, ".2g")
                      + (f" {DISAGREES}" if r.get("disagrees") else ""),
                      _fmt(r.get("p_pooled_description"), ".2g"), versus,
                      _fmt(r.get("probe_auc"), ".2f")])
    thresholds = []
    for cell in (c for c in found["cells"] if c["metric"] == metric):
        at = ("none of the doses" if cell["threshold"] is None else
              f"dose {cell['threshold']} copies/epoch"
              + ("" if cell["threshold_times_seen"] is None
                 else f" ({cell['threshold_times_seen']:g} times seen)"))
        if cell.get("holm_floor", 0) > alpha:
            at = (f"not testable here (at best Holm p {cell['holm_floor']:.3g} with these seeds; "
                  f"{cell['seeds_for_alpha']} seeds would let a level reach {alpha:g})")
        whose = ("this model's" if cell["unit"] != SEED_UNIT else
                 f"these {cell['trend_seeds']} models'" if cell.get("trend_seeds") else
                 "these models'")
        thresholds.append(f"- {cell['model']} {cell['arm']} E={cell['epochs']}"
                          f"{'' if cell['train_size'] in ('', 'None', None) else ' train ' + str(cell['train_size'])}"
                          f" (unit: {cell['unit'] or '-'}): {_describe_trend(cell, alpha)}; "
                          f"{whose} detection threshold {at}{_describe_fits(cell)}")
    epochs = found.get("pretrain_epochs")
    note = (f"Dose: {DOSE_SCALE}, since every base document is also seen once per corpus epoch; "
            f"times seen: the dose x {_fmt(epochs, 'g') if epochs else 'the'} pre-training "
            f"epochs. {metric}: corpus-level score per level (mean over seeds). Lift: per seed "
            f"the level's mean per-sample {metric} minus dose 0's in that seed's model, the mean "
            f"over seeds, {1 - alpha:.0%} interval: {found['interval']}. p: "
            f"{found['within_test']}, Holm across a cell's levels; * marks Holm p <= {alpha:g}. "
            f"One seed (unit {SAMPLE_UNIT}): p is a {found['one_model_test']} and the interval "
            f"a {found['one_model_interval']}: the levels are random groups of samples, so both "
            f"are about that one model. Pooled p: {found['pooled_description']}. vs control: "
            f"{found['paired_test']}; Holm. Token share: the level's share of the trained "
            f"tokens. {DISAGREES}: the interval and the test disagree (the interval excludes 0 "
            f"and Holm p > {alpha:g}, or holds 0 and Holm p <= {alpha:g}; the interval is not "
            f"adjusted for the family, and with one seed it is about the mean while the test "
            f"ranks). Trend: one per ladder, Holm across this metric's ladders; one seed: "
            f"{found['trend_test']['one_model']}; seeds: {found['trend_test']['seeds']}. "
            f"Detection threshold: the smallest dose whose lift is positive with Holm p <= "
            f"{alpha:g}: a detection limit of these models and samples (it moves with the "
            f"seeds and samples per level), not a dose below which nothing happens. Curves, "
            f"fitted to the mean lifts against the dose: "
            f"{found['curves']['monotone']}; {found['curves']['unconstrained']}. "
            f"{found['non_monotone_rule']}; such a ladder is worded by how it turns ('non-"
            f"monotone: rises then falls'), whatever its trend p."
            + (f" {CLIPPED_LEGEND}." if any(r.get("lift_ci_clipped")
                                            or r.get("lift_vs_control_ci_clipped")
                                            for r in levels) else ""))
    markdown = ("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
                + "".join("| " + " | ".join(line) + " |\n" for line in lines)
                + "\n" + "\n".join(thresholds) + "\n\n" + note + "\n")
    columns = ["model", "task", "metric", "arm", "epochs", "train_size", "dose", "times_seen",
               "token_share", "seeds", "samples", "score", "score_std", "sample_mean", "lift",
               "lift_ci_low", "lift_ci_high", "lift_ci_clipped", "unit", "p", "p_holm",
               "p_pooled_description", "lift_vs_control", "lift_vs_control_ci_low",
               "lift_vs_control_ci_high", "lift_vs_control_ci_clipped",
               "p_vs_control", "p_vs_control_holm", "disagrees", "disagrees_vs_control",
               "probe_auc", "probe_p"]
    columns += sorted({k for r in found["levels"] for k in r if "_vs_" in k and k not in columns})
    handle = io.StringIO()
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(columns)
    for r in found["levels"]:
        writer.writerow(["" if r.get(c) is None else (f"{r[c]:.6g}" if isinstance(r[c], float)
                                                      else r[c]) for c in columns])
    return {"md": markdown, "csv": handle.getvalue()}
