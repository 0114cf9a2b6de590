"""Pre-training's GPU path, checked on a CPU: the FlexAttention document kernel computes what the
4D masks compute (forward; FlexAttention trains on CUDA only, and scripts/gpu-check.sh runs the
same comparison there in bf16), the device decides the unset speed settings (a CPU run and its
stage keys stay what they were), and the manifest's throughput separates the steady rate from
start-up."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.common import LabError

REPO = Path(__file__).resolve().parents[1]
BLOCK = 128


@pytest.fixture(scope="module")
def batch_world(micro_world):
    from lab.tokenizer import load_tokenizer, tokenizer_hash
    from lab.train.packing import PackedDataset, pack_documents, tokenize_corpus

    tok = load_tokenizer(micro_world / "tok")
    corpus = tokenize_corpus(micro_world / "paired", tok, tokenizer_hash(micro_world / "tok"),
                             None)
    dataset = PackedDataset(corpus, pack_documents(corpus.lengths(), BLOCK), tok.bos_token_id,
                            tok.eos_token_id, tok.pad_token_id)
    # the sequences holding most documents, and the last (the least full: padding)
    most = sorted(range(len(dataset)), key=lambda i: -int(dataset[i]["segments"].max()))[:5]
    features = [dataset[i] for i in most + [len(dataset) - 1]]
    return tok, features


def _model(family: str, tok):
    import torch

    from lab.models import build_config, build_model

    torch.manual_seed(0)
    return build_model(family, build_config(family, "micro", tok, BLOCK)).eval()


@pytest.mark.parametrize("family", ["gpt2", "roberta"])
def test_flex_document_kernel_gives_the_mask_paths_logits_per_document(batch_world, family):
    import torch

    from lab.models import position_offset
    from lab.train.attention import use_flex_attention, with_document_mask
    from lab.train.packing import PackedCollator

    tok, features = batch_world
    model = _model(family, tok)
    offset = position_offset(model.config)
    mask_batch = PackedCollator(tok, mlm=family == "roberta", seed=1,
                                position_offset=offset)(features)
    flex_batch = PackedCollator(tok, mlm=family == "roberta", seed=1, position_offset=offset,
                                attention="flex", rows=8)(features)
    rows = len(features)
    assert flex_batch["input_ids"].shape[0] == 8  # filled up to one shape ...
    assert (flex_batch["labels"][rows:] == -100).all()  # ... with rows that add nothing
    for key in ("input_ids", "position_ids", "labels"):
        assert torch.equal(flex_batch[key][:rows], mask_batch[key]), key
    documents = flex_batch["document_ids"][:rows]
    assert documents.max() >= 2 and (documents == 0).any()  # two documents, and padding

    with torch.no_grad():
        want = model(**{k: v for k, v in mask_batch.items() if k != "labels"}).logits
        dropout = use_flex_attention(model)
        assert dropout == pytest.approx(0.1)
        flex = with_document_mask({k: v for k, v in flex_batch.items() if k != "labels"},
                                  causal=family == "gpt2")
        got = model(**flex).logits[:rows]
    for row in range(rows):
        for document in documents[row].unique().tolist():
            if document == 0:
                continue
            where = documents[row] == document
            torch.testing.assert_close(got[row][where], want[row][where], atol=1e-4, rtol=1e-4)
    # the other documents of a row change nothing: shuffle one document's tokens in place
    mixed = dict(flex)
    ids = flex_batch["input_ids"].clone()
    first = documents[0] == 1
    ids[0, first] = ids[0, first].flip(0)
    mixed["input_ids"] = ids[:, :]
    with torch.no_grad():
        again = model(**mixed).logits[:rows]
    other = (documents[0] > 1)
    torch.testing.assert_close(again[0][other], got[0][other], atol=1e-5, rtol=1e-5)


def test_the_flex_model_is_saved_as_a_plain_one(batch_world, tmp_path):
    from transformers import AutoModelForCausalLM

    from lab.train.attention import restore_attention, use_flex_attention

    tok, _ = batch_world
    model = _model("gpt2", tok)
    before = model.config._attn_implementation
    restore_attention(model, use_flex_attention(model))
    assert model.config._attn_implementation == before
    assert model.transformer.h[0].attn.attn_dropout.p == pytest.approx(0.1)
    model.save_pretrained(tmp_path / "m")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert loaded.config._attn_implementation != "lab_document_flex"


def test_the_device_decides_what_is_unset():
    from lab.train.pretrain import PretrainConfig, resolve_for_device

    base = PretrainConfig(model="gpt2", corpus=Path("c"), tokenizer=Path("t"), out=Path("o"))
    assert (base.bf16, base.compile, base.attention) == (None, None, None)
    cpu = resolve_for_device(base, "cpu")
    assert (cpu.bf16, cpu.compile, cpu.attention, cpu.loop) == (False, False, "mask", "trainer")
    tiny = resolve_for_device(base, "cuda")  # compiling costs more than a tiny run takes
    assert (tiny.bf16, tiny.compile, tiny.attention, tiny.loop) == (True, False, "mask", "plain")
    gpu = resolve_for_device(PretrainConfig(model="gpt2", corpus=Path("c"), tokenizer=Path("t"),
                                            out=Path("o"), preset="paper"), "cuda")
    assert (gpu.bf16, gpu.compile, gpu.attention) == (True, True, "flex")
    pinned = PretrainConfig(model="gpt2", corpus=Path("c"), tokenizer=Path("t"), out=Path("o"),
                            bf16=False, compile=False, attention="mask", loop="trainer")
    assert resolve_for_device(pinned, "cuda:1") == pinned
    deep = PretrainConfig(model="gpt2", corpus=Path("c"), tokenizer=Path("t"), out=Path("o"),
                          preset="paper", deepspeed=Path("z.json"))
    assert resolve_for_device(deep, "cuda").compile is False  # DeepSpeed wraps the model itself
    with pytest.raises(LabError, match="--attention flex: FlexAttention trains on a CUDA GPU only"):
        resolve_for_device(pinned.__class__(**{**pinned.__dict__, "attention": "flex"}), "cpu")
    with pytest.raises(LabError, match="--attention dense: choose from mask, flex"):
        PretrainConfig(model="gpt2", corpus=Path("c"), tokenizer=Path("t"), out=Path("o"),
                       attention="dense")


def test_a_gpu_study_keys_its_pretraining_by_the_gpu_defaults():
    from lab.study.grid import expand
    from lab.study.recipe import load_recipe

    recipe = REPO / "recipes" / "quickstart.yaml"
    cpu = next(s for s in expand(load_recipe(recipe)) if s.kind == "pretrain")
    # a CPU study keeps the keys it had before these settings existed
    assert not {"bf16", "compile", "attention", "loop"} & set(cpu.keyed)
    gpu = next(s for s in expand(load_recipe(recipe, ["resources.device=cuda"]))
               if s.kind == "pretrain")
    assert (gpu.config.bf16, gpu.config.compile, gpu.config.attention, gpu.config.loop) == (
        True, False, "mask", "plain")
    assert gpu.key != cpu.key
    paper = next(s for s in expand(load_recipe(recipe, ["resources.device=cuda", "preset=paper"]))
                 if s.kind == "pretrain")
    assert (paper.config.bf16, paper.config.compile, paper.config.attention) == (True, True, "flex")
    pinned = next(s for s in expand(load_recipe(recipe, [
        "resources.device=cuda", "pretrain.bf16=false", "pretrain.loop=trainer"]))
        if s.kind == "pretrain")
    assert pinned.key == cpu.key
    ranks = next(s for s in expand(load_recipe(recipe, [
        "resources.device=cuda", "resources.pretrain.processes=2"])) if s.kind == "pretrain")
    assert ranks.config.loop == "trainer"  # the plain loop runs one process


def test_flops_per_token_and_the_peak_table():
    from transformers import GPT2Config, RobertaConfig

    from lab.train.speed import flops_per_token, matmul_parameters, peak_bf16_tflops

    gpt2 = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_inner=3072, vocab_size=16000)
    per_layer = 4 * 768 * 768 + 2 * 768 * 3072
    assert matmul_parameters(gpt2) == 12 * per_layer + 768 * 16000
    assert flops_per_token(gpt2, 512) == 6 * (12 * per_layer + 768 * 16000) + 12 * 12 * 768 * 512
    roberta = RobertaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=256,
                            vocab_size=100)
    assert matmul_parameters(roberta) == 2 * (4 * 64 * 64 + 2 * 64 * 256) + 64 * 64 + 64 * 100
    assert peak_bf16_tflops("NVIDIA H200")[0] == 790.0
    assert peak_bf16_tflops("NVIDIA H100 80GB HBM3")[0] == 790.0
    assert peak_bf16_tflops("NVIDIA H100 PCIe")[0] == 756.0
    assert peak_bf16_tflops("NVIDIA A100-SXM4-80GB")[0] == 312.0
    assert peak_bf16_tflops("Tesla T4") is None and peak_bf16_tflops(None) is None


def test_a_cpu_run_records_its_speed_settings_and_steady_rate(micro_world, tmp_path):
    from lab.train.pretrain import PretrainConfig, run_pretrain

    manifest = run_pretrain(PretrainConfig(
        model="gpt2", corpus=micro_world / "paired", tokenizer=micro_world / "tok",
        out=tmp_path / "pt", preset="micro", max_steps=12, batch_size=4, block_size=BLOCK,
        log_steps=4, save_steps=100, report_to="none", cache_dir=tmp_path / "cache"))
    speed = manifest["speed"]
    assert (speed["bf16"], speed["compile"], speed["attention"]) == (False, False, "mask")
    assert speed["device"] == "cpu" and speed["gpu"] is None and speed["tf32"] is False
    assert speed["attention_dropout"] == pytest.approx(0.1)
    assert manifest["config"]["bf16"] is False and manifest["config"]["attention"] == "mask"
    throughput = manifest["throughput"]
    assert throughput["steady_steps"] == [2, 12]  # the first steps are start-up
    assert throughput["steady_tokens_per_second"] > 0 and throughput["startup_seconds"] >= 0
    assert throughput["mfu"] is None  # no GPU, no peak


BLOCK_MASK_TENSORS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                      "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices")


def _rows(layout: str, length: int):
    """(batch, length) document numbers (0: padding) of one packing layout."""
    import torch

    generator = torch.Generator().manual_seed(length)
    if layout == "one document":
        return torch.ones(1, length, dtype=torch.long)
    if layout == "many short documents":
        sizes = (torch.randint(1, 12, (length,), generator=generator).cumsum(0) < length).sum()
        edges = torch.randint(1, 12, (int(sizes),), generator=generator).cumsum(0)
        row = torch.zeros(length, dtype=torch.long)
        for number, (start, end) in enumerate(zip([0] + edges.tolist(), edges.tolist() + [length]),
                                              start=1):
            row[start:end] = number
        return torch.stack([row, row.flip(0)])
    rows = []  # "padding": a few documents, padding before the first and after the last
    for _ in range(3):
        cuts = sorted(torch.randperm(length - 1, generator=generator)[:4].add(1).tolist())
        row = torch.zeros(length, dtype=torch.long)
        for number, (start, end) in enumerate(zip([0] + cuts, cuts[1:] + [length - 7]), start=1):
            row[start:end] = number
        rows.append(row)
    rows.append(torch.ones(length, dtype=torch.long))
    return torch.stack(rows)


def assert_kernel_layout(name: str, got, want=None) -> None:
    """What a CUDA kernel reads: contiguous (the flex kernels read index rows at stride 1 whatever
    the strides say), and with `want`, equal to it in value, dtype, shape and strides."""
    import torch

    assert got.is_contiguous(), f"{name}: strides {got.stride()} (not contiguous)"
    if want is not None:
        assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, torch's {want.dtype}"
        assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)}, torch's {tuple(want.shape)}"
        assert got.stride() == want.stride(), f"{name}: strides {got.stride()}, torch's {want.stride()}"
        assert torch.equal(got, want), f"{name}: values differ"


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("layout", ["padding", "one document", "many short documents"])
@pytest.mark.parametrize("length", [128, 200, 300, 512])  # 200, 300: not a multiple of the tile
def test_document_block_mask_is_torchs_create_block_mask_in_value_and_layout(causal, layout,
                                                                              length):
    """The contract with the flex kernels: every tensor of the lab's BlockMask equals what torch's
    own create_block_mask builds, in value (the unused index slots too), dtype, shape and
    layout. The backward pass reads the q side (q_num_blocks, q_indices, ...), which the forward
    never reads and no CPU can run: transposed q_indices there trained on wrong gradients
    (issue 57)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    from lab.train.attention import document_block_mask

    documents = _rows(layout, length)

    def mask_mod(b, h, q, kv):
        same = documents[b, q] == documents[b, kv]
        return same & (q >= kv) if causal else same

    want = create_block_mask(mask_mod, documents.shape[0], None, length, length, device="cpu")
    got = document_block_mask(documents, causal)
    for name in BLOCK_MASK_TENSORS:
        assert_kernel_layout(name, getattr(got, name), getattr(want, name))
    assert got.seq_lengths == want.seq_lengths and got.BLOCK_SIZE == want.BLOCK_SIZE
    dense = documents[:, :, None] == documents[:, None, :]
    if causal:
        dense &= torch.ones(length, length, dtype=torch.bool).tril()
    q, kv = torch.meshgrid(torch.arange(length), torch.arange(length), indexing="ij")
    for b in range(documents.shape[0]):
        assert torch.equal(got.mask_mod(b, 0, q, kv), dense[b])


