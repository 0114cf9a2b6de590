"""`lab corpora extract`: a CodeSearchNet-style corpus (CSN's layout and fields) from a folder
of repositories, by the rules of the shared CSN-style Java corpus
(corpora/codesearchnet-java/PROVENANCE.md, "Extraction and filtering rules", rules 1-20).

One pipeline for both languages: a language's module gives the methods of a file
(extract_java.py: tree-sitter, rules 3-9 and 14-16; extract_python.py: the standard library's
ast and tokenize); this module walks the repositories (2), cuts and filters the docstring
summary (10-13), drops methods with few identifiers (17), removes exact (18) and near
duplicates (19), splits by repository (20) and writes the shards and extract-manifest.json.
docs/data.md lists the rules and what differs for Python.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import importlib
import json
import math
import os
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterator

from lab.common import (EXTRACT_MANIFEST, LabError, atomic_output_dir, check_output, dumps_json,
                        param)

LANGUAGES = {"java": "lab.corpora.extract_java", "python": "lab.corpora.extract_python"}
SPLITS = ("train", "valid", "test")
FIELDS = ("repo", "path", "func_name", "original_string", "language", "code", "code_tokens",
          "docstring", "docstring_tokens", "sha", "url", "partition")
SHARD_RECORDS = 30_000
KIND = "lab-corpora-extract"
FILE_FILTERS = ("test_path", "file_not_utf8", "file_syntax_error")
SUMMARY_FILTERS = ("doc_lt3_tokens", "doc_gt256_tokens", "doc_special_tokens", "doc_not_english",
                   "lt10_identifier_tokens")
CORPUS_FILTERS = ("exact_duplicate", "near_duplicate")
# CSN's docstring tokenizer (function_parser's language_parser.py), rule 10.
DOCSTRING_TOKEN = re.compile(r"[^\s,'\"`.():\[\]=*;>{\}+-/\\]+|\\+|\.+|\(\)|{\}|\[\]|\(+|\)+|:+"
                             r"|\[+|\]+|{+|\}+|=+|\*+|;+|>+|\++|-+|/+")
PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
MIN_DOC_TOKENS, MAX_DOC_TOKENS, MIN_IDENTIFIERS = 3, 256, 10
# Rule 12: links, images and HTML tags that carry an attribute.
SPECIAL = re.compile(r"https?:|ftp:|www\.|<img|<a\s+href"
                     r"|<[a-z][a-z0-9]*\s+[a-z_:][-a-z0-9_:.]*\s*=", re.I)
# Rule 13: function words of English and of the languages a summary is most often written in
# instead (German, French, Spanish, Portuguese, Italian, Dutch; none an English word).
ENGLISH = frozenset("""the a an is are was were be been of to in for and or with this that these
    it its by on from as at not will can if when which should returns return given used into
    all any has have""".split())
FOREIGN = frozenset("""der das und ist nicht ein eine einen dem mit für von zu auf wird werden
    oder sich auch nach wenn bei aus les du une est pour dans avec sont pas qui sur cette ce au
    aux el los las del es para por una como está si con il di che della gli sono het een niet
    voor zijn wordt worden naar uma não são ou mais pelo pela""".split())
SET_JACCARD, MULTISET_JACCARD = Fraction(4, 5), Fraction(7, 10)  # rule 19
SPLIT_SLACK = Fraction(103, 100)  # rule 20: test and valid stay within 103% of their target


@dataclass
class ExtractConfig:
    """One extraction. Every option of `lab corpora extract` is declared here, once."""
    language: str = param("java", "java or python.")
    from_dir: Path | None = param(None, "A folder whose sub-folders are each one repository "
                                        "(the sub-folder's name is the repository's); `stdlib`: "
                                        "this interpreter's standard library (python), each "
                                        "top-level module or package one repository.",
                                  option="--from")
    out: Path | None = param(None, "Output folder: LANGUAGE/final/jsonl/{train,valid,test}/ "
                                   "shards and extract-manifest.json.")
    seed: int = param(0, "Seeds the split of the repositories.")
    shares: tuple[float, ...] = param((0.8, 0.1, 0.1), "Train, valid and test shares of the "
                                                       "methods (summing to 1).")
    force: bool = param(False, "Replace an existing output folder (an earlier lab corpora "
                               "extract output).")


STDLIB = "stdlib"


def run_extract(cfg: ExtractConfig) -> dict[str, Any]:
    """Extract, filter, deduplicate and split the methods of every repository under
    cfg.from_dir (or of the standard library); write the corpus to cfg.out whole or not at all.
    Returns the manifest."""
    if str(cfg.from_dir) != STDLIB:
        return _extract(cfg, str(Path(cfg.from_dir).resolve()) if cfg.from_dir else "")
    if cfg.language != "python":
        raise LabError(f"--from {STDLIB}: the standard library is Python's (--language python)")
    import sysconfig

    from lab.corpora.extract_python import standard_library_tree

    library = sysconfig.get_paths()["stdlib"]
    with tempfile.TemporaryDirectory(prefix="lab-stdlib-") as tree:
        standard_library_tree(Path(tree))
        return _extract(dataclasses.replace(cfg, from_dir=Path(tree)),
                        f"{STDLIB}: {library} (Python {sys.version.split()[0]})")


def _extract(cfg: ExtractConfig, source: str) -> dict[str, Any]:
    started = time.perf_counter()
    language = _checked(cfg)
    out = Path(cfg.out)
    counts: Counter[str] = Counter()
    records, passed = [], Counter()
    repositories = _repositories(Path(cfg.from_dir))
    for repo in repositories:
        for method in _methods(language, Path(cfg.from_dir) / repo, repo, cfg.language, counts):
            records.append(method)
            passed[repo] += 1
    kept = _near_unique(_exact_unique(records, counts), counts)
    partition = assign_splits(Counter(r["repo"] for r in kept), cfg.shares, cfg.seed)
    manifest = {
        "kind": KIND, "language": cfg.language, "input": source,
        "seed": cfg.seed, "shares": dict(zip(SPLITS, cfg.shares)),
        "splits": {s: {"records": sum(partition[r["repo"]] == s for r in kept),
                       "repositories": sum(v == s for v in partition.values())} for s in SPLITS},
        "records": len(kept),
        "files": {name: counts[name] for name in ("files", *FILE_FILTERS)},
        "filters": {name: counts[name] for name in (*language.FILTERS, *SUMMARY_FILTERS,
                                                    *CORPUS_FILTERS)},
        "declarations": counts["declarations"], "passed": len(records),
        "repositories": {repo: {"passed": passed[repo], "records": 0, "split": partition.get(repo)}
                         for repo in repositories},
        "versions": {"python": sys.version.split()[0], **language.versions()},
        "rules": "corpora/codesearchnet-java/PROVENANCE.md rules 1-20; docs/data.md",
    }
    for record in kept:
        record["partition"] = partition[record["repo"]]
        manifest["repositories"][record["repo"]]["records"] += 1
    with atomic_output_dir(out, force=cfg.force, kind=KIND, inputs=[cfg.from_dir]) as tmp:
        for split in SPLITS:
            _write_split(tmp / cfg.language / "final" / "jsonl" / split, cfg.language, split,
                         [r for r in kept if r["partition"] == split])
        manifest["seconds"] = round(time.perf_counter() - started, 3)
        (tmp / EXTRACT_MANIFEST).write_text(dumps_json(manifest), encoding="utf-8")
    return manifest


def _checked(cfg: ExtractConfig) -> Any:
    """The language's module, once every option is valid and the output may be written."""
    if cfg.language not in LANGUAGES:
        raise LabError(f"--language {cfg.language}: unknown; choose {' or '.join(LANGUAGES)}")
    if cfg.from_dir is None:
        raise LabError("--from: required (a folder whose sub-folders are the repositories)")
    if not Path(cfg.from_dir).is_dir():
        raise LabError(f"--from {cfg.from_dir}: no such folder")
    if cfg.out is None:
        raise LabError("--out: required (the folder to write the corpus to)")
    shares = ",".join(map(str, cfg.shares))
    if len(cfg.shares) != len(SPLITS) or not all(math.isfinite(s) and s >= 0 for s in cfg.shares):
        raise LabError(f"--shares {shares}: three shares >= 0 expected (train,valid,test)")
    if abs(sum(cfg.shares) - 1) > 1e-9:
        raise LabError(f"--shares {shares}: the shares sum to {sum(cfg.shares):g}, not 1")
    if not _repositories(Path(cfg.from_dir)):
        raise LabError(f"--from {cfg.from_dir}: no sub-folders (each sub-folder is one repository)")
    check_output(Path(cfg.out), cfg.force, KIND, [cfg.from_dir])
    return importlib.import_module(LANGUAGES[cfg.language])


