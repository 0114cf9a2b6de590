"""One byte-level BPE tokenizer per study, trained without any test data.

It is trained on the control arm's corpus plus the benchmarks' train splits and shared by
every arm and seed, so the vocabulary itself carries no contamination. Saved as a transformers
fast tokenizer with the special tokens both model families use and the paired-injection marker.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from lab.common import (
    TOKENIZER_RECORD, DataNotFound, LabError, atomic_output_dir, check_output, environment_record,
    corpora_param, loading, param, read_text_file, sha256_file, write_json_atomic,
)
from lab.contamination import SEP_MARKER
from lab.corpora.shards import read_corpus, verify_corpus
from lab.corpora import corpora_inputs, get_spec, load_samples
from lab.recipe_sections import section

BOS, EOS, PAD, UNK, MASK = "<s>", "</s>", "<pad>", "<unk>", "<mask>"
SPECIAL_TOKENS = [BOS, PAD, EOS, UNK, MASK, SEP_MARKER]  # ids 0..5, RoBERTa's order first


def _benchmark_train_texts(benchmarks: list[str], corpora_dir: Path | None,
                           used: list[dict[str, Any]]) -> Iterator[str]:
    for name in benchmarks:
        spec = get_spec(name)
        if spec.kind != "benchmark":
            raise LabError(f"--benchmarks {name}: not a benchmark")
        try:
            loaded = load_samples(name, "train", corpora_dir)
        except DataNotFound as exc:
            # CONCODE's train split is often absent offline; say so (and why) in the manifest.
            used.append({"dataset": name, "split": "train", "records": 0, "where": "missing",
                         "reason": str(exc)})
            continue
        used.append(loaded.provenance())
        for sample in loaded.records:
            yield sample.input
            if sample.output.strip():
                yield sample.output


@dataclass
class TokenizerConfig:
    """One tokenizer. Every option of `lab tokenizer train` and the recipe's `tokenizer` section
    are declared here, once."""
    corpus: Path = param(help="A control-arm corpus directory (lab inject --setting control).")
    out: Path = param(help="Output directory.")
    benchmarks: tuple[str, ...] = param(("codetrans", "concode"),
                                        "Benchmarks whose train splits are added.")
    vocab_size: int = param(16000, "BPE vocabulary size, special tokens included.")
    min_frequency: int = param(2, "Minimum pair frequency for a merge.")
    force: bool = param(False, "Replace an existing output directory.")
    corpora_dir: Path | None = corpora_param()

    def __post_init__(self) -> None:
        # Checked where the config is made: by `lab tokenizer train` and by a recipe's
        # `tokenizer` section alike (lab.study.recipe_checks names the recipe's field).
        if self.vocab_size < MIN_VOCAB_SIZE:
            raise LabError(f"--vocab-size {self.vocab_size}: must be >= {MIN_VOCAB_SIZE}")


# A study's `tokenizer` section. A CPU study's corpus is small: the tokenizer's vocabulary too.
TokenizerSection = section("TokenizerSection", TokenizerConfig, ["vocab_size"],
                           study_defaults={"vocab_size": 8000})

MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + 256  # the 256 byte symbols and the special tokens


def train_tokenizer(corpus: Path, out: Path, benchmarks: Sequence[str] | None = None,
                    **options: Any) -> dict[str, Any]:
    """run_tokenizer with TokenizerConfig's fields as arguments (`options`: its other fields)."""
    return run_tokenizer(TokenizerConfig(
        corpus=Path(corpus), out=Path(out), **options,
        **({} if benchmarks is None else {"benchmarks": tuple(benchmarks)})))