def test_transposed_tiles_break_the_layout_contract():
    """The contract test fails on the layout 964b434 built (same values, q side transposed)."""
    import torch

    from lab.train.attention import document_block_mask

    mask = document_block_mask(_rows("padding", 300), causal=True)
    transposed = mask.q_indices.transpose(-1, -2).contiguous().transpose(-1, -2)
    with pytest.raises(AssertionError, match="q_indices: strides"):
        assert_kernel_layout("q_indices", transposed, mask.q_indices)
    assert torch.equal(transposed, mask.q_indices)  # values alone cannot tell


@pytest.mark.parametrize("family", ["gpt2", "roberta"])
def test_what_the_lab_hands_to_kernels_is_contiguous(batch_world, family):
    """Everything the lab itself builds for a kernel: both collated batches (the 4D mask SDPA
    reads, the flex path's document numbers), the BlockMask made from them, and the flex
    attention's output."""
    import torch

    from lab.models import position_offset
    from lab.train.attention import (_document_flex_attention, document_block_mask,
                                     with_document_mask)
    from lab.train.packing import PackedCollator

    tok, features = batch_world
    offset = position_offset(_model(family, tok).config)
    for attention in ("mask", "flex"):
        batch = PackedCollator(tok, mlm=family == "roberta", seed=1, position_offset=offset,
                               attention=attention, rows=8)(features)
        for key, value in batch.items():
            if torch.is_tensor(value):
                assert_kernel_layout(f"{attention} batch {key}", value)
    mask = with_document_mask(batch, causal=family == "gpt2")["document_mask"]
    for name in BLOCK_MASK_TENSORS:
        assert_kernel_layout(name, getattr(mask, name))
    query = torch.randn(8, 2, BLOCK, 32).transpose(1, 2).contiguous().transpose(1, 2)
    small = document_block_mask(batch["document_ids"], causal=family == "gpt2")
    with torch.no_grad():
        out, _ = _document_flex_attention(None, query, query, query, None, document_mask=small)
    assert_kernel_layout("flex attention output", out)


