"""The flex kernel's self-check (lab.train.flex_check), on a CPU: it passes the right kernel,
refuses a wrong mask (logits) and a kernel whose backward alone is wrong (gradients: what the
transposed tiles did on an H200), refuses a flex run before anything is written, and a flex run
that passes records it in its manifest. torch has no flex backward on a CPU, so the gradient
cases swap in a dense kernel computing the same function through the BlockMask's mask_mod."""
from __future__ import annotations

import dataclasses

import pytest

from lab.common import LabError

BLOCK = 128


@pytest.fixture
def micro(micro_world):
    from lab.models import build_config
    from lab.tokenizer import load_tokenizer

    tok = load_tokenizer(micro_world / "tok")
    return tok, {family: build_config(family, "micro", tok, BLOCK) for family in ("gpt2", "roberta")}


@pytest.fixture(autouse=True)
def fresh_checks(monkeypatch):
    """Each test starts with no check done in this process."""
    import lab.train.flex_check as flex_check

    monkeypatch.setattr(flex_check, "_checked", {})


def dense_kernel(wrong_backward: bool = False):
    """flex_attention's function, computed densely from the BlockMask's mask_mod (differentiable
    on a CPU); wrong_backward: the forward right, every gradient through it halved."""
    import torch

    class HalvedGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            return grad * 0.5

    def kernel(query, key, value, block_mask=None, scale=None):
        batch, _, length, _ = query.shape
        allowed = block_mask.mask_mod(torch.arange(batch)[:, None, None], 0,
                                      torch.arange(length)[None, :, None],
                                      torch.arange(length)[None, None, :])
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=allowed[:, None], scale=scale)
        return HalvedGradient.apply(out) if wrong_backward else out

    return lambda: kernel


def test_the_check_batch_covers_what_packing_makes(micro):
    from lab.train.flex_check import CHECK_ROWS, check_features

    tok, _ = micro
    features = check_features(tok, 200)
    assert len(features) == CHECK_ROWS
    segments = [f["segments"] for f in features]
    assert all(s.shape == (200,) for s in segments)
    assert (segments[0] == 0).any() and segments[0].max() >= 4  # documents, then padding
    assert (segments[1] == 1).all()  # one document filling its row
    assert segments[2].max() >= 20 and (segments[2] > 0).all()  # many short documents
    edges = [int((s[1:] != s[:-1]).nonzero()[0]) + 1 for s in segments if (s[1:] != s[:-1]).any()]
    assert any(edge % 128 for edge in edges)  # document edges inside a tile
    for f in features:
        ids, documents = f["input_ids"], f["segments"]
        assert ((ids == tok.pad_token_id) == (documents == 0)).all()
        starts = (documents > 0) & ((documents != documents.roll(1)) | (documents.new_ones(200)
                                                                         .cumsum(0) == 1))
        assert (ids[starts] == tok.bos_token_id).all()


@pytest.mark.parametrize("family", ["gpt2", "roberta"])
def test_the_check_passes_the_right_kernel_once_per_process(micro, family):
    from lab.train.flex_check import check_flex_kernel

    tok, configs = micro
    record = check_flex_kernel(configs[family], tok, BLOCK, "cpu", bf16=False)
    assert record["ok"] and not record["cached"] and record["device"] == "cpu"
    errors = record["errors"]["float32"]
    assert errors["logits"] < 1e-5 and errors["gradients"] is None  # no flex backward on a CPU
    assert errors["loss"][0] == pytest.approx(errors["loss"][1], rel=1e-5)
    again = check_flex_kernel(configs[family], tok, BLOCK, "cpu", bf16=False)
    assert again["cached"] and again["errors"] == record["errors"]


@pytest.mark.parametrize("family", ["gpt2", "roberta"])
def test_a_wrong_mask_is_refused_naming_the_error_and_the_way_out(micro, monkeypatch, family):
    import lab.train.attention as attention
    from lab.train.flex_check import require_flex_kernel

    tok, configs = micro
    right = attention.document_block_mask
    # GPT-2 gets a bidirectional mask, RoBERTa one that cuts each document at the tile edge
    if family == "gpt2":
        monkeypatch.setattr(attention, "document_block_mask",
                            lambda documents, causal: right(documents, causal=False))
    else:
        def cut_at_tiles(documents, causal):
            import torch

            tile = torch.arange(documents.shape[1]) // attention.BLOCK
            return right(documents * 100 + tile, causal)
        monkeypatch.setattr(attention, "document_block_mask", cut_at_tiles)
    with pytest.raises(LabError) as refused:
        require_flex_kernel(configs[family], tok, 200, "cpu", bf16=False)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("--attention flex: the FlexAttention document kernel disagrees")
    assert "logits in float32" in message and "train with --attention mask" in message


