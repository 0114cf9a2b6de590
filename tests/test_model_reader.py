"""One reader per trained artefact (lab.train.artefacts over lab.models): no module reads a
model's, an export's or a checkpoint's record another way, a current-format record missing a
field is refused rather than read as legacy, and a checkpoint is read only with the weights its
run recorded for that step."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from lab.common import LabError

ROOT = Path(__file__).resolve().parent.parent
MANIFEST_FILES = ("manifest.json", "lab_manifest.json")  # a model folder's, an export's
PARSERS = {"load", "loads", "read_text_file"}  # json / orjson parsing, the lab's text reader
# Modules that read these files themselves, and why.
READERS = {
    "lab/models.py": "the reader of a model folder's and an export's manifest",
    "lab/corpora/shards.py": "the reader of a corpus's manifest.json (a corpus, not a model)",
}


def _manifest_names(tree: ast.Module) -> set[str]:
    """Names a module gives a model manifest's file: imported from lab.models, or a module
    constant set to one of MANIFEST_FILES."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "lab.models":
            names |= {a.asname or a.name for a in node.names
                      if a.name in ("MANIFEST", "EXPORTED_MANIFEST")}
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and node.value.value in MANIFEST_FILES:
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any((isinstance(n, ast.Constant) and isinstance(n.value, str)
                and n.value.endswith(MANIFEST_FILES)) or (isinstance(n, ast.Name) and n.id in names)
               for n in ast.walk(node))


def direct_reads(source: str) -> list[int]:
    """Lines of `source` that parse a model manifest file: a JSON parse whose argument names
    the file, or a variable that was set from a path naming it (`m = folder / "manifest.json"`,
    `for m in folder.glob("*/manifest.json")`, `with open(m) as f`)."""
    tree = ast.parse(source)
    module_names = _manifest_names(tree)
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        tainted = set(module_names)
        changed = True
        while changed:  # names set from an expression naming a manifest file, to a fixpoint
            changed = False
            for node in ast.walk(function):
                pairs = []
                if isinstance(node, ast.Assign):
                    pairs = [(t, node.value) for t in node.targets]
                elif isinstance(node, (ast.For, ast.comprehension)):
                    pairs = [(node.target, node.iter)]
                elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                    pairs = [(node.optional_vars, node.context_expr)]
                for target, value in pairs:
                    if _mentions(value, tainted):
                        new = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} - tainted
                        if new:
                            tainted |= new
                            changed = True
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", None))
                if name in PARSERS and any(_mentions(a, tainted) for a in node.args):
                    found.append(node.lineno)
    return sorted(set(found))


def test_no_module_reads_a_model_manifest_but_the_reader():
    offenders = {}
    for path in sorted((ROOT / "lab").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in READERS:
            continue
        lines = direct_reads(path.read_text(encoding="utf-8"))
        if lines:
            offenders[name] = lines
    assert offenders == {}, ("read a model's manifest with lab.train.artefacts.read_model / "
                             f"read_export / read_checkpoint instead: {offenders}")


def test_the_scan_finds_each_way_of_reading_a_manifest():
    """The scan can fail: each form of a direct read is found, a reader's call is not."""
    reads = '''
import json, orjson
from lab.models import MANIFEST
def a(folder):
    return json.loads((folder / "manifest.json").read_text())
def b(folder):
    path = folder / MANIFEST
    return orjson.loads(path.read_bytes())
def c(folder):
    for m in sorted(folder.glob("*/lab_manifest.json")):
        with open(m) as handle:
            json.load(handle)
def d(folder):
    return read_model(folder, "--model"), json.loads((folder / "metrics.json").read_text())
'''
    assert direct_reads(reads) == [5, 8, 12]


# --- the record's fields ----------------------------------------------------------------------

def _model(folder: Path, **fields) -> Path:
    """A minimal current-format pre-trained model folder (no weights: MODEL_FILES lists none)."""
    from lab.models import MEMBERSHIP_HASH, membership_hashes

    record = {"kind": "lab-pretrained", "steps": 4,
              "corpus": {"path": str(folder / "no-corpus"), "setting": "paired",
                         "injected_ids": ["a", "b"], "held_out_ids": ["c", "d"]},
              "model_files": {}, **fields}
    record[MEMBERSHIP_HASH] = membership_hashes(record)
    (folder / "model").mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(record))
    return folder


@pytest.mark.parametrize("removed", ["model_files", "membership_sha256"])
def test_a_current_record_missing_a_field_is_refused_not_read_as_legacy(tmp_path, removed):
    from lab.train.artefacts import read_model

    folder = _model(tmp_path / "m")
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest[removed]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(LabError, match=f"manifest.json: field {removed} missing"):
        read_model(folder, "--model")


def test_a_record_of_neither_field_is_legacy_and_read_with_a_warning(tmp_path, capsys):
    from lab.train.artefacts import read_model

    folder = _model(tmp_path / "m")
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["model_files"], manifest["membership_sha256"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert read_model(folder, "--model")["corpus"]["injected_ids"] == ["a", "b"]
    assert "no membership_sha256" in capsys.readouterr().err


def test_weights_are_checked_on_every_read(tmp_path):
    """Not only by commands that load them: a changed file of model/ is refused by the read."""
    from lab.common import files_record
    from lab.train.artefacts import read_model

    folder = tmp_path / "m"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "model.safetensors").write_bytes(b"weights-1")
    _model_files = files_record(folder / "model")
    (folder / "model" / "model.safetensors").unlink()
    (folder / "model").rmdir()
    _model(folder, model_files=_model_files)
    (folder / "model" / "model.safetensors").write_bytes(b"weights-1")
    assert read_model(folder, "--model")["model_files"] == _model_files
    (folder / "model" / "model.safetensors").write_bytes(b"weights-2")
    with pytest.raises(LabError, match="model/model.safetensors differs from the sha256"):
        read_model(folder, "--model")


