"""Shared fixtures: the real corpora (via $LAB_CORPORA only) and a tiny synthetic copy of
their original layouts built in tmp_path."""
from __future__ import annotations

import gzip
import json
import os
import random
import tempfile
from pathlib import Path

import pytest

WORDS = """
account address amount anchor archive asset audit balance batch beacon binding block bucket
budget buffer bundle cache calendar camera canvas capacity carrier catalog channel chapter
checksum cipher circle client cluster column comment config console contact content context
contract counter coupon credit cursor customer dataset deadline delta device dialog digest
domain draft driver element engine entry event export factor feature filter folder format
fragment frame gateway gauge handler header height history host image index invoice island
item journal kernel label ledger length library limit locale marker matrix member message
meter metric module monitor network node notice number offset order origin owner package
packet page panel parcel parser partner patch payload permit pixel planet player plugin
pointer policy portal prefix price printer profile project prompt quota range reader record
region report request resource result route sample schema score section segment sensor
server session shadow signal socket source spring stamp status stream suffix summary table
target task tenant thread ticket timer token topic tracker unit update user vector vendor
version volume wallet widget window worker
""".split()

TYPES = ["int", "long", "double"]


def pytest_configure(config):
    """Tests run the CLI from temporary folders, so a relative $LAB_CORPORA (as in the README's
    `LAB_CORPORA=../shared/corpora ...`) is resolved once, against the folder pytest started in."""
    value = os.environ.get("LAB_CORPORA")
    if value:
        os.environ["LAB_CORPORA"] = str(Path(value).resolve())
    _one_core_per_worker()


