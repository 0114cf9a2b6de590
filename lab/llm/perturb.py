"""`lab perturb`: automated sub-token identifier perturbation, the study's LLM control sets.

The study (II-E, Table I) built its uncontaminated LLM control groups by hand: consistent
sub-token-level renaming of identifiers in input and output (`fieldName` -> `fieldIdentifier`
in the Java and in the C#), so that length and cyclomatic complexity stay the same. This does
it automatically, checks those guarantees per sample, and compares with the manual twins.

Renaming rule. Renamed are the names the record declares: the method's own name, its
parameters, locals (`Type x =`, `Type x;`, `for (Type x :`, `foreach (T x in`, `catch (E x)`),
fields written `this.x`; and bare lowercase values that no side calls (the class's own fields,
e.g. `initFieldMap = true`). One map per record, shared by every code side: such names that
differ only in casing or separators (`createComponents` / `CreateComponents`) form one group and
get the same new sub-token, each spelled in its own casing; an undeclared name of the same words
(the type `Tokenizer` beside the local `tokenizer`) is not touched. Never renamed: keywords, a
group with a member in `words/api_names.txt` (JDK/.NET names: an override of `toString` or a local `size` stay),
a name after `.`/`::`/`@` unless after `this.`, literals, comments, numbers. New names avoid
every identifier of the record and every keyword. NL sides get the same renames where an old
name (3+ characters) occurs verbatim as a word. Sub-token synonyms: `words/synonym_groups.txt` first, else
WordNet 3.0 (two commonest senses, SemCor-attested lemmas).

Token definition of the Table-I statistics (`table_tokens`): the lab lexer's tokens with each
identifier split into its sub-tokens (camelCase, PascalCase, snake_case, digits). Tried on the
study's 16 manual pairs against Table I: whitespace split, \\w+ words, \\w+|punctuation, nltk
wordpunct and Treebank, the lab lexer with and without the sub-token split, sub-tokens plus
whitespace runs. This one reproduces the perturbance ratio best: mean absolute error 1.5
points over 15 rows, max 3.7 (Llama RQ1 Java 15.16% vs 15.33%, C# 15.62% vs 15.49%, NL 49.48%
vs 48.58%). None reproduces Avg/Std/Med, which look like model BPE counts: this one is ~11%
below on average (Llama RQ1 Java Avg 49.95 vs 62.47; StarCoder 51.04 vs 52.30), the counts
~18% below. Table I's StarCoder NL (Java->NL) ratio 15.70% is a typo in the paper (14.26 of 28
tokens is ~50%, as measured). Std is the sample standard deviation.
"""
from __future__ import annotations

import difflib
import random
import re
import statistics
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

import lab
# The lab lexer's own regex (with positions): renaming must keep its token count exactly.
from lab.codetokens import KEYWORDS, TOKEN_PATTERN, code_tokens
from lab.common import (LabError, check_numbers, check_output, param, read_jsonl, sha256_file,
                        write_json_atomic, write_jsonl)
from lab.llm.table_i import table_i_row

def _lines(name: str) -> list[list[str]]:
    """The words of each line of a word list in lab/llm/words/ (`#` lines are comments)."""
    text = resources.files("lab.llm").joinpath("words").joinpath(name).read_text(encoding="utf-8")
    return [line.split() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _words(name: str) -> frozenset[str]:
    return frozenset(word for line in _lines(name) for word in line)


_IDENT = re.compile(r"[^\W\d][\w$]*|\$[\w$]*")
_SEGMENT = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^A-Za-z\d]+")
_SUBTOKEN = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_DECISIONS = frozenset({"if", "for", "foreach", "while", "case", "catch", "&&", "||", "?"})
_TYPE_WORDS = _words("type_words.txt")
_DECL_NEXT = frozenset({"=", ";", ":", "in", ")", ","})
_GENERIC_INNER = frozenset({",", ".", "?", "[", "]", ">", "extends", "super"})
_NOT_FIELDS = _words("not_fields.txt")
_KEEP_WORDS = _words("keep_words.txt")
_API = _words("api_names.txt")



def is_identifier(tok: str) -> bool:
    return bool(_IDENT.fullmatch(tok)) and tok not in KEYWORDS


