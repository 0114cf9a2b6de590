"""Packed documents see only themselves: per-document attention and positions for GPT-2 and
RoBERTa (against one document per padded sequence), the cross-document opt-out, the packing's
sample guard and the injected share of trained tokens."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from lab.models import build_config, build_model, position_offset
from lab.train.packing import (
    PackedCollator, PackedDataset, TokenizedCorpus, pack_documents, packing_report,
    sequences_repeating_a_sample,
)

BOS, PAD, EOS, MASK = 0, 1, 2, 4
VOCAB = 96
BLOCK = 64
MODELS = ["gpt2", "roberta"]


class FakeTokenizer:
    """The lab tokenizer's special ids (<s> <pad> </s> <unk> <mask> <SEP> = 0..5), a small
    vocabulary and nothing else: all the model builders and the collator read."""

    bos_token_id, pad_token_id, eos_token_id, unk_token_id, mask_token_id = BOS, PAD, EOS, 3, MASK
    all_special_ids = [0, 1, 2, 3, 4, 5]

    def __len__(self) -> int:
        return VOCAB


def make_corpus(documents: list[list[int]], injected: list[str | None] | None = None
                ) -> TokenizedCorpus:
    lengths = [len(d) for d in documents]
    offsets = np.zeros(len(documents) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.asarray([t for d in documents for t in d], dtype=np.uint32)
    return TokenizedCorpus(parts=[tokens], offsets=offsets,
                           doc_ids=[f"doc{i}" for i in range(len(documents))],
                           injected=injected or [None] * len(documents), key="test")


def random_documents(count: int, seed: int = 0, low: int = 3, high: int = 30) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(6, VOCAB, size=int(rng.integers(low, high))).tolist()
            for _ in range(count)]


def micro_model(family: str):
    torch.manual_seed(0)
    model = build_model(family, build_config(family, "micro", FakeTokenizer(), BLOCK))
    return model.eval()  # no dropout: the comparisons are exact up to float rounding


def packed(documents: list[list[int]], family: str, cross_document: bool = False, seed: int = 0):
    corpus = make_corpus(documents)
    packing = pack_documents(corpus.lengths(), BLOCK, cross_document=cross_document)
    dataset = PackedDataset(corpus, packing, BOS, EOS, PAD)
    collator = PackedCollator(FakeTokenizer(), mlm=family == "roberta", seed=seed,
                              cross_document=cross_document)
    return corpus, packing, dataset, collator


def spans(dataset: PackedDataset, index: int) -> list[tuple[int, int, int]]:
    """(document, first token, end) of every document's tokens in packed sequence `index`."""
    _, segments = dataset.sequence_and_segments(index)
    out = []
    for number, doc in enumerate(dataset.packing.sequences[index], start=1):
        where = np.flatnonzero(segments == number)
        out.append((doc, int(where[0]), int(where[-1]) + 1))
    return out


def a_sequence_with(dataset: PackedDataset, documents: int) -> int:
    return next(i for i in range(len(dataset)) if len(dataset.packing.sequences[i]) >= documents)


# --- (a) a token's logits do not depend on the other documents of its sequence ---------------

@pytest.mark.parametrize("family", MODELS)
def test_logits_ignore_the_other_documents_of_the_sequence(family):
    model = micro_model(family)
    _, _, dataset, collator = packed(random_documents(60), family)
    index = a_sequence_with(dataset, 3)
    feature = dataset[index]
    first_doc, start, end = spans(dataset, index)[0]
    altered = dict(feature, input_ids=feature["input_ids"].clone())
    body = slice(start + 1, end - 1)  # the first document's own tokens (not its <s> / </s>)
    altered["input_ids"][body] = (altered["input_ids"][body] + 7) % (VOCAB - 6) + 6
    with torch.no_grad():
        before = model(**collator([feature])).logits[0]
        after = model(**collator([altered])).logits[0]
    others = torch.arange(BLOCK) >= end
    others &= feature["input_ids"] != PAD
    assert others.sum() > 10
    assert torch.allclose(before[others], after[others], atol=1e-5), \
        (before[others] - after[others]).abs().max()
    assert not torch.allclose(before[start:end], after[start:end], atol=1e-3)  # it did change


# --- (b) packed loss == one document per padded sequence -------------------------------------