@pytest.mark.parametrize("loop", ["trainer", "plain"])
def test_loader_workers_train_the_same_weights(micro_world, tmp_path, monkeypatch, loop):
    """A GPU run collates in loader processes (cuda_speed_settings): the masks a RoBERTa batch
    draws depend on its sequence, the seed and the epoch, so two epochs end in the same weights
    as with no workers, dropout included, in either loop."""
    import torch

    import lab.train.pretrain as pretrain_module
    from lab.train.pretrain import PretrainConfig, run_pretrain

    # what a GPU run gets, read with a GPU pretended (its loader settings apply on a CPU too)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch, "set_float32_matmul_precision", lambda *a: None)
    cuda_settings = pretrain_module.cuda_speed_settings()
    monkeypatch.undo()
    assert not cuda_settings.get("dataloader_persistent_workers")
    assert cuda_settings["dataloader_num_workers"] == pretrain_module.LOADER_WORKERS

    def run(name: str) -> dict:
        return run_pretrain(PretrainConfig(
            model="roberta", corpus=micro_world / "paired", tokenizer=micro_world / "tok",
            out=tmp_path / name, preset="micro", epochs=2, batch_size=32, block_size=BLOCK,
            log_steps=50, save_steps=1000, report_to="none", cache_dir=tmp_path / "cache",
            loop=loop))

    plain = run("plain")
    monkeypatch.setattr(pretrain_module, "cuda_speed_settings", lambda: {
        key: value for key, value in cuda_settings.items() if key.startswith("dataloader_")
        and key != "dataloader_pin_memory"})
    workers = run("workers")
    assert workers["speed"]["loader_workers"] == 2 and plain["speed"]["loader_workers"] == 0
    assert plain["steps"] > 20 and plain["config"]["epochs"] == 2
    assert workers["final_weights_sha256"] == plain["final_weights_sha256"]
    assert workers["first_batch_sha256"] == plain["first_batch_sha256"]