def table_tokens(text: str) -> list[str]:
    """Tokens of the Table-I statistics: lab tokens, identifiers split into sub-tokens."""
    out: list[str] = []
    for tok in code_tokens(text):
        out.extend((_SUBTOKEN.findall(tok) if _IDENT.fullmatch(tok) else None) or [tok])
    return out


def cyclomatic(text: str) -> int:
    """1 + decision points (a sample is one function); every `?` counts, renaming keeps it."""
    return 1 + sum(tok in _DECISIONS for tok in code_tokens(text))


def perturbed_count(before: list[str], after: list[str]) -> int:
    """Tokens changed: position by position when the counts agree, else difflib's edits."""
    if len(before) == len(after):
        return sum(a != b for a, b in zip(before, after))
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal")


def renamed_identifiers(before: str, after: str) -> set[str]:
    """Identifiers of `before` that `after` replaced (how the manual renames are recovered)."""
    a, b = code_tokens(before), code_tokens(after)
    if len(a) == len(b):
        return {x for x, y in zip(a, b) if x != y and is_identifier(x)}
    found: set[str] = set()
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op in ("replace", "delete"):
            found |= {x for x in a[i1:i2] if is_identifier(x) and x not in b[j1:j2]}
    return found


@lru_cache(maxsize=1)
def _builtin() -> dict[str, tuple[str, ...]]:
    table: dict[str, list[str]] = {}
    for words in _lines("synonym_groups.txt"):
        for word in words:
            table.setdefault(word, []).extend(s for s in words if s != word and s not in table[word])
    return {word: tuple(syns) for word, syns in table.items()}


def _plural(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    return word[:-1] + "ies" if word.endswith("y") and word[-2:-1] not in "aeiou" else word + "s"


def _singulars(word: str) -> list[str]:
    if not word.endswith("s") or word.endswith("ss"):
        return []
    return [word[:-3] + "y"] * word.endswith("ies") + [word[:-2]] * word.endswith("es") + [word[:-1]]


@lru_cache(maxsize=None)
def _wordnet(word: str) -> tuple[str, ...]:
    from nltk.corpus import wordnet as wn
    try:
        synsets = wn.synsets(word)
    except LookupError as exc:
        raise LabError("WordNet data for nltk not found (expected in the venv's nltk_data); "
                       "use --no-wordnet") from exc
    # Base forms only (lemma names would drop an inflection); the two commonest senses, and
    # lemmas attested in SemCor (count > 0): rare senses and words make odd names.
    found = {lemma.name() for synset in synsets[:2] if word in synset.lemma_names()
             for lemma in synset.lemmas() if lemma.count() > 0}
    # A shared start means a spelling variant or derivation (inflater/inflator), not a synonym.
    return tuple(sorted(n for n in found if n.isalpha() and n.islower() and 3 <= len(n) <= 12
                        and n[:4] != word[:4] and n not in _KEEP_WORDS))


def synonyms(word: str, use_wordnet: bool = True) -> tuple[str, ...]:
    """Replacements of one lowercase sub-token: the built-in table first, else WordNet."""
    lw = word.lower()
    if lw in _KEEP_WORDS or not lw.isalpha():
        return ()
    table = _builtin()
    if lw in table:
        return table[lw]
    for single in _singulars(lw):  # plurals of table words: entries -> items
        if single in table:
            return tuple(_plural(s) for s in table[single])
    if not use_wordnet or len(lw) < 4:  # WordNet reads short abbreviations as words (con, hex)
        return ()
    found = _wordnet(lw)
    for single in _singulars(lw) if not found else ():
        if _wordnet(single):
            return tuple(_plural(s) for s in _wordnet(single))
    return found


def _key(name: str) -> tuple[str, ...]:
    return tuple(s.lower() for s in _SEGMENT.findall(name) if s[0].isascii() and s[0].isalnum())


def _respell(name: str, position: int, synonym: str) -> str:
    """`name` with its position-th sub-token replaced by `synonym`, in that sub-token's casing."""
    parts, seen = _SEGMENT.findall(name), -1
    for i, part in enumerate(parts):
        if part[0].isascii() and part[0].isalnum():
            seen += 1
            if seen == position:
                parts[i] = (synonym.upper() if part.isupper() and len(part) > 1
                            else synonym.capitalize() if part[0].isupper() else synonym.lower())
    return "".join(parts)


def _lex(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group()) for m in TOKEN_PATTERN.finditer(text)
            if not m.group().startswith(("//", "/*"))]