def _repositories(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _files(repo_dir: Path, suffix: str) -> list[str]:
    """The repository's source files (relative POSIX paths, sorted); hidden folders skipped."""
    found = []
    for root, dirs, files in os.walk(repo_dir):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            path = Path(root) / name
            if name.endswith(suffix) and path.is_file() and not path.is_symlink():
                found.append(path.relative_to(repo_dir).as_posix())
    return sorted(found)


def _methods(language: Any, repo_dir: Path, repo: str, language_name: str,
             counts: Counter[str]) -> Iterator[dict[str, Any]]:
    """The records of one repository's methods that pass every per-method rule."""
    for path in _files(repo_dir, language.SUFFIX):
        counts["files"] += 1
        if "test" in path.lower():  # rule 2: CSN's path filter
            counts["test_path"] += 1
            continue
        data = (repo_dir / path).read_bytes()
        try:
            text = data.decode("utf-8").removeprefix("\ufeff")
        except UnicodeDecodeError:
            counts["file_not_utf8"] += 1
            continue
        sha = hashlib.sha256(data).hexdigest()
        try:
            found = list(language.methods_of(text))
        except (SyntaxError, ValueError):  # Python 2, syntax errors, NUL bytes
            counts["file_syntax_error"] += 1
            continue
        for method in found:
            counts["declarations"] += 1
            if isinstance(method, str):
                counts[method] += 1
                continue
            summary = docstring_summary(method["docstring_raw"])
            tokens = DOCSTRING_TOKEN.findall(summary)
            identifiers = [t for t in method["code_tokens"] if language.is_identifier(t)]
            reason = summary_filter(summary, tokens) or (
                "lt10_identifier_tokens" if len(identifiers) < MIN_IDENTIFIERS else None)
            if reason:
                counts[reason] += 1
                continue
            first, last = method["lines"]
            yield {"repo": repo, "path": path, "func_name": method["func_name"],
                   "original_string": method["original_string"], "language": language_name,
                   "code": method["code"], "code_tokens": method["code_tokens"],
                   "docstring": method["docstring"], "docstring_tokens": tokens, "sha": sha,
                   "url": f"{repo}/{path}#L{first}-L{last}", "partition": "",
                   "_identifiers": identifiers}


def docstring_summary(docstring: str) -> str:
    """Rule 10: the text before the first blank line (a line of spaces is blank too), else
    before the first `@` (CSN's, of the comment not yet trimmed)."""
    parts = PARAGRAPH_BREAK.split(docstring, maxsplit=1)
    if len(parts) > 1:
        return parts[0]
    return docstring.split("@", 1)[0]


def summary_filter(summary: str, tokens: list[str]) -> str | None:
    """The first of rules 11-13 that the summary (and its tokens) fails, else None."""
    if len(tokens) < MIN_DOC_TOKENS:
        return "doc_lt3_tokens"
    if len(tokens) > MAX_DOC_TOKENS:
        return "doc_gt256_tokens"
    if SPECIAL.search(summary):
        return "doc_special_tokens"
    if not_english(summary):
        return "doc_not_english"
    return None


def not_english(summary: str) -> bool:
    """Rule 13's heuristic: over 5% of the letters not ASCII, or at least two function words
    of another language and more of those than English ones."""
    letters = [c for c in summary if c.isalpha()]
    if letters and sum(not c.isascii() for c in letters) > 0.05 * len(letters):
        return True
    words = re.findall(r"[^\W\d_]+", summary.lower())
    foreign = sum(w in FOREIGN for w in words)
    return foreign >= 2 and foreign > sum(w in ENGLISH for w in words)


def _exact_unique(records: list[dict[str, Any]], counts: Counter[str]) -> list[dict[str, Any]]:
    """Rule 18: the first of the records with the same code text or the same code tokens."""
    seen_code, seen_tokens, kept = set(), set(), []
    for record in records:
        code = hashlib.sha256(record["code"].encode("utf-8")).digest()
        tokens = hashlib.sha256(json.dumps(record["code_tokens"]).encode("utf-8")).digest()
        if code in seen_code or tokens in seen_tokens:
            counts["exact_duplicate"] += 1
        else:
            kept.append(record)
        seen_code.add(code)
        seen_tokens.add(tokens)
    return kept


def near_duplicate_groups(bags: list[list[str]]) -> list[int]:
    """Rule 19: for each bag of identifiers, the index of the earliest bag it is linked to
    (transitively): identifier sets with Jaccard >= 0.8 whose multisets also have Jaccard >=
    0.7. All pairs by prefix filtering: the sets in order of size, each set's tokens rarest
    first; two sets that reach the threshold share a token among the first |x| - ceil(0.8|x|)
    + 1 of the larger one's and the smaller one's, so only those are indexed and compared.
    Exact: SetSimilaritySearch's all_pairs (the shared corpus's) also prunes by position,
    which misses some pairs at the threshold (17 of the corpus's final records' pairs)."""
    sets = [frozenset(bag) for bag in bags]
    frequency = Counter(token for s in sets for token in s)
    parent = list(range(len(bags)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    index: dict[str, list[int]] = {}
    multisets = [Counter(bag) for bag in bags]
    for i in sorted(range(len(sets)), key=lambda i: (len(sets[i]), i)):
        size = len(sets[i])
        if size == 0:
            continue
        least = -(-SET_JACCARD.numerator * size // SET_JACCARD.denominator)  # ceil(0.8 size)
        prefix = sorted(sets[i], key=lambda t: (frequency[t], t))[:size - least + 1]
        candidates = {j for token in prefix for j in index.get(token, ())
                      if len(sets[j]) >= least}
        for j in sorted(candidates):
            shared = len(sets[i] & sets[j])
            if shared * SET_JACCARD.denominator < SET_JACCARD.numerator * (
                    size + len(sets[j]) - shared):
                continue
            low = sum((multisets[i] & multisets[j]).values())
            high = sum((multisets[i] | multisets[j]).values())
            if low * MULTISET_JACCARD.denominator >= MULTISET_JACCARD.numerator * high:
                a, b = root(i), root(j)
                parent[max(a, b)] = min(a, b)  # the root is the group's earliest member
        for token in prefix:
            index.setdefault(token, []).append(i)
    return [root(i) for i in range(len(bags))]


def _near_unique(records: list[dict[str, Any]], counts: Counter[str]) -> list[dict[str, Any]]:
    groups = near_duplicate_groups([r.pop("_identifiers") for r in records])
    kept = [r for i, r in enumerate(records) if groups[i] == i]
    counts["near_duplicate"] += len(records) - len(kept)
    return kept


def assign_splits(sizes: Counter[str], shares: tuple[float, ...], seed: int) -> dict[str, str]:
    """Rule 20: each repository (in order of sha256 of "SEED/REPO") to the split (test, valid,
    train: ties in that order) with the largest shortfall against its share of all methods;
    test and valid only while they stay within 103% of it (or are still empty)."""
    total = sum(sizes.values())
    target = {s: Fraction(share).limit_denominator(10**6) * total
              for s, share in zip(SPLITS, shares)}
    have = dict.fromkeys(SPLITS, 0)
    chosen = {}
    for repo in sorted(sizes, key=lambda r: hashlib.sha256(f"{seed}/{r}".encode()).hexdigest()):
        allowed = [s for s in ("test", "valid", "train") if s == "train" or target[s] > 0 and (
            have[s] == 0 or have[s] + sizes[repo] <= SPLIT_SLACK * target[s])]
        split = max(allowed, key=lambda s: target[s] - have[s])
        chosen[repo] = split
        have[split] += sizes[repo]
    return chosen


def _write_split(folder: Path, language: str, split: str, records: list[dict[str, Any]]) -> None:
    """CSN's shards: LANGUAGE_SPLIT_N.jsonl.gz of 30,000 records (one, empty, for no record);
    gzip without a time stamp, so equal records give equal bytes."""
    folder.mkdir(parents=True)
    for number, start in enumerate(range(0, max(len(records), 1), SHARD_RECORDS)):
        name = f"{language}_{split}_{number}.jsonl.gz"
        with open(folder / name, "wb") as raw, gzip.GzipFile(
                name, mode="wb", fileobj=raw, mtime=0, compresslevel=6) as shard:
            for record in records[start:start + SHARD_RECORDS]:
                shard.write((json.dumps({f: record[f] for f in FIELDS}) + "\n").encode("utf-8"))