def test_gradients_only_the_backward_gets_wrong_are_caught(micro, monkeypatch):
    import lab.train.attention as attention
    import lab.train.flex_check as flex_check
    from lab.train.flex_check import check_flex_kernel

    tok, configs = micro
    monkeypatch.setattr(attention, "_eager_flex", dense_kernel())
    right = check_flex_kernel(configs["gpt2"], tok, BLOCK, "cpu", bf16=False,
                              gradients=True)
    assert right["ok"], right["errors"]
    assert right["errors"]["float32"]["gradients"] < 1e-5
    monkeypatch.setattr(attention, "_eager_flex", dense_kernel(wrong_backward=True))
    wrong = check_flex_kernel(configs["roberta"], tok, BLOCK, "cpu", bf16=False,
                              gradients=True)
    errors = wrong["errors"]["float32"]
    assert errors["logits"] < 1e-5  # the forward pass cannot tell ...
    assert errors["gradients"] > 0.05 and not wrong["ok"]  # ... the gradients can
    assert "attention" in errors["gradients_worst_matrix"]["name"]
    assert errors["gradients_together"] < errors["gradients"]  # a sum would dilute it
    with pytest.raises(LabError, match=r"gradients in float32 0\.\d+ > 0\.0005 \(roberta\."):
        monkeypatch.setattr(flex_check, "_checked", {})
        flex_check.require_flex_kernel(configs["roberta"], tok, BLOCK, "cpu", False,
                                       gradients=True)


def _flex_on_this_cpu(monkeypatch, kernel):
    """A pre-training on the flex path here: the device's refusal lifted, a dense kernel."""
    import lab.train.attention as attention
    import lab.train.pretrain as pretrain

    monkeypatch.setattr(pretrain, "resolve_attention",
                        lambda choice, device, preset="paper": choice or "mask")
    monkeypatch.setattr(attention, "_eager_flex", kernel)


def _config(micro_world, tmp_path, name):
    from lab.train.pretrain import PretrainConfig

    return PretrainConfig(model="gpt2", corpus=micro_world / "paired", tokenizer=micro_world / "tok",
                          out=tmp_path / name, preset="micro", max_steps=3, batch_size=4,
                          block_size=BLOCK, report_to="none", cache_dir=tmp_path / "cache",
                          attention="flex")


def test_a_flex_run_that_fails_the_check_is_refused_before_anything_is_written(
        micro_world, tmp_path, monkeypatch):
    import lab.train.attention as attention
    from lab.train.pretrain import run_pretrain

    _flex_on_this_cpu(monkeypatch, dense_kernel())
    right = attention.document_block_mask
    monkeypatch.setattr(attention, "document_block_mask",
                        lambda documents, causal: right(documents, causal=False))
    with pytest.raises(LabError, match="disagrees with the mask path on cpu .*--attention mask"):
        run_pretrain(_config(micro_world, tmp_path, "refused"))
    assert not (tmp_path / "refused").exists() and not (tmp_path / "refused.partial").exists()


def test_a_flex_run_records_its_check_in_the_manifest(micro_world, tmp_path, monkeypatch):
    from lab.train.pretrain import run_pretrain

    _flex_on_this_cpu(monkeypatch, dense_kernel())
    manifest = run_pretrain(_config(micro_world, tmp_path, "flex"))
    speed = manifest["speed"]
    assert speed["attention"] == "flex" and speed["attention_dropout"] == 0.0
    check = speed["flex_check"]
    assert check["ok"] and check["device"] == "cpu" and check["block"] == BLOCK
    assert check["errors"]["float32"]["logits"] < 1e-5 and check["seconds"] >= 0
    assert manifest["steps"] == 3
    mask = run_pretrain(dataclasses.replace(_config(micro_world, tmp_path, "mask"),
                                            attention="mask"))
    assert mask["speed"]["flex_check"] is None
