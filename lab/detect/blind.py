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

Das, Zhang and Tramèr, "Blind Baselines Beat Membership Inference Attacks for Foundation
Models", 2024; Duan et al., "Do Membership Inference Attacks Work on Large Language Models?"
(MIMIR), COLM 2024 (the temporal shift behind most detectors' scores)."""
from __future__ import annotations

import random
from typing import Any, Sequence

from lab.common import LabError
from lab.detect.context import DetectContext

FEATURES = 2 ** 18
TOKEN = r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[^\sA-Za-z0-9_]"  # identifiers, numbers, punctuation
C = 1.0
FOLDS = 2


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


def cross_fit(texts: Sequence[str], labels: Sequence[bool], seed: int) -> list[float]:
    """Every text's log-odds of being a member, from the model trained on the other fold."""
    import numpy as np
    from sklearn.feature_extraction.text import HashingVectorizer
    from sklearn.linear_model import LogisticRegression

    positives = sum(1 for label in labels if label)
    negatives = len(labels) - positives
    if positives < FOLDS or negatives < FOLDS:
        raise LabError(f"blind: needs at least {FOLDS} members and {FOLDS} non-members to train "
                       f"on one half and score the other ({positives} and {negatives} given)")
    vectorizer = HashingVectorizer(n_features=FEATURES, token_pattern=TOKEN, lowercase=False,
                                   ngram_range=(1, 2), alternate_sign=False, norm="l2")
    features = vectorizer.transform(list(texts))
    target = np.asarray([bool(label) for label in labels])
    fold = np.asarray(folds(labels, seed))
    scores = np.zeros(len(texts))
    for held in range(FOLDS):
        train = fold != held
        classifier = LogisticRegression(C=C, max_iter=2000)
        classifier.fit(features[train], target[train])
        scores[~train] = classifier.decision_function(features[~train])
    return [float(s) for s in scores]


def score(ctx: DetectContext, samples: Sequence[Any]) -> list[float]:
    if ctx.labels is None or len(ctx.labels) != len(samples):
        raise LabError("blind: needs each scored sample's membership label (ctx.labels, one per "
                       "sample)")
    texts = ["\n".join(ctx.documents(sample)) for sample in samples]
    return cross_fit(texts, ctx.labels, ctx.fold_seed)
