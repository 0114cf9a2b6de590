"""Fine-tuning a pre-trained model on CodeTrans (Java -> C#) or CONCODE (NL -> Java).

GPT-2 learns one sequence `<s> source <SEP> target </s>` tokenised exactly as a paired injected
document is, with the loss on target tokens only. RoBERTa becomes the encoder of an
encoder-decoder model whose decoder (6 layers, as CodeXGLUE's baseline) starts from random
weights, its embeddings copied from the encoder. `--epochs 0` keeps a GPT-2 as pre-trained
(direct inference).
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.codetokens import whitespace_hash
from lab.common import (LabError, atomic_output_dir, check_numbers, check_output, config_record,
                        corpora_param, environment_record, files_record, loading, param,
                        write_json_atomic)
from lab.contamination import SEP_MARKER
from lab.corpora import Sample, corpora_inputs, load_samples
from lab.models import (MANIFEST, MODEL_FILES, WEIGHTS_SUBDIR, cpu_bfloat16_attention,
                        lab_cuts_itself, load_weights, positions_of)
from lab.train.artefacts import read_model
from lab.recipe_sections import section
from lab.tasks import Task, fine_tuning_records, get_task, train_subset
from lab.tokenizer import fit_to_model
from lab.train.common import (
    MEMBERSHIP_FIELDS, MEMBERSHIP_HASH, TENSORBOARD_DIR, history_without_timing,
    make_guarded_trainer_class, quiet_training, report_targets, report_to_param, state_sha256,
    training_arguments,
)
from lab.train.speed import training_device


@dataclass
class FinetuneConfig:
    """One fine-tuning run. Every option of `lab finetune` and the fields of a recipe's
    `finetune` section are declared here, once."""
    pretrained: Path = param(help="Directory made by lab pretrain.")
    task: str = param(help="translation (CodeTrans Java->C#) or generation (CONCODE NL->Java).")
    epochs: int = param(help="Training epochs; 0 = direct inference (GPT-2 only).")
    out: Path = param(help="Output directory.")
    seed: int = param(0, "Seeds the train subset, decoder init and data order.")
    train_size: int | None = param(None, "Seeded subset of N training samples.")
    valid_size: int | None = param(None, "Seeded subset of N validation samples (--select best "
                                         "scores every epoch on them; null: the whole split).")
    select: str = param("last", "last, or best on validation loss.")
    lr: float = param(5e-4, "Peak learning rate.")
    batch_size: int = param(8, "Samples per step.")
    max_source_length: int = param(256, "Source tokens kept.")
    max_target_length: int = param(256, "Target tokens kept (and generated).")
    decoder_layers: int = param(6, "RoBERTa: layers of the new decoder.")
    decoder_init: str = param("random", "RoBERTa: the decoder's weights: random (the study's) "
                                        "or encoder (BERT2BERT, Rothe et al. 2020: the first "
                                        "decoder_layers layers, embeddings and LM head of the "
                                        "pre-trained model; only cross-attention is new).")
    warmup_steps: int = param(0, "Linear warm-up steps.")
    weight_decay: float = param(0.0, "AdamW weight decay.")
    log_steps: int = param(10, "Log the loss every N steps.")
    report_to: str = report_to_param()
    bf16: bool = param(False, "bfloat16 autocast (CPUs with AVX-512 BF16 or AMX, GPUs; changes "
                              "the numbers).")
    group_by_length: bool = param(False, "Batch samples of similar length (the Trainer's "
                                         "length-grouped sampler): less padding, another data "
                                         "order (changes the numbers). In a random CodeTrans batch "
                                         "of 8, 48% of the tokens are padding.")
    injected_corpora: tuple[Path, ...] = param(
        (), "Placebo corpora (lab inject) of the model's seed: the training pairs they injected "
            "are counted (manifest data.placebo_overlap; a study gives every fine-tuning its "
            "seed's placebo corpora).")
    exclude_injected: bool = param(
        False, "Leave the pairs the --injected-corpora injected out of the training and "
               "validation pairs (a study does, for every arm of a seed alike, when its placebos "
               "draw from a split it fine-tunes on).")
    force: bool = param(False, "Replace an existing output directory.")
    corpora_dir: Path | None = corpora_param()

    def __post_init__(self) -> None:
        # The rules of single options, checked where the config is made: by `lab finetune` and
        # by a recipe's `finetune` section alike (lab.study.recipe_checks names the recipe's field).
        if self.select not in SELECTIONS:
            raise LabError(f"--select {self.select}: choose {' or '.join(SELECTIONS)}")
        if self.decoder_init not in DECODER_INITS:
            raise LabError(f"--decoder-init {self.decoder_init}: choose "
                           f"{' or '.join(DECODER_INITS)}")
        for name, value in (("--batch-size", self.batch_size),
                            ("--max-source-length", self.max_source_length),
                            ("--max-target-length", self.max_target_length),
                            ("--decoder-layers", self.decoder_layers),
                            ("--train-size", self.train_size),
                            ("--valid-size", self.valid_size)):
            if value is not None and value < 1:
                raise LabError(f"{name} {value}: must be >= 1")
        check_numbers(epochs=self.epochs, lr=self.lr, seed=self.seed,
                      warmup_steps=self.warmup_steps, weight_decay=self.weight_decay)
        if self.exclude_injected and not self.injected_corpora:
            raise LabError("--exclude-injected: name the corpora whose pairs are left out "
                           "(--injected-corpora)")


# A study's `finetune` section: these fields of FinetuneConfig, and the grid of epochs and
# training-set sizes (each value its own fine-tuning). Its key-neutral fields were added after
# studies were made with the section: left out of a stage's key while they hold these values,
# so an existing study folder keeps its stage keys and resumes.
FinetuneSection = section("FinetuneSection", FinetuneConfig,
                          ["lr", "batch_size", "select", "valid_size", "bf16", "decoder_layers",
                           "decoder_init", "group_by_length"],
                          own=[
    ("epochs", list[int], field(default_factory=lambda: [0], metadata={
        "expect": "int >= 0", "help": "Fine-tuning epochs of the grid; 0 = direct inference "
                                      "(GPT-2 only)."})),
    ("train_sizes", list[int | None], field(default_factory=lambda: [None], metadata={
        "expect": "int >= 1 or null", "help": "Training-set sizes of the grid (null: the whole "
                                              "train split)."})),
], key_neutral={"bf16": False, "decoder_layers": 6, "decoder_init": "random",
                "group_by_length": False, "valid_size": None},
   sweeps={"epochs": "epochs", "train_sizes": "train_size"})


SELECTIONS = ("last", "best")  # the checkpoint kept: the last, or the best on validation loss


# --- encoding shared by training and generation -----------------------------------------------

def causal_prompt(tokenizer: Any, source: str, max_source: int) -> list[int]:
    """`<s> source <SEP>`, tokenised as the start of a paired document `source <SEP> target`."""
    source_ids = tokenizer(source + " ", add_special_tokens=False)["input_ids"][:max_source]
    return [tokenizer.bos_token_id, *source_ids, tokenizer.convert_tokens_to_ids(SEP_MARKER)]


def causal_example(tokenizer: Any, sample: Sample, max_source: int, max_target: int
                   ) -> dict[str, list[int]]:
    """Input ids and labels of one GPT-2 training sequence; the prompt carries no loss."""
    prompt = causal_prompt(tokenizer, sample.input, max_source)
    target = tokenizer(" " + sample.output, add_special_tokens=False)["input_ids"][:max_target]
    target = [*target, tokenizer.eos_token_id]
    return {"input_ids": prompt + target, "labels": [-100] * len(prompt) + target}


def seq2seq_source(tokenizer: Any, source: str, max_source: int) -> list[int]:
    ids = tokenizer(source, add_special_tokens=False)["input_ids"][: max_source - 2]
    return [tokenizer.bos_token_id, *ids, tokenizer.eos_token_id]


def seq2seq_example(tokenizer: Any, sample: Sample, max_source: int, max_target: int
                    ) -> dict[str, list[int]]:
    target = tokenizer(sample.output, add_special_tokens=False)["input_ids"][: max_target - 1]
    return {"input_ids": seq2seq_source(tokenizer, sample.input, max_source),
            "labels": [*target, tokenizer.eos_token_id]}


class PaddingCollator:
    """Right-pads input ids (pad) and labels (-100); the mask marks real tokens."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, features: list[dict[str, list[int]]]) -> dict[str, Any]:
        import torch

        width = max(len(f["input_ids"]) for f in features)
        label_width = max(len(f["labels"]) for f in features)
        ids = torch.full((len(features), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(features), width), dtype=torch.long)
        same_width = all(len(f["labels"]) == len(f["input_ids"]) for f in features)
        labels = torch.full((len(features), width if same_width else label_width), -100,
                            dtype=torch.long)
        for row, feature in enumerate(features):
            n = len(feature["input_ids"])
            ids[row, :n] = torch.tensor(feature["input_ids"])
            mask[row, :n] = 1
            labels[row, : len(feature["labels"])] = torch.tensor(feature["labels"])
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


