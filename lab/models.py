"""Model presets and construction: RoBERTa (masked LM) and GPT-2 (causal LM) from scratch.

One preset names one shape for both families, so an MLM-vs-CLM comparison is like for like.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

from lab.common import (MANIFEST, LabError, cached_sha256, loading, param, read_text_file,
                        safetensors_complete)

MODELS = ("roberta", "gpt2")


@dataclass(frozen=True)
class Preset:
    layers: int
    hidden: int
    heads: int
    ffn: int
    max_positions: int
    note: str
    # GPT-2 as the study ran it: 1,024 positions and an untied output head (~150M parameters
    # at a 40-50k vocabulary); None keeps the shared shape.
    gpt2_max_positions: int | None = None
    gpt2_tie_head: bool = True


PRESETS: dict[str, Preset] = {
    # The study's sizes: RoBERTa-base (12/768/12, ~125M with a 50k vocabulary) and GPT-2 base
    # (~124M tied, ~163M with an untied head at 50k; the study reports 150M).
    "paper": Preset(12, 768, 12, 3072, 512, "the study's models; GPU nodes",
                    gpt2_max_positions=1024, gpt2_tie_head=False),
    "small": Preset(6, 512, 8, 2048, 512, "about 20M; a single GPU or patient CPU"),
    "tiny": Preset(4, 256, 4, 1024, 512, "a few million; CPU studies in minutes"),
    "micro": Preset(2, 64, 2, 128, 256, "under 1M with a small vocabulary; tests and CI"),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise LabError(f"--preset {name}: unknown preset (choose from {', '.join(PRESETS)})")
    return PRESETS[name]


def check_model(name: str) -> str:
    if name not in MODELS:
        raise LabError(f"--model {name}: unknown model (choose from {', '.join(MODELS)})")
    return name


def check_block_size(model: str, preset: str, block_size: int) -> int:
    """The preset's number of positions, after refusing a block that does not fit it."""
    check_model(model)
    shape = get_preset(preset)
    positions = shape.max_positions
    if model == "gpt2" and shape.gpt2_max_positions:
        positions = shape.gpt2_max_positions
    if block_size > positions:
        raise LabError(
            f"--block-size {block_size}: larger than the {model} {preset} preset's {positions} positions"
        )
    if block_size < 16:
        raise LabError(f"--block-size {block_size}: must be at least 16")
    return positions


def build_config(model: str, preset: str, tokenizer: Any, block_size: int):
    """A transformers config for `model` at `preset`, sized to the tokenizer."""
    from transformers import GPT2Config, RobertaConfig

    positions = check_block_size(model, preset, block_size)
    shape = get_preset(preset)
    special = dict(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, vocab_size=len(tokenizer),
    )
    if model == "roberta":
        # RoBERTa offsets positions by padding_idx + 1, hence the two extra positions.
        return RobertaConfig(
            num_hidden_layers=shape.layers, hidden_size=shape.hidden,
            num_attention_heads=shape.heads, intermediate_size=shape.ffn,
            max_position_embeddings=shape.max_positions + 2, type_vocab_size=1, **special,
        )
    return GPT2Config(
        n_layer=shape.layers, n_embd=shape.hidden, n_head=shape.heads, n_inner=shape.ffn,
        n_positions=positions, tie_word_embeddings=shape.gpt2_tie_head, **special,
    )


def build_model(model: str, config: Any):
    """Randomly initialised weights (seeded by the caller)."""
    from transformers import GPT2LMHeadModel, RobertaForMaskedLM

    cls = RobertaForMaskedLM if model == "roberta" else GPT2LMHeadModel
    return with_named_loss(cls(config))


def with_named_loss(model: Any) -> Any:
    """The model, its loss named. transformers finds a model's loss by its class name, and
    'GPT2LMHeadModel' contains none of the names it looks for ('ForCausalLM', ...): every
    forward pass with labels then warns "loss_type=None ... unrecognized" and falls back to the
    causal-LM loss. Naming that loss keeps the numbers and drops the warning."""
    if getattr(model, "loss_type", "") is None and getattr(model.config, "model_type", "") == "gpt2":
        model.loss_type = "ForCausalLM"
    return model


def positions_of(config: Any) -> int:
    """Token positions a GPT-2 or RoBERTa config can attend over (RoBERTa reserves two)."""
    return getattr(config, "n_positions", None) or config.max_position_embeddings - 2


def position_offset(config: Any) -> int:
    """The position id of a sequence's first token: RoBERTa counts from padding_idx + 1 (its
    embeddings reserve the ids up to the padding index), GPT-2 from 0."""
    return config.pad_token_id + 1 if model_family(config) == "roberta" else 0


