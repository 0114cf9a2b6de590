"""`lab stats` and `lab report`: the study's answer as tables and the contamination-decay figure.

The first table holds the study's primary contrasts (lab.study.primary): each declared question
as an effect over seeds with its interval, its exact sign-flip test and Holm over the declared
family. The second, secondary table is descriptive and never starred: per cell (model x task x
metric x epochs x train size) every arm's mean and spread over seeds, each contaminated arm
against the control and its placebo by the study's own test (Mann-Whitney U over seeds under a
named convention, unpaired as the study ran it), the per-sample contrasts pooled over seeds,
and, where the arm was injected split-half, injected against held-out samples of the same
models (pooled, per seed, and, where seeds drew different splits, each sample injected against
itself held out).
"""
from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from lab.common import LabError, write_json_atomic
from lab.contamination import settings as settings_table
from lab.eval.generate import EXCLUDED_FROM_CLEAN
from lab.study.runner import BASELINE_PREFIX, PROBE_COLUMNS, PROBES, RESULTS, SAMPLES
from lab.stats import (ALPHA, ASYMPTOTIC_TIES, CONVENTIONS, CROSSOVER_TEST, DEFAULT_CONVENTION,
                       EXACT_SPLITS, PAIRED_SAMPLES_TEST, PERMUTATION_TIES, SEEDS_TEST, compare,
                       membership_auc, paired_sample_differences, paired_within_model,
                       signed_rank_test, within_model_net_of, within_model_seeds)
from lab.study.dose import dose_stats, dose_table
from lab.study.figure import decay_figure, dose_figure, plotted_cells, train_size_order
from lab.study.primary import exploratory_markdown, primary_table, render as render_primary
from lab.study.recipe import StatisticsSection

SCORE_FLOOR = 5.0  # below this (BLEU-like 0-100) a lift says little: the cell is flagged
LABELS = ("model", "task", "arm", "seed", "epochs", "train_size", "group")  # results.csv must have
SAMPLE_LABELS = ("model", "task", "arm", "epochs", "train_size", "group")   # samples.csv must have
NOT_METRICS = {"study", "benchmark", "task", "model", "arm", "seed", "epochs", "train_size",
               "stage", "group", "samples", "id", "injected_token_fraction", "pretrain_loss"}
RUN_NUMBERS = {"injected_token_fraction", "pretrain_loss"}  # numeric, but not metrics
WITHIN_TEST = "Mann-Whitney U, greater, asymptotic"
# Sample groups of lab evaluate (lab.eval.generate.GROUPS). The arm-vs-control comparison uses
# each evaluation's `clean` samples (outside the fine-tuning data and pre-existing overlap),
# falling back to `all` for studies collected before that group existed; the within-model test
# uses `injected` and `held_out` only, so the groups below are left out of it.
CLEAN = "clean"
LEFT_OUT = ("in_finetune_data", "pre_existing", "injected_truncated", "held_out_truncated")


def _number(value: str, path: Path, line: int, column: str) -> float | None:
    """A CSV cell as a float; empty (or nan/inf, which no mean survives) counts as missing."""
    if value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        raise LabError(f"{path}: line {line}, column {column}: '{value}' is not a number") from None
    return number if math.isfinite(number) else None


def _read_csv(path: Path, required: tuple[str, ...], numeric: Callable[[str], bool]
              ) -> list[dict[str, Any]]:
    """Rows of a study CSV, numeric columns parsed; every defect is a LabError naming the file
    (and the line and column where there is one)."""
    if path.is_dir():
        raise LabError(f"{path}: is a directory, not a CSV file")
    if not path.exists():
        raise LabError(f"{path}: no such file (run lab study first)")
    rows: list[tuple[int, dict[str, Any]]] = []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            for row in reader:
                rows.append((reader.line_num, row))
            columns = list(reader.fieldnames or [])
    except OSError as exc:
        raise LabError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise LabError(f"{path}: not UTF-8 text") from None
    except csv.Error as exc:
        raise LabError(f"{path}: line {len(rows) + 2}: {exc}") from None
    if not rows:
        return []  # header only: the caller says what that means
    missing = [c for c in required if c not in columns]
    if missing:
        raise LabError(f"{path}: missing column(s) {', '.join(missing)}")
    for line, row in rows:
        if None in row or None in row.values():
            raise LabError(f"{path}: line {line}: expected {len(columns)} fields like the header")
        if "epochs" in required and not row["epochs"].isdigit():
            raise LabError(f"{path}: line {line}, column epochs: '{row['epochs']}' is not a "
                           "whole number")
        for column in columns:
            if numeric(column):
                row[column] = _number(row[column], path, line, column)
    return [row for _line, row in rows]


def _std(values: list[float]) -> float | None:
    """Sample standard deviation; None for a single value (one seed has no spread to show)."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _mean(values: list[float], fallback: float) -> float:
    return sum(values) / len(values) if values else fallback


def _count(row: dict[str, Any]) -> float:
    """The `samples` cell of a results.csv row (kept as text: it is not a metric)."""
    try:
        return float(row.get("samples") or 0)
    except ValueError:
        return 0.0


def _scores(samples: list[dict[str, Any]], metric: str) -> list[float]:
    return [s[f"score_{metric}"] for s in samples if s.get(f"score_{metric}") is not None]


def _settings(study: Path, convention: str | None, alpha: float | None) -> tuple[str, float]:
    """The test convention and alpha: as given, else the study's recipe (STUDY/recipe.json),
    else the lab's defaults."""
    given_convention, given_alpha = convention, alpha
    recorded: dict[str, Any] = {}
    recipe = study / "recipe.json"
    if (convention is None or alpha is None) and recipe.is_file():
        try:
            recorded = json.loads(recipe.read_text(encoding="utf-8")).get("statistics") or {}
        except (OSError, ValueError, AttributeError):
            raise LabError(f"{recipe}: unreadable (not the JSON lab study writes)") from None
    defaults = StatisticsSection()
    convention = convention or recorded.get("convention") or defaults.convention
    alpha = alpha if alpha is not None else recorded.get("alpha", defaults.alpha)
    given = {"convention": given_convention, "alpha": given_alpha}
    where = {k: f"--{k}" if v is not None else f"{recipe}: statistics.{k}" for k, v in given.items()}
    if convention not in CONVENTIONS:
        raise LabError(f"{where['convention']} '{convention}': choose from {', '.join(CONVENTIONS)}")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 < alpha < 1:
        raise LabError(f"{where['alpha']} {alpha!r}: expected a number in (0, 1)")
    return convention, float(alpha)