# --- models -------------------------------------------------------------------------------------

DECODER_INITS = ("random", "encoder")


def build_seq2seq(encoder_dir: Path, tokenizer: Any, decoder_layers: int,
                  decoder_init: str = "random"):
    """RoBERTa encoder (pre-trained) + a RoBERTa decoder with cross-attention: randomly
    initialised (the study's), or warm-started from the pre-trained model (BERT2BERT)."""
    import torch
    from transformers import EncoderDecoderModel, RobertaConfig, RobertaForCausalLM, RobertaModel

    encoder = load_weights(RobertaModel, encoder_dir, add_pooling_layer=False)
    if decoder_init == "encoder" and decoder_layers > encoder.config.num_hidden_layers:
        raise LabError(f"--decoder-layers {decoder_layers}: --decoder-init encoder copies "
                       f"layers of the encoder, which has {encoder.config.num_hidden_layers}")
    decoder_config = RobertaConfig(**{**encoder.config.to_dict(), "is_decoder": True,
                                      "add_cross_attention": True,
                                      "num_hidden_layers": decoder_layers})
    if decoder_init == "encoder":
        # The masked LM's layers, embeddings and LM head; cross-attention starts random.
        decoder = load_weights(RobertaForCausalLM, encoder_dir, config=decoder_config)
    else:
        decoder = RobertaForCausalLM(decoder_config)
        # CodeXGLUE's decoder shares the encoder's embeddings; a copy gives the same start
        # without weights tied across the two halves (which saving and reloading would untie).
        with torch.no_grad():
            decoder.roberta.embeddings.word_embeddings.weight.copy_(
                encoder.embeddings.word_embeddings.weight)
    model = EncoderDecoderModel(encoder=encoder, decoder=decoder)
    model.config.decoder_start_token_id = tokenizer.bos_token_id
    model.config.bos_token_id = tokenizer.bos_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.vocab_size = decoder_config.vocab_size
    return model