def model_family(config: Any) -> str:
    kind = getattr(config, "model_type", "")
    if kind == "roberta":
        return "roberta"
    if kind == "gpt2":
        return "gpt2"
    raise LabError(f"model type '{kind}' is not one the lab builds")


def count_parameters(model: Any) -> dict[str, int]:
    unique = {id(p): p for p in model.parameters()}  # tied weights once
    embedding = sum(p.numel() for n, p in model.named_parameters() if "embed" in n or "wte" in n
                    or "wpe" in n)
    total = sum(p.numel() for p in unique.values())
    return {"total": total, "embedding": embedding, "non_embedding": total - embedding}


# --- a model manifest's membership ------------------------------------------------------------
# What a model saw (its membership: which benchmark samples were injected, held out, when they
# were trained on, through which stages and from which weights): the fields of a pre-training
# manifest that every result about the model trusts. Each is hashed when the manifest is
# written (each key of `corpus` on its own, so that a refusal names the field) and checked by
# every read of a model manifest (read_model_manifest).
MEMBERSHIP_FIELDS = ("corpus", "own_corpus", "exposures", "lineage", "init_from")
MEMBERSHIP_HASH = "membership_sha256"
MODEL_FILES = "model_files"  # the manifest's files_record of WEIGHTS_SUBDIR, written at saving
_WARNED_UNHASHED: set[str] = set()


def _canonical_sha256(value: Any) -> str:
    # as written and read back first: a key that is a number in memory is a string in the file
    value = json.loads(json.dumps(value))
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def membership_hashes(record: dict[str, Any]) -> dict[str, str]:
    """{field: sha256 of its canonical JSON} of a pre-training manifest's membership fields
    (`corpus.KEY` for each key of its corpus record; absent fields are not listed)."""
    hashes = {f"corpus.{key}": _canonical_sha256(value)
              for key, value in (record.get("corpus") or {}).items()}
    hashes.update({field: _canonical_sha256(record[field]) for field in MEMBERSHIP_FIELDS[1:]
                   if record.get(field) is not None})
    return dict(sorted(hashes.items()))


def check_membership_hashes(manifest: dict[str, Any], path: Path) -> None:
    """A LabError naming `path` and the first membership field that differs from the hash
    written with it (an edited id list, a swapped sample, a removed or added field). A model
    manifest written before the lab kept these hashes (one with neither MODEL_FILES nor
    MEMBERSHIP_HASH) is read with a warning: nothing vouches for its membership, and nothing can
    be done about it but training it again. One with one of those fields but not the other is
    refused (missing_field)."""
    record = manifest if manifest.get("kind") == "lab-pretrained" else manifest.get("pretrained")
    if not isinstance(record, dict) or not isinstance(record.get("corpus"), dict):
        return  # not a model manifest with a membership (a corpus's, a stub's)
    where = "" if record is manifest else "pretrained."
    recorded = record.get(MEMBERSHIP_HASH)
    if recorded is not None and not isinstance(recorded, dict):
        raise LabError(f"{path}: field {where}{MEMBERSHIP_HASH} is not a table of hashes")
    actual = membership_hashes(record) if recorded is not None else {}
    for field in sorted(set(recorded or {}) | set(actual)):
        if recorded.get(field) != actual.get(field):
            change = ("is missing" if field not in actual else "was added" if field not in
                      recorded else f"differs from its {MEMBERSHIP_HASH}")
            raise LabError(f"{path}: field {where}{field} {change} (the membership was edited "
                           "after the model was made: restore the manifest or train again)")
    missing = missing_field(manifest)
    if missing is not None:
        raise LabError(f"{path}: field {missing} missing (the record names fields of the lab's "
                       "current format but lacks this one: it was edited or is of another model; "
                       "restore the manifest or train again)")
    if recorded is None and str(path) not in _WARNED_UNHASHED:  # once per process
        _WARNED_UNHASHED.add(str(path))
        print(f"lab: warning: {path}: no {where}{MEMBERSHIP_HASH} (a model made before the "
              "lab hashed its membership): its injected and held-out ids are taken as "
              "written", file=sys.stderr, flush=True)


