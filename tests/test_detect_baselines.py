"""The detectors' baselines (issue 60): the blind bag-of-words baseline that never sees the model,
DC-PDD by hand, the TPR at 0.1% FPR only where the non-members allow it, and the leaderboard's
rows per contamination form."""
from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest

from lab.common import LabError
from lab.corpora import Sample
from lab.detect import DETECTORS, check_detectors, score_all
from lab.detect.context import DetectContext
from lab.detect.run import detection_metrics
from tests.test_detect import bigram_model

needs_corpora = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")


def blind_context() -> DetectContext:
    """No model, no tokenizer: the blind baseline reads the samples' text only."""
    return DetectContext(model=None, tokenizer=None, family="gpt2", form="paired")


def codetrans_test() -> list[Sample]:
    from lab.corpora import load_samples

    return list(load_samples("codetrans", "test", None).records)


@needs_corpora
def test_blind_on_random_halves_of_one_split_covers_chance():
    """The split-half design: members and non-members drawn at random from CodeTrans test. The
    blind baseline cannot tell them apart: the interval the lab prints (its permutation test's,
    lab.detect.blind.INTERVAL) covers 0.5 exactly where its p is above 0.05, which a random
    split gives in 19 draws of 20. Ten draws of 40 + 40 (each with its own folds), 19
    permutations each: at least 8 cover 0.5 (tests/test_calibration_detect.py measures the
    rate)."""
    from lab.detect import blind

    samples = codetrans_test()
    assert len(samples) == 1000
    texts = ["\n".join(blind_context().documents(s)) for s in samples]
    covered, aucs = 0, []
    for draw in range(10):
        drawn = random.Random(f"draw {draw}").sample(range(len(samples)), 80)
        tested = blind.permutation_test([texts[i] for i in drawn], ["member"] * 40 + [None] * 40,
                                        draw, permutations=19)[blind.MEMBER]
        covered += tested["low"] <= 0.5 <= tested["high"]
        assert (tested["low"] <= 0.5 <= tested["high"]) == (tested["p"] > 0.05)
        aucs.append(tested["auc"])
    assert covered >= 8, aucs
    assert abs(sum(aucs) / len(aucs) - 0.5) < 0.06, aucs
    # the detector is the same cross-fitting, deterministic per seed; another seed folds afresh
    labels = [i in set(random.Random("draw 0").sample(range(1000), 500)) for i in range(1000)]
    ctx = DetectContext(model=None, tokenizer=None, family="gpt2", form="paired", fold_seed=0)
    scored = score_all(ctx, samples, check_detectors(["blind"]), labels=labels)["blind"]
    assert scored == blind.cross_fit(texts, labels, 0)
    other = DetectContext(model=None, tokenizer=None, family="gpt2", form="paired", fold_seed=1)
    assert score_all(other, samples, check_detectors(["blind"]), labels=labels)["blind"] != scored


@needs_corpora
def test_blind_finds_a_split_that_is_not_random():
    """Members = the samples whose code mentions a string: the split is in the text, and the
    blind baseline (trained on the other fold only) finds it."""
    samples = codetrans_test()
    labels = ["String" in s.input for s in samples]
    assert 100 < sum(labels) < 900
    scores = score_all(blind_context(), samples, check_detectors(["blind"]),
                       labels=labels)["blind"]
    metrics = detection_metrics([s for s, m in zip(scores, labels) if m],
                                [s for s, m in zip(scores, labels) if not m])
    assert metrics["auc"] > 0.8
    # its own test (19 permutations: the smallest p is 1/20) finds it, and its interval
    from lab.detect import blind

    tested = blind.test(blind_context(), samples, ["member" if m else None for m in labels],
                        19)[blind.MEMBER]
    assert tested["auc"] == metrics["auc"] and tested["p"] == 1 / 20 and tested["low"] > 0.5


def test_blind_needs_labels_and_both_groups():
    samples = [Sample(id=f"t:test:{i}", split="test", index=i, input="a b", output="c")
               for i in range(6)]
    # without labels the blind baseline does not apply (and never loads a model)
    assert score_all(blind_context(), samples, check_detectors(["blind"])) == {}
    with pytest.raises(LabError, match="blind: needs at least 2 members and 2 non-members"):
        score_all(blind_context(), samples, check_detectors(["blind"]),
                  labels=[True] + [False] * 5)
    with pytest.raises(LabError, match="blind: needs each scored sample's membership label"):
        DETECTORS["blind"].score(blind_context(), samples)