def one_per_sequence(batch: dict, dataset: PackedDataset, indices: list[int], family: str) -> dict:
    """The documents of a collated packed batch, each alone in a `<s> doc </s> <pad>...` row with
    a 2D padding mask (the study's layout), carrying over the packed batch's tokens and labels
    (so RoBERTa's masked positions are the same)."""
    rows, masks, labels, positions = [], [], [], []
    for row, index in enumerate(indices):
        for _, start, end in spans(dataset, index):
            n = end - start
            ids = torch.full((BLOCK,), PAD)
            ids[:n] = batch["input_ids"][row, start:end]
            lab = torch.full((BLOCK,), -100)
            lab[:n] = batch["labels"][row, start:end]
            lab[0] = -100  # the GPT-2 loss shifts it away; RoBERTa never masks <s>
            mask = torch.zeros(BLOCK, dtype=torch.long)
            mask[:n] = 1
            # RoBERTa's own positions for this row (padding_idx + 1 + i), given explicitly in case
            # a randomly replaced token is the padding id; GPT-2's default (0, 1, ...).
            pos = torch.arange(BLOCK) + (PAD + 1 if family == "roberta" else 0)
            rows.append(ids), labels.append(lab), masks.append(mask), positions.append(pos)
    return {"input_ids": torch.stack(rows), "attention_mask": torch.stack(masks),
            "labels": torch.stack(labels), "position_ids": torch.stack(positions)}


@pytest.mark.parametrize("family", MODELS)
def test_packed_loss_equals_one_document_per_sequence(family):
    model = micro_model(family)
    _, _, dataset, collator = packed(random_documents(60, seed=1), family, seed=3)
    indices = [0, 1, 2]
    batch = collator([dataset[i] for i in indices])
    reference = one_per_sequence(batch, dataset, indices, family)
    assert len(reference["input_ids"]) > 3 * 2  # several documents per packed sequence
    if family == "roberta":
        assert (batch["labels"] != -100).sum() > 20
        assert int((batch["labels"] != -100).sum()) == int((reference["labels"] != -100).sum())
    else:  # every document token and </s> is predicted, once, in both layouts
        assert int((batch["labels"] != -100).sum()) == int((reference["labels"] != -100).sum()) \
            == int(reference["attention_mask"].sum()) - len(reference["input_ids"])
    with torch.no_grad():
        loss_packed = model(**batch).loss
        loss_alone = model(**reference).loss
    assert loss_packed.item() == pytest.approx(loss_alone.item(), rel=1e-5, abs=1e-6)
    # And token by token: every document's logits are those it gets alone.
    with torch.no_grad():
        logits = model(**batch).logits
        alone = model(**reference).logits
    k = 0
    for row, index in enumerate(indices):
        for _, start, end in spans(dataset, index):
            assert torch.allclose(logits[row, start:end], alone[k, :end - start], atol=1e-4)
            k += 1


def test_roberta_positions_and_mask_are_per_document():
    _, _, dataset, collator = packed(random_documents(40, seed=2), "roberta")
    index = a_sequence_with(dataset, 2)
    batch = collator([dataset[index]])
    config = build_config("roberta", "micro", FakeTokenizer(), BLOCK)
    assert position_offset(config) == PAD + 1 == collator.position_offset
    mask = batch["attention_mask"]
    assert mask.dtype == torch.bool and mask.shape == (1, 1, BLOCK, BLOCK)
    for _, start, end in spans(dataset, index):
        assert batch["position_ids"][0, start:end].tolist() == list(range(2, 2 + end - start))
        assert mask[0, 0, start:end, start:end].all()
        assert not mask[0, 0, start:end, :start].any() and not mask[0, 0, start:end, end:].any()
    pads = batch["input_ids"][0] == PAD
    assert (batch["position_ids"][0, pads] == PAD).all()
    assert mask[0, 0].any(dim=-1).all()  # no fully masked row (padding attends to padding)


@pytest.mark.unmasked_padding  # the reference: positions alone
def test_gpt2_packed_batches_carry_their_mask_and_score_as_without_it():
    """A padded GPT-2 batch carries its mask (a padded batch scored without one draws
    transformers' "strongly recommend passing in an attention_mask" warning), and the mask is
    exactly what transformers derives from the restarting positions alone: the same logits,
    bit for bit, so pre-training numbers do not move."""
    model = micro_model("gpt2")
    _, _, dataset, collator = packed(random_documents(60, seed=4), "gpt2")
    indices = [i for i in range(len(dataset)) if (dataset[i]["input_ids"] == PAD).any()][:3]
    assert indices, "no padded sequence"
    batch = collator([dataset[i] for i in indices])
    mask = batch["attention_mask"]
    assert mask.dtype == torch.bool and mask.shape == (len(indices), 1, BLOCK, BLOCK)
    assert not mask[0, 0].triu(1).any()  # never a later token
    for _, start, end in spans(dataset, indices[0]):
        own = torch.ones(end - start, end - start, dtype=torch.bool).tril()
        assert torch.equal(mask[0, 0, start:end, start:end], own)
        assert not mask[0, 0, start:end, :start].any()
    positions_only = {k: v for k, v in batch.items() if k != "attention_mask"}
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, model(**positions_only).logits)