def _declared(study: Path) -> dict[str, Any]:
    """What the study's recipe (STUDY/recipe.json) declares of its primary contrasts: the
    questions (None: every one its arms allow), the metric and whether it is descriptive; the
    recipe's defaults where the study has no recipe.json or predates the fields."""
    recipe = study / "recipe.json"
    recorded: dict[str, Any] = {}
    if recipe.is_file():
        try:
            recorded = json.loads(recipe.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise LabError(f"{recipe}: unreadable (not the JSON lab study writes)") from None
    statistics = (recorded.get("statistics") if isinstance(recorded, dict) else None) or {}
    evaluation = (recorded.get("evaluation") if isinstance(recorded, dict) else None) or {}
    primary = statistics.get("primary")
    if primary is not None and (not isinstance(primary, list)
                                or not all(isinstance(q, str) for q in primary)):
        raise LabError(f"{recipe}: statistics.primary: expected a list of questions or null")
    return {"primary": primary, "metric": statistics.get("primary_metric")
            or next(iter(evaluation.get("metrics") or []), None),
            "descriptive": bool(statistics.get("descriptive", False)), "where": recipe}


def study_primary(study: Path, convention: str | None = None, alpha: float | None = None
                  ) -> dict[str, Any]:
    """The study's primary table (lab.study.primary) as its recipe declares it: the questions,
    the metric (default: the recipe's first evaluation metric, else the results' first) and
    whether the study is descriptive; convention (its alternative) and alpha as study_stats."""
    study = Path(study)
    convention, alpha = _settings(study, convention, alpha)
    declared = _declared(study)
    rows = [r for r in _read_csv(study / RESULTS, LABELS,
                                 lambda c: c in RUN_NUMBERS or c not in NOT_METRICS)]
    compared = CLEAN if any(r["group"] == CLEAN for r in rows) else "all"
    rows = [r for r in rows if r["group"] == compared]
    if not rows or not (study / SAMPLES).exists():
        return {"rows": [], "missing": f"{study / SAMPLES}: no per-sample scores"}
    samples = _read_csv(study / SAMPLES, SAMPLE_LABELS, lambda c: c.startswith("score_"))
    metric = declared["metric"] or next(c for c in rows[0] if c not in NOT_METRICS)
    if not any(s.get(f"score_{metric}") is not None for s in samples):
        raise LabError(f"{declared['where']}: statistics.primary_metric '{metric}': no per-sample "
                       f"score_{metric} in {study / SAMPLES}")
    return primary_table(samples, rows, metric, declared["primary"], alpha,
                         CONVENTIONS[convention][0], declared["descriptive"])


def study_stats(study: Path, convention: str | None = None, include_control: bool = False,
                alpha: float | None = None) -> list[dict[str, Any]]:
    """One record per cell and arm: the contaminated arms, and with include_control the control
    too (its mean and spread only). Convention and alpha default to the study's recipe."""
    study = Path(study)
    if not study.is_dir():
        raise LabError(f"{study}: " + ("not a directory" if study.exists() else
                                       "no such study directory"))
    convention, alpha = _settings(study, convention, alpha)
    alternative = CONVENTIONS[convention][0]
    results = study / RESULTS
    every_group = _read_csv(results, LABELS, lambda c: c in RUN_NUMBERS or c not in NOT_METRICS)
    compared = CLEAN if any(r["group"] == CLEAN for r in every_group) else "all"
    older = sorted({r.get("stage") or "?" for r in every_group if r["group"] == "all"}
                   - {r.get("stage") or "?" for r in every_group if r["group"] == compared})
    if older:  # a study evaluated partly before `clean` existed: one sample set per comparison
        raise LabError(f"{results}: {len(older)} evaluation(s) predate the `clean` group "
                       f"({', '.join(older[:3])}{' ...' if len(older) > 3 else ''}): remove "
                       "their folders under STUDY/stages and run lab study again")
    rows = [r for r in every_group if r["group"] == compared]
    if not rows:
        raise LabError(f"{results}: the study has no finished runs")
    metrics = [c for c in rows[0] if c not in NOT_METRICS and not c.startswith("codebleu_")
               and not c.startswith(BASELINE_PREFIX)]
    if not metrics:
        raise LabError(f"{results}: no metric columns (bleu, meteor, em, ...)")
    samples = (_read_csv(study / SAMPLES, SAMPLE_LABELS, lambda c: c.startswith("score_"))
               if (study / SAMPLES).exists() else [])

    runs: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        runs[(r["model"], r["task"], int(r["epochs"]), r["train_size"])][r["arm"]].append(r)
    # Split-half groups as whole-corpus metrics (the same metric as the arm's own score), per run.
    group_runs: dict[tuple, list] = defaultdict(list)
    for r in every_group:
        if r["group"] in ("injected", "held_out", *LEFT_OUT):
            group_runs[(r["model"], r["task"], int(r["epochs"]), r["train_size"], r["arm"],
                        r["group"])].append(r)
    per_sample: dict[tuple, list] = defaultdict(list)
    for s in samples:
        per_sample[(s["model"], s["task"], int(s["epochs"]), s["train_size"], s["arm"],
                    s["group"])].append(s)
    # Per arm, each clean sample's score keyed by (seed, id): two arms of one seed scored the
    # same samples (older samples.csv files lack the seed or id column: no paired contrast).
    clean_scores: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        if s["group"] not in EXCLUDED_FROM_CLEAN and s.get("seed") not in (None, "") \
                and s.get("id") not in (None, ""):
            clean_scores[(s["model"], s["task"], int(s["epochs"]), s["train_size"])][s["arm"]].append(s)
    arms = sorted({r["arm"] for r in rows} - {"control"})
    if include_control and any(r["arm"] == "control" for r in rows):
        arms.insert(0, "control")
    keys = sorted(runs, key=lambda k: (k[0], k[1], k[2], train_size_order(k[3])))

    cells: list[dict[str, Any]] = []
    for metric in metrics:
        for key in keys:
            model, task, epochs, size = key
            control = [r[metric] for r in runs[key]["control"] if r[metric] is not None]
            for arm in arms:
                values = [r[metric] for r in runs[key][arm] if r[metric] is not None]
                cell: dict[str, Any] = {"model": model, "task": task, "metric": metric,
                                        "epochs": epochs, "train_size": size, "arm": arm,
                                        "convention": convention, "alpha": alpha,
                                        "seeds": len(values)}
                if values:
                    cell.update(mean=sum(values) / len(values), std=_std(values))
                baselines = baseline_means(runs[key][arm], metric)
                if baselines and values:  # flagged when every model of the cell is below
                    means = [cell["mean"]] + ([sum(control) / len(control)] if control else [])
                    cell.update(baselines=baselines, baseline_best=max(baselines.values()),
                                below_baseline=max(means) < max(baselines.values()))
                # The samples compared, and those left out per reason (mean per evaluation;
                # an evaluation without a group's row had none of it).
                evaluations = len(runs[key][arm])
                cell.update(sample_set=compared, samples_compared=_mean(
                    [_count(r) for r in runs[key][arm]], 0.0))
                for group in LEFT_OUT:
                    cell[f"left_out_{group}"] = sum(
                        _count(r) for r in group_runs[key + (arm, group)]) / max(1, evaluations)
                for column in ("injected_token_fraction", "pretrain_loss"):  # older studies lack them
                    known = [r[column] for r in runs[key][arm] if r.get(column) is not None]
                    if known:
                        cell[column] = sum(known) / len(known)
                if arm == "control":
                    cells.append(cell)
                    continue
                if values and control:
                    result = compare(values, control, convention)
                    cell.update(control=result.mean_control, control_std=_std(control),
                                control_seeds=len(control), lift=result.lift,
                                lift_pct=result.lift_pct,
                                below_floor=max(result.mean_experimental, result.mean_control)
                                < SCORE_FLOOR)
                    if _over_seeds(values, control):
                        cell.update(u=result.u, p=result.p, test=result.convention(),
                                    cliffs_delta=result.cliffs_delta, a12=result.a12)
                # The study's contrast above; against the placebo arm (same form, count and repeat
                # from samples disjoint from the test split) the lift is the contamination alone.
                placebo = settings_table.placebo_of(arm)
                placebo_values = [r[metric] for r in runs[key].get(placebo, []) if r[metric] is not None]
                if values and placebo_values:
                    vs = compare(values, placebo_values, convention)
                    cell.update(placebo_arm=placebo, placebo=vs.mean_control,
                                placebo_std=_std(placebo_values), placebo_seeds=len(placebo_values),
                                lift_vs_placebo=vs.lift)
                    if _over_seeds(values, placebo_values):
                        cell.update(u_vs_placebo=vs.u, p_vs_placebo=vs.p,
                                    cliffs_delta_vs_placebo=vs.cliffs_delta)
                # The per-sample references of this cell, by key suffix: each arm's clean
                # scores keyed by (seed, sample id), built once for both contrasts below.
                references = {suffix: _keyed(clean_scores[key], reference, metric)
                              for reference, suffix in (("control", ""), (placebo, "_vs_placebo"))
                              if reference}
                own = _keyed(clean_scores[key], arm, metric)
                for suffix, reference_scores in references.items():
                    cell.update(_paired_samples(own, reference_scores, suffix))
                injected = _scores(per_sample[key + (arm, "injected")], metric)
                held = _scores(per_sample[key + (arm, "held_out")], metric)
                if injected and held:
                    # The test and its power use per-sample scores; the columns show the
                    # corpus-level metric of each group (mean over seeds), like the arm's score.
                    _u, p_within = paired_within_model(injected, held)
                    mean_i, mean_h = sum(injected) / len(injected), sum(held) / len(held)
                    corpus = {g: [r[metric] for r in group_runs[key + (arm, g)]
                                  if r.get(metric) is not None] for g in ("injected", "held_out")}
                    cell.update(injected=_mean(corpus["injected"], mean_i),
                                held_out=_mean(corpus["held_out"], mean_h),
                                below_floor_within=max(_mean(corpus["injected"], mean_i),
                                                       _mean(corpus["held_out"], mean_h))
                                < SCORE_FLOOR,
                                injected_sample_mean=mean_i, held_out_sample_mean=mean_h,
                                injected_samples=len(injected), held_out_samples=len(held),
                                p_within=p_within)
                    # Over seeds: older samples.csv files lack the seed or id column.
                    scored = [(s.get("seed"), s.get("id"), group, s.get(f"score_{metric}"))
                              for group in ("injected", "held_out")
                              for s in per_sample[key + (arm, group)]]
                    if all(seed not in (None, "") and sample not in (None, "")
                           for seed, sample, _g, _s in scored):
                        scored = [row for row in scored if row[3] is not None]
                        cell.update(within_model_seeds(scored))
                        for suffix, reference_scores in references.items():
                            net = within_model_net_of(scored, reference_scores)
                            cell.update({k + suffix: v for k, v in net.items()})
                cells.append(cell)
    memorised = memorisation(study, alpha)
    for cell in cells:
        cell.update(memorised.get((cell["model"], cell["arm"]), {}))
    return cells


def _over_seeds(experimental: list[float], reference: list[float]) -> bool:
    """Whether two arms' scores over seeds can be tested (and their lift given an interval):
    with one seed on a side, U has a single value and p is 1 whatever the scores; the
    per-sample contrasts still compare the two models."""
    return min(len(experimental), len(reference)) >= 2


def _keyed(scores: dict[str, list], arm: str, metric: str) -> dict[tuple, float]:
    """One arm's clean per-sample scores keyed by (seed, sample id)."""
    return {(s["seed"], s["id"]): s[f"score_{metric}"] for s in scores.get(arm, [])
            if s.get(f"score_{metric}") is not None}


def _paired_samples(own: dict[tuple, float], reference: dict[tuple, float], suffix: str
                    ) -> dict[str, Any]:
    """Arm against a reference arm on the same clean test samples (same seed; both keyed as
    _keyed makes them): the mean per-sample difference and its signed-rank test, keys
    `sample_gap{suffix}`, `paired_samples{suffix}`, `p_samples{suffix}`."""
    differences = paired_sample_differences(own, reference)
    if not differences:
        return {}
    p, _test = signed_rank_test(differences, PAIRED_SAMPLES_TEST)
    return {f"sample_gap{suffix}": sum(differences) / len(differences),
            f"paired_samples{suffix}": len(differences), f"p_samples{suffix}": p}


MEMORISED_BY = {"held_out": "injected vs held-out (same model)",
                "reference": "injected vs never-seen valid samples (same model)"}
VS_PLACEBO = "arm model vs placebo model on the injected samples (same seed)"


def memorisation(study: Path, alpha: float) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (model, arm): did the pre-trained models tell injected samples from never-seen ones by
    their loss (lab probe, pooled over seeds)? Within the same model: injected vs held-out
    samples (split-half arms), else injected vs never-seen samples of the benchmark's valid
    split (`reference`). A control or placebo model gets the same comparison on a contaminated
    arm's samples, which it never saw (expect AUC near 0.5). Besides, a contaminated arm's loss
    on its injected samples against its placebo model's on the same samples (same seed): what
    memorising them adds to seeing the task's format and languages."""

    path = Path(study) / PROBES
    if not path.exists():
        return {}
    rows = _read_csv(path, ("model", "arm", "seed", "groups", "id", "group", "loss"),
                     lambda c: c in PROBE_COLUMNS)
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for model, arm in sorted({(r["model"], r["arm"]) for r in rows}):
        own = [r for r in rows if (r["model"], r["arm"]) == (model, arm) and r["loss"] is not None]
        if own and not settings_table.get(arm).injects_test:  # probed on another arm's samples
            own = [r for r in own if r["groups"] == own[0]["groups"]]
        injected = [r["loss"] for r in own if r["group"] == "injected"]
        verdict: dict[str, Any] = {}
        for baseline in ("held_out", "reference"):
            others = [r["loss"] for r in own if r["group"] == baseline]
            if injected and others:
                auc, p = membership_auc(injected, others, False)
                verdict.update(memorised=p <= alpha, memorised_auc=auc, memorised_p=p,
                               memorised_by=MEMORISED_BY[baseline])
                break
        placebo = settings_table.placebo_of(arm)
        if placebo:
            theirs = {(r["seed"], r["id"]): r["loss"] for r in rows
                      if (r["model"], r["arm"], r["groups"], r["group"])
                      == (model, placebo, arm, "injected") and r["loss"] is not None}
            pairs = [(r["loss"], theirs[(r["seed"], r["id"])]) for r in own
                     if r["group"] == "injected" and (r["seed"], r["id"]) in theirs]
            if pairs:
                auc, p = membership_auc([a for a, _ in pairs], [b for _, b in pairs], False)
                verdict.update(memorised_vs_placebo=p <= alpha, memorised_vs_placebo_auc=auc,
                               memorised_vs_placebo_p=p, memorised_vs_placebo_by=VS_PLACEBO)
        if verdict:
            found[(model, arm)] = verdict
    return found


def _memorised(cell: dict[str, Any], prefix: str = "memorised") -> str:
    """'yes (0.97, vs held-out)': the verdict, its AUC and what the injected samples were compared
    with (held-out samples, never-seen valid samples, or the placebo model)."""
    if prefix not in cell:
        return "-"
    against = {MEMORISED_BY["held_out"]: "vs held-out", MEMORISED_BY["reference"]: "vs valid",
               VS_PLACEBO: "vs placebo"}.get(cell.get(f"{prefix}_by", ""), "")
    return (f"{'yes' if cell[prefix] else 'no'} ({cell[f'{prefix}_auc']:.2f}"
            + (f", {against})" if against else ")"))


# ---- tables -------------------------------------------------------------------------------

def _num(cell: dict[str, Any], key: str, spec: str = ".2f") -> str:
    value = cell.get(key)
    return "-" if value is None else format(value, spec)


def _mean_std(cell: dict[str, Any], mean: str, std: str) -> str:
    if cell.get(mean) is None:
        return "-"
    return f"{cell[mean]:.2f}" + (f" ± {cell[std]:.2f}" if cell.get(std) is not None else "")


def _lift(cell: dict[str, Any], suffix: str = "") -> str:
    return "-" if f"lift{suffix}" not in cell else f"{cell[f'lift{suffix}']:+.2f}"


def _plain(cell: dict[str, Any], key: str, spec: str) -> str:
    """A p-value of the secondary table: a description, so never starred (the primary table
    holds the tests)."""
    return "-" if cell.get(key) is None else format(cell[key], spec)


def _paired(cell: dict[str, Any], suffix: str) -> str:
    """The mean per-sample difference against a reference arm and its signed-rank p."""
    if cell.get(f"p_samples{suffix}") is None:
        return "-"
    return (f"{cell[f'sample_gap{suffix}']:+.2f}, p "
            + _plain(cell, f"p_samples{suffix}", ".2g"))


def _net(cell: dict[str, Any], suffix: str) -> str:
    """The split-half gap net of the control (suffix '') or the placebo ('_vs_placebo') on the
    same halves, its pooled per-sample p and, from two seeds, its p over seeds."""
    if cell.get(f"net_gap{suffix}") is None:
        return "-"
    text = f"{cell[f'net_gap{suffix}']:+.2f}, p " + _plain(cell, f"p_net{suffix}", ".2g")
    if cell.get(f"p_net_seeds{suffix}") is not None:
        text += "; seeds " + _plain(cell, f"p_net_seeds{suffix}", ".2g")
    return text + (" †" if cell.get("below_floor_within") else "")


def _gap(cell: dict[str, Any]) -> str:
    """The mean per-seed gap (injected minus held-out) and how many seeds had it above zero;
    '-' with a single seed, whose gap is the injected and held-out columns' difference."""
    gaps = cell.get("seed_gaps") or {}
    if len(gaps) < 2:
        return "-"
    return f"{cell['gap_per_seed']:+.2f} ({cell['seeds_positive']}/{len(gaps)} positive)"


def _crossover(cell: dict[str, Any]) -> str:
    if cell.get("p_crossover") is None:
        return "-"
    return (_plain(cell, "p_crossover", ".2g") + f" (n = {cell['crossover_samples']})"
            + (" †" if cell.get("below_floor_within") else ""))


def _p(cell: dict[str, Any]) -> str:
    if cell.get("p") is None:
        return "-"
    return _plain(cell, "p", ".4g") + (" †" if cell.get("below_floor") else "")


def _p_within(cell: dict[str, Any], key: str) -> str:
    """A within-model p (injected vs held-out halves), flagged like _p when both halves score
    below the floor."""
    if cell.get(key) is None:
        return "-"
    return _plain(cell, key, ".2g") + (" †" if cell.get("below_floor_within") else "")


def baseline_means(runs: list[dict[str, Any]], metric: str) -> dict[str, float]:
    """Each trivial baseline's score on a cell's samples (results.csv's baseline_NAME_METRIC
    columns), averaged over the cell's evaluations."""
    found: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for column, value in run.items():
            name, _, of = column[len(BASELINE_PREFIX):].partition("_")
            if column.startswith(BASELINE_PREFIX) and of == metric and value is not None:
                found[name].append(value)
    return {name: sum(v) / len(v) for name, v in sorted(found.items())}


def _baselines(cell: dict[str, Any]) -> str:
    shown = " / ".join(f"{name} {value:.2f}" for name, value in (cell.get("baselines") or {}).items())
    return (shown + (" ‡" if cell.get("below_baseline") else "")) if shown else "-"


# (header, formatter) of the two tables: the paper-style one of lab report, the full one of
# lab stats.
PAPER_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("model", lambda c: c["model"]), ("task", lambda c: c["task"]),
    ("metric", lambda c: c["metric"]), ("epochs", lambda c: str(c["epochs"])),
    ("train size", lambda c: c["train_size"] or "all"), ("arm", lambda c: c["arm"]),
    ("injected tokens", lambda c: _num(c, "injected_token_fraction", ".1%")),
    ("memorised? (AUC)", _memorised),
    ("memorised vs placebo (AUC)", lambda c: _memorised(c, "memorised_vs_placebo")),
    ("experimental", lambda c: _mean_std(c, "mean", "std")),
    ("control", lambda c: _mean_std(c, "control", "control_std")),
    ("baselines", _baselines),
    ("p", _p),
    ("placebo", lambda c: _mean_std(c, "placebo", "placebo_std")),
    ("p vs placebo", lambda c: _plain(c, "p_vs_placebo", ".4g")),
    ("per sample vs control", lambda c: _paired(c, "")),
    ("per sample vs placebo", lambda c: _paired(c, "_vs_placebo")),
    ("injected", lambda c: _num(c, "injected")), ("held-out", lambda c: _num(c, "held_out")),
    ("p (within)", lambda c: _p_within(c, "p_within")),
    ("gap net of control", lambda c: _net(c, "")),
    ("gap net of placebo", lambda c: _net(c, "_vs_placebo")),
    ("gap/seed", _gap), ("p (seeds)", lambda c: _p_within(c, "p_seeds")),
    ("p (crossover)", _crossover),
]
TEXT_COLUMNS = {"model", "task", "metric", "train size", "arm"}  # left-aligned in LaTeX
STATS_COLUMNS = PAPER_COLUMNS[:7] + [
    ("pre-training loss", lambda c: _num(c, "pretrain_loss")), ("seeds", lambda c: str(c["seeds"])), ("mean ± std", lambda c: _mean_std(c, "mean", "std")),
    ("control", lambda c: _mean_std(c, "control", "control_std")), ("baselines", _baselines),
    ("lift", lambda c: _lift(c)),
    ("U", lambda c: _num(c, "u", "g")), ("p", _p),
    ("Cliff's delta", lambda c: _num(c, "cliffs_delta")), ("A12", lambda c: _num(c, "a12")),
    ("placebo", lambda c: _mean_std(c, "placebo", "placebo_std")),
    ("lift vs placebo", lambda c: _lift(c, "_vs_placebo")),
    ("p vs placebo", lambda c: _plain(c, "p_vs_placebo", ".4g")),
    ("per sample vs control", lambda c: _paired(c, "")),
    ("per sample vs placebo", lambda c: _paired(c, "_vs_placebo")),
    ("injected", lambda c: _num(c, "injected")), ("held-out", lambda c: _num(c, "held_out")),
    ("p (within)", lambda c: _p_within(c, "p_within")),
    ("gap net of control", lambda c: _net(c, "")),
    ("gap net of placebo", lambda c: _net(c, "_vs_placebo")),
    ("gap/seed", _gap), ("p (seeds)", lambda c: _p_within(c, "p_seeds")),
    ("p (crossover)", _crossover),
]


