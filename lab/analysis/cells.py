"""The secondary table of `lab stats` and `lab report`, computed from a study's tables before
anything is rendered: descriptive and never starred.

One Cell per (model x task x metric x epochs x train size) and arm, with every arm's mean and
spread over seeds, each contaminated arm against the control and its placebo by the study's own
test (Mann-Whitney U over seeds under a named convention, unpaired as the study ran it), the
per-sample contrasts pooled over seeds, and, where the arm was injected split-half, injected
against held-out samples of the same models (pooled, per seed, and, where seeds drew different
splits, each sample injected against itself held out). Besides: whether the pre-trained models
told their injected samples from others by loss (memorisation), the trivial baselines' scores,
and each cell's headline primary test for the decay figure.

The study's tables are read by lab.analysis.report_data; the renderers (lab.analysis.tables,
lab.analysis.html, lab.analysis.figure) read these records; a Cell's record() is its form in
stats.json.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.common import LabError
from lab.contamination import settings as settings_table
from lab.eval.generate import EXCLUDED_FROM_CLEAN
from lab.stats import (PAIRED_SAMPLES_TEST, compare, holm, membership_auc,
                       paired_sample_differences, paired_within_model, signed_rank_test,
                       within_model_net_of, within_model_seeds)
from lab.analysis.collect import (BASELINE_PREFIX, PROBE_COLUMNS, PROBES, RESULTS, SAMPLES,
                                  baseline_column)
from lab.analysis.report_data import (LABELS, NOT_METRICS, RUN_NUMBERS, SAMPLE_LABELS,
                                      convention_and_alpha, read_csv, train_size_order)

SCORE_FLOOR = 5.0  # below this (BLEU-like 0-100) a lift says little: the cell is flagged
WITHIN_TEST = "Mann-Whitney U, greater, asymptotic"
# Sample groups of lab evaluate (lab.eval.generate.GROUPS). The arm-vs-control comparison uses
# each evaluation's `clean` samples (outside the fine-tuning data and pre-existing overlap),
# falling back to `all` for studies collected before that group existed; the within-model test
# uses `injected` and `held_out` only, so the groups below are left out of it.
CLEAN = "clean"
LEFT_OUT = ("in_finetune_data", "pre_existing", "injected_truncated", "held_out_truncated")
MEMORISED_BY = {"held_out": "injected vs held-out (same model)",
                "reference": "injected vs never-seen valid samples (same model)"}
VS_PLACEBO = "arm model vs placebo model on the injected samples (same seed)"


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


# ---- the secondary table's cells ------------------------------------------------------------

@dataclass
class OverSeeds:
    """Two arms' scores over seeds by the study's own test (Mann-Whitney U, unpaired as the
    study ran it): there only with two seeds or more a side."""
    u: float
    p: float
    test: str
    cliffs_delta: float
    a12: float


@dataclass
class Versus:
    """The cell's arm against a reference arm (the control, or its placebo) over seeds."""
    arm: str
    mean: float
    std: float | None
    seeds: int
    lift: float
    lift_pct: float | None
    below_floor: bool  # both means below SCORE_FLOOR
    tested: OverSeeds | None


@dataclass
class PerSample:
    """The arm against a reference arm on the same clean test samples (same seed): the mean
    per-sample difference and its signed-rank p (PAIRED_SAMPLES_TEST, a description)."""
    gap: float
    samples: int
    p: float


@dataclass
class SeedGaps:
    """Per seed, the injected minus the held-out per-sample mean of its model, with their
    seed-level test; where seeds drew different splits, the crossover comparison
    (lab.stats.within_model_seeds)."""
    seed_gaps: dict[str, float]
    gap_per_seed: float | None
    seeds_positive: int
    p_seeds: float | None
    seeds_test: str
    crossover_samples: int
    p_crossover: float | None
    crossover_test: str
    crossover_gap: float | None


@dataclass
class NetGap:
    """The split-half gap net of a reference arm's model of the same seed
    (lab.stats.within_model_net_of)."""
    gap: float
    seed_gaps: dict[str, float]
    samples: int
    p: float
    p_seeds: float | None