# --- (d) the opt-out: cross-document attention, positions running on ------------------------

@pytest.mark.parametrize("family", MODELS)
def test_cross_document_opt_out_attends_across_documents(family):
    model = micro_model(family)
    corpus, packing, dataset, collator = packed(random_documents(60), family, cross_document=True)
    index = a_sequence_with(dataset, 3)
    feature = dataset[index]
    ids = feature["input_ids"].tolist()
    # Today's layout: one <s>, then doc </s> doc </s> ...
    expected = [BOS]
    for doc in packing.sequences[index]:
        expected += [int(t) for t in corpus.document(doc)] + [EOS]
    assert ids[:len(expected)] == expected and set(ids[len(expected):]) <= {PAD}
    batch = collator([feature])
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["attention_mask"].shape == (1, BLOCK)  # one mask over the whole sequence
    first_doc, start, end = spans(dataset, index)[0]
    altered = dict(feature, input_ids=feature["input_ids"].clone())
    body = slice(start + 1, end - 1)  # the first document (after the sequence's <s>)
    altered["input_ids"][body] = (altered["input_ids"][body] + 7) % (VOCAB - 6) + 6
    with torch.no_grad():
        before = model(**batch).logits[0]
        after = model(**collator([altered])).logits[0]
        plain = model(input_ids=feature["input_ids"][None],
                      attention_mask=feature["attention_mask"][None]).logits[0]
    later = (torch.arange(BLOCK) >= end) & (feature["input_ids"] != PAD)
    assert not torch.allclose(before[later], after[later], atol=1e-3)  # the context leaks in
    if family == "gpt2":  # no masking noise: the model's own full-sequence computation
        assert torch.allclose(before, plain, atol=1e-5)


# --- (c) no sequence holds two documents of one sample ---------------------------------------

def guarded_corpus() -> tuple[list[int], list[str | None]]:
    """Lengths and sample ids: 30 samples injected 4 times (equal lengths, so best fit would put
    copies side by side), 30 unpaired samples (input and output sides), 400 base documents."""
    rng = np.random.default_rng(5)
    lengths: list[int] = []
    samples: list[str | None] = []
    for s in range(30):
        n = int(rng.integers(5, 60))
        lengths += [n] * 4
        samples += [f"copy{s}"] * 4
    for s in range(30):
        lengths += [int(rng.integers(5, 60)), int(rng.integers(5, 60))]
        samples += [f"sides{s}"] * 2
    lengths += rng.integers(1, 300, size=400).tolist()
    samples += [None] * 400
    return lengths, samples


@pytest.mark.parametrize("cross_document", [False, True])
def test_packing_never_places_two_documents_of_one_sample_together(cross_document):
    lengths, samples = guarded_corpus()
    unguarded = pack_documents(np.array(lengths), 128, cross_document=cross_document)
    assert sequences_repeating_a_sample(unguarded, samples) > 5  # what the guard prevents
    packing = pack_documents(np.array(lengths), 128, samples=samples, cross_document=cross_document)
    again = pack_documents(np.array(lengths), 128, samples=samples, cross_document=cross_document)
    assert packing.sequences == again.sequences  # deterministic
    assert sequences_repeating_a_sample(packing, samples) == 0
    for seq in packing.sequences:
        ids = [samples[d] for d in seq if samples[d]]
        assert len(ids) == len(set(ids))
    placed = sorted(d for seq in packing.sequences for d in seq)
    assert placed == list(range(len(lengths)))
    assert packing.displaced > 0
    assert packing.padding_fraction() < unguarded.padding_fraction() + 0.01 < 0.05
    corpus = make_corpus([[7] * n for n in lengths], samples)
    report = packing_report(corpus, packing)
    assert report["sequences_with_repeated_sample"] == 0
    assert packing_report(corpus, unguarded)["sequences_with_repeated_sample"] > 5


# --- (e) the injected share counts trained tokens; truncated samples are listed --------------