def run_tokenizer(cfg: TokenizerConfig) -> dict[str, Any]:
    """Entry point of `lab tokenizer train` and of a study's tokenizer stage: the tokenizer in
    cfg.out; returns its manifest."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    started = time.perf_counter()
    corpus, out = Path(cfg.corpus), Path(cfg.out)
    inputs = [corpus, *corpora_inputs(cfg.corpora_dir)]
    check_output(out, cfg.force, "lab-tokenizer", inputs)
    corpus_manifest = verify_corpus(corpus)  # its shards are what its manifest says
    if corpus_manifest.get("setting") != "control" or corpus_manifest.get("counts", {}).get(
            "injected_documents"):
        raise LabError(
            f"{corpus}/manifest.json: setting is '{corpus_manifest.get('setting')}'; the "
            "tokenizer must be trained on a control corpus (no test data)"
        )

    used: list[dict[str, Any]] = []

    def texts() -> Iterator[str]:
        for record in read_corpus(corpus):
            yield record["text"]
        yield from _benchmark_train_texts(cfg.benchmarks, cfg.corpora_dir, used)

    bpe = Tokenizer(models.BPE(unk_token=UNK))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    bpe.train_from_iterator(texts(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK,
        mask_token=MASK, additional_special_tokens=[SEP_MARKER],
    )
    with atomic_output_dir(Path(out), force=cfg.force, kind="lab-tokenizer", inputs=inputs) as tmp:
        fast.save_pretrained(str(tmp))
        manifest = {
            "kind": "lab-tokenizer",
            "vocab_size": len(fast),
            "requested_vocab_size": cfg.vocab_size,
            "min_frequency": cfg.min_frequency,
            "special_tokens": SPECIAL_TOKENS,
            "trained_on": {
                "corpus": str(corpus), "corpus_sha256": corpus_manifest.get("corpus_sha256"),
                "corpus_setting": corpus_manifest.get("setting"),
                "benchmark_train_splits": used,
            },
            "tokenizer_sha256": sha256_file(tmp / "tokenizer.json"),
            "wall_seconds": round(time.perf_counter() - started, 2),
            "environment": environment_record(),
        }
        write_json_atomic(tmp / TOKENIZER_RECORD, manifest)
    return manifest


def load_tokenizer(folder: Path):
    """A saved lab tokenizer as a transformers fast tokenizer (refuses anything else)."""
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder)
    if not folder.is_dir():
        raise LabError(f"--tokenizer {folder}: no such directory")
    if not (folder / "tokenizer.json").is_file() or not (folder / TOKENIZER_RECORD).is_file():
        raise LabError(f"--tokenizer {folder}: not a lab tokenizer (make one with lab tokenizer train)")
    recorded = tokenizer_hash(folder)
    if sha256_file(folder / "tokenizer.json") != recorded:
        raise LabError(f"--tokenizer {folder}: tokenizer.json differs from the sha256 in its "
                       f"{TOKENIZER_RECORD} (changed since it was trained: restore it or train it "
                       "again)")
    with loading(folder, "--tokenizer"):
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
    for token in SPECIAL_TOKENS:
        if tokenizer.convert_tokens_to_ids(token) in (None, tokenizer.unk_token_id) and token != UNK:
            raise LabError(f"{folder}/tokenizer.json: special token {token} is missing")
    return tokenizer


def fit_to_model(tokenizer: Any, config: Any, trained_positions: int | None = None) -> Any:
    """`tokenizer` with model_max_length set to the positions `config`'s model attends over (an
    encoder-decoder: the fewer of its two), as it is saved beside the model: a trained
    tokenizer's default, 1e30, made `truncation=True` cut nothing and a long input crash the
    model. `trained_positions` (pre-training's block size) lowers it to the positions that were
    trained: those past it hold random embeddings (an export said 256 where 128 were trained).
    The lab itself cuts token ids to its own lengths (lab.models.lab_cuts_itself)."""
    from lab.models import positions_of

    parts = [config.encoder, config.decoder] if hasattr(config, "encoder") else [config]
    positions = min(positions_of(part) for part in parts)
    tokenizer.model_max_length = min(positions, trained_positions or positions)
    return tokenizer


def tokenizer_hash(folder: Path) -> str:
    """The tokenizer_sha256 its manifest records (load_tokenizer checks the file against it)."""
    path = Path(folder) / TOKENIZER_RECORD
    try:
        recorded = json.loads(read_text_file(path, "--tokenizer")).get("tokenizer_sha256")
    except (json.JSONDecodeError, AttributeError):
        raise LabError(f"--tokenizer {path}: corrupt JSON") from None
    if not isinstance(recorded, str):
        raise LabError(f"--tokenizer {path}: field 'tokenizer_sha256' missing")
    return recorded