def _closes_generic(toks: list[str], i: int) -> bool:
    depth = 0
    for j in range(i, max(-1, i - 40), -1):
        if toks[j] == ">":
            depth += 1
        elif toks[j] == "<":
            depth -= 1
            if depth == 0:
                return j > 0 and is_identifier(toks[j - 1])
        elif not (is_identifier(toks[j]) or toks[j] in _TYPE_WORDS or toks[j] in _GENERIC_INNER):
            return False
    return False


def _declared(toks: list[str]) -> tuple[set[str], set[str], set[str]]:
    """(declared names, bare lowercase values, called names) of one side (see the module
    docstring); a lexer heuristic, not a parser."""
    names: set[str] = set()
    values: set[str] = set()
    body = toks.index("{") if "{" in toks else len(toks)
    for i in range(2, body):  # the method: first `name(` after a return type
        prev = toks[i - 2]
        if toks[i] == "(" and is_identifier(toks[i - 1]) and (
                is_identifier(prev) or prev in _TYPE_WORDS or prev in (">", "]")):
            names.add(toks[i - 1])
            break
    for i, tok in enumerate(toks):
        if not is_identifier(tok) or i == 0:
            continue
        prev, nxt = toks[i - 1], toks[i + 1] if i + 1 < len(toks) else ""
        if (prev == "." and i >= 2 and toks[i - 2] == "this") or (nxt in _DECL_NEXT and (
                is_identifier(prev) or prev in _TYPE_WORDS or (prev == "]" and toks[i - 2] == "[")
                or (prev == ">" and _closes_generic(toks, i - 1)))):
            names.add(tok)
        elif prev not in (".", "::", "@") and nxt != "(" and (tok[0].islower() or tok[0] == "_") \
                and tok not in _NOT_FIELDS and not (prev in ("(", ",") and nxt == ":"):
            values.add(tok)  # the class's own field (named arguments excluded)
    return names, values, {toks[i - 1] for i in range(1, len(toks)) if toks[i] == "("}


def _renamable(toks: list[str], i: int) -> bool:
    """A member access is someone else's name, unless it is `this.`'s."""
    return i == 0 or toks[i - 1] not in (".", "::", "@") or (i >= 2 and toks[i - 2] == "this")


def _word_pattern(names: list[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n)))
    return re.compile(rf"(?<![\w$])(?:{alternatives})(?![\w$])")


def _respellings(key: tuple[str, ...], members: list[str], rng: random.Random,
                 use_wordnet: bool) -> Iterator[dict[str, str]]:
    """Candidate renames of one group, in seeded order: one sub-token replaced by a synonym."""
    positions = [p for p, word in enumerate(key) if synonyms(word, use_wordnet)]
    rng.shuffle(positions)
    for position in positions:
        candidates = list(synonyms(key[position], use_wordnet))
        rng.shuffle(candidates)
        for synonym in candidates:
            yield {m: _respell(m, position, synonym) for m in members}


def _cost(new: dict[str, str], occurrences: dict[str, int]) -> tuple[int, int]:
    """(characters, sub-tokens) that renaming `new` adds to a side with these occurrences."""
    return (sum(c * (len(new[m]) - len(m)) for m, c in occurrences.items() if m in new),
            sum(c * (len(_SUBTOKEN.findall(new[m])) - len(_SUBTOKEN.findall(m)))
                for m, c in occurrences.items() if m in new))


def _add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], a[1] + b[1]