def _training_samples(task: Task, cfg: FinetuneConfig) -> tuple[list[Sample], list[Sample], dict]:
    """Train and validation samples, and the note on where they come from: with
    --injected-corpora, how many training pairs those corpora injected (placebo_overlap), after
    leaving them out where --exclude-injected says so."""
    records, note = fine_tuning_records(task, cfg.corpora_dir, cfg.train_size, cfg.seed)
    valid_records: list[Sample] = []
    if note["valid_split"]:
        valid_records = load_samples(task.benchmark, task.valid_split, cfg.corpora_dir, True).records
        if cfg.valid_size is not None and cfg.valid_size < len(valid_records):
            valid_records = train_subset(valid_records, cfg.valid_size, cfg.seed, "valid-size")
        note["valid_used"] = len(valid_records)
    if cfg.injected_corpora:
        injected, corpora = injected_pairs(cfg.injected_corpora, cfg.corpora_dir)
        hit = [s for s in records if pair_key(s) in injected]
        hit_valid = [s for s in valid_records if pair_key(s) in injected]
        if cfg.exclude_injected:
            records = [s for s in records if pair_key(s) not in injected]
            valid_records = [s for s in valid_records if pair_key(s) not in injected]
            note["train_used"] = len(records)
        note["placebo_overlap"] = 0 if cfg.exclude_injected else len(hit)
        note["placebo_overlap_valid"] = 0 if cfg.exclude_injected else len(hit_valid)
        note["injected"] = {
            "corpora": corpora, "pairs": len(injected), "excluded": cfg.exclude_injected,
            "excluded_train": len(hit) if cfg.exclude_injected else 0,
            "excluded_valid": len(hit_valid) if cfg.exclude_injected else 0,
            "rule": "a pair is the same when both sides are, after whitespace normalisation "
                    "(any benchmark's ids: a -paper subset's samples are its base's)",
        }
    return records, valid_records, note