@dataclass
class Halves:
    """A split-half arm's injected and held-out samples: the corpus-level metric of each half
    (mean over seeds) and the pooled per-sample test (a description)."""
    injected: float
    held_out: float
    below_floor: bool  # both halves below SCORE_FLOOR
    injected_sample_mean: float
    held_out_sample_mean: float
    injected_samples: int
    held_out_samples: int
    p_within: float
    seeds: SeedGaps | None = None  # older samples.csv files lack the seed or id column
    net_of_control: NetGap | None = None
    net_of_placebo: NetGap | None = None


@dataclass
class Memorised:
    """Whether the pre-trained models' loss told injected samples from others (lab probe): the
    verdict is p_holm <= alpha, Holm over the report's `family` memorised tests (every arm's,
    within the model and against its placebo), since they are read together."""
    verdict: bool
    auc: float
    p: float
    by: str
    p_holm: float
    family: int


@dataclass
class Cell:
    """One arm in one (model, task, metric, epochs, train size) of the secondary table."""
    model: str
    task: str
    metric: str
    epochs: int
    train_size: str
    arm: str
    convention: str
    alpha: float
    seeds: int
    mean: float | None = None  # None: no seed scored this metric
    std: float | None = None
    baselines: dict[str, float] = field(default_factory=dict)  # where the cell has a mean
    below_baseline: bool = False  # every model of the cell below the best baseline
    sample_set: str = CLEAN
    samples_compared: float = 0.0
    left_out: dict[str, float] = field(default_factory=dict)  # per LEFT_OUT group
    injected_token_fraction: float | None = None
    pretrain_loss: float | None = None
    control: Versus | None = None
    placebo: Versus | None = None
    per_sample_vs_control: PerSample | None = None
    per_sample_vs_placebo: PerSample | None = None
    halves: Halves | None = None
    memorised: Memorised | None = None
    memorised_vs_placebo: Memorised | None = None
    p_primary: float | None = None  # the arm's headline primary test here (with_primary_p)
    p_primary_label: str | None = None

    def record(self) -> dict[str, Any]:
        """The cell as stats.json holds it: flat keys, a part the cell lacks left out."""
        out: dict[str, Any] = {k: getattr(self, k) for k in (
            "model", "task", "metric", "epochs", "train_size", "arm", "convention", "alpha",
            "seeds")}
        if self.mean is not None:
            out.update(mean=self.mean, std=self.std)
        if self.baselines:
            out.update(baselines=self.baselines, baseline_best=max(self.baselines.values()),
                       below_baseline=self.below_baseline)
        out.update(sample_set=self.sample_set, samples_compared=self.samples_compared,
                   **{f"left_out_{group}": n for group, n in self.left_out.items()})
        for name in ("injected_token_fraction", "pretrain_loss"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.control:
            c = self.control
            out.update(control=c.mean, control_std=c.std, control_seeds=c.seeds, lift=c.lift,
                       lift_pct=c.lift_pct, below_floor=c.below_floor)
            if c.tested:
                out.update(u=c.tested.u, p=c.tested.p, test=c.tested.test,
                           cliffs_delta=c.tested.cliffs_delta, a12=c.tested.a12)
        if self.placebo:
            c = self.placebo
            out.update(placebo_arm=c.arm, placebo=c.mean, placebo_std=c.std,
                       placebo_seeds=c.seeds, lift_vs_placebo=c.lift)
            if c.tested:
                out.update(u_vs_placebo=c.tested.u, p_vs_placebo=c.tested.p,
                           cliffs_delta_vs_placebo=c.tested.cliffs_delta)
        for suffix, paired in (("", self.per_sample_vs_control),
                               ("_vs_placebo", self.per_sample_vs_placebo)):
            if paired:
                out.update({f"sample_gap{suffix}": paired.gap,
                            f"paired_samples{suffix}": paired.samples,
                            f"p_samples{suffix}": paired.p})
        if self.halves:
            h = self.halves
            out.update(injected=h.injected, held_out=h.held_out,
                       below_floor_within=h.below_floor,
                       injected_sample_mean=h.injected_sample_mean,
                       held_out_sample_mean=h.held_out_sample_mean,
                       injected_samples=h.injected_samples, held_out_samples=h.held_out_samples,
                       p_within=h.p_within)
            if h.seeds:
                out.update(vars(h.seeds))
            for suffix, net in (("", h.net_of_control), ("_vs_placebo", h.net_of_placebo)):
                if net:
                    out.update({f"net_gap{suffix}": net.gap,
                                f"net_seed_gaps{suffix}": net.seed_gaps,
                                f"net_samples{suffix}": net.samples, f"p_net{suffix}": net.p,
                                f"p_net_seeds{suffix}": net.p_seeds})
        for prefix, verdict in (("memorised", self.memorised),
                                ("memorised_vs_placebo", self.memorised_vs_placebo)):
            if verdict:
                out.update({prefix: verdict.verdict, f"{prefix}_auc": verdict.auc,
                            f"{prefix}_p": verdict.p, f"{prefix}_p_holm": verdict.p_holm,
                            f"{prefix}_by": verdict.by})
        if self.p_primary is not None:
            out.update(p_primary=self.p_primary, p_primary_label=self.p_primary_label)
        return out


def study_cells(study: Path, convention: str | None = None, include_control: bool = False,
                alpha: float | None = None) -> list[Cell]:
    """One Cell per cell and arm: the contaminated arms, and with include_control the control
    too (its mean and spread only). Convention and alpha default to the study's recipe."""
    study = Path(study)
    if not study.is_dir():
        raise LabError(f"{study}: " + ("not a directory" if study.exists() else
                                       "no such study directory"))
    convention, alpha = convention_and_alpha(study, convention, alpha)
    results = study / RESULTS
    every_group = read_csv(results, LABELS, lambda c: c in RUN_NUMBERS or c not in NOT_METRICS)
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
    samples = (read_csv(study / SAMPLES, SAMPLE_LABELS, lambda c: c.startswith("score_"))
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

    cells: list[Cell] = []
    for metric in metrics:
        for key in keys:
            model, task, epochs, size = key
            control = [r[metric] for r in runs[key]["control"] if r[metric] is not None]
            for arm in arms:
                values = [r[metric] for r in runs[key][arm] if r[metric] is not None]
                cell = Cell(model=model, task=task, metric=metric, epochs=epochs, train_size=size,
                            arm=arm, convention=convention, alpha=alpha, seeds=len(values))
                if values:
                    cell.mean, cell.std = sum(values) / len(values), _std(values)
                baselines = baseline_means(runs[key][arm], metric)
                if baselines and values:  # flagged when every model of the cell is below
                    means = [cell.mean] + ([sum(control) / len(control)] if control else [])
                    cell.baselines = baselines
                    cell.below_baseline = max(means) < max(baselines.values())
                # The samples compared, and those left out per reason (mean per evaluation;
                # an evaluation without a group's row had none of it).
                evaluations = len(runs[key][arm])
                cell.sample_set = compared
                cell.samples_compared = _mean([_count(r) for r in runs[key][arm]], 0.0)
                cell.left_out = {group: sum(_count(r) for r in group_runs[key + (arm, group)])
                                 / max(1, evaluations) for group in LEFT_OUT}
                for column in ("injected_token_fraction", "pretrain_loss"):  # older studies lack them
                    known = [r[column] for r in runs[key][arm] if r.get(column) is not None]
                    if known:
                        setattr(cell, column, sum(known) / len(known))
                if arm != "control":
                    _compare_arms(cell, values, control, runs[key], clean_scores[key])
                    _compare_halves(cell, per_sample, group_runs, key, clean_scores[key])
                cells.append(cell)
    memorised = memorisation(study, alpha)
    for cell in cells:
        cell.memorised, cell.memorised_vs_placebo = memorised.get((cell.model, cell.arm),
                                                                  (None, None))
    return cells


def _versus(values: list[float], reference: list[float], arm: str, convention: str) -> Versus:
    result = compare(values, reference, convention)
    tested = (OverSeeds(u=result.u, p=result.p, test=result.convention(),
                        cliffs_delta=result.cliffs_delta, a12=result.a12)
              if _over_seeds(values, reference) else None)
    return Versus(arm=arm, mean=result.mean_control, std=_std(reference), seeds=len(reference),
                  lift=result.lift, lift_pct=result.lift_pct,
                  below_floor=max(result.mean_experimental, result.mean_control) < SCORE_FLOOR,
                  tested=tested)


def _references(cell: Cell) -> dict[str, str]:
    """The reference arms of a contaminated cell by role: the control, and its placebo where
    the arm has one."""
    placebo = settings_table.placebo_of(cell.arm)
    return {"control": "control", **({"placebo": placebo} if placebo else {})}


def _compare_arms(cell: Cell, values: list[float], control: list[float],
                  runs: dict[str, list], clean_scores: dict[str, list]) -> None:
    """The study's contrast (the arm against the control over seeds) and, against the placebo
    arm (same form, count and repeat from samples disjoint from the test split), the
    contamination alone; both also per sample on the same clean test samples."""
    if values and control:
        cell.control = _versus(values, control, "control", cell.convention)
    placebo = settings_table.placebo_of(cell.arm)
    placebo_values = [r[cell.metric] for r in runs.get(placebo, []) if r[cell.metric] is not None]
    if values and placebo_values:
        cell.placebo = _versus(values, placebo_values, placebo, cell.convention)
    own = _keyed(clean_scores, cell.arm, cell.metric)
    for role, reference in _references(cell).items():
        setattr(cell, f"per_sample_vs_{role}",
                _paired_samples(own, _keyed(clean_scores, reference, cell.metric)))


def _compare_halves(cell: Cell, per_sample: dict[tuple, list], group_runs: dict[tuple, list],
                    key: tuple, clean_scores: dict[str, list]) -> None:
    """A split-half arm's injected against its held-out samples: pooled, per seed, across
    seeds' splits, and net of the reference arms' models of the same seed."""
    injected = _scores(per_sample[key + (cell.arm, "injected")], cell.metric)
    held = _scores(per_sample[key + (cell.arm, "held_out")], cell.metric)
    if not (injected and held):
        return
    # The test and its power use per-sample scores; the columns show the corpus-level metric of
    # each group (mean over seeds), like the arm's score.
    _u, p_within = paired_within_model(injected, held)
    mean_i, mean_h = sum(injected) / len(injected), sum(held) / len(held)
    corpus = {g: [r[cell.metric] for r in group_runs[key + (cell.arm, g)]
                  if r.get(cell.metric) is not None] for g in ("injected", "held_out")}
    shown = _mean(corpus["injected"], mean_i), _mean(corpus["held_out"], mean_h)
    cell.halves = halves = Halves(
        injected=shown[0], held_out=shown[1], below_floor=max(shown) < SCORE_FLOOR,
        injected_sample_mean=mean_i, held_out_sample_mean=mean_h, injected_samples=len(injected),
        held_out_samples=len(held), p_within=p_within)
    # Over seeds: older samples.csv files lack the seed or id column.
    scored = [(s.get("seed"), s.get("id"), group, s.get(f"score_{cell.metric}"))
              for group in ("injected", "held_out") for s in per_sample[key + (cell.arm, group)]]
    if not all(seed not in (None, "") and sample not in (None, "")
               for seed, sample, _g, _s in scored):
        return
    scored = [row for row in scored if row[3] is not None]
    halves.seeds = SeedGaps(**within_model_seeds(scored))
    for role, reference in _references(cell).items():
        net = within_model_net_of(scored, _keyed(clean_scores, reference, cell.metric))
        if net:
            setattr(halves, f"net_of_{role}", NetGap(
                gap=net["net_gap"], seed_gaps=net["net_seed_gaps"], samples=net["net_samples"],
                p=net["p_net"], p_seeds=net["p_net_seeds"]))


def _over_seeds(experimental: list[float], reference: list[float]) -> bool:
    """Whether two arms' scores over seeds can be tested (and their lift given an interval):
    with one seed on a side, U has a single value and p is 1 whatever the scores; the
    per-sample contrasts still compare the two models."""
    return min(len(experimental), len(reference)) >= 2


def _keyed(scores: dict[str, list], arm: str, metric: str) -> dict[tuple, float]:
    """One arm's clean per-sample scores keyed by (seed, sample id)."""
    return {(s["seed"], s["id"]): s[f"score_{metric}"] for s in scores.get(arm, [])
            if s.get(f"score_{metric}") is not None}


def _paired_samples(own: dict[tuple, float], reference: dict[tuple, float]) -> PerSample | None:
    """Arm against a reference arm on the same clean test samples (same seed; both keyed as
    _keyed makes them); None where they share none."""
    differences = paired_sample_differences(own, reference)
    if not differences:
        return None
    p, _test = signed_rank_test(differences, PAIRED_SAMPLES_TEST)
    return PerSample(gap=sum(differences) / len(differences), samples=len(differences), p=p)


def below_baselines(cells: list["Cell"]) -> str | None:
    """One line when every arm of the study, in every cell, scores at or below the best
    trivial baseline on the same samples (lab.eval.baselines): the models have not learned the
    task, and no contrast between them speaks of contamination. None otherwise, or without
    baselines."""
    scored = [c for c in cells if c.baselines and c.mean is not None]
    if not scored or any(c.mean > max(c.baselines.values()) for c in scored):
        return None
    best = {}
    for cell in scored:
        name, value = max(cell.baselines.items(), key=lambda item: item[1])
        best.setdefault((cell.metric, name), []).append(value)
    shown = ", ".join(f"{name} {sum(v) / len(v):.2f} {metric}"
                      for (metric, name), v in sorted(best.items()))
    return (f"Every arm scores at or below the best trivial baseline in every cell ({shown}, "
            "averaged over the cells): these models have not learned the task, so no contrast "
            "below says anything about contamination.")


def baseline_means(runs: list[dict[str, Any]], metric: str) -> dict[str, float]:
    """Each trivial baseline's score on a cell's samples (results.csv's baseline_NAME_METRIC
    columns), averaged over the cell's evaluations."""
    from lab.eval.baselines import BASELINES

    # By whole column name: baseline and metric names hold underscores themselves
    # (method_name, smooth_bleu), so the column cannot be split at one.
    names = {baseline_column(name, metric): name for name in BASELINES}
    found: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for column, value in run.items():
            if column in names and value is not None:
                found[names[column]].append(value)
    return {name: sum(v) / len(v) for name, v in sorted(found.items())}


def memorisation(study: Path, alpha: float
                 ) -> dict[tuple[str, str], tuple[Memorised | None, Memorised | None]]:
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
    rows = read_csv(path, ("model", "arm", "seed", "groups", "id", "group", "loss"),
                    lambda c: c in PROBE_COLUMNS)
    tested: dict[tuple[str, str], list[tuple[float, float, str] | None]] = {}  # (auc, p, by)
    for model, arm in sorted({(r["model"], r["arm"]) for r in rows}):
        own = [r for r in rows if (r["model"], r["arm"]) == (model, arm) and r["loss"] is not None]
        if own and not settings_table.get(arm).injects_test:  # probed on another arm's samples
            own = [r for r in own if r["groups"] == own[0]["groups"]]
        injected = [r["loss"] for r in own if r["group"] == "injected"]
        within = versus_placebo = None
        for baseline in ("held_out", "reference"):
            others = [r["loss"] for r in own if r["group"] == baseline]
            if injected and others:
                auc, p = membership_auc(injected, others, False)
                within = (auc, p, MEMORISED_BY[baseline])
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
                versus_placebo = (auc, p, VS_PLACEBO)
        if within or versus_placebo:
            tested[(model, arm)] = [within, versus_placebo]
    # One family: the report shows every arm's verdicts side by side (issue 58).
    family = [t for pair in tested.values() for t in pair if t]
    adjusted = iter(holm([p for _auc, p, _by in family]))  # walked in the family's order
    found: dict[tuple[str, str], tuple[Memorised | None, Memorised | None]] = {}
    for key, pair in tested.items():
        verdicts = []
        for t in pair:
            p_holm = next(adjusted) if t else None
            verdicts.append(t and Memorised(verdict=p_holm <= alpha, auc=t[0], p=t[1], by=t[2],
                                            p_holm=p_holm, family=len(family)))
        found[key] = (verdicts[0], verdicts[1])
    return found


def with_primary_p(cells: list[Cell], primary: dict[str, Any]) -> None:
    """Each cell of the primary metric gets its arm's headline primary test (contamination,
    else study, else split-half; a placebo arm: format) at its epochs, for the decay figure."""
    headline = {"contamination": 0, "study": 1, "split-half": 2, "format": 3}
    for cell in cells:
        tests = [r for r in primary["rows"] if r["epochs_to"] is None and r.get("p_holm") is not None
                 and (r["model"], r["task"], r["metric"], r["epochs"], r["train_size"], r["arm"])
                 == (cell.model, cell.task, cell.metric, cell.epochs, cell.train_size, cell.arm)
                 and r["question"] in headline]
        if tests:
            best = min(tests, key=lambda r: headline[r["question"]])
            cell.p_primary, cell.p_primary_label = best["p_holm"], f"p (Holm), {best['question']}"