def _test_name(cells: list[dict[str, Any]]) -> str:
    """The convention's test by name, and what ties made of an exact one: the exact permutation
    distribution, or (too many splits to count) the normal approximation."""
    convention = cells[0]["convention"] if cells else DEFAULT_CONVENTION
    alternative, method = CONVENTIONS[convention]
    name = f"Mann-Whitney U, {alternative}, {method} (convention {convention})"
    if any(c.get("test", "").endswith(PERMUTATION_TIES) for c in cells):
        name += ("; exact permutation distribution (ties as midranks, every split counted) in "
                 "cells with tied scores")
    if any(c.get("test", "").endswith(ASYMPTOTIC_TIES) for c in cells):
        name += (f"; asymptotic in cells with tied scores and over {EXACT_SPLITS:,} splits to "
                 "enumerate")
    return name


def _methods(cells: list[dict[str, Any]], p_key: str, test_key: str) -> str:
    """'exact', 'asymptotic' or both: what the cells' tests of one kind used."""
    used = {"asymptotic" if "asymptotic" in c[test_key] else "exact" for c in cells
            if c.get(p_key) is not None}
    return "exact" if used == {"exact"} else (
        "asymptotic" if used == {"asymptotic"} else "exact (asymptotic where too large)")


def _note(cells: list[dict[str, Any]]) -> str:
    """What the table's columns and marks mean, for the parts this table has."""
    alpha = cells[0]["alpha"] if cells else ALPHA
    parts = ["Descriptive: no p-value of this table is starred or decides anything; the "
             "primary table holds the study's tests (over seeds, paired by seed, Holm over the "
             "declared family).",
             "Injected tokens: the share of pre-training tokens that were injected test data."]
    if any("memorised" in c or "memorised_vs_placebo" in c for c in cells):
        parts.append(
            "Memorised?: whether the pre-trained models' loss (lab probe) tells the injected "
            "samples from never-seen ones within the same model, with the ROC AUC (0.5: no "
            "signal) and the comparison used: 'vs held-out' (the held-out half of a split-half "
            "arm), 'vs valid' (never-seen samples of the benchmark's valid split that the audit "
            "clears of test overlap); a control or placebo row: the same on a contaminated arm's "
            "samples, which it never saw. Memorised vs placebo: the arm model's loss on its "
            "injected samples against its placebo model's on the same samples (same seed). Yes "
            f"when the one-sided Mann-Whitney p <= {alpha}.")
    if any(c.get("sample_set") == CLEAN for c in cells):
        parts.append(
            "Experimental, control: the metric over each evaluation's clean samples, those "
            "neither in its fine-tuning data (input or output verbatim) nor pre-existing in the "
            f"arm's base corpus; left out per evaluation: {_range(cells, 'in_finetune_data')} in "
            f"the fine-tuning data, {_range(cells, 'pre_existing')} pre-existing. Injected "
            "samples whose document was cut at the pre-training block size "
            f"({_range(cells, 'injected_truncated')} per evaluation), held-out samples whose "
            f"document would have been ({_range(cells, 'held_out_truncated')}) and those left out "
            "above are in neither the injected nor the held-out group.")
    if any("p" in c for c in cells):
        parts.append(
            f"p: arm vs control over seeds by the study's own test, {_test_name(cells)}, "
            "unpaired as the study ran it (kept to compare with its tables; arms of one seed "
            "share their base documents, so the primary table pairs them).")
    elif any("control" in c for c in cells):
        parts.append("One seed per arm: no test over seeds (see the per-sample contrasts).")
    else:
        parts.append("No control arm: no arm-vs-control test.")
    if any("p_vs_placebo" in c or "p_samples_vs_placebo" in c for c in cells):
        parts.append(
            "Three contrasts: a contaminated arm vs its placebo (same form, count and repeat, "
            "from train/valid samples disjoint from the test split: the contamination effect); "
            "the placebo arm's own row vs the control (the format effect: the task's form and "
            "languages seen in pre-training); the arm vs the control (the study's contrast, "
            "both effects together). p vs placebo: the same test over seeds.")
    if any("p_samples" in c or "p_samples_vs_placebo" in c for c in cells):
        parts.append(
            "Per sample vs control / vs placebo: the mean difference of each clean test sample's "
            "score under the arm's model and under the other arm's model of the same seed, and "
            f"its p ({PAIRED_SAMPLES_TEST}; a sample counts once per seed: a description of "
            "these models, not a test over seeds).")
    if any("p_within" in c for c in cells):
        parts.append(
            "Injected, held-out: the metric on each half of a split-half arm's test samples (mean "
            f"over seeds). p (within): injected vs held-out per-sample scores of the same models, "
            f"{WITHIN_TEST}, pooled over seeds as if independent (a description).")
    if any(c.get("net_gap") is not None or c.get("net_gap_vs_placebo") is not None
           for c in cells):
        parts.append(
            "Gap net of control / of placebo: the halves hold different samples, so injected vs "
            "held-out also compares how hard each half is; the control's (placebo's) model of "
            "the same seed saw neither half and scores both. Per seed, the arm's mean per-sample "
            "lift over that model on the injected half minus its lift on the held-out half; the "
            f"mean over seeds. p: the two halves' lifts pooled over seeds ({WITHIN_TEST}, a "
            f"description); seeds: the per-seed net gaps above zero ({SEEDS_TEST}).")
    if any(c.get("p_seeds") is not None for c in cells):
        parts.append(
            "Gap/seed: per seed, the injected minus the held-out per-sample mean of its model; "
            "their mean, and the seeds where it is positive. p (seeds): are the per-seed gaps "
            f"above zero, {SEEDS_TEST}, {_methods(cells, 'p_seeds', 'seeds_test')} (with k "
            "seeds its p is at least 1/2^k: 2 seeds cannot go below 0.25, 5 reach 0.031).")
    elif any("seeds_test" in c for c in cells):
        parts.append("One seed: the gap between injected and held-out samples cannot be tested "
                     "over seeds.")
    if any(c.get("p_crossover") is not None for c in cells):
        parts.append(
            "p (crossover): the seeds drew different splits, so a sample injected by some seeds' "
            "models was held out by others': each such sample's mean score injected minus held "
            f"out, {CROSSOVER_TEST}, {_methods(cells, 'p_crossover', 'crossover_test')}, over "
            "the n samples (zero differences dropped, ties as midranks).")
    if any(c.get("below_floor") or c.get("below_floor_within") for c in cells):
        parts.append(f"† both means (arm and control, or injected and held-out) below "
                     f"{SCORE_FLOOR}: a difference there says little.")
    if any(c.get("baselines") for c in cells):
        parts.append("baselines: what a program with no model scores on the same samples (copy: "
                     "the input unchanged; retrieval: the reference of the most similar "
                     "fine-tuning input, BM25), lab.eval.baselines.")
    if any(c.get("below_baseline") for c in cells):
        parts.append("‡ the arm (and the control, if any) below the best trivial baseline: no "
                     "model of the cell is one anyone would use, whatever the lift.")
    return " ".join(parts)