def pair_key(sample: Sample) -> tuple[bytes, bytes]:
    """A fine-tuning pair as injection and fine-tuning both see it: both sides, whitespace
    normalised (one key across a benchmark and its -paper subset, whose ids differ)."""
    return whitespace_hash(sample.input), whitespace_hash(sample.output)


def injected_pairs(corpora: tuple[Path, ...], corpora_dir: Path | None
                   ) -> tuple[set[tuple[bytes, bytes]], list[dict[str, Any]]]:
    """The pairs the placebo corpora injected (their manifests' placebo samples, read back from
    the benchmark), and a record of each corpus."""
    keys: set[tuple[bytes, bytes]] = set()
    records = []
    for corpus in corpora:
        manifest = read_model(Path(corpus), "--injected-corpora")
        if manifest.get("kind") != "lab-corpus":
            raise LabError(f"--injected-corpora {corpus}: not a lab corpus (lab inject)")
        placebo = manifest.get("placebo") or {}
        by_split: dict[str, set[str]] = {}
        for sample in placebo.get("samples") or []:
            by_split.setdefault(sample["split"], set()).add(sample["id"])
        for split, ids in sorted(by_split.items()):
            found = [s for s in load_samples(manifest["benchmark"], split, corpora_dir).records
                     if s.id in ids]
            if len(found) != len(ids):
                raise LabError(f"--injected-corpora {corpus}: {len(ids) - len(found)} of its "
                               f"placebo samples are not in {manifest['benchmark']} {split} here")
            keys.update(pair_key(s) for s in found)
        records.append({"path": str(corpus), "setting": manifest.get("setting"),
                        "seed": manifest.get("seed"), "corpus_sha256": manifest.get("corpus_sha256"),
                        "placebo_samples": sum(map(len, by_split.values())),
                        "by_split": {k: len(v) for k, v in sorted(by_split.items())}})
    return keys, records


def model_positions(model_dir: Path) -> int:
    """Token positions the model can attend over (RoBERTa reserves two for its offset)."""
    from transformers import AutoConfig

    with loading(model_dir):
        return positions_of(AutoConfig.from_pretrained(str(model_dir)))


def position_limit(pretrained: dict[str, Any], positions: int) -> int:
    """Positions fine-tuning and evaluation may use: the model's, never beyond the block size
    it was pre-trained on (the position embeddings past it were never trained: random)."""
    block = (pretrained.get("config") or {}).get("block_size")
    return min(positions, int(block)) if block else positions


