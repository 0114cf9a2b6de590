"""Blind baseline: a bag-of-words classifier that never sees the model. It reads only the
samples' text and their membership labels, so an AUC above 0.5 says the members differ from
the non-members in their text alone: the split is not random (a distribution shift), and a
detector's AUC on that split owes some of its height to the split, not to the model.

The features are the hashed counts of the unigrams and bigrams of the code tokens (identifiers,
numbers, single punctuation characters) of the documents each sample is scored as, each
sample's vector scaled to unit length (scikit-learn's HashingVectorizer, 2^18 features, no sign
flipping), and the classifier an L2-regularised logistic regression (C = 1). Every sample gets
a score by 2-fold cross-fitting: the members and the non-members are each split in random
halves (seeded by ctx.fold_seed: the study's seed, so each seed folds afresh and the same seed
folds alike), a model trained on one fold scores the other, and the other way round. The score
is the held-out fold's log-odds of membership; the two folds' models are pooled in one ROC, as
cross-validated predictions are. A sample is never scored by a model trained on it, so on a
random split the AUC is 0.5 up to chance.

The test (permutation_test): the pooled scores of two cross-fitted models are not independent
samples (each fold's model has its own offset and scale, and every score shares its training
fold's noise), so the rank test and the bootstrap that assume they are reject a random split
far more often than alpha (issue 69: 0.17 at 0.05 with 40 + 40 samples). The test instead
permutes the membership labels among the scored samples, refits the whole cross-fitting on each
permutation and sets the observed AUC against those AUCs (TEST_RULE); the interval is the one that
test implies (INTERVAL). Under a random split the labels are exchangeable, so the p is valid at
any number of permutations.

Das, Zhang and Tramèr, "Blind Baselines Beat Membership Inference Attacks for Foundation
Models", 2024; Duan et al., "Do Membership Inference Attacks Work on Large Language Models?"
(MIMIR), COLM 2024 (the temporal shift behind most detectors' scores)."""
from __future__ import annotations

import math
import random
from typing import Any, Hashable, Sequence

from lab.common import LabError
from lab.detect.context import DetectContext
from lab.stats import ALPHA

FEATURES = 2 ** 18
TOKEN = r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[^\sA-Za-z0-9_]"  # identifiers, numbers, punctuation
C = 1.0
FOLDS = 2
# Label permutations of the test: alpha * (PERMUTATIONS + 1) is whole, so a test at ALPHA has
# exactly that level and the interval's half-width is one of the permutation AUCs; 199 refits of
# 200 + 200 samples take about 2 s (a study's detect stage runs two such tests: membership and
# the shift check).
PERMUTATIONS = 199
TEST = "label permutation, cross-fitting refitted"  # the name every metric row records
TEST_RULE = ("label permutation: the membership labels shuffled among the scored samples and "
             "the whole cross-fitting refitted each time; two-sided p = (1 + #{permuted "
             "|AUC - 0.5| >= observed}) / (permutations + 1)")
INTERVAL = ("AUC +/- the permutation AUCs' half-width: their (alpha (permutations + 1))-th "
            "largest |AUC - 0.5|, cut to [0, 1]; it leaves out 0.5 exactly where the two-sided "
            "p <= alpha, so under a random split it covers 0.5 with probability 1 - alpha (the "
            "test inverted, assuming the AUC's spread away from 0.5 is no larger than at 0.5)")


def folds(labels: Sequence[bool], seed: int) -> list[int]:
    """Each sample's fold (0 or 1): the members and the non-members each shuffled with the seed
    and dealt in turn, so each fold holds half of either group (one more where odd)."""
    rng = random.Random(f"lab.detect.blind:{seed}")
    fold = [0] * len(labels)
    for group in (True, False):
        indices = [i for i, label in enumerate(labels) if bool(label) == group]
        rng.shuffle(indices)
        for position, i in enumerate(indices):
            fold[i] = position % FOLDS
    return fold


def _check_groups(labels: Sequence[bool]) -> None:
    positives = sum(1 for label in labels if label)
    negatives = len(labels) - positives
    if positives < FOLDS or negatives < FOLDS:
        raise LabError(f"blind: needs at least {FOLDS} members and {FOLDS} non-members to train "
                       f"on one half and score the other ({positives} and {negatives} given)")


def features(texts: Sequence[str]) -> Any:
    """The texts' hashed n-gram vectors (module docstring), keeping only the columns some text
    uses: a column no text uses gets weight 0 in every fit, so the fits are the same, only
    faster (the hash space is 2^18 wide, a few hundred texts use some thousands)."""
    import numpy as np
    from sklearn.feature_extraction.text import HashingVectorizer

    vectorizer = HashingVectorizer(n_features=FEATURES, token_pattern=TOKEN, lowercase=False,
                                   ngram_range=(1, 2), alternate_sign=False, norm="l2")
    hashed = vectorizer.transform(list(texts)).tocsr()
    return hashed[:, np.unique(hashed.indices)]


