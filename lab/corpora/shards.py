"""On-disk format of a lab corpus directory (an arm's corpus, made by lab inject): sharded gzip
JSON lines plus manifest.json. It lives with the loaders, below everything that writes or reads
such a corpus (injection, tokenizer, training, probes, `lab corpora verify`).

Each line is {"id", "text", "sample", "side", "copy"}: which test sample, side (input, output,
pair) and copy an injected document is; a base document has sample "", side "base", copy 0.
Every line has every field with one type (no nulls, whose type a reader cannot infer from a
shard without injected documents), so shards load together with one schema in
`datasets.load_dataset("json", data_files=...)` or pandas. Gzip headers carry no timestamp or name, so equal
content gives equal bytes.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import orjson

from lab.common import MANIFEST, LabError, read_text_file
from lab.contamination import settings as settings_table  # the data layer's settings table
from lab.corpora import placements

CORPUS_SUBDIR = "corpus"
BASE_FIELDS = {"sample": "", "side": "base", "copy": 0}  # a base document's injection fields


def corpus_line(record: dict[str, Any]) -> bytes:
    """One document as its corpus line: every field, keys sorted (equal records, equal bytes)."""
    return orjson.dumps({**BASE_FIELDS, **record}, option=orjson.OPT_SORT_KEYS) + b"\n"


def shard_name(number: int) -> str:
    return f"part-{number:05d}.jsonl.gz"


def write_shard(path: Path, payload: bytes) -> str:
    """Write one shard's lines gzipped (no timestamp, no name); return the file's sha256."""
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            gz.write(payload)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_shards(folder: Path, records: Iterable[dict[str, Any]], shard_size: int
                 ) -> list[dict[str, Any]]:
    """Write records in shards of `shard_size`; shards compress in parallel (zlib releases
    the GIL), and each shard's bytes depend only on its records."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [corpus_line(record) for record in records]
    starts = list(range(0, len(lines), shard_size)) or [0]
    names = [shard_name(i) for i in range(len(starts))]
    payloads = [b"".join(lines[start:start + shard_size]) for start in starts]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        digests = list(pool.map(write_shard, [folder / n for n in names], payloads))
    return [
        {"file": f"{CORPUS_SUBDIR}/{name}", "documents": len(lines[start:start + shard_size]),
         "sha256": digest}
        for name, start, digest in zip(names, starts, digests)
    ]


def read_manifest(folder: Path) -> dict[str, Any]:
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise LabError(f"{folder}: no such corpus directory")
    if not path.is_file():
        raise LabError(f"{folder}: not a lab corpus directory (no {MANIFEST}; make one with lab inject)")
    try:
        manifest = json.loads(read_text_file(path))
    except json.JSONDecodeError as exc:
        raise LabError(f"{path}: corrupt JSON ({exc})") from None
    kind = manifest.get("kind") if isinstance(manifest, dict) else None
    if isinstance(kind, str) and kind != "lab-corpus":  # a model's folder given as a corpus
        raise LabError(f"{folder}: a {kind} folder (its {MANIFEST} says so), not a corpus: "
                       "give an arm's corpus folder (made by lab inject)")
    if not isinstance(manifest, dict) or "shards" not in manifest:
        raise LabError(f"{path}: field 'shards' missing")
    shards = manifest["shards"]
    if not isinstance(shards, list) or not all(
            isinstance(s, dict) and isinstance(s.get("file"), str) for s in shards):
        raise LabError(f"{path}: field 'shards' must be a list of {{\"file\": ...}} objects")
    root = folder.resolve()
    for shard in shards:
        name = shard["file"]
        inside = (root / name).resolve()
        if (not name or os.path.isabs(name) or ".." in Path(name).parts
                or not inside.is_relative_to(root)):
            raise LabError(f"{path}: shard path '{name}' leaves the corpus folder")
    return manifest