def perturb_record(record: dict[str, str], code_fields: list[str], nl_fields: list[str],
                   rng: random.Random, tolerance: float,
                   use_wordnet: bool = True) -> tuple[dict[str, str], dict[str, str], str | None]:
    """(perturbed record, rename map, reason when nothing could be renamed)."""
    lexed = {f: _lex(record[f]) for f in code_fields}
    toks = {f: [t for _, _, t in lexed[f]] for f in code_fields}
    existing = {t for f in code_fields for t in toks[f] if _IDENT.fullmatch(t)}
    groups: dict[tuple[str, ...], list[str]] = {}
    order: dict[str, int] = {}
    for tok in (t for f in code_fields for t in toks[f]):
        order.setdefault(tok, len(order))
    found = [_declared(toks[f]) for f in code_fields]
    # A bare value that some side calls is a method of someone else's (Java `getX()` vs C# `getX`).
    called = set().union(*(c for _, _, c in found))
    candidates = set().union(*(d for d, _, _ in found)) | (set().union(*(v for _, v, _ in found)) - called)
    for name in sorted(candidates, key=order.get):
        if _key(name):
            groups.setdefault(_key(name), []).append(name)
    groups = {k: v for k, v in groups.items() if not any(m in _API for m in v)}
    if not groups:
        return dict(record), {}, "no renamable identifier (nothing declared outside keywords/API names)"
    occurrences: dict[str, dict[str, int]] = {f: {} for f in code_fields + nl_fields}
    for f in code_fields:
        for i, tok in enumerate(toks[f]):
            if _IDENT.fullmatch(tok) and _renamable(toks[f], i):
                occurrences[f][tok] = occurrences[f].get(tok, 0) + 1
    nl_names = [n for n in existing if len(n) >= 3]  # `e` would hit "e.g."
    for f in nl_fields:
        for match in _word_pattern(nl_names).finditer(record[f]) if nl_names else ():
            occurrences[f][match.group()] = occurrences[f].get(match.group(), 0) + 1
    # Per side, how many characters and sub-tokens the renames may add or remove in total.
    budget = {f: (tolerance * len(record[f]), tolerance * len(table_tokens(record[f]))) for f in occurrences}
    spent = {f: (0, 0) for f in occurrences}
    renames: dict[str, str] = {}
    taken = existing | KEYWORDS
    for key, members in groups.items():
        for new in _respellings(key, members, rng, use_wordnet):
            if any(n in taken for n in new.values()) or len(set(new.values())) < len(new):
                continue
            after = {f: _add(spent[f], _cost(new, occ)) for f, occ in occurrences.items()}
            if all(abs(after[f][k]) <= budget[f][k] for f in after for k in (0, 1)):
                spent, taken = after, taken | set(new.values())
                renames.update(new)
                break
    if not renames:
        return dict(record), {}, f"no synonym avoids collisions within tolerance {tolerance}"
    out = dict(record)
    for f in code_fields:
        pieces, last = [], 0
        for i, (start, end, tok) in enumerate(lexed[f]):
            if tok in renames and _renamable(toks[f], i):
                pieces += [record[f][last:start], renames[tok]]
                last = end
        out[f] = "".join(pieces) + record[f][last:]
    nl_renamed = [n for n in renames if len(n) >= 3]
    for f in nl_fields if nl_renamed else ():
        out[f] = _word_pattern(nl_renamed).sub(lambda m: renames[m.group()], record[f])
    for f in code_fields + nl_fields:  # guarantees of identifier -> identifier renaming
        if len(code_tokens(out[f])) != len(code_tokens(record[f])):
            raise AssertionError(f"lab token count changed in field {f}: {renames}")
    for f in code_fields:
        if cyclomatic(out[f]) != cyclomatic(record[f]):
            raise AssertionError(f"cyclomatic complexity changed in field {f}: {renames}")
    return out, dict(sorted(renames.items())), None