def _range(cells: list[dict[str, Any]], group: str) -> str:
    """The samples left out for one reason per evaluation, over the cells: '0', '4' or '0-6'."""
    values = [c[f"left_out_{group}"] for c in cells if f"left_out_{group}" in c]
    low, high = (min(values), max(values)) if values else (0.0, 0.0)
    text = lambda v: f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"  # noqa: E731
    return text(low) if low == high else f"{text(low)}-{text(high)}"


def _rows(cells: list[dict[str, Any]], columns: list[tuple[str, Callable]]
          ) -> tuple[list[str], list[list[str]]]:
    return [h for h, _ in columns], [[fmt(c) for _, fmt in columns] for c in cells]


def _markdown(header: list[str], rows: list[list[str]], note: str) -> str:
    return ("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
            + "".join("| " + " | ".join(row) + " |\n" for row in rows) + f"\n{note}\n")


def _csv(header: list[str], rows: list[list[str]], test: str) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header + ["test"])  # the convention rides along in every row
    writer.writerows(row + [test] for row in rows)
    return out.getvalue()


def tables(cells: list[dict[str, Any]]) -> dict[str, str]:
    """Paper-style tables of the contaminated arms: Markdown, LaTeX and CSV."""
    cells = [c for c in cells if c["arm"] != "control"] or cells
    columns = PAPER_COLUMNS
    if len({c["train_size"] for c in cells}) <= 1:  # one train size: the column says nothing
        columns = [c for c in columns if c[0] != "train size"]
    header, lines = _rows(cells, columns)
    note = _note(cells)
    # For reading, drop columns the study cannot fill (no control arm: no p; no split-half arm:
    # no injected/held-out); the CSV keeps every column so that its schema never changes.
    keep = [i for i in range(len(header)) if any(row[i] != "-" for row in lines)]
    shown, shown_lines = [header[i] for i in keep], [[row[i] for i in keep] for row in lines]
    latex = ("\\begin{tabular}{" + "".join("l" if h in TEXT_COLUMNS else "r" for h in shown)
             + "}\n\\toprule\n" + " & ".join(shown).replace("%", "\\%") + " \\\\\n\\midrule\n"
             + "".join(" & ".join(x.replace("±", "$\\pm$").replace("†", "$^\\dagger$")
                                  .replace("_", "\\_") for x in row) + " \\\\\n"
                       for row in shown_lines)
             + "\\bottomrule\n\\end{tabular}\n% " + note + "\n")
    return {"md": _markdown(shown, shown_lines, note), "tex": latex,
            "csv": _csv(header, lines, _test_name(cells))}