def test_a_run_checkpointed_before_the_attention_setting_resumes(micro_world, tmp_path):
    import json
    import shutil

    from lab.train.pretrain import CONFIG_FILE, PretrainConfig, run_pretrain

    def config(name: str, **more) -> PretrainConfig:
        return PretrainConfig(model="gpt2", corpus=micro_world / "paired",
                              tokenizer=micro_world / "tok", out=tmp_path / name, preset="micro",
                              max_steps=4, save_steps=2, batch_size=4, block_size=BLOCK,
                              report_to="none", cache_dir=tmp_path / "cache", **more)

    done = run_pretrain(config("done"))
    partial = tmp_path / "old.partial"
    shutil.copytree(tmp_path / "done", partial)
    shutil.rmtree(partial / "model")
    saved = json.loads((partial / CONFIG_FILE).read_text())
    del saved["attention"]  # as the lab wrote it before the setting existed
    (partial / CONFIG_FILE).write_text(json.dumps(saved))
    resumed = run_pretrain(config("old", resume=True))
    assert resumed["resumed_from"] == "checkpoint-4" and done["steps"] == 4
    saved["bf16"] = True  # a setting that does change the weights is still refused
    (tmp_path / "old2.partial").mkdir()
    (tmp_path / "old2.partial" / CONFIG_FILE).write_text(json.dumps(saved))
    with pytest.raises(LabError, match="another config.*bf16"):
        run_pretrain(config("old2", resume=True))