def missing_field(manifest: dict[str, Any]) -> str | None:
    """The first of MODEL_FILES and MEMBERSHIP_HASH that a model manifest lacks while carrying
    the other, else None. A manifest with neither is of the legacy format (read with a
    warning); one with either is of the current format, and a field missing there was removed,
    not never written: read as legacy, it would let a swapped or edited record pass unchecked.
    A fine-tuned model's copy of a legacy parent's record holds its membership hash as null
    (written, empty)."""
    record = manifest if manifest.get("kind") == "lab-pretrained" else manifest.get("pretrained")
    if not isinstance(record, dict):
        return None
    where = "" if record is manifest else "pretrained."
    present = {MODEL_FILES: MODEL_FILES in manifest,
               where + MEMBERSHIP_HASH: MEMBERSHIP_HASH in record}
    if any(present.values()):
        for name, there in present.items():
            if not there:
                return name
    return None


# --- loading what the lab trained -------------------------------------------------------------

# An exported folder keeps it under this name: the manifest the source's provenance (membership,
# lineage) travels in, which `lab pretrain --init-from` reads from an exported folder.
EXPORTED_NAME = "lab_{}"
EXPORTED_MANIFEST = EXPORTED_NAME.format(MANIFEST)


def read_stage_manifest(folder: Path, option: str) -> dict[str, Any]:
    """The manifest of a lab folder (`option` names it in errors): the one reader of a model
    folder's manifest.json. A model's is returned only after its membership
    (check_membership_hashes) and its weights (MODEL_FILES, check_weights) are what was
    recorded; a corpus's as written (lab.corpora.shards verifies a corpus). What needs layers
    above this one (the corpus at corpus.path, the parent model) is checked by
    lab.train.artefacts.read_model, which every command reading a model calls."""
    path = Path(folder) / MANIFEST
    if not Path(folder).is_dir():
        raise LabError(f"{option} {folder}: no such directory")
    if not path.is_file():
        raise LabError(f"{option} {folder}: no {MANIFEST} (not a lab model directory)")
    manifest = read_model_manifest(path)
    if isinstance(manifest, dict) and manifest.get("kind") in MODEL_KINDS:
        check_weights(manifest, Path(folder) / WEIGHTS_SUBDIR, f"{option} {folder}",
                      WEIGHTS_SUBDIR + "/")
    return manifest


def read_export_manifest(folder: Path, option: str) -> dict[str, Any]:
    """The EXPORTED_MANIFEST of a `lab export` folder, the one reader of it: returned only after
    its membership and the exported weights (at the folder's top, as MODEL_FILES lists them) are
    what the model recorded."""
    path = Path(folder) / EXPORTED_MANIFEST
    if not path.is_file():
        raise LabError(f"{option} {folder}: no {EXPORTED_MANIFEST} (not a lab export)")
    manifest = read_model_manifest(path)
    if not isinstance(manifest, dict) or manifest.get("kind") not in MODEL_KINDS:
        raise LabError(f"{option} {folder}: its {EXPORTED_MANIFEST} is not a lab model's record")
    # the weights only: an export may write its own config and tokenizer files beside them
    recorded = manifest.get(MODEL_FILES)
    weights = ({MODEL_FILES: {name: entry for name, entry in recorded.items()
                              if name.endswith(".safetensors")}}
               if isinstance(recorded, dict) else manifest)
    check_weights(weights, Path(folder), f"{option} {folder}", "",
                  f"not the weights its {EXPORTED_MANIFEST} records: the export was changed or "
                  "its record swapped; export the model again")
    return manifest


def read_model_manifest(path: Path) -> dict[str, Any]:
    """A lab manifest file, parsed; a model's is read only with its membership as written
    (check_membership_hashes) and its current-format fields all there (missing_field). Callers
    read a folder's with read_stage_manifest or read_export_manifest, which check its weights."""
    try:
        manifest = json.loads(read_text_file(path))
    except json.JSONDecodeError as exc:
        raise LabError(f"{path}: corrupt JSON ({exc})") from None
    if isinstance(manifest, dict):
        check_membership_hashes(manifest, Path(path))
    return manifest


MODEL_KINDS = ("lab-pretrained", "lab-finetuned")  # the kinds of a lab model's manifest


def weights_problem(folder: Path, recorded: Any) -> str | None:
    """None if every file of a files_record is in `folder` with its recorded size and sha256,
    else what is wrong. The hashes come from lab.common.cached_sha256 (remembered by path, size
    and mtime across processes): every read of a model checks its weights, so a command that
    reads ten models does not hash ten models' weights each time."""
    if not isinstance(recorded, dict) or not all(isinstance(v, dict) for v in recorded.values()):
        return "its record of file sizes and hashes is malformed"
    for name, expected in sorted(recorded.items()):
        path = Path(folder) / name
        if not path.is_file():
            return f"{name} missing"
        size = path.stat().st_size
        if size != expected.get("size"):
            return f"{name} has {size} bytes, {expected.get('size')} recorded"
    for name, expected in sorted(recorded.items()):
        if cached_sha256(Path(folder) / name) != expected.get("sha256"):
            return f"{name} differs from the sha256 recorded when it was written"
    return None