def _one_core_per_worker() -> None:
    """Under pytest-xdist (scripts/test.sh runs a worker per core) each worker keeps to cores
    of its own, before torch is imported: the lab's defaults (a study's threads, torch's) are
    then its share (one thread on two cores), and two workers never fight over cores. Two torch threads on a core that
    another process also wants wait for each other: a micro pre-training took 6.2 s on two
    threads beside a busy core, 0.56 s on one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker.startswith("gw") and 1 < count <= len(cores):
        os.sched_setaffinity(0, set(cores[int(worker[2:]) % count::count]))


@pytest.fixture(autouse=True)
def padded_batches_carry_their_mask(request):
    """Every test fails if a model scores a padded batch without its attention mask (padding
    would then be attended to; transformers only warns, once per process). A test that does it
    on purpose says so with @pytest.mark.unmasked_padding."""
    from transformers.modeling_utils import PreTrainedModel

    if request.node.get_closest_marker("unmasked_padding"):
        yield
        return
    lenient = PreTrainedModel.warn_if_padding_and_no_attention_mask

    def strict(self, input_ids, attention_mask):
        pad = getattr(self.config, "pad_token_id", None)
        if attention_mask is None and pad is not None and bool((input_ids == pad).any()):
            raise AssertionError(f"{type(self).__name__}: a padded batch scored without its "
                                 "attention mask")
        return lenient(self, input_ids, attention_mask)

    PreTrainedModel.warn_if_padding_and_no_attention_mask = strict
    try:
        yield
    finally:
        PreTrainedModel.warn_if_padding_and_no_attention_mask = lenient


def _cap(word: str) -> str:
    return word[:1].upper() + word[1:]


def _java_method(i: int, rng: random.Random) -> tuple[str, str, str]:
    """(name, docstring, code) of one small, distinct, realistic Java method."""
    a, b, c, d, e = rng.sample(WORDS, 5)
    typ = rng.choice(TYPES)
    k = rng.randint(2, 97)
    template = i % 5
    if template == 0:
        name = f"sum{_cap(a)}{_cap(b)}"
        doc = f"Sums the {a} {b} values scaled by {k}."
        code = (f"public static {typ} {name}({typ}[] {a}{_cap(b)}s) {{\n"
                f"    {typ} {c}Total = 0;\n"
                f"    for ({typ} {d}Value : {a}{_cap(b)}s) {{\n"
                f"        {c}Total += {d}Value * {k};\n"
                f"    }}\n"
                f"    return {c}Total;\n}}")
    elif template == 1:
        name = f"find{_cap(a)}By{_cap(b)}"
        doc = f"Finds the {a} whose {b} matches the given key."
        code = (f"public {_cap(a)} {name}(String {b}Key) {{\n"
                f"    for ({_cap(a)} {c}Item : this.{d}{_cap(e)}List) {{\n"
                f"        if ({c}Item.get{_cap(b)}().equals({b}Key)) {{\n"
                f"            return {c}Item;\n"
                f"        }}\n"
                f"    }}\n"
                f"    return null;\n}}")
    elif template == 2:
        name = f"is{_cap(a)}{_cap(b)}Valid"
        doc = f"Checks that the {a} {b} lies within the {c} limits."
        code = (f"public boolean {name}({typ} {a}{_cap(b)}) {{\n"
                f"    if ({a}{_cap(b)} < {c}{_cap(d)}Min) {{\n"
                f"        return false;\n"
                f"    }}\n"
                f"    return {a}{_cap(b)} <= {e}{_cap(c)}Max + {k};\n}}")
    elif template == 3:
        name = f"build{_cap(a)}{_cap(b)}Map"
        doc = f"Builds a map from {a} names to their {b} entries."
        code = (f"public Map<String, {_cap(b)}> {name}(List<{_cap(b)}> {c}{_cap(d)}s) {{\n"
                f"    Map<String, {_cap(b)}> {e}Map = new HashMap<>();\n"
                f"    for ({_cap(b)} {a}Entry : {c}{_cap(d)}s) {{\n"
                f"        {e}Map.put({a}Entry.get{_cap(a)}Name(), {a}Entry);\n"
                f"    }}\n"
                f"    return {e}Map;\n}}")
    else:
        name = f"format{_cap(a)}{_cap(b)}"
        doc = f"Formats the {a} {b} as a {c} label."
        code = (f"public String {name}(String {a}{_cap(c)}, int {d}Width) {{\n"
                f"    StringBuilder {e}Builder = new StringBuilder(\"{a}-{b}:\");\n"
                f"    {e}Builder.append({a}{_cap(c)}.trim());\n"
                f"    while ({e}Builder.length() < {d}Width) {{\n"
                f"        {e}Builder.append('{k % 10}');\n"
                f"    }}\n"
                f"    return {e}Builder.toString();\n}}")
    return name, doc, code


def _csn_record(i: int, split: str, rng: random.Random) -> dict:
    name, doc, code = _java_method(i, rng)
    repo = f"example{i % 7}/{rng.choice(WORDS)}-lib"
    path = f"src/main/java/org/example/{_cap(rng.choice(WORDS))}Service.java"
    return {
        "repo": repo,
        "path": path,
        "func_name": f"{_cap(rng.choice(WORDS))}Service.{name}",
        "original_string": f"/**\n * {doc}\n */\n{code}",
        "language": "java",
        "code": code,
        "code_tokens": code.replace("(", " ( ").replace(")", " ) ").split(),
        "docstring": doc,
        "docstring_tokens": doc.rstrip(".").split(),
        "sha": f"{rng.getrandbits(160):040x}",
        "url": f"https://github.com/{repo}/blob/{i:040x}/{path}#L{10 + i}-L{17 + i}",
        "partition": split,
    }


def _codetrans_pair(rng: random.Random) -> tuple[str, str]:
    a, b, c = rng.sample(WORDS, 3)
    if rng.random() < 0.5:
        java = (f"public {_cap(a)}{_cap(b)} set{_cap(c)}({_cap(c)} {c}) {{this.{c} = {c}; "
                f"return this;}}")
        cs = (f"public virtual {_cap(a)}{_cap(b)} Set{_cap(c)}({_cap(c)} {c}){{this.{c} = {c}; "
              f"return this;}}")
    else:
        java = (f"public int get{_cap(a)}{_cap(b)}Count() {{return {a}{_cap(b)}s.size() + "
                f"{c}Offset;}}")
        cs = (f"public virtual int Get{_cap(a)}{_cap(b)}Count(){{return {a}{_cap(b)}s.Count + "
              f"{c}Offset;}}")
    return java, cs


def _concode_record(rng: random.Random) -> dict:
    a, b, c, d = rng.sample(WORDS, 4)
    nl = (f"returns the {a} {b} of this {c} . concode_field_sep int {a}{_cap(b)} "
          f"concode_elem_sep {_cap(d)} {d} concode_field_sep void set{_cap(d)} "
          f"concode_elem_sep int size")
    code = f"int function ( ) {{ return {a}{_cap(b)} + {d} . get{_cap(c)} ( ) ; }}"
    return {"nl": nl, "code": code}


TINY_CSN = {"train": 240, "valid": 40, "test": 40}
TINY_CODETRANS = {"train": 40, "valid": 20, "test": 30}
TINY_CONCODE = {"dev": 20, "test": 25}


def build_tiny_corpora(root: Path) -> Path:
    """A small corpora folder in the original layouts (CSN shards, CodeTrans line files,
    CONCODE JSON lines); content is synthetic and seeded."""
    rng = random.Random(1234)
    csn = root / "codesearchnet-java" / "java" / "final" / "jsonl"
    for split, count in TINY_CSN.items():
        folder = csn / split
        folder.mkdir(parents=True)
        with gzip.open(folder / f"java_{split}_0.jsonl.gz", "wt", encoding="utf-8") as handle:
            for i in range(count):
                handle.write(json.dumps(_csn_record(i, split, rng)) + "\n")
    codetrans = root / "codetrans"
    codetrans.mkdir()
    for split, count in TINY_CODETRANS.items():
        pairs = [_codetrans_pair(rng) for _ in range(count)]
        (codetrans / f"{split}.java-cs.txt.java").write_text(
            "".join(java + "\n" for java, _ in pairs), encoding="utf-8")
        (codetrans / f"{split}.java-cs.txt.cs").write_text(
            "".join(cs + "\n" for _, cs in pairs), encoding="utf-8")
    concode = root / "concode"
    concode.mkdir()
    for split, count in TINY_CONCODE.items():
        with open(concode / f"{split}.json", "w", encoding="utf-8") as handle:
            for _ in range(count):
                handle.write(json.dumps(_concode_record(rng)) + "\n")
    return root


@pytest.fixture(scope="session", autouse=True)
def own_torch_extensions_dir(tmp_path_factory):
    """DeepSpeed builds its CPU comm op under torch's extensions folder, behind a lock file that a
    build killed midway leaves behind; every later run then waits on it forever. The tests (and the
    ranks they start, which inherit os.environ) build in a folder of their own session instead:
    one build a session, about a minute, and never a lock from another run."""
    saved = os.environ.get("TORCH_EXTENSIONS_DIR")
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    # The workers of one pytest-xdist run share one build (torch's own lock keeps them apart).
    folder = (Path(tempfile.gettempdir()) / f"lab-torch-extensions-{run}" if run
              else tmp_path_factory.mktemp("torch-extensions"))
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(folder)
    yield
    if saved is None:
        os.environ.pop("TORCH_EXTENSIONS_DIR", None)
    else:
        os.environ["TORCH_EXTENSIONS_DIR"] = saved


@pytest.fixture
def corpora_root() -> Path:
    """The real shared corpora, only through $LAB_CORPORA (never copied into the repo)."""
    value = os.environ.get("LAB_CORPORA")
    if not value:
        pytest.skip("LAB_CORPORA is not set (point it at the shared corpora folder)")
    return Path(value)


@pytest.fixture
def tiny_corpora(tmp_path: Path) -> Path:
    return build_tiny_corpora(tmp_path / "tiny-corpora")


@pytest.fixture(scope="session")
def micro_world(tmp_path_factory) -> Path:
    """On the real corpora: a control arm, the study tokenizer, and a split-half paired
    CodeTrans arm (100 injected samples) over 700 CSN-format documents."""
    if not os.environ.get("LAB_CORPORA"):
        pytest.skip("needs LAB_CORPORA")
    from lab.contamination.inject import InjectConfig, run_inject
    from lab.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("micro-world")
    common = dict(benchmark="codetrans", seed=3, base_splits=("valid",), limit=700)
    run_inject(InjectConfig(setting="control", out=root / "control", **common))
    train_tokenizer(root / "control", root / "tok", ["codetrans", "concode"], vocab_size=1200)
    run_inject(InjectConfig(setting="paired", fraction=0.1, out=root / "paired", **common))
    return root