def load_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of a JSON-lines file; blank lines are skipped."""
    path = Path(path)
    records = list(read_jsonl(path, where=lambda number: f"{path}: line {number}"))
    if not records:
        raise LabError(f"{path}: no records")
    return records


def _looks_like_code(text: str) -> bool:
    stripped = text.strip()
    return "(" in stripped and stripped.endswith(("}", ";"))


def _choose_fields(path: Path, records: list[tuple[int, dict[str, Any]]], code: list[str] | None,
                   nl: list[str] | None) -> tuple[list[str], list[str]]:
    code, nl = (None if names is None else list(names) for names in (code, nl))
    known = list(records[0][1])
    for name in (code or []) + (nl or []):
        if name not in known:
            raise LabError(f"{path}: unknown field '{name}' (fields: {', '.join(known)})")
    if code is None:  # a field is code when most of its values look like a function
        code = [f for f in known if f not in (nl or []) and 2 * sum(
            isinstance(r.get(f), str) and _looks_like_code(r[f]) for _, r in records) > len(records)]
    if not code:
        raise LabError(f"{path}: no code field found (fields: {', '.join(known)}); give --code-fields")
    nl = [f for f in known if f not in code] if nl is None else [f for f in nl if f not in code]
    for number, record in records:
        for name in code + nl:
            if name not in record:
                raise LabError(f"{path}: line {number}: record has no field '{name}'")
            if not isinstance(record[name], str):
                raise LabError(f"{path}: line {number}: field '{name}' is not a string")
    return code, nl


def _summary(values: list[float]) -> dict[str, float]:
    return {"avg": round(statistics.mean(values), 2),
            "std": round(statistics.stdev(values), 2) if len(values) > 1 else 0.0,
            "med": round(statistics.median(values), 2)}


def _pair_stats(before: list[str], after: list[str]) -> dict[str, Any]:
    """Table-I statistics of one field over (contaminated, perturbed) texts."""
    tb, ta = [table_tokens(t) for t in before], [table_tokens(t) for t in after]
    counts = [perturbed_count(b, a) for b, a in zip(tb, ta)]
    return {"exp": _summary([len(t) for t in tb]), "ctl": _summary([len(t) for t in ta]),
            "count": round(statistics.mean(counts), 2),
            "ratio": round(100 * statistics.mean(c / max(1, len(t)) for c, t in zip(counts, tb)), 2),
            "per_sample": counts}


@dataclass
class PerturbConfig:
    """One perturbation. Every option of `lab perturb` is declared here, once."""
    input_file: Path = param(help="JSON-lines records (the study's paper-llm layout).",
                             argument=True)
    seed: int = param(0, "Seeds every choice: same input and seed, same bytes.")
    tolerance: float = param(0.1, "Largest relative change of a side's characters or sub-tokens.")
    strict: bool = param(False, "Refuse a sample that cannot be perturbed.")
    out: Path | None = param(None, "Write the perturbed file and OUT.report.json.")
    compare: Path | None = param(None, "The study's manual _perturbed twin.")
    code_fields: tuple[str, ...] | None = param(None, "Code fields (default: detected).")
    nl_fields: tuple[str, ...] | None = param(None, "Natural-language fields (default: the "
                                                    "others).")
    wordnet: bool = param(True, "Also take synonyms from WordNet.")
    force: bool = param(False, "Replace an existing output file.")


def run_perturb(input_file: Path, **options: Any) -> dict[str, Any]:
    """Perturb every record of `input_path`; with `out` write it and `out`.report.json; with
    `compare` (the manual `_perturbed` twin) also measure the study's own perturbation."""
    cfg = PerturbConfig(input_file=Path(input_file), **options)
    out = cfg.out
    check_numbers(seed=cfg.seed, tolerance=cfg.tolerance)
    if cfg.tolerance < 0:
        raise LabError(f"--tolerance must be >= 0, got {cfg.tolerance}")
    if out is not None:
        out = Path(out)
        if out.resolve() == cfg.input_file.resolve():
            raise LabError(f"{out}: output would overwrite the input")
        # The perturbed file is recognised by its OUT.report.json (kind lab-perturbation).
        check_output(out, cfg.force, "lab-perturbation", [cfg.input_file, cfg.compare], what="file")
        report_file = out.with_name(out.name + ".report.json")
        check_output(report_file, True, "lab-perturbation", [cfg.input_file, cfg.compare], what="file")
        if not out.parent.is_dir():
            raise LabError(f"{out.parent}: output folder does not exist")
    records = load_records(cfg.input_file)
    code, nl = _choose_fields(cfg.input_file, records, cfg.code_fields, cfg.nl_fields)
    perturbed, samples, unperturbed = [], [], []
    for index, (number, record) in enumerate(records):
        rng = random.Random(f"perturb:{cfg.seed}:{index}")  # str seeds hash with sha512: stable
        new, renames, reason = perturb_record(record, code, nl, rng, cfg.tolerance, cfg.wordnet)
        if reason is not None:
            if cfg.strict:
                raise LabError(f"{cfg.input_file}: sample {index} (line {number}): cannot be perturbed "
                               f"within tolerance {cfg.tolerance}: {reason}")
            unperturbed.append({"index": index, "line": number, "reason": reason})
        perturbed.append(new)
        samples.append({"index": index, "renames": renames,  # [contaminated, perturbed] pairs:
                        "lab_tokens": {f: [len(code_tokens(t[f])) for t in (record, new)] for f in code + nl},
                        "complexity": {f: [cyclomatic(t[f]) for t in (record, new)] for f in code},
                        "chars": {f: [len(t[f]) for t in (record, new)] for f in code + nl}})
    fields = []
    for f in code + nl:
        stats = _pair_stats([r[f] for _, r in records], [r[f] for r in perturbed])
        for sample, count in zip(samples, stats.pop("per_sample")):
            sample.setdefault("perturbed_tokens", {})[f] = count
        fields.append({"field": f, "kind": "code" if f in code else "nl", **stats,
                       "table_i": table_i_row(cfg.input_file, f)})
    report: dict[str, Any] = {
        "kind": "lab-perturbation", "input": str(cfg.input_file), "input_sha256": sha256_file(cfg.input_file), "seed": cfg.seed,
        "tolerance": cfg.tolerance, "wordnet": cfg.wordnet, "strict": cfg.strict,
        "lab_version": lab.__version__, "code_fields": code, "nl_fields": nl,
        "token_definition": "lab code_tokens, identifiers split into sub-tokens (table_tokens)",
        "records": len(records), "perturbed": len(records) - len(unperturbed),
        "unperturbed": unperturbed, "fields": fields, "compare": None, "samples": samples,
        "keep_lab_tokens": sum(all(a == b for a, b in s["lab_tokens"].values()) for s in samples),
    }
    if cfg.compare is not None:
        report["compare"] = _compare(cfg.input_file, records, report, Path(cfg.compare))
    if out is not None:
        write_jsonl(out, perturbed, sort_keys=False)
        report["out"], report["report"] = str(out), str(out.with_name(out.name + ".report.json"))
        write_json_atomic(Path(report["report"]), report)
    return report