def check_weights(manifest: dict[str, Any], folder: Path, named: str, prefix: str,
                  fix: str = "changed since it was trained: restore it or train it again") -> None:
    """A LabError (`named`: the option and folder) unless `folder` holds the very files the
    manifest's MODEL_FILES records (each named `prefix` + its name). A legacy manifest, without
    that record, is checked for cut-short weights only."""
    recorded = manifest.get(MODEL_FILES)
    if recorded is None:
        for path in sorted(Path(folder).glob("*.safetensors")):
            if not safetensors_complete(path):
                raise LabError(f"{named}: {prefix}{path.name} is truncated")
        return
    problem = weights_problem(folder, recorded)
    if problem is not None:
        raise LabError(f"{named}: {prefix}{problem} ({fix})")


def pretraining_record(manifest: dict[str, Any]) -> dict[str, Any]:
    """The pre-training manifest behind a pre-trained or fine-tuned model directory."""
    if manifest.get("kind") == "lab-pretrained":
        return manifest
    return manifest.get("pretrained", {})


WEIGHTS_SUBDIR = "model"  # a lab model directory keeps its transformers weights here

# The transformers class that loads each architecture a lab model directory can hold.
LOADERS = {"causal-lm": "AutoModelForCausalLM", "masked-lm": "AutoModelForMaskedLM",
           "encoder-decoder": "EncoderDecoderModel"}


# Weights a lab checkpoint carries beyond, or lacks of, the class that loads it, by design: a
# pre-trained masked LM's head is no part of the encoder that fine-tuning builds from it, and
# that encoder has no pooler, which EncoderDecoderModel adds (randomly initialised, never used)
# when it loads one; a decoder warm-started from it (--decoder-init encoder) starts its
# cross-attention new and keeps only its first --decoder-layers layers. transformers would print
# a "LOAD REPORT" of them in every such stage.
EXPECTED_AT_LOAD = {
    "RobertaModel": {"_keys_to_ignore_on_load_unexpected": [r"^lm_head\."]},
    "EncoderDecoderModel": {"_keys_to_ignore_on_load_missing": [r"^encoder\.pooler\."]},
    "RobertaForCausalLM": {"_keys_to_ignore_on_load_missing": [r"\.crossattention\."],
                           "_keys_to_ignore_on_load_unexpected": [r"^roberta\.encoder\.layer\.\d+\."]},
}


@contextlib.contextmanager
def expected_at_load(loader: Any) -> Iterator[None]:
    """`loader.from_pretrained` within reports only what EXPECTED_AT_LOAD does not expect."""
    with contextlib.ExitStack() as stack:
        for attribute, patterns in EXPECTED_AT_LOAD.get(loader.__name__, {}).items():
            stack.enter_context(mock.patch.object(loader, attribute, patterns))
        yield


def load_weights(loader: Any, folder: Path, option: str = "", **kwargs: Any) -> Any:
    """`loader.from_pretrained(folder)` the one way the lab loads weights: damaged files are one
    LabError naming the folder (and `option`), weights left out by design are not reported
    (EXPECTED_AT_LOAD), and GPT-2's loss is named (with_named_loss)."""
    import torch
    import transformers

    # In float32 whatever precision the files hold (transformers 5 otherwise keeps theirs: a
    # bf16 pre-training's bfloat16 files were evaluated in bfloat16 where float32 was asked);
    # a computation in another precision asks for it (place_model, bf16 autocast).
    precision = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    kwargs.setdefault(precision, torch.float32)
    with loading(folder, option), expected_at_load(loader):
        return with_named_loss(loader.from_pretrained(str(folder), **kwargs))


def architecture_of(manifest: dict[str, Any]) -> str | None:
    """What a lab model directory holds, by its manifest: causal-lm (GPT-2, pre-trained or
    fine-tuned), masked-lm (a pre-trained RoBERTa), encoder-decoder (a fine-tuned RoBERTa); None
    for anything else."""
    if manifest.get("kind") == "lab-pretrained":
        return "causal-lm" if manifest.get("model", {}).get("family") == "gpt2" else "masked-lm"
    if manifest.get("kind") == "lab-finetuned":
        return manifest.get("architecture")
    return None