@pytest.mark.parametrize("options, expected", [
    ([], (None, None, None)),
    (["--bf16", "--compile", "--attention", "flex"], (True, True, "flex")),
    (["--no-bf16", "--no-compile", "--attention", "mask"], (False, False, "mask")),
])
def test_the_command_line_leaves_unset_what_it_is_not_given(monkeypatch, options, expected):
    """A launcher hands a resolved config to its ranks as options (lab.common.command_line),
    --no-bf16 included; what no option names stays unset for the device to decide."""
    from typer.testing import CliRunner

    import lab.train.pretrain as pretrain_module
    from lab.cli import app
    from lab.common import command_line

    seen = []
    monkeypatch.setattr(pretrain_module, "run_pretrain",
                        lambda cfg: seen.append(cfg) or {"dry_run": True})
    result = CliRunner().invoke(app, ["pretrain", "--model", "gpt2", "--corpus", "c",
                                      "--tokenizer", "t", "--out", "o", "--dry-run", *options])
    assert seen, result.output
    cfg = seen[0]
    assert (cfg.bf16, cfg.compile, cfg.attention) == expected
    again = CliRunner().invoke(app, ["pretrain", *command_line(cfg)])
    assert (seen[1].bf16, seen[1].compile, seen[1].attention) == expected, again.output


def test_the_cuda_only_code_is_what_a_gpu_check_passed():
    """The rule for CUDA-only code (docs/scaling-out.md): the flex path is the GPU default only
    while its code (lab.train.attention.CUDA_ONLY) is code on which the GPU check's correctness
    part passed, logits and gradients, as a committed record says (results/gpu-*/verified-*.json,
    written by scripts/gpu-check.sh). A change to it goes behind an option until then."""
    import json

    from lab.train.attention import CUDA_ONLY, cuda_only_sha256

    records = [json.loads(path.read_text()) for path in REPO.glob("results/gpu-*/verified-*.json")]
    passed = {r["cuda_only_sha256"] for r in records
              if r["cuda_only"] == list(CUDA_ONLY) and r["checks"]
              and all(c["ok"] and c["gradients"] is not None for c in r["checks"].values())}
    assert cuda_only_sha256() in passed, (
        f"lab.train.attention's CUDA-only code ({', '.join(CUDA_ONLY)}) is not code a GPU "
        "check passed on: run `bash scripts/gpu-check.sh --parts data,correctness` on a GPU and "
        "commit its verified.json as results/gpu-NAME/verified-COMMIT.json, or put the change "
        "behind an option and leave the default's code as it was (docs/scaling-out.md)")