def _report_folder(study: Path) -> Path:
    folder = Path(study) / "report"
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise LabError(f"{folder}: cannot create ({exc.strerror or exc})") from None
    return folder


def study_doses(study: Path, cells: list[dict[str, Any]], band_metric: str | None = None
                ) -> dict[str, Any]:
    """The dose-response levels and cells of a study with a dose ladder (lab.study.dose), for
    the metrics of `cells`; written to STUDY/report/dose.json when there are any."""
    metrics = sorted({c["metric"] for c in cells})
    found = dose_stats(study, metrics, cells[0]["alpha"], _read_csv, band_metric,
                       alternative=CONVENTIONS[cells[0]["convention"]][0])
    if found["levels"]:
        write_json_atomic(_report_folder(study) / "dose.json", found)
    return found


def _write_stats(study: Path, cells: list[dict[str, Any]], primary: dict[str, Any]) -> Path:
    """STUDY/report/stats.json, written whole or not at all: the primary table's rows, then the
    secondary table's cells."""
    path = _report_folder(study) / "stats.json"
    convention, alpha = cells[0]["convention"], cells[0]["alpha"]
    alternative, method = CONVENTIONS[convention]
    write_json_atomic(path, {"convention": convention, "alpha": alpha, "primary": primary,
                             "test": f"Mann-Whitney U, {alternative}, {method}",
                             "within_test": WITHIN_TEST, "seeds_test": SEEDS_TEST,
                             "crossover_test": CROSSOVER_TEST,
                             "paired_samples_test": PAIRED_SAMPLES_TEST, "cells": cells})
    return path