def lab_architecture(manifest: dict[str, Any], model_dir: Path) -> str:
    """architecture_of a directory that must hold a lab model."""
    architecture = architecture_of(manifest)
    if architecture is None:
        raise LabError(f"--model {model_dir}: not a lab pre-trained or fine-tuned model")
    return architecture



def check_model_files(model_dir: Path, option: str) -> None:
    """A LabError unless WEIGHTS_SUBDIR holds the very files training saved (read_stage_manifest
    checks them on every read): weights overwritten in place, cut short or swapped are refused
    before anything loads them."""
    read_stage_manifest(model_dir, option)


def lab_cuts_itself(tokenizer: Any) -> Any:
    """`tokenizer` without transformers' warning that a document is longer than the model's
    length: the lab tokenizes whole documents and cuts their ids to its own lengths, so the
    warning would only be noise in every stage's log."""
    tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True
    return tokenizer


def load_lab_model(model_dir: Path, architecture: str, option: str = "--model") -> tuple[Any, Any]:
    """(model in eval mode, tokenizer) of a lab model directory (its weights are in model/,
    checked against the manifest first); damaged files are one LabError naming the folder.
    Callers check first what they accept."""
    import transformers

    check_model_files(model_dir, option)
    weights = Path(model_dir) / WEIGHTS_SUBDIR
    loader = getattr(transformers, LOADERS[architecture])
    with loading(weights, option):
        tokenizer = lab_cuts_itself(
            transformers.PreTrainedTokenizerFast.from_pretrained(str(weights)))
    model = load_weights(loader, weights, option)
    model.eval()
    return model, tokenizer


# --- where inference runs ---------------------------------------------------------------------

DTYPES = ("float32", "bfloat16", "float16")


def device_param(default: str = "cpu") -> Any:
    return param(default, "cpu, cuda or cuda:N: where the model runs (a GPU asked for and not "
                          "there is an error, never a silent CPU run)" +
                 ("; auto: cuda when there is one." if default == "auto" else "."))


def dtype_param() -> Any:
    return param("float32", "Inference precision: " + ", ".join(DTYPES) + " (float16 on a GPU "
                            "only; anything but float32 changes the numbers).")


def resolve_device(device: str, instead: str = "use --device cpu") -> str:
    """The torch device a --device names; a GPU that is not there is refused, not replaced.
    `instead`: how the caller's command asks for the CPU (a study's recipe has no --device)."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        if not torch.cuda.is_available():
            raise LabError(f"--device {device}: no CUDA GPU is visible here "
                           f"(torch.cuda.is_available() is false); {instead}")
        index = int(device[5:]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise LabError(f"--device {device}: only {torch.cuda.device_count()} GPU(s) visible")
        return device
    raise LabError(f"--device {device}: choose cpu, cuda, cuda:N or auto")


def check_placement(device: str, dtype: str) -> str:
    """The torch device of a --device / --dtype request that can be met here, else a LabError
    (asked before any weights are loaded)."""
    if dtype not in DTYPES:
        raise LabError(f"--dtype {dtype}: choose from {', '.join(DTYPES)}")
    where = resolve_device(device)
    if dtype == "float16" and where == "cpu":
        raise LabError("--dtype float16: half precision inference needs a GPU (--device cuda); "
                       "on a CPU use bfloat16 or float32")
    return where


def place_model(model: Any, device: str, dtype: str) -> Any:
    """`model` on its device in its inference precision; as loaded (CPU, float32) when that is
    what is asked."""
    import torch

    where = check_placement(device, dtype)
    precision = getattr(torch, dtype)
    if where == "cpu" and precision != torch.float32:
        cpu_bfloat16_attention(model)
    if where == "cpu" and getattr(model, "dtype", precision) == precision:
        return model
    return model.to(device=where, dtype=precision)


def cpu_bfloat16_attention(model: Any) -> None:
    """Eager attention for a model that computes in bfloat16 on a CPU whose bfloat16
    instructions (AVX-512 BF16, AMX) torch's flash kernel would use under the AVX2 kernels lab
    pins (lab.PINNED_CPU_CAPABILITY): there torch 2.13 refuses every sequence of 64 tokens or
    more ("pack_vnni2 is only supported when avx512 is supported"). Elsewhere nothing changes."""
    import os

    import torch

    from lab import PINNED_CPU_CAPABILITY

    if os.environ.get("ATEN_CPU_CAPABILITY") != PINNED_CPU_CAPABILITY:
        return
    probes = [getattr(torch.cpu, name, None)
              for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if not any(probe is not None and probe() for probe in probes):
        return
    # every model inside it too: an encoder-decoder's encoder and decoder keep configs of their own
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = "eager"
