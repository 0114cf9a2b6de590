"""The conventions a study's statistics are stated in: which Mann-Whitney test, at what alpha,
the power a plan aims for, the two scores a contrast can be in, and a p-value as the tables show it.

Mann-Whitney U over seeds, with the convention named in every result. The lab's default is
the most defensible test for five runs a side: exact (no normal approximation) where there are
no ties, two-sided. The study's conventions are one option away:
- its published tables: two-sided, asymptotic (normal approximation, continuity correction);
- its replication package's later README: one-sided "greater", exact.
With five runs per group and complete separation these give 0.0122, 0.0040 and (default) 0.0079.
Tied scores do not make an exact convention asymptotic: U (midranks) gets its exact permutation
distribution, every split of the pooled scores counted, up to EXACT_SPLITS splits
(lab.stats.significance).

Apart from the tests that use them: the recipe checks these names, the CLI lists them and every
table states them, none of which needs a test or scipy.
"""
from __future__ import annotations


CONVENTIONS = {
    "exact-two-sided": ("two-sided", "exact"),
    "study-tables": ("two-sided", "asymptotic"),
    "replication-package": ("greater", "exact"),
    "exact-greater": ("greater", "exact"),
}
DEFAULT_CONVENTION = "exact-two-sided"  # the lab's choice (module docstring); recipes default to it
ALPHA = 0.05  # every convention's significance level; the power notes use it
POWER = 0.8
# The two scores a contrast can be stated in (recipe statistics.score): the mean of the samples'
# scores (sentence BLEU per sample; resampled within seeds), or the arm's corpus-level score
# (corpus BLEU, as the study's tables give it; one number per arm and seed).
SAMPLE_SCORE = "sample"
CORPUS_SCORE = "corpus"
SCORES = {SAMPLE_SCORE: "mean per-sample score", CORPUS_SCORE: "corpus-level score, as the study's "
          "tables give it"}


def starred_p(p: float | None, lift: float | None, alpha: float = ALPHA, spec: str = ".4g") -> str:
    """A p-value as the lab's tables show it: '-' when untested, starred at or below alpha, and
    a significant difference in the wrong direction (lift < 0) says '(lower)', since a
    two-sided test fires either way."""
    if p is None:
        return "-"
    if p > alpha:
        return format(p, spec)
    return format(p, spec) + "*" + (" (lower)" if (lift or 0) < 0 else "")