def _primary_markdown(primary: dict[str, Any]) -> str:
    """The primary table's section, and the exploratory one where the arms allow undeclared
    questions."""
    body = (render_primary(primary)["md"] if primary["rows"] else
            f"No primary contrast: {primary.get('missing') or 'the study declares none'}.\n")
    exploratory = exploratory_markdown(primary) if primary.get("exploratory") else ""
    return ("## Primary contrasts\n\n" + body
            + ("\n## Exploratory contrasts (not declared: no Holm, never starred)\n\n"
               + exploratory if exploratory else ""))


def _with_primary_p(cells: list[dict[str, Any]], primary: dict[str, Any]) -> None:
    """Each cell of the primary metric gets its arm's headline primary test (contamination,
    else study, else split-half; a placebo arm: format) at its epochs, for the decay figure."""
    headline = {"contamination": 0, "study": 1, "split-half": 2, "format": 3}
    for cell in cells:
        tests = [r for r in primary["rows"] if r["epochs_to"] is None and r.get("p_holm") is not None
                 and (r["model"], r["task"], r["metric"], r["epochs"], r["train_size"], r["arm"])
                 == (cell["model"], cell["task"], cell["metric"], cell["epochs"],
                     cell["train_size"], cell["arm"]) and r["question"] in headline]
        if tests:
            best = min(tests, key=lambda r: headline[r["question"]])
            cell.update(p_primary=best["p_holm"], p_primary_label=f"p (Holm), {best['question']}")