def fitted_lengths(family: str, limit: int, source: int, target: int) -> tuple[int, int]:
    """(source, target) lengths that fit `limit` positions. GPT-2 holds `<s> source <SEP>
    target </s>` in one sequence: source + target + 3 <= limit; a target keeps its length as
    long as the source keeps at least a quarter of the rest (min(source, (limit - 3) // 4)),
    the source being cut first (a target cut short can never be generated whole; a source
    cut short loses context). RoBERTa: each side <= limit (the encoder's pre-trained positions;
    the decoder learns the target's)."""
    if family != "gpt2":
        return min(source, limit), min(target, limit)
    budget = limit - 3
    if source + target <= budget:
        return source, target
    target = min(target, budget - min(source, budget // 4))
    return min(source, budget - target), target


def longest_kept_target(family: str, limit: int, source: int = 256) -> int:
    """The longest target that fitted_lengths keeps whole beside a source of `source` tokens
    (what a study's evaluation.max_new_tokens may be)."""
    return fitted_lengths(family, limit, source, 10 ** 9)[1] if family == "gpt2" else limit


def fit_lengths(cfg: FinetuneConfig, family: str, positions: int,
                block_size: int | None = None) -> dict[str, Any]:
    """Fit source/target lengths to the positions the model was pre-trained on (its block
    size, within its positions; fitted_lengths says how). The fitted lengths go into the
    manifest's config; the returned record (manifest `lengths`) says what was asked and why."""
    limit = min(positions, block_size) if block_size else positions
    asked = {"max_source_length": cfg.max_source_length, "max_target_length": cfg.max_target_length}
    cfg.max_source_length, cfg.max_target_length = fitted_lengths(
        family, limit, cfg.max_source_length, cfg.max_target_length)
    fitted = (cfg.max_source_length, cfg.max_target_length) != tuple(asked.values())
    return {
        "model_positions": positions, "pretrain_block_size": block_size, "limit": limit,
        "requested": asked,
        "used": {"max_source_length": cfg.max_source_length,
                 "max_target_length": cfg.max_target_length},
        "action": "fitted" if fitted else "kept",
        "rule": ("<s> source <SEP> target </s> within the pre-training block: source + target + 3 "
                 "<= limit, the source cut first down to a quarter of the budget"
                 if family == "gpt2" else "source <= limit and target <= limit"),
    }


def _validate(cfg: FinetuneConfig) -> None:
    """Every check that needs no model and that the config's own fields cannot tell (its
    __post_init__ checked those), before any work."""
    report_targets(cfg.report_to)
    check_output(Path(cfg.out), cfg.force, "lab-finetuned", _inputs(cfg))


def _inputs(cfg: FinetuneConfig) -> list[Path]:
    """What the output may never be or contain: the pre-trained model and the datasets."""
    return [Path(cfg.pretrained), *map(Path, cfg.injected_corpora),
            *corpora_inputs(cfg.corpora_dir)]


def run_finetune(cfg: FinetuneConfig) -> dict[str, Any]:
    """Entry point of `lab finetune`."""
    with quiet_training(deepspeed_config=None):  # fine-tuning takes no DeepSpeed config
        return _finetune(cfg)


def _finetune(cfg: FinetuneConfig) -> dict[str, Any]:
    started = time.perf_counter()
    task = get_task(cfg.task)
    _validate(cfg)
    pretrained = read_model(cfg.pretrained, "--pretrained")
    if pretrained.get("kind") != "lab-pretrained":
        raise LabError(f"--pretrained {cfg.pretrained}: not a lab pre-trained model (lab pretrain)")
    family = pretrained["model"]["family"]
    if cfg.epochs == 0 and family == "roberta":
        raise LabError("--epochs 0 with RoBERTa: its decoder is untrained, so direct inference "
                       "is only defined for GPT-2")

    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, set_seed

    model_dir = Path(cfg.pretrained) / WEIGHTS_SUBDIR
    with loading(model_dir, "--pretrained"):
        tokenizer = lab_cuts_itself(PreTrainedTokenizerFast.from_pretrained(str(model_dir)))
    lengths = fit_lengths(cfg, family, model_positions(model_dir),
                          (pretrained.get("config") or {}).get("block_size"))
    train, valid, data_note = _training_samples(task, cfg)
    if cfg.select == "best" and not valid:
        raise LabError("--select best: no validation split for this task here; use --select last")
    encode = causal_example if family == "gpt2" else seq2seq_example
    train_set = [encode(tokenizer, s, cfg.max_source_length, cfg.max_target_length) for s in train]
    valid_set = [encode(tokenizer, s, cfg.max_source_length, cfg.max_target_length) for s in valid]

    set_seed(cfg.seed)
    if family == "gpt2":
        model = load_weights(AutoModelForCausalLM, model_dir, "--pretrained")
    else:
        model = build_seq2seq(model_dir, tokenizer, cfg.decoder_layers, cfg.decoder_init)
    if cfg.bf16 and training_device() == "cpu":
        cpu_bfloat16_attention(model)
    init_sha = state_sha256(model)
    history: list[dict[str, Any]] = []
    with atomic_output_dir(Path(cfg.out), force=cfg.force, kind="lab-finetuned",
                           inputs=_inputs(cfg)) as tmp:
        if cfg.epochs > 0:
            evaluate_each_epoch = bool(valid_set) and cfg.select == "best"
            args = training_arguments(
                tmp / "checkpoints", report_to=report_targets(cfg.report_to),
                per_device_train_batch_size=cfg.batch_size,
                per_device_eval_batch_size=cfg.batch_size, num_train_epochs=cfg.epochs,
                learning_rate=cfg.lr, warmup_steps=cfg.warmup_steps,
                weight_decay=cfg.weight_decay, logging_steps=cfg.log_steps, seed=cfg.seed,
                data_seed=cfg.seed,
                save_strategy="epoch" if evaluate_each_epoch else "no",
                eval_strategy="epoch" if evaluate_each_epoch else "no",
                load_best_model_at_end=evaluate_each_epoch, metric_for_best_model="eval_loss",
                greater_is_better=False, save_total_limit=1 if evaluate_each_epoch else None,
                bf16=cfg.bf16,
                # transformers 5 names the sampler; 4.x has the flag (the other is dropped)
                train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
                group_by_length=cfg.group_by_length,
            )
            # Stops on a non-finite loss (one line naming the step); nothing is left behind.
            trainer = make_guarded_trainer_class()(
                model=model, args=args, train_dataset=train_set,
                eval_dataset=valid_set if evaluate_each_epoch else None,
                data_collator=PaddingCollator(tokenizer.pad_token_id),
                tensorboard_dir=tmp / TENSORBOARD_DIR)
            if family == "roberta":
                trainer.model_accepts_loss_kwargs = False  # its loss is a mean, not a sum
            trainer.train()
            history = history_without_timing(trainer.state.log_history)
            model = trainer.model
            shutil.rmtree(tmp / "checkpoints", ignore_errors=True)
        model.save_pretrained(str(tmp / WEIGHTS_SUBDIR))
        fit_to_model(tokenizer, model.config, lengths["limit"]).save_pretrained(
            str(tmp / WEIGHTS_SUBDIR))
        losses = [h["loss"] for h in history if "loss" in h]
        manifest = {
            "kind": "lab-finetuned",
            "config": config_record(cfg),
            "task": task.record(),
            "family": family,
            "architecture": "causal-lm" if family == "gpt2" else "encoder-decoder",
            "data": data_note,
            "lengths": lengths,
            "seed": cfg.seed,
            "init_weights_sha256": init_sha,
            "final_weights_sha256": state_sha256(model),
            MODEL_FILES: files_record(tmp / WEIGHTS_SUBDIR),
            "loss": {"first": losses[0] if losses else None, "final": losses[-1] if losses else None,
                     "history": history},
            "best_checkpoint_selected": cfg.select,
            "pretrained": {k: pretrained.get(k) for k in
                           ("config", "corpus", "tokenizer", "model", "seed", "steps",
                            "final_weights_sha256", *MEMBERSHIP_FIELDS[1:], MEMBERSHIP_HASH)},
            "pretrained_path": str(cfg.pretrained),
            "wall_seconds": round(time.perf_counter() - started, 2),
            "environment": environment_record(),
        }
        write_json_atomic(tmp / MANIFEST, manifest)
    return manifest
