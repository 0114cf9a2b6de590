"""Statistics of a contamination study: is the contaminated arm's score above the control's?

One module per concern, so that a test, an interval or the power planner reads in one sitting;
every public name is re-exported here and callers import from `lab.stats` as before
(`from lab.stats import compare`). Inside the package a module imports its siblings directly,
never this file, and no two import each other:

    conventions     the Mann-Whitney conventions, alpha, power, the two scores, starred p-values
    interval_rule   the one rule for every printed interval, an effect with its interval as text,
                    an interval cut to what the effect can be
    intervals       Welch's lift interval, Student's t over seeds, the cluster bootstrap-t of a
                    per-seed effect, one model's sample bootstrap, a simulated null study
    ranks           midranks, Cliff's delta, ROC AUC, its points and interval, TPR at low FPR
    significance    Mann-Whitney U (exact with ties), `compare`, the exact sign-flip test
    paired          split-half gaps over seeds, crossover and per-sample Wilcoxon signed-rank
                    tests, the gap net of a reference model
    multiplicity    Holm's adjusted p-values and rejections
    power           the sign-flip test simulated at a declared effect: power and seeds to plan
    dose_response   dose-response curves, their band, a ladder's turns, one model's rank test

Lowest first: conventions and interval_rule; intervals; ranks; significance; paired,
multiplicity, power and dose_response.
"""
from __future__ import annotations

from lab.stats.conventions import (ALPHA, CONVENTIONS, CORPUS_SCORE, DEFAULT_CONVENTION, POWER,
                                   SAMPLE_SCORE, SCORES, starred_p)
from lab.stats.interval_rule import (CLIPPED_LEGEND, CLIPPED_MARK, CLIPPED_SIDES, INTERVAL_RULE,
                                     NOT_FINITE, SAME_VALUES, ZERO_SPREAD, bounds_text,
                                     checked_interval, clipped, clipped_side, effect_text,
                                     interval_reason, no_interval_reason)
from lab.stats.intervals import (BOOTSTRAP_RESAMPLES, CLUSTER_BOOTSTRAP, LIFT_INTERVAL, RQ4_NOISE,
                                 SAMPLE_BOOTSTRAP, SEED_INTERVAL, STUDENT_T, STUDENT_T_SEEDS,
                                 SeedParts, cluster_resamples, effect_interval, expanded_tail,
                                 interval_method, lift_interval, sample_interval, seed_effect,
                                 seed_mean_interval, simulated_null)
from lab.stats.ranks import (auc_interval, cliffs_delta, membership_auc, roc_auc, roc_points,
                             tpr_at_fpr)
from lab.stats.significance import (ASYMPTOTIC_TIES, EXACT_SPLITS, PERMUTATION_TIES,
                                    SIGN_FLIP_EXACT, SIGN_FLIP_TEST, Comparison, compare,
                                    mann_whitney, permutation_mann_whitney, sign_flip_test)
from lab.stats.paired import (CROSSOVER_TEST, PAIRED_SAMPLES_TEST, SEEDS_TEST, SIGNED_RANK_EXACT,
                              crossover_differences, crossover_test, paired_sample_differences,
                              paired_within_model, seed_gaps, seed_level_test, signed_rank_test,
                              within_model_net_of, within_model_seeds)
from lab.stats.multiplicity import holm, holm_rejections
from lab.stats.power import (BIMODAL_OFFSET, HEAVY_TAIL_DF, PLANNING_CORRELATION, PLANNING_SD,
                             PLANNING_SHAPE, PLANNING_SHAPES, POWER_ASSUMPTIONS, POWER_RNG_SEED,
                             POWER_SEARCH_SEEDS, POWER_SIMULATIONS, SENSITIVITY_CORRELATIONS,
                             SMALLEST_EFFECT, seeds_for_planned_power, sign_flip_p_values,
                             simulated_power, simulated_powers, standardised_effects)
from lab.stats.dose_response import (DEFAULT_DOSE_TREND, DOSE_BAND, DOSE_BOOTSTRAP, DOSE_CURVE,
                                     DOSE_CURVE_UNCONSTRAINED, DOSE_GRID, DOSE_TREND_SIDES,
                                     NON_MONOTONE_RULE, ONE_MODEL_TEST, TOP_BOUND, dose_band,
                                     dose_curve_values, dose_turns, fit_dose_curve,
                                     fit_unconstrained_curve, one_model_rank_test,
                                     unconstrained_curve_values)

__all__ = [
    "ALPHA", "ASYMPTOTIC_TIES", "BIMODAL_OFFSET", "BOOTSTRAP_RESAMPLES", "CLIPPED_LEGEND",
    "CLIPPED_MARK", "CLIPPED_SIDES", "CLUSTER_BOOTSTRAP", "CONVENTIONS", "CORPUS_SCORE",
    "CROSSOVER_TEST", "Comparison", "DEFAULT_CONVENTION", "DEFAULT_DOSE_TREND", "DOSE_BAND",
    "DOSE_BOOTSTRAP", "DOSE_CURVE", "DOSE_CURVE_UNCONSTRAINED", "DOSE_GRID", "DOSE_TREND_SIDES",
    "EXACT_SPLITS", "HEAVY_TAIL_DF", "INTERVAL_RULE", "LIFT_INTERVAL", "NON_MONOTONE_RULE",
    "NOT_FINITE", "ONE_MODEL_TEST", "PAIRED_SAMPLES_TEST", "PERMUTATION_TIES",
    "PLANNING_CORRELATION", "PLANNING_SD", "PLANNING_SHAPE", "PLANNING_SHAPES", "POWER",
    "POWER_ASSUMPTIONS", "POWER_RNG_SEED", "POWER_SEARCH_SEEDS", "POWER_SIMULATIONS", "RQ4_NOISE",
    "SAME_VALUES", "SAMPLE_BOOTSTRAP", "SAMPLE_SCORE", "SCORES", "SEEDS_TEST", "SEED_INTERVAL",
    "SENSITIVITY_CORRELATIONS", "SIGNED_RANK_EXACT", "SIGN_FLIP_EXACT", "SIGN_FLIP_TEST",
    "SMALLEST_EFFECT", "STUDENT_T", "STUDENT_T_SEEDS", "SeedParts", "TOP_BOUND", "ZERO_SPREAD",
    "auc_interval", "bounds_text", "checked_interval", "cliffs_delta", "clipped", "clipped_side",
    "cluster_resamples", "compare", "crossover_differences", "crossover_test", "dose_band",
    "dose_curve_values", "dose_turns", "effect_interval", "effect_text", "expanded_tail",
    "fit_dose_curve", "fit_unconstrained_curve", "holm", "holm_rejections", "interval_method",
    "interval_reason", "lift_interval", "mann_whitney", "membership_auc", "no_interval_reason",
    "one_model_rank_test", "paired_sample_differences", "paired_within_model",
    "permutation_mann_whitney", "roc_auc", "roc_points", "sample_interval", "seed_effect",
    "seed_gaps", "seed_level_test", "seed_mean_interval", "seeds_for_planned_power",
    "sign_flip_p_values", "sign_flip_test", "signed_rank_test", "simulated_null",
    "simulated_power", "simulated_powers", "standardised_effects", "starred_p", "tpr_at_fpr",
    "unconstrained_curve_values", "within_model_net_of", "within_model_seeds",
]