def test_injected_share_counts_trained_tokens_and_lists_truncated_samples():
    documents = [[7] * 200, [8] * 20, [9] * 30, [10] * 100, [11] * 10]
    injected = [None, "s1", "s1", "s2", None]
    corpus = make_corpus(documents, injected)
    packing = pack_documents(corpus.lengths(), BLOCK, samples=injected)
    report = packing_report(corpus, packing)
    kept = BLOCK - 2  # <s> doc </s> fills a block
    assert report["trained_tokens"] == kept + 20 + 30 + kept + 10
    assert report["injected_trained_tokens"] == 20 + 30 + kept
    assert report["injected_token_fraction"] == pytest.approx(
        (20 + 30 + kept) / (kept + 20 + 30 + kept + 10), abs=1e-6)
    assert report["truncated_ids"] == ["s2"]
    assert report["truncated_injected_ids"] == ["doc3"] and report["truncated_base_ids"] == ["doc0"]
    assert report["truncated_tokens_dropped"] == (200 - kept) + (100 - kept)
    assert report["useful_tokens"] == report["trained_tokens"] + 2 * 5
    # inside a base document (embedded), a sample is cut where its block ends past the kept
    # tokens, wherever its document ends (doc3 is cut either way)
    embedded = packing_report(corpus, packing, block_ends={3: 40})
    assert embedded["truncated_ids"] == [] and embedded["truncated_injected_ids"] == ["doc3"]
    assert packing_report(corpus, packing, block_ends={3: kept + 1})["truncated_ids"] == ["s2"]


# --- the same through `lab pretrain` on a real unpaired arm -----------------------------------

@pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")
def test_pretraining_an_unpaired_arm_keeps_samples_apart_and_records_truncation(micro_world,
                                                                                tmp_path):
    from lab.contamination.inject import InjectConfig, run_inject
    from lab.tokenizer import load_tokenizer, tokenizer_hash
    from lab.train.packing import tokenize_corpus
    from lab.train.pretrain import PretrainConfig, run_pretrain

    arm = tmp_path / "unpaired"
    run_inject(InjectConfig(benchmark="codetrans", setting="unpaired", seed=3,
                            base_splits=("valid",), limit=700, fraction=0.1, repeat=3, out=arm))
    tok = load_tokenizer(micro_world / "tok")
    corpus = tokenize_corpus(arm, tok, tokenizer_hash(micro_world / "tok"), tmp_path / "cache")
    block = 96  # short enough that some injected documents are truncated
    unguarded = pack_documents(corpus.lengths(), block)
    assert sequences_repeating_a_sample(unguarded, corpus.injected) > 0
    manifest = run_pretrain(PretrainConfig(
        model="gpt2", corpus=arm, tokenizer=micro_world / "tok", out=tmp_path / "pt",
        preset="micro", max_steps=2, batch_size=4, block_size=block, cache_dir=tmp_path / "cache"))
    report = json.loads((tmp_path / "pt" / "packing.json").read_text())
    assert report["sequences_with_repeated_sample"] == 0 == manifest["packing"][
        "sequences_with_repeated_sample"]
    assert report["cross_document_attention"] is False
    truncated = sorted({corpus.injected[i] for i in range(len(corpus))
                        if corpus.injected[i] and corpus.lengths()[i] > block - 2})
    assert truncated and report["truncated_ids"] == truncated
    assert manifest["corpus"]["truncated_ids"] == truncated
    assert set(truncated) <= set(manifest["corpus"]["injected_ids"])


# --- recipes: the field is always part of a pre-training stage's key ------------------------

def test_cross_document_attention_is_always_in_the_pretraining_stage_key(tmp_path, monkeypatch):
    import dataclasses
    from pathlib import Path

    from lab.study import stages as kinds
    from lab.study.recipe import KEY_NEUTRAL_DEFAULTS, load_recipe
    from lab.study.execution import _run_stage_unlocked
    from lab.study.grid import expand

    recipe = Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml"
    stages = expand(load_recipe(recipe))
    pretrains = [s for s in stages if s.kind == "pretrain"]
    # Not key-neutral: the default changed, so stages made before it get new keys.
    assert "cross_document_attention" not in KEY_NEUTRAL_DEFAULTS.get("pretrain", {})
    assert all(s.config.cross_document_attention is False for s in pretrains)
    cross = expand(load_recipe(recipe, ["pretrain.cross_document_attention=true"]))
    changed = {s.kind for s in cross if s.key not in {t.key for t in stages}}
    assert "pretrain" in changed and not changed & {"inject", "tokenizer"}
    seen = []
    monkeypatch.setitem(kinds.KINDS, "pretrain",
                        dataclasses.replace(kinds.KINDS["pretrain"], run=seen.append))
    stage = next(s for s in cross if s.kind == "pretrain")
    _run_stage_unlocked(stage, tmp_path, None)
    assert seen[0].cross_document_attention is True