# --- checkpoints ------------------------------------------------------------------------------

def _checkpoint(checkpoints: Path, step: int, weights: bytes) -> Path:
    from lab.train.common import record_checkpoint

    folder = checkpoints / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(weights)
    record_checkpoint(folder)
    return folder


def test_a_checkpoint_is_read_only_with_the_weights_its_run_saved_at_that_step(tmp_path):
    from lab.train.artefacts import read_checkpoint
    from lab.train.common import CHECKPOINT_WEIGHTS, read_checkpoint_weights

    run = tmp_path / "run"
    mine = _checkpoint(run / "checkpoints", 2, b"control weights")
    recorded = read_checkpoint_weights(run / "checkpoints")
    assert set(recorded) == {"2"} and set(recorded["2"]) == {"model.safetensors"}
    _model(run, **{CHECKPOINT_WEIGHTS: recorded})
    assert read_checkpoint(mine, "--init-from")["steps"] == 2
    # another run's checkpoint of the same step put in its place
    other = _checkpoint(tmp_path / "other" / "checkpoints", 2, b"paired weights!")
    (mine / "model.safetensors").write_bytes((other / "model.safetensors").read_bytes())
    (mine / "lab_checkpoint.json").write_bytes((other / "lab_checkpoint.json").read_bytes())
    with pytest.raises(LabError, match="not the weights .*run saved at step 2"):
        read_checkpoint(mine, "--init-from")
    # a step the run never saved
    _checkpoint(run / "checkpoints", 3, b"paired weights!")
    with pytest.raises(LabError, match="saved no checkpoint at step 3"):
        read_checkpoint(run / "checkpoints" / "checkpoint-3", "--init-from")


def test_a_current_run_without_its_checkpoint_record_is_refused(tmp_path):
    from lab.train.artefacts import read_checkpoint

    run = tmp_path / "run"
    checkpoint = _checkpoint(run / "checkpoints", 2, b"weights")
    _model(run)  # model_files and membership_sha256, no checkpoint_weights
    with pytest.raises(LabError, match="field checkpoint_weights missing"):
        read_checkpoint(checkpoint, "--init-from")


def test_a_fine_tuned_model_carries_its_parents_membership(tmp_path):
    """Its copy of the pre-trained record, edited consistently (its hash recomputed), is
    refused while the parent it names is there with the same weights."""
    from lab.models import MEMBERSHIP_HASH, membership_hashes
    from lab.train.artefacts import read_model

    parent = _model(tmp_path / "pt", final_weights_sha256="w" * 64)
    copy = json.loads((parent / "manifest.json").read_text())
    child = tmp_path / "e0"
    (child / "model").mkdir(parents=True)

    def write_child(record):
        (child / "manifest.json").write_text(json.dumps(
            {"kind": "lab-finetuned", "model_files": {}, "pretrained": record,
             "pretrained_path": str(parent)}))

    write_child(copy)
    assert read_model(child, "--model")["pretrained"]["corpus"] == copy["corpus"]
    corpus = copy["corpus"]
    corpus["injected_ids"], corpus["held_out_ids"] = corpus["held_out_ids"], corpus["injected_ids"]
    copy[MEMBERSHIP_HASH] = membership_hashes(copy)
    write_child(copy)
    with pytest.raises(LabError, match="pretrained.corpus.held_out_ids differs from its "
                                       "pre-trained model's"):
        read_model(child, "--model")


# Modules that may parse a corpus's manifest without verifying the corpus, and why.
CORPUS_PEEKS = {
    "lab/corpora/shards.py": "the corpus reader itself (verify_corpus reads, then verifies)",
    "lab/train/artefacts.py": "looks at which corpus sits at a model's corpus.path before "
                              "verifying it (another corpus there now is not this model's)",
}


def unverified_corpus_reads(source: str) -> list[int]:
    """Lines of `source` calling lab.corpora.shards.read_manifest (a corpus's manifest as
    written) rather than verify_corpus (the manifest after its shards are checked)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Call) and getattr(node.func, "id",
                                                            getattr(node.func, "attr", None))
                  == "read_manifest")


def test_every_command_reads_a_corpus_through_verify_corpus():
    offenders = {}
    for path in sorted((ROOT / "lab").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name not in CORPUS_PEEKS and (lines := unverified_corpus_reads(path.read_text("utf-8"))):
            offenders[name] = lines
    assert offenders == {}, f"read a corpus with lab.corpora.shards.verify_corpus: {offenders}"
    assert unverified_corpus_reads("from lab.corpora import shards\nshards.read_manifest(p)\n"
                                   "read_manifest(q)\nverify_corpus(r)\n") == [2, 3]


def test_weights_saved_in_bfloat16_are_read_and_placed_in_the_precision_asked(tmp_path):
    """A bf16 pre-training may save bfloat16 files; the lab reads them in float32 and computes
    in what the command asks (a float32 evaluation ran in bfloat16 before: its record lied)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from lab.models import load_weights, place_model

    saved = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64,
                                       n_positions=32)).to(torch.bfloat16)
    saved.save_pretrained(str(tmp_path / "m"))
    loaded = load_weights(GPT2LMHeadModel, tmp_path / "m")
    assert loaded.dtype == torch.float32
    assert place_model(loaded.to(torch.bfloat16), "cpu", "float32").dtype == torch.float32
    assert place_model(loaded, "cpu", "bfloat16").dtype == torch.bfloat16