def run_stats(study: Path, convention: str | None = None, alpha: float | None = None
              ) -> dict[str, Any]:
    """Entry point of `lab stats`: the primary table, then every arm per cell with the
    descriptive tests and effect sizes; writes STUDY/report/stats.json. Convention and alpha
    default to the study's recipe."""
    cells = study_stats(study, convention, include_control=True, alpha=alpha)
    primary = study_primary(study, convention, alpha)
    path = _write_stats(study, cells, primary)
    doses = study_doses(study, cells)
    header, rows = _rows(cells, STATS_COLUMNS)
    note = _note(cells)
    return {"cells": cells, "primary": primary, "json": path, "doses": doses,
            "primary_md": _primary_markdown(primary),
            "dose_tables": {m: dose_table(doses, m) for m in sorted({r["metric"] for r in
                                                                      doses["levels"]})},
            "title": f"{Path(study)}: secondary table (descriptive; {_test_name(cells)})",
            "header": header, "rows": rows, "note": note, "md": _markdown(header, rows, note),
            "csv": _csv(header, rows, _test_name(cells))}


def run_report(study: Path, convention: str | None = None, metric: str = "bleu",
               alpha: float | None = None, html: bool = True) -> dict[str, Any]:
    """Entry point of `lab report`: tables (md, tex, csv), stats.json, the decay figure and
    (html) the self-contained HTML page with the sample browser. Convention and alpha default
    to the study's recipe."""
    study = Path(study)
    cells = study_stats(study, convention, include_control=True, alpha=alpha)
    plotted_cells(cells, metric)  # an unknown --metric fails before anything is written
    if html:  # so does a defect in what the HTML page reads (predictions, probes)
        from lab.study.html import study_page_data, write_html_report

        page = study_page_data(study)
    primary = study_primary(study, convention, alpha)
    _with_primary_p(cells, primary)
    written = []
    path = _write_stats(study, cells, primary)
    rendered = tables(cells)
    outputs = {f"table.{suffix}": text for suffix, text in rendered.items()}
    if primary["rows"] or primary.get("exploratory"):
        outputs.update({f"primary.{suffix}": text
                        for suffix, text in render_primary(primary).items()})
    for name, text in outputs.items():
        written.append(study / "report" / name)
        written[-1].write_text(text, encoding="utf-8")
    figure = decay_figure(cells, metric, study / "report" / f"decay-{metric}")
    doses = study_doses(study, cells, band_metric=metric)
    dose_markdown = ""
    if doses["levels"]:
        dose_tables = dose_table(doses, metric)
        for suffix, text in dose_tables.items():
            written.append(study / "report" / f"dose.{suffix}")
            written[-1].write_text(text, encoding="utf-8")
        dose_markdown = dose_tables["md"]
        figure += dose_figure(doses, metric, study / "report" / f"dose-{metric}")
    # The returned cells are the compared arms (the control's own rows are in stats.json).
    result = {"cells": [c for c in cells if c["arm"] != "control"], "tables": written,
              "stats": path, "figure": figure, "doses": doses, "primary": primary,
              "markdown": _primary_markdown(primary)
              + "\n## Secondary table (descriptive)\n\n" + rendered["md"]
              + ("\n## Dose-response\n\n" + dose_markdown if dose_markdown else "")}
    if html:
        result["html"] = write_html_report(study, result, page)
    return result