def _compare(input_path: Path, records: list[tuple[int, dict[str, Any]]], report: dict[str, Any],
             twin: Path) -> dict[str, Any]:
    """The study's manual twin beside the automated perturbation, field by field."""
    code, nl = report["code_fields"], report["nl_fields"]
    manual_records = load_records(twin)
    _choose_fields(twin, manual_records, code, nl)
    if len(manual_records) != len(records):
        raise LabError(f"{twin}: {len(manual_records)} records, {input_path} has {len(records)}")
    originals = [r for _, r in records]
    manual = [r for _, r in manual_records]
    fields = []
    for auto in report["fields"]:
        m = _pair_stats([r[auto["field"]] for r in originals], [r[auto["field"]] for r in manual])
        fields.append({"field": auto["field"], "kind": auto["kind"], "manual_ctl": m["ctl"],
                       "manual_count": m["count"], "manual_ratio": m["ratio"],
                       "auto_count": auto["count"], "auto_ratio": auto["ratio"], "table_i": auto["table_i"]})
    per_sample, both, n_manual, n_auto = [], 0, 0, 0
    for sample, original, twin_record in zip(report["samples"], originals, manual):
        by_hand = set().union(*(renamed_identifiers(original[f], twin_record[f]) for f in code))
        by_tool = set(sample["renames"])
        both, n_manual, n_auto = both + len(by_hand & by_tool), n_manual + len(by_hand), n_auto + len(by_tool)
        per_sample.append({"index": sample["index"], "manual": sorted(by_hand), "auto": sorted(by_tool)})
    return {
        "twin": str(twin), "twin_sha256": sha256_file(twin), "fields": fields,
        "samples": len(records),
        "manual_keep_lab_tokens": sum(all(len(code_tokens(x[f])) == len(code_tokens(y[f])) for f in code)
                                      for x, y in zip(originals, manual)),
        "auto_keep_lab_tokens": report["keep_lab_tokens"],
        "identifiers": {"manual": n_manual, "auto": n_auto, "both": both,
                        "auto_covers_manual": round(both / n_manual, 4) if n_manual else None,
                        "manual_covers_auto": round(both / n_auto, 4) if n_auto else None},
        "per_sample": per_sample,
    }
