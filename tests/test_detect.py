"""Contamination detectors (lab.detect) on fixtures whose values are computed by hand, and the
membership metrics against scikit-learn's definitions."""
from __future__ import annotations

import math
import zlib
from types import SimpleNamespace

import pytest

from lab.common import LabError
from lab.corpora import Sample
from lab.detect import DETECTORS, check_detectors, score_all
from lab.detect.context import DetectContext

VOCAB = 32
BOS, PAD, EOS, MASK = 0, 1, 2, 4


class CharTokenizer:
    """One id per character (what DetectContext and the detectors read of a tokenizer)."""
    bos_token_id, pad_token_id, eos_token_id, mask_token_id = BOS, PAD, EOS, MASK

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.id(c) for c in text]}

    @staticmethod
    def id(c: str) -> int:
        return 5 + (ord(c) % (VOCAB - 5))


def bigram_model(probabilities):
    """A causal LM whose next-token distribution depends on the previous token only:
    p(next = j | previous = i) = probabilities[i][j]."""
    import torch

    class Bigram(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.tensor(probabilities, dtype=torch.float64).log())
            self.config = SimpleNamespace(model_type="gpt2", n_positions=64)

        def forward(self, input_ids, attention_mask=None, **_):
            return SimpleNamespace(logits=self.table[input_ids])

    return Bigram()