# DC-PDD on a hand-made example: one id per character, a bigram model, a two-document corpus.
VOCAB = 32
BOS, PAD, EOS, MASK = 0, 1, 2, 4


class CharTokenizer:
    bos_token_id, pad_token_id, eos_token_id, mask_token_id = BOS, PAD, EOS, MASK

    def __call__(self, text, add_special_tokens=False):
        if isinstance(text, list):
            return {"input_ids": [[self.id(c) for c in t] for t in text]}
        return {"input_ids": [self.id(c) for c in text]}

    def __len__(self):
        return VOCAB

    @staticmethod
    def id(c: str) -> int:
        return 5 + (ord(c) % (VOCAB - 5))


def write_corpus(folder: Path, texts: list[str]) -> dict[str, str]:
    from lab.corpora.shards import shards_digest, write_shards

    records = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    shards = write_shards(folder / "corpus", records, 10)
    digest = shards_digest(shards)
    (folder / "manifest.json").write_text(json.dumps({"shards": shards, "corpus_sha256": digest}))
    return {"path": str(folder), "sha256": digest}


def test_dc_pdd_by_hand(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_CACHE", str(tmp_path / "cache"))
    a, b = CharTokenizer.id("a"), CharTokenizer.id("b")
    rows = [[1 / VOCAB] * VOCAB for _ in range(VOCAB)]
    for previous, likely, p in ((BOS, a, 0.5), (a, b, 0.9), (b, a, 0.5)):
        rows[previous] = [p if j == likely else (1 - p) / (VOCAB - 1) for j in range(VOCAB)]
    corpus = write_corpus(tmp_path / "corpus", ["aab", "bb"])
    ctx = DetectContext(model=bigram_model(rows), tokenizer=CharTokenizer(), family="gpt2",
                        form="output", corpus=corpus)
    # counted as <s> text </s>: <s> 2, </s> 2, a 2, b 3; N = 9 tokens, |V| = 32: Laplace
    f = {BOS: 3 / 41, EOS: 3 / 41, a: 3 / 41, b: 4 / 41}
    # "aba": <s> a b a </s>; predicted a (1/2), b (0.9), a again (skipped: not its first
    # occurrence), </s> after a (0.1/31); each term -p log f, capped at a = 0.01
    terms = [min(-0.5 * math.log(f[a]), 0.01), min(-0.9 * math.log(f[b]), 0.01),
             min(-(0.1 / 31) * math.log(f[EOS]), 0.01)]
    assert terms[:2] == [0.01, 0.01] and terms[2] < 0.01  # the cap binds where p is high
    sample = Sample(id="t:test:0", split="test", index=0, input="x", output="aba")
    got = score_all(ctx, [sample], check_detectors(["dc_pdd"]))["dc_pdd"]
    assert got == pytest.approx([sum(terms) / 3], rel=1e-6)  # float32 log-softmax
    # without the cap: the mean of the raw terms
    from lab.detect.dc_pdd import smoothed, token_score

    counts = [0] * VOCAB
    counts[BOS], counts[EOS], counts[a], counts[b] = 2, 2, 2, 3
    raw = token_score([a, b, a, EOS], [math.log(0.5), math.log(0.9), math.log(0.5),
                                       math.log(0.1 / 31)], smoothed(counts), a=math.inf)
    assert raw == pytest.approx((-0.5 * math.log(f[a]) - 0.9 * math.log(f[b])
                                 - (0.1 / 31) * math.log(f[EOS])) / 3)
    # the counts were cached by the corpus's and tokenizer's sha256 where a tokenizer states one
    assert not (tmp_path / "cache" / "dc_pdd").exists()
    hashed = DetectContext(model=ctx.model, tokenizer=ctx.tokenizer, family="gpt2",
                           form="output", corpus={**corpus, "tokenizer_sha256": "t"})
    assert DETECTORS["dc_pdd"].score(hashed, [sample]) == got
    assert len(list((tmp_path / "cache" / "dc_pdd").glob("*.npy"))) == 1


def test_dc_pdd_refuses_a_corpus_that_is_not_there(tmp_path):
    ctx = DetectContext(model=None, tokenizer=CharTokenizer(), family="gpt2", form="output",
                        corpus={"path": str(tmp_path / "gone"), "sha256": "x"})
    sample = Sample(id="t:test:0", split="test", index=0, input="x", output="ab")
    with pytest.raises(LabError, match=r"dc_pdd: the model's pre-training corpus .*gone is not "
                                       r"there"):
        DETECTORS["dc_pdd"].score(ctx, [sample])
    corpus = write_corpus(tmp_path / "other", ["ab"])
    ctx.corpus = {**corpus, "sha256": "another"}
    with pytest.raises(LabError, match="holds another corpus now"):
        DETECTORS["dc_pdd"].score(ctx, [sample])
    # an outside model (no corpus record): DC-PDD does not apply
    outside = DetectContext(model=None, tokenizer=None, family="gpt2", form="output")
    assert score_all(outside, [sample], check_detectors(["dc_pdd"])) == {}


def test_tpr_at_a_tenth_of_a_percent_fpr_only_with_1000_non_members():
    rng = random.Random(0)
    members = [rng.gauss(1, 1) for _ in range(200)]
    few = detection_metrics(members, [rng.gauss(0, 1) for _ in range(999)])
    assert few["tpr_at_0.1pct_fpr"] is None
    assert few["tpr_at_0.1pct_fpr_note"] == "n/a (needs >= 1000 non-members; 999 here)"
    assert {"tpr_at_1pct_fpr", "tpr_at_5pct_fpr"} <= set(few)  # the existing ones unchanged
    enough = detection_metrics(members, [rng.gauss(0, 1) for _ in range(1000)])
    assert 0 <= enough["tpr_at_0.1pct_fpr"] <= enough["tpr_at_1pct_fpr"]
    assert "tpr_at_0.1pct_fpr_note" not in enough


def test_the_contamination_form_of_a_corpus_record():
    from lab.contamination.soft import recorded_form

    assert recorded_form({}) == "verbatim"
    assert recorded_form({"options": {"contamination_form": "renamed"}}) == "renamed"
    assert recorded_form({"contamination_form": {"name": "partial", "fraction": 0.5}}) == \
        "partial:0.5"


def test_the_leaderboard_has_rows_per_contamination_form_and_says_when_tpr_is_na():
    from lab.detect.leaderboard import leaderboard, leaderboard_markdown

    base = {"model": "gpt2", "arm": "paired", "groups": "paired", "epochs": None,
            "comparison": "membership", "dose": "all", "detector": "loss",
            "members": 40, "nonmembers": 40, "tpr_at_0.1pct_fpr": None,
            "tpr_at_0.1pct_fpr_note": "n/a (needs >= 1000 non-members; 40 here)"}
    rows = [{**base, "seed": seed, "auc": auc, "contamination_form": form}
            for form, aucs in (("verbatim", (0.9, 0.95)), ("renamed", (0.6, 0.7)))
            for seed, auc in enumerate(aucs)]
    board = leaderboard(rows)
    assert [(r["contamination_form"], r["seeds"]) for r in board] == [("verbatim", 2),
                                                                      ("renamed", 2)]
    assert [r["auc"] for r in board] == pytest.approx([0.925, 0.65])
    assert board[0]["tpr_at_0.1pct_fpr_mean"] is None
    assert board[0]["tpr_at_0.1pct_fpr_note"] == "n/a (needs >= 1000 non-members; 40 here)"
    table = leaderboard_markdown(board)
    assert table.splitlines()[0] == ("| detector | gpt2 paired, pre-trained | "
                                     "gpt2 paired (renamed), pre-trained |")
    assert "none here: n/a (needs >= 1000 non-members; 40 here)" in table
    # rows from before the form and the low FPR: the same columns as before
    old = leaderboard([{k: v for k, v in r.items() if not k.startswith(("contamination",
                                                                         "tpr_at_0.1"))}
                       for r in rows[:2]])
    assert "contamination_form" not in old[0] and "tpr_at_0.1pct_fpr_mean" not in old[0]


@needs_corpora
def test_lab_detect_runs_the_baselines_beside_the_detectors(micro_world, tmp_path, monkeypatch):
    """`lab detect` on a (barely trained) micro GPT-2 of the split-half paired arm: DC-PDD from
    its own pre-training corpus, the blind baseline on members vs non-members and, in the shift
    check, on held-out test vs valid; the contamination form on every row; no TPR at 0.1% FPR
    with 40 non-members; DC-PDD refused in one line once the corpus is gone, and skipped for an
    outside model (no corpus known)."""
    import shutil

    from lab.detect.run import run_detect
    from lab.train.pretrain import PretrainConfig, run_pretrain

    monkeypatch.setenv("LAB_CACHE", str(tmp_path / "lab-cache"))
    shutil.copytree(micro_world / "paired", tmp_path / "paired")  # moved away below
    run_pretrain(PretrainConfig(model="gpt2", corpus=tmp_path / "paired", out=tmp_path / "arm",
                                tokenizer=micro_world / "tok", preset="micro", max_steps=4,
                                lr=3e-3, batch_size=16, block_size=128, seed=0, report_to="none",
                                cache_dir=tmp_path / "cache", save_steps=1000))
    detectors = ("loss", "dc_pdd", "blind")
    result = run_detect(tmp_path / "arm", tmp_path / "detect", detectors=detectors,
                        max_samples=40)
    assert list(result["detectors"]) == list(detectors) and result["skipped"] == []
    assert result["contamination_form"] == "verbatim"
    assert result["settings"]["dc_pdd_a"] == 0.01 and result["settings"]["blind_fold_seed"] == 0
    for name in detectors:
        metrics = result["detectors"][name]
        assert metrics["members"] == metrics["nonmembers"] == 40
        assert metrics["tpr_at_0.1pct_fpr"] is None
        assert metrics["tpr_at_0.1pct_fpr_note"] == "n/a (needs >= 1000 non-members; 40 here)"
        assert metrics["contamination_form"] == "verbatim"
        assert name in result["shift"]["detectors"]
    assert list(tmp_path.glob("lab-cache/dc_pdd/*.npy"))  # the corpus's token counts, cached
    rows = [json.loads(line) for line in (tmp_path / "detect" / "scores.jsonl").open()]
    assert {r["contamination_form"] for r in rows} == {"verbatim"}
    by_role = {role: [r for r in rows if r["role"] == role]
               for role in ("member", "nonmember", "shift")}
    assert all("blind" in r and "blind_shift" not in r for r in by_role["member"])
    assert all("blind" in r and "blind_shift" in r for r in by_role["nonmember"])
    assert all("blind" not in r and "blind_shift" in r and "dc_pdd" in r
               for r in by_role["shift"])
    from lab.stats import roc_auc

    shift = result["shift"]["detectors"]["blind"]
    assert shift["auc"] == pytest.approx(roc_auc([r["blind_shift"] for r in by_role["nonmember"]],
                                                 [r["blind_shift"] for r in by_role["shift"]]))
    assert shift["alternative"] == "two-sided" and shift["bound"].startswith("shift AUC")
    # the blind baseline's p and interval are its permutation test's (named, with its
    # permutations and seed), membership and shift check alike; the other detectors' are not
    from lab.detect import blind
    from lab.detect.shift import detectable_shift

    for metrics in (result["detectors"]["blind"], shift):
        assert (metrics["test"], metrics["permutations"], metrics["permutation_seed"],
                metrics["alternative"]) == (blind.TEST, blind.PERMUTATIONS, 0, "two-sided")
        assert 1 / (blind.PERMUTATIONS + 1) <= metrics["p"] <= 1
        assert metrics["auc_sample_low"] <= metrics["auc"] <= metrics["auc_sample_high"]
    assert shift["detectable_shift"] == detectable_shift(shift["null_sd"])
    assert result["settings"]["blind_permutations"] == blind.PERMUTATIONS
    assert result["detectors"]["loss"]["alternative"] == "greater"
    assert "test" not in result["detectors"]["loss"]

    # the corpus moved away: DC-PDD is refused in one line, before anything is written
    (tmp_path / "paired").rename(tmp_path / "moved")
    with pytest.raises(LabError, match=r"dc_pdd: the model's pre-training corpus .*paired is "
                                       r"not there"):
        run_detect(tmp_path / "arm", tmp_path / "refused", detectors=detectors, max_samples=40)
    assert not (tmp_path / "refused").exists()

    # an outside model: no corpus record, so no DC-PDD; the blind baseline reads audited vs valid
    outside = tmp_path / "hf-gpt2"
    shutil.copytree(tmp_path / "arm" / "model", outside)
    audit = run_detect(outside, tmp_path / "audit", benchmark="codetrans", max_samples=24,
                       detectors=detectors)
    assert list(audit["detectors"]) == ["loss", "blind"] and audit["skipped"] == ["dc_pdd"]
    assert "contamination_form" not in audit