def fitted_scores(vectors: Any, labels: Sequence[bool], seed: int) -> list[float]:
    """Every sample's log-odds of being a member, from the model trained on the other fold."""
    import numpy as np
    import sklearn
    from sklearn.linear_model import LogisticRegression

    target = np.asarray([bool(label) for label in labels])
    fold = np.asarray(folds(labels, seed))
    scores = np.zeros(len(target))
    # the vectors are finite (unit-length counts) and the parameters fixed: scikit-learn's
    # checks of them are skipped, which halves a small fit's time (a test refits hundreds)
    with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
        for held in range(FOLDS):
            train = fold != held
            classifier = LogisticRegression(C=C, max_iter=2000)
            classifier.fit(vectors[train], target[train])
            scores[~train] = classifier.decision_function(vectors[~train])
    return [float(s) for s in scores]


def cross_fit(texts: Sequence[str], labels: Sequence[bool], seed: int) -> list[float]:
    """Every text's log-odds of being a member, from the model trained on the other fold."""
    _check_groups(labels)
    return fitted_scores(features(texts), labels, seed)


MEMBER = "all"  # permutation_test's comparison of every member against the non-members


def permutation_test(texts: Sequence[str], groups: Sequence[Hashable | None], seed: int,
                     permutations: int = PERMUTATIONS, alpha: float = ALPHA
                     ) -> dict[Hashable, dict[str, Any]]:
    """The blind baseline's AUC, two-sided permutation p and interval (TEST_RULE, INTERVAL): the
    cross-fitting (seed: its folds) on the observed labels, then on `permutations` shuffles of
    them (drawn with the same seed). `groups`: each sample's member group (a dose, or any name)
    or None for a non-member; the classifier learns member against non-member. Per comparison,
    MEMBER (every member) and each member group of more than one member but not every one (that
    group's members against every non-member, as a dose ladder's rows are), a dict of auc, p,
    low, high, half_width, null_sd (the permutation AUCs' standard deviation), permutations and
    seed. Shuffling the groups keeps every group's size, so each comparison's permutation AUCs
    are its own null."""
    from lab.stats import roc_auc

    labels = [group is not None for group in groups]
    _check_groups(labels)
    if permutations < 1:
        raise LabError(f"blind: permutations {permutations}: must be >= 1")
    named = sorted({g for g in groups if g is not None}, key=str)
    sizes = {g: sum(1 for x in groups if x == g) for g in named}
    # a group that is every member is MEMBER itself; one of a single member has no AUC spread
    compared = [MEMBER] + [g for g in named if 1 < sizes[g] < sum(labels)]

    def aucs(arrangement: Sequence[Hashable | None]) -> dict[Hashable, float]:
        member = [group is not None for group in arrangement]
        scores = fitted_scores(vectors, member, seed)
        rest = [s for s, group in zip(scores, arrangement) if group is None]
        return {name: roc_auc([s for s, group in zip(scores, arrangement)
                               if group is not None and (name == MEMBER or group == name)], rest)
                for name in compared}

    vectors = features(texts)
    observed = aucs(groups)
    rng = random.Random(f"lab.detect.blind.permutations:{seed}")
    null = [aucs(rng.sample(list(groups), len(groups))) for _ in range(permutations)]
    # p <= alpha exactly where the observed deviation exceeds the rank-th largest permuted one
    rank = max(1, math.floor(alpha * (permutations + 1)))
    out = {}
    for name in compared:
        deviation = abs(observed[name] - 0.5)
        spread = sorted((abs(n[name] - 0.5) for n in null), reverse=True)
        # AUCs are fractions k / (n1 n2), computed alike: equal ones compare equal exactly
        exceeding = sum(1 for d in spread if d >= deviation)
        half = spread[min(rank, permutations) - 1]
        values = [n[name] for n in null]
        mean = sum(values) / permutations
        out[name] = {"auc": observed[name], "p": (1 + exceeding) / (permutations + 1),
                     "low": max(0.0, observed[name] - half),
                     "high": min(1.0, observed[name] + half), "half_width": half,
                     "null_sd": math.sqrt(sum((v - mean) ** 2 for v in values) / permutations),
                     "permutations": permutations, "seed": seed}
    return out


def _texts(ctx: DetectContext, samples: Sequence[Any]) -> list[str]:
    return ["\n".join(ctx.documents(sample)) for sample in samples]


def score(ctx: DetectContext, samples: Sequence[Any]) -> list[float]:
    if ctx.labels is None or len(ctx.labels) != len(samples):
        raise LabError("blind: needs each scored sample's membership label (ctx.labels, one per "
                       "sample)")
    return cross_fit(_texts(ctx, samples), ctx.labels, ctx.fold_seed)


def test(ctx: DetectContext, samples: Sequence[Any], groups: Sequence[Hashable | None],
         permutations: int = PERMUTATIONS) -> dict[Hashable, dict[str, Any]]:
    """permutation_test of the samples as score reads them, folded with ctx.fold_seed: the p
    and interval of the AUC of score's scores (the same cross-fitting)."""
    if len(groups) != len(samples):
        raise LabError(f"blind: groups: {len(groups)} given for {len(samples)} samples")
    return permutation_test(_texts(ctx, samples), groups, ctx.fold_seed, permutations)