def unigram_masked_model(probabilities):
    """A masked LM whose prediction at every position is one fixed distribution."""
    import torch

    class Unigram(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.logits = torch.nn.Parameter(torch.tensor(probabilities, dtype=torch.float64).log())
            self.config = SimpleNamespace(model_type="roberta")

        def forward(self, input_ids, attention_mask=None, **_):
            return SimpleNamespace(logits=self.logits.expand(*input_ids.shape, VOCAB))

    return Unigram()


def peaked_rows() -> list[list[float]]:
    """Uniform rows (1/32), except: after <s>, 'a' has 1/2 and the rest 1/62 each; after 'a',
    'b' has 1/2; after 'b', </s> has 1/2."""
    a, b = CharTokenizer.id("a"), CharTokenizer.id("b")
    rows = [[1 / VOCAB] * VOCAB for _ in range(VOCAB)]
    for previous, likely in ((BOS, a), (a, b), (b, EOS)):
        rows[previous] = [0.5 if j == likely else 0.5 / (VOCAB - 1) for j in range(VOCAB)]
    return rows


def sample(output: str, input: str = "x", index: int = 0) -> Sample:
    return Sample(id=f"t:test:{index}", split="test", index=index, input=input, output=output)


def context(model, family="gpt2", form="output", **more) -> DetectContext:
    return DetectContext(model=model, tokenizer=CharTokenizer(), family=family, form=form, **more)


def test_loss_zlib_min_k_and_reference_by_hand():
    ctx = context(bigram_model(peaked_rows()), k=0.2)
    ab, c = sample("ab"), sample("c", index=1)
    # "ab": <s> a b </s>, each token at probability 1/2
    # "c": c after <s> at 1/62, </s> after c at 1/32
    want_loss = [math.log(0.5), (math.log(0.5 / 31) + math.log(1 / 32)) / 2]
    got = score_all(ctx, [ab, c], check_detectors(["loss", "zlib", "min_k"]))
    assert got["loss"] == pytest.approx(want_loss, abs=1e-6)
    assert got["zlib"] == pytest.approx([want_loss[0] / len(zlib.compress(b"ab")),
                                         want_loss[1] / len(zlib.compress(b"c"))], abs=1e-6)
    # k = 20%: the lowest ceil(0.2 n) tokens, one here
    assert got["min_k"] == pytest.approx([math.log(0.5), math.log(0.5 / 31)], abs=1e-6)
    uniform = context(bigram_model([[1 / VOCAB] * VOCAB] * VOCAB))
    ctx.reference = uniform
    reference = DETECTORS["reference"].score(ctx, [ab, c])
    assert reference == pytest.approx([w - math.log(1 / VOCAB) for w in want_loss], abs=1e-6)
    with pytest.raises(LabError, match="reference: no reference model"):
        DETECTORS["reference"].score(uniform, [ab])


def test_min_k_plus_plus_by_hand():
    ctx = context(bigram_model(peaked_rows()), k=0.5)
    rows = peaked_rows()
    zs = []
    for previous, token in ((BOS, CharTokenizer.id("a")), (CharTokenizer.id("a"),
                                                           CharTokenizer.id("b")),
                            (CharTokenizer.id("b"), EOS)):
        p = rows[previous]
        mu = sum(q * math.log(q) for q in p)
        sigma = math.sqrt(sum(q * math.log(q) ** 2 for q in p) - mu ** 2)
        zs.append((math.log(p[token]) - mu) / sigma)
    # k = 50% of 3 tokens: the lowest two
    want = sum(sorted(zs)[:2]) / 2
    assert DETECTORS["min_k_plus_plus"].score(ctx, [sample("ab")]) == pytest.approx([want])
    # a uniform row has sigma 0: such a token counts 0
    flat = context(bigram_model([[1 / VOCAB] * VOCAB] * VOCAB))
    assert DETECTORS["min_k_plus_plus"].score(flat, [sample("ab")]) == [0.0]


def test_the_masked_family_scores_each_inner_token_masked():
    probabilities = [1 / 64] * VOCAB
    a, b = CharTokenizer.id("a"), CharTokenizer.id("b")
    probabilities[a], probabilities[b] = 0.25, 0.25
    rest = (1 - 0.5) / (VOCAB - 2)
    probabilities = [p if i in (a, b) else rest for i, p in enumerate(probabilities)]
    ctx = context(unigram_masked_model(probabilities), family="roberta")
    # <s> a b a </s>: the three inner tokens, each masked once; <s> and </s> are not scored
    assert DETECTORS["loss"].score(ctx, [sample("aba")]) == pytest.approx([math.log(0.25)])
    assert DETECTORS["loss"].score(ctx, [sample("ax")]) == pytest.approx(
        [(math.log(0.25) + math.log(rest)) / 2])


def test_a_sample_injected_as_two_documents_is_scored_over_both():
    ctx = context(bigram_model(peaked_rows()), form="unpaired")
    # input "ab" (3 tokens at 1/2) and output "c" (1/62, then 1/32)
    want = (3 * math.log(0.5) + math.log(0.5 / 31) + math.log(1 / 32)) / 5
    assert DETECTORS["loss"].score(ctx, [sample("c", input="ab")]) == pytest.approx([want])


def test_neighbourhood_compares_with_renamed_twins():
    from lab.detect.neighbourhood import neighbours

    import random

    generator = random.Random(0)
    rows = []
    for _ in range(VOCAB):
        weights = [generator.random() + 0.05 for _ in range(VOCAB)]
        rows.append([w / sum(weights) for w in weights])
    ctx = context(bigram_model(rows), form="paired", neighbours=3)

    def logprobs(text: str) -> list[float]:
        ids = [BOS, *CharTokenizer()(text)["input_ids"], EOS]
        return [math.log(rows[x][y]) for x, y in zip(ids, ids[1:])]

    java = "int total(int count) { int sum = count * 2; return sum; }"
    cs = "int Total(int count) { int sum = count * 2; return sum; }"
    renamable = sample(cs, input=java)
    twins = neighbours(ctx, renamable)
    assert len(twins) == 3 and any(t.input != java for t in twins)
    from lab.contamination.settings import paired_document

    own = logprobs(paired_document(java, cs))
    theirs = [logprobs(paired_document(t.input, t.output)) for t in twins]
    want = sum(own) / len(own) - sum(sum(t) / len(t) for t in theirs) / len(theirs)
    assert DETECTORS["neighbourhood"].score(ctx, [renamable]) == pytest.approx([want])
    # nothing to rename: the sample is its own neighbour
    assert DETECTORS["neighbourhood"].score(ctx, [sample("{ }", input="{ }")]) == [0.0]


def test_extraction_and_peakedness_from_given_continuations(monkeypatch):
    import lab.eval.generate as generation
    from lab.detect.peakedness import edit_distance, peakedness

    assert edit_distance("kitten", "sitting") == 3 and edit_distance([], [1, 2]) == 2
    # 20 tokens long: alpha 0.05 allows one edit
    greedy = list(range(20))
    near = greedy[:19] + [99]
    far = greedy[:17] + [97, 98, 99]
    assert peakedness(greedy, [greedy, near, far, far], 0.05) == 0.5

    outputs = {"greedy": ["a b c d", "q r s"], "sample": ["a b c d", "a b c e", "z", "a b c d"]}

    def given(model, tokenizer, architecture, sources, decoding, *args, **kwargs):
        texts = outputs["sample" if decoding.mode == "sample" else "greedy"]
        return texts[:len(sources)]

    monkeypatch.setattr(generation, "generate", given)
    ctx = context(bigram_model(peaked_rows()), cdd_samples=4, cdd_alpha=0.0)
    ctx.model.config.n_positions = 64
    first = [sample("a b c d", input="p")]
    assert DETECTORS["extraction"].score(ctx, first) == pytest.approx([100.0])
    from lab.eval.metrics import bleu_per_sample

    other = DETECTORS["extraction"].score(ctx, [sample("x y z w", input="p")])
    assert other == pytest.approx(bleu_per_sample(["x y z w"], ["a b c d"])) and other[0] < 50
    # 2 of the 4 sampled outputs equal the greedy one (alpha 0: no edit allowed)
    assert DETECTORS["peakedness"].score(ctx, first) == [0.5]


def test_detectors_that_do_not_apply_are_left_out():
    ctx = context(unigram_masked_model([1 / VOCAB] * VOCAB), family="roberta")
    got = score_all(ctx, [sample("ab")], list(DETECTORS.values()))
    assert set(got) == {"loss", "zlib", "min_k", "min_k_plus_plus", "neighbourhood"}
    with pytest.raises(LabError, match="--detectors bleu: unknown detector .choose from loss"):
        check_detectors(["loss", "bleu"])


@pytest.mark.parametrize("members, nonmembers", [
    ([0.9, 0.8, 0.7, 0.3], [0.1, 0.4, 0.35, 0.8, 0.2]),
    ([1, 1, 2, 3, 3, 3], [1, 2, 2, 3, 0, 0, 1]),  # ties within and across groups
    ([5.0], [5.0]),
    (list(range(100)), [x + 0.5 for x in range(100)]),
])
def test_auc_and_tpr_at_fpr_follow_scikit_learns_definitions(members, nonmembers):
    import numpy as np
    from sklearn.metrics import roc_auc_score, roc_curve

    from lab.stats import roc_auc, roc_points, tpr_at_fpr

    labels = [1] * len(members) + [0] * len(nonmembers)
    scores = [*members, *nonmembers]
    if len(set(labels)) == 2:
        assert roc_auc(members, nonmembers) == pytest.approx(roc_auc_score(labels, scores))
    fpr, tpr, _ = roc_curve(labels, scores, drop_intermediate=False)
    mine = roc_points(members, nonmembers)
    assert mine[0] == pytest.approx(fpr.tolist()) and mine[1] == pytest.approx(tpr.tolist())
    for target in (0.0, 0.01, 0.05, 0.2, 0.5, 1.0):
        assert tpr_at_fpr(members, nonmembers, target) == pytest.approx(
            float(np.max(tpr[fpr <= target])))
    assert roc_auc(members, []) is None and tpr_at_fpr([], nonmembers, 0.05) is None


def test_the_auc_interval_over_samples_brackets_the_auc_and_narrows_with_more_samples():
    import random

    from lab.stats import auc_interval, roc_auc

    generator = random.Random(1)
    small = ([generator.gauss(1, 1) for _ in range(20)], [generator.gauss(0, 1) for _ in range(20)])
    large = ([generator.gauss(1, 1) for _ in range(400)],
             [generator.gauss(0, 1) for _ in range(400)])
    for members, others in (small, large):
        low, high = auc_interval(members, others)
        assert low <= roc_auc(members, others) <= high
    assert auc_interval(*large)[1] - auc_interval(*large)[0] < \
        (auc_interval(*small)[1] - auc_interval(*small)[0]) / 2
    assert auc_interval(*small) == auc_interval(*small)  # seeded: the same interval
    # separated groups: every resample separates them too
    assert auc_interval([2.0, 3.0, 4.0], [0.0, 1.0]) == (1.0, 1.0)
    assert auc_interval([], [1.0]) is None