def shards_digest(shards: list[dict[str, Any]]) -> str:
    """The corpus_sha256 of a manifest: sha256 over its shards' sha256 strings, in order."""
    digest = hashlib.sha256()
    for shard in shards:
        digest.update(str(shard.get("sha256")).encode())
    return digest.hexdigest()


_VERIFIED: dict[tuple, bool] = {}  # corpora verified by this process (and their files' stats)


def verify_corpus(folder: Path) -> dict[str, Any]:
    """The manifest of a lab corpus directory, after checking that the corpus is what it says:
    every shard's bytes hash to the sha256 listed for it, corpus_sha256 is the digest of those
    hashes, the corpus holds documents (no empty shard), and its membership is what the
    documents' own sample fields say (check_membership). One read of every shard per process
    (a 97,000-document CSN arm: about 2 s, most of it gunzip; a hash alone took 0.05 s);
    anything else trusting corpus_sha256 (the token cache is keyed by it) would otherwise train
    on another arm's tokens, and pre-training would copy an edited membership into the model.
    An embedded arm's placements are checked in the same read (lab.corpora.placements)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    path = folder / MANIFEST
    shards = manifest["shards"]
    if "corpus_sha256" not in manifest:
        raise LabError(f"{path}: field 'corpus_sha256' missing")
    if not shards or sum(int(s.get("documents") or 0) for s in shards) == 0:
        raise LabError(f"{folder}: empty corpus (0 documents)")
    stats = []
    for shard in shards:
        shard_path = folder / shard["file"]
        if not shard_path.is_file():
            raise LabError(f"{shard_path}: shard listed in {MANIFEST} is missing")
        st = shard_path.stat()
        if st.st_size == 0 or not shard.get("documents"):
            raise LabError(f"{shard_path}: empty shard (0 documents)")
        stats.append((shard["file"], st.st_size, st.st_mtime_ns, st.st_ino))
    key = (str(folder.resolve()), path.read_bytes(), tuple(stats))
    if key in _VERIFIED:
        return manifest
    watch = placements.watched(manifest)  # an embedded arm's: the texts its check needs
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # zlib frees the GIL
        found = list(pool.map(
            lambda shard: _read_injected(folder / shard["file"], shard, path, watch), shards))
    if shards_digest(shards) != manifest["corpus_sha256"]:
        raise LabError(f"{path}: corpus_sha256 does not match the shards it lists (manifest of "
                       "another corpus?)")
    injected = Injected.joined(found)
    placements.check_placements(path, manifest, injected.texts, injected.injected_documents)
    check_membership(path, manifest, injected)
    check_claims(path, manifest, injected)
    _VERIFIED[key] = True
    return manifest


@dataclass
class Injected:
    """What a corpus's documents themselves say was injected: per sample id (the documents'
    `sample` field), the copies of it; per copy (sample, copy), its documents' `side` fields;
    the `form` fields of the injected documents (None: a line without one, as a verbatim arm
    writes them); the documents in all; and the texts an embedded arm's check needs, by id
    (placements.Watched: none for another arm)."""
    copies: dict[str, set[int]] = field(default_factory=dict)
    sides: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    forms: set[str | None] = field(default_factory=set)
    documents: int = 0
    injected_documents: int = 0
    texts: dict[str, list[str]] = field(default_factory=dict)

    @staticmethod
    def joined(parts: list["Injected"]) -> "Injected":
        whole = Injected()
        for part in parts:
            for sample, copies in part.copies.items():
                whole.copies.setdefault(sample, set()).update(copies)
            for copy, sides in part.sides.items():
                whole.sides.setdefault(copy, []).extend(sides)
            whole.forms |= part.forms
            whole.documents += part.documents
            whole.injected_documents += part.injected_documents
            for doc_id, texts in part.texts.items():
                whole.texts.setdefault(doc_id, []).extend(texts)
        return whole


BASE_SAMPLE = b'"sample":""'  # how corpus_line writes a base document's sample field


def _read_injected(shard_path: Path, shard: dict[str, Any], manifest_path: Path,
                   watch: placements.Watched | None = None) -> Injected:
    """One read of a shard: its bytes against the sha256 `manifest_path` lists, then its
    documents' sample fields. A base line (nearly all of them) is recognised by its bytes
    (corpus_line writes `"sample":""` before the text, and an unescaped quote cannot occur
    inside a JSON string); any other line is parsed. `watch`: the texts to keep (embedded)."""
    data = shard_path.read_bytes()
    if hashlib.sha256(data).hexdigest() != shard.get("sha256"):
        raise LabError(f"{shard_path}: sha256 differs from the one listed in {manifest_path} "
                       "(shard changed or manifest of another corpus)")
    try:
        text = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise LabError(f"{shard_path}: unreadable ({exc})") from None
    try:  # base lines are not parsed below, but pre-training parses (and refuses) every line
        text.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = text.count(b"\n", 0, exc.start) + 1
        raise LabError(f"{shard_path}:{lineno}: not UTF-8 text (byte {exc.start} of the "
                       "decompressed shard)") from None
    lines = text.splitlines()
    found = Injected(documents=len(lines))
    for lineno, line in enumerate(lines, start=1):
        if BASE_SAMPLE in line:
            if watch is not None:
                watch.note(line, None, found.texts)
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise LabError(f"{shard_path}:{lineno}: corrupt JSON line ({exc})") from None
        sample = record.get("sample") if isinstance(record, dict) else None
        if sample:
            found.injected_documents += 1
            found.copies.setdefault(str(sample), set()).add(record.get("copy", 0))
            found.sides.setdefault((str(sample), record.get("copy", 0)), []).append(
                str(record.get("side")))
            found.forms.add(record.get("form"))
            if watch is not None:
                watch.note(line, record, found.texts)
    if shard.get("documents") != found.documents:
        raise LabError(f"{shard_path}: {found.documents} documents, {manifest_path} lists "
                       f"{shard.get('documents')}")
    return found


def _ids(path: Path, manifest: dict[str, Any], name: str) -> list[str]:
    ids = manifest.get(name, [])
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise LabError(f"{path}: field '{name}' must be a list of sample ids")
    return ids


def _listed(ids: Iterable[str]) -> str:
    ids = sorted(ids)
    return (f"{len(ids)} sample{'s' if len(ids) != 1 else ''} "
            f"({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})")


def check_membership(path: Path, manifest: dict[str, Any], found: Injected) -> None:
    """A corpus manifest's membership (injected_ids, held_out_ids, placebo_ids, its dose and
    timing levels, counts) against what its documents say they are (`found`): a manifest whose
    membership was edited would otherwise be copied into every model trained on the corpus, and
    detection would score members as non-members. LabError naming the field."""
    injected = _ids(path, manifest, "injected_ids")
    held_out = _ids(path, manifest, "held_out_ids")
    placebo = _ids(path, manifest, "placebo_ids") if "placebo_ids" in manifest else None
    sources = "placebo_ids" if placebo is not None else "injected_ids"
    claimed = set(placebo if placebo is not None else injected)
    seen = set(found.copies)
    if claimed - seen:
        raise LabError(f"{path}: field '{sources}' lists {_listed(claimed - seen)} "
                       "that no document of the shards injects")
    if seen - claimed:
        raise LabError(f"{path}: field '{sources}' lacks {_listed(seen - claimed)} "
                       "that documents of the shards inject")
    for name, ids in (("held_out_ids", held_out), ("injected_ids", injected)):
        if len(set(ids)) != len(ids):
            raise LabError(f"{path}: field '{name}' lists a sample twice")
    if set(held_out) & (seen | set(injected)):
        raise LabError(f"{path}: field 'held_out_ids' lists "
                       f"{_listed(set(held_out) & (seen | set(injected)))} that are injected")
    _check_decontamination(path, manifest, sources, claimed)
    _check_copies(path, manifest, found)
    _check_counts(path, manifest, found, {"injected_samples": len(injected),
                                          "held_out_samples": len(held_out),
                                          **({"placebo_samples": len(placebo)}
                                             if placebo is not None else {})})


def _surviving_copies(path: Path, manifest: dict[str, Any]) -> dict[str, int]:
    """A decontaminated arm's (lab inject --decontaminate-with) injected samples that lost
    copies, and the copies each has left (0: all removed); none for any other arm."""
    record = manifest.get("decontamination")
    if record is None:
        return {}
    surviving = record.get("surviving_copies") if isinstance(record, dict) else None
    if not isinstance(surviving, dict) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0
            for n in surviving.values()):
        raise LabError(f"{path}: field 'decontamination.surviving_copies' must map sample ids "
                       "to copies >= 0")
    return surviving


def _check_decontamination(path: Path, manifest: dict[str, Any], sources: str,
                           claimed: set[str]) -> None:
    """A decontaminated arm: the samples meant to be injected (intended_injected_ids, a
    placebo's intended_placebo_ids) are those left (injected_ids, placebo_ids) and those whose
    every copy was removed (decontamination.removed_injected_ids), no other."""
    surviving = _surviving_copies(path, manifest)
    if "decontamination" not in manifest:
        return
    intended = set(_ids(path, manifest, "intended_" + sources))
    removed = manifest["decontamination"].get("removed_injected_ids")
    if not isinstance(removed, list) or not all(isinstance(i, str) for i in removed):
        raise LabError(f"{path}: field 'decontamination.removed_injected_ids' must be a list "
                       "of sample ids")
    if claimed - intended:
        raise LabError(f"{path}: field '{sources}' lists {_listed(claimed - intended)} not in "
                       f"'intended_{sources}'")
    if intended - claimed != set(removed):
        raise LabError(f"{path}: field 'decontamination.removed_injected_ids' lists "
                       f"{_listed(set(removed))}; 'intended_{sources}' less '{sources}' is "
                       f"{_listed(intended - claimed)}")
    if {s for s, n in surviving.items() if n == 0} != set(removed):
        raise LabError(f"{path}: field 'decontamination.surviving_copies' does not give 0 "
                       "copies to exactly the removed_injected_ids")


def _check_copies(path: Path, manifest: dict[str, Any], found: Injected) -> None:
    """Each injected sample's copies: its dose level's dose (a placebo's own samples: the dose
    of their level's placebo_ids), else options.repeat, less those a decontaminated arm removed
    (decontamination.surviving_copies); a dose-0 level's samples not at all; a timing level's
    samples among the injected ones (or removed by decontamination)."""
    surviving = _surviving_copies(path, manifest)

    def expect(field_name: str, sample: str, copies: int) -> None:
        if sample in surviving:
            if not isinstance(copies, int) or surviving[sample] >= copies:
                raise LabError(f"{path}: field 'decontamination.surviving_copies' gives {sample} "
                               f"{surviving[sample]} copies, not fewer than its {copies}")
            field_name, copies = "decontamination.surviving_copies", surviving[sample]
        have = len(found.copies.get(sample, ()))
        if have != copies:
            raise LabError(f"{path}: field '{field_name}' says {sample} was injected {copies} "
                           f"times; the shards hold {have} copies of it")

    levels = manifest.get("dose_levels")
    if levels:
        if not isinstance(levels, list) or not all(isinstance(lv, dict) for lv in levels):
            raise LabError(f"{path}: field 'dose_levels' must be a list of levels")
        for level in levels:
            dose = level.get("dose")
            for sample in level.get("placebo_ids" if "placebo_ids" in manifest else "ids") or []:
                expect("dose_levels", sample, dose)
        return
    repeat = (manifest.get("options") or {}).get("repeat")
    if isinstance(repeat, int):
        for sample in found.copies:
            expect("options.repeat", sample, repeat)
    for level in manifest.get("timing_levels") or []:
        stray = (set(level.get("sources") or level.get("ids") or []) - set(found.copies)
                 - {sample for sample, n in surviving.items() if n == 0})
        if stray:
            raise LabError(f"{path}: field 'timing_levels' lists {_listed(stray)} that "
                           "no document of the shards injects")


def _check_counts(path: Path, manifest: dict[str, Any], found: Injected,
                  from_ids: dict[str, int]) -> None:
    """`counts` against the ids and the shards (each injected document took a base document's
    place, so the arm keeps its size)."""
    counts = manifest.get("counts")
    if counts is None:
        return
    if not isinstance(counts, dict):
        raise LabError(f"{path}: field 'counts' must be an object")
    removed = manifest.get("removed_base_ids")
    decontaminated = manifest.get("decontaminated_ids")
    expected = {**from_ids, "injected_documents": found.injected_documents,
                "final_documents": found.documents, "arm_documents": found.documents,
                **({"removed_documents": len(removed)} if isinstance(removed, list) else {}),
                **({"decontaminated_removed": len(decontaminated)}
                   if isinstance(decontaminated, list) else {}),
                "injected_document_fraction": round(found.injected_documents / found.documents, 6)}
    if isinstance(counts.get("decontaminated_removed"), int):
        expected["after_limit"] = found.documents + counts["decontaminated_removed"]
    for name, value in expected.items():
        if name in counts and counts[name] != value:
            raise LabError(f"{path}: field 'counts.{name}' is {counts[name]!r}; the shards and "
                           f"ids say {value!r}")
    fraction = counts.get("injected_char_fraction")
    if fraction is not None and not (isinstance(fraction, (int, float)) and 0 <= fraction <= 1):
        raise LabError(f"{path}: field 'counts.injected_char_fraction' is {fraction!r}, not a "
                       "fraction")


# What an arm's manifest claims about its injection, each checked against the documents by
# check_claims. A manifest made by lab inject (kind lab-corpus) has every one; a manifest with
# any of them has all of them: one missing is refused, not read as an older format.
CLAIMS = ("setting", "benchmark", "benchmark_split", "options", "injected_ids", "held_out_ids")


def check_claims(path: Path, manifest: dict[str, Any], found: Injected) -> None:
    """A corpus manifest's benchmark, benchmark_split, setting, options.samples and
    contamination form against what its documents say (their `sample`, `side` and `form`
    fields, `found`): pre-training copies these claims into the model and its card, and lab
    decontam counts by them, so an edited one would otherwise be believed (issue 70, row 7).
    LabError naming the field."""
    if (manifest.get("kind") != "lab-corpus" and not any(n in manifest for n in CLAIMS)
            and not found.copies):
        return  # documents only (no injection claimed, none in the shards)
    for name in CLAIMS:
        if name not in manifest:
            raise LabError(f"{path}: field '{name}' missing (an arm's manifest states all of "
                           f"{', '.join(CLAIMS)})")
    options = manifest["options"]
    if not isinstance(options, dict) or "samples" not in options:
        raise LabError(f"{path}: field 'options.samples' missing")
    setting = settings_table.find(manifest["setting"]) if isinstance(
        manifest["setting"], str) else None
    if setting is None:
        raise LabError(f"{path}: field 'setting' is {manifest['setting']!r}, not a setting "
                       f"(choose from {', '.join(settings_table.names())})")
    _check_benchmark(path, manifest, options)
    _check_form(path, manifest, options, found)  # before the sides: the form says which
    _check_sides(path, manifest, setting, found)


def _id_parts(sample: str) -> tuple[str, str, str]:
    dataset, _, rest = sample.partition(":")
    split, _, index = rest.rpartition(":")
    return dataset, split, index


def _check_benchmark(path: Path, manifest: dict[str, Any], options: dict[str, Any]) -> None:
    """Every test sample the arm names (injected, held out, removed by decontamination) is a
    sample of `benchmark`'s `benchmark_split`, a placebo's own samples of its other splits, and
    together they are the split's first options.samples samples (all of them: inputs.benchmark's
    record count), as lab inject takes them."""
    benchmark, split = manifest["benchmark"], manifest["benchmark_split"]
    for name, value in (("benchmark", benchmark), ("benchmark_split", split)):
        if not isinstance(value, str) or not value:
            raise LabError(f"{path}: field '{name}' must name a {name.replace('_', ' ')}")
    # Samples a decontaminated arm removed whole: test samples, a placebo's its own ones.
    removed = [i for i in (manifest.get("decontamination") or {}).get("removed_injected_ids")
               or [] if isinstance(i, str)]
    placebo = "placebo_ids" in manifest
    tested = [*_ids(path, manifest, "injected_ids"), *_ids(path, manifest, "held_out_ids"),
              *([] if placebo else removed)]
    for sample in tested:
        dataset, of_split, index = _id_parts(sample)
        if dataset != benchmark:
            raise LabError(f"{path}: field 'benchmark' is {benchmark!r}, but it lists {sample} "
                           f"of {dataset!r}")
        if of_split != split:
            raise LabError(f"{path}: field 'benchmark_split' is {split!r}, but it lists "
                           f"{sample} of split {of_split!r}")
    for sample in [*_ids(path, manifest, "placebo_ids"), *removed] if placebo else []:
        dataset, of_split, _ = _id_parts(sample)
        if dataset != benchmark or of_split == split:
            raise LabError(f"{path}: field 'placebo_ids' lists {sample}, not a sample of "
                           f"{benchmark} outside its {split} split")
    provenance = (manifest.get("inputs") or {}).get("benchmark") or {}
    for name, key, value in (("benchmark", "dataset", benchmark), ("benchmark_split", "split",
                                                                    split)):
        if key in provenance and provenance[key] != value:
            raise LabError(f"{path}: field '{name}' is {value!r}; inputs.benchmark.{key} (the "
                           f"file it was read from) says {provenance[key]!r}")
    samples, records = options["samples"], provenance.get("records")
    if samples is not None and (not isinstance(samples, int) or isinstance(samples, bool)
                                or samples < 1):
        raise LabError(f"{path}: field 'options.samples' is {samples!r}, not a count >= 1")
    taking = [n for n in (samples, records) if isinstance(n, int)]
    if not taking:
        return
    expected = min(taking)
    indices = sorted(_id_parts(sample)[2] for sample in tested)
    if len(tested) != expected or set(indices) != {str(i) for i in range(expected)}:
        what = (f"the split's first {expected} samples take part" if samples is not None
                else f"all {expected} samples of the split take part (inputs.benchmark.records)")
        raise LabError(f"{path}: field 'options.samples' is {json.dumps(samples)}: {what}, but "
                       f"injected_ids and held_out_ids list {len(tested)}")


def cross_language_side(benchmark: str, base: str) -> str | None:
    """The side a cross-language document keeps of a paired one (lab.contamination.soft): the
    benchmark's side in a language other than the base corpus's; None unless exactly one is."""
    from lab.corpora import get_spec

    spec = get_spec(benchmark)
    language = {"input": spec.input_language, "output": spec.output_language}
    others = [side for side in settings_table.SIDES
              if language[side] != get_spec(base).input_language]
    return others[0] if len(others) == 1 else None


def _kept_side(manifest: dict[str, Any]) -> str | None:
    """The side a cross-language arm's documents keep; None for another form."""
    options = manifest.get("options") or {}
    if options.get("contamination_form") != "cross-language":
        return None
    return cross_language_side(manifest["benchmark"], str(options.get("base") or "csn-java"))


def _check_sides(path: Path, manifest: dict[str, Any], setting: settings_table.Setting,
                 found: Injected) -> None:
    """Each injected copy of a sample is the documents its setting makes of it (their `side`
    fields: lab.contamination.settings.document_sides); a decontaminated arm may have lost
    some of them. The control injects nothing; a setting that injects, something."""
    if not setting.injects:
        if found.injected_documents:
            raise LabError(f"{path}: field 'setting' is {setting.name!r}, but "
                           f"{found.injected_documents} documents of the shards are injected")
        return
    if setting.placebo != ("placebo_ids" in manifest):
        raise LabError(f"{path}: field 'setting' is {setting.name!r}, but the manifest "
                       f"{'lacks' if setting.placebo else 'has'} field 'placebo_ids'")
    decontaminated = "decontamination" in manifest
    if not found.injected_documents and not decontaminated:
        raise LabError(f"{path}: field 'setting' is {setting.name!r}, but no document of the "
                       "shards is injected")
    expected = sorted(settings_table.document_sides(setting, _kept_side(manifest)))
    for (sample, copy), sides in sorted(found.sides.items(), key=str):
        have = sorted(sides)
        fits = (not (Counter(have) - Counter(expected)) if decontaminated
                else have == expected)
        if not fits:
            raise LabError(f"{path}: field 'setting' is {setting.name!r} (documents of sides "
                           f"{', '.join(expected)} per copy), but copy {copy} of {sample} is "
                           f"documents of sides {', '.join(have)}")


def _check_form(path: Path, manifest: dict[str, Any], options: dict[str, Any],
                found: Injected) -> None:
    """The contamination form: options.contamination_form and the contamination_form record
    both there (a non-verbatim arm) or both absent (verbatim), naming the same form, and every
    injected document's `form` field that form's name (a verbatim arm's lines have none)."""
    spec, record = options.get("contamination_form"), manifest.get("contamination_form")
    if (spec is None) != (record is None):
        missing = "contamination_form" if record is None else "options.contamination_form"
        raise LabError(f"{path}: field '{missing}' missing (the other states a form)")
    name = None
    if spec is not None:
        if not isinstance(spec, str) or not isinstance(record, dict):
            raise LabError(f"{path}: field 'contamination_form' must be an object and "
                           "'options.contamination_form' a form name")
        name, _, value = spec.partition(":")
        if record.get("name") != name or (value and str(record.get("fraction")) != value
                                          and record.get("fraction") != _number(value)):
            raise LabError(f"{path}: field 'contamination_form' says {record.get('name')!r}, "
                           f"options.contamination_form says {spec!r}")
    forms = found.forms - {None} if name is None else found.forms
    if forms and forms != {name}:
        shown = ", ".join(sorted("none (verbatim)" if f is None else repr(f) for f in forms))
        stated = "states no form (verbatim)" if spec is None else f"is {spec!r}"
        raise LabError(f"{path}: field 'options.contamination_form' {stated}, but the "
                       f"injected documents' form fields say {shown}")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def read_corpus(folder: Path) -> Iterator[dict[str, Any]]:
    """Every document of a lab corpus directory, in stored order."""
    folder = Path(folder)
    for shard in read_manifest(folder)["shards"]:
        yield from read_shard(folder / shard["file"], shard.get("documents"))


def json_lines(path: Path) -> Iterator[tuple[int, bytes, Any]]:
    """(line number, the line's bytes, its parsed JSON) of every line of a jsonl.gz file; a
    corrupt line, a truncated file or one that is not gzip is one LabError naming the place."""
    lineno = 0
    try:
        with gzip.open(path, "rb") as handle:
            for lineno, line in enumerate(handle, start=1):
                try:
                    yield lineno, line, orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise LabError(f"{path}:{lineno}: corrupt JSON line ({exc})") from None
    except (OSError, EOFError, zlib.error) as exc:  # truncated or not gzip
        raise LabError(f"{path}: unreadable after line {lineno} ({exc})") from None


def read_shard(path: Path, listed: int | None = None) -> Iterator[dict[str, Any]]:
    """Every document of one corpus shard; `listed` is the count its manifest gives."""
    if not path.is_file():
        raise LabError(f"{path}: shard listed in {MANIFEST} is missing")
    lineno = 0
    for lineno, _line, record in json_lines(path):
        if not isinstance(record, dict) or "text" not in record or "id" not in record:
            raise LabError(f"{path}:{lineno}: record needs fields 'id' and 'text'")
        yield record
    if isinstance(listed, int) and listed != lineno:
        raise LabError(f"{path}: {lineno} documents, {MANIFEST} lists {listed}")
