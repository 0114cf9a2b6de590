"""Fault-table rows for issue 70 (corpus): built with the constructors of table.py.

Row 7: an arm manifest's benchmark, benchmark_split, setting, options.samples or contamination
form edited (or a field an arm's manifest states removed) is refused by the one corpus reader
(lab.corpora.shards.verify_corpus, which checks them against the documents' `sample`, `side`
and `form` fields) in every command that reads the arm. Row 8: an output-only renamed arm's
manifest counts as altered exactly the samples whose injected (C#) document differs from the
verbatim one."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from .table import AUDIT, INJECT, PRETRAIN, Case, copy_then, error, ok
from .world import Result


def edit_manifest(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    """The arm's manifest.json with `change` applied to it (its shards untouched)."""
    def damage(folder: Path) -> None:
        path = folder / "manifest.json"
        manifest = json.loads(path.read_text())
        change(manifest)
        path.write_text(json.dumps(manifest, indent=2))
    return damage


def claim_renamed(manifest: dict[str, Any]) -> None:
    """A verbatim arm made to say its samples were injected renamed (both records of it)."""
    manifest["options"]["contamination_form"] = "renamed"
    manifest["contamination_form"] = {"name": "renamed", "seed": manifest["seed"],
                                      "altered_samples": len(manifest["injected_ids"]),
                                      "unchanged": []}


def _edited(name: str, change: Callable[[dict[str, Any]], Any]):
    return copy_then("paired", name, edit_manifest(change))


BENCHMARK = _edited("arm-bench", lambda m: m.update(benchmark="concode"))
SPLIT = _edited("arm-split", lambda m: m.update(benchmark_split="valid"))
SETTING = _edited("arm-setting", lambda m: m.update(setting="input-only"))
SAMPLES = _edited("arm-samples", lambda m: m["options"].update(samples=27))
FORM = _edited("arm-form", claim_renamed)
NO_SPLIT = _edited("arm-nosplit", lambda m: m.pop("benchmark_split"))

BENCHMARK_SAYS = "arm-bench/manifest.json: field 'benchmark' is 'concode', but it lists codetrans:test:"
SETTING_SAYS = ("arm-setting/manifest.json: field 'setting' is 'input-only' (documents of sides "
                "input per copy), but copy 0 of codetrans:test:")


def _pretrain_on(corpus: str) -> list[str]:
    return [corpus if part == "paired" else part for part in PRETRAIN] + ["--out", "out-pt"]


# Row 8's arm: the issue's reproduction (output-only, renamed, seed 3, 20 samples, half injected).
RENAMED_OUTPUT_ONLY = [*INJECT[:-1], "out-renamed", "--setting", "output-only",
                       "--contamination-form", "renamed", "--seed", "3", "--samples", "20",
                       "--fraction", "0.5"]


def altered_is_what_was_injected(root: Path, result: Result) -> str | None:
    """Every injected document differs from the verbatim one (the sample's C#, all output-only
    injects) exactly when the manifest counts its sample altered; altered_samples plus the
    unchanged ones are the injected samples."""
    from lab.contamination import settings as settings_table
    from lab.corpora import load_samples
    from lab.corpora.shards import read_corpus

    arm = root / "out-renamed"
    form = json.loads((arm / "manifest.json").read_text())["contamination_form"]
    unchanged = {entry["id"] for entry in form["unchanged"]}
    samples = {s.id: s for s in load_samples("codetrans", "test").records}
    injected = [r for r in read_corpus(arm) if r["sample"]]
    if form["altered_samples"] + len(unchanged) != len(injected):
        return (f"altered_samples {form['altered_samples']} + {len(unchanged)} unchanged, "
                f"{len(injected)} injected documents")
    for record in injected:
        ((_, verbatim),) = settings_table.get("output-only").documents(samples[record["sample"]])
        if (record["text"] == verbatim) != (record["sample"] in unchanged):
            said = "unchanged" if record["sample"] in unchanged else "altered"
            return (f"{record['sample']}'s C# document is "
                    f"{'byte-identical to' if record['text'] == verbatim else 'not'} the verbatim "
                    f"one, but the manifest counts it {said}")
    return None


ROWS: list[Case] = [
    # row 7: an arm manifest's claims edited, the shards untouched
    error("i70 corpus: corpora verify, benchmark edited", ["corpora", "verify", "arm-bench"],
          BENCHMARK_SAYS, BENCHMARK),
    error("i70 corpus: corpora verify, benchmark_split edited", ["corpora", "verify", "arm-split"],
          "arm-split/manifest.json: field 'benchmark_split' is 'valid', but it lists "
          "codetrans:test:", SPLIT),
    error("i70 corpus: corpora verify, setting edited", ["corpora", "verify", "arm-setting"],
          SETTING_SAYS, SETTING),
    error("i70 corpus: corpora verify, options.samples edited",
          ["corpora", "verify", "arm-samples"],
          "arm-samples/manifest.json: field 'options.samples' is 27: the split's first 27 "
          "samples take part, but injected_ids and held_out_ids list 1000", SAMPLES),
    error("i70 corpus: corpora verify, a verbatim arm said to be renamed",
          ["corpora", "verify", "arm-form"],
          "arm-form/manifest.json: field 'options.contamination_form' is 'renamed', but the "
          "injected documents' form fields say none (verbatim)", FORM),
    error("i70 corpus: corpora verify, benchmark_split removed (not read as legacy)",
          ["corpora", "verify", "arm-nosplit"],
          "arm-nosplit/manifest.json: field 'benchmark_split' missing", NO_SPLIT),
    error("i70 corpus: decontam on an arm whose benchmark was edited",
          ["decontam", "--corpus", "arm-bench", "--out", "out-decontam"], BENCHMARK_SAYS,
          BENCHMARK),
    error("i70 corpus: pretrain on an arm whose setting was edited", _pretrain_on("arm-setting"),
          SETTING_SAYS, SETTING),
    error("i70 corpus: pretrain on an arm whose options.samples was edited",
          _pretrain_on("arm-samples"), "arm-samples/manifest.json: field 'options.samples' is 27",
          SAMPLES),
    error("i70 corpus: audit --against an arm whose setting was edited",
          [*AUDIT[:-3], "arm-setting", "--out", "out-audit"], SETTING_SAYS, SETTING),
    # row 8: output-only renamed, what is counted altered is what was injected altered
    ok("i70 corpus: inject output-only renamed counts the C# it altered", RENAMED_OUTPUT_ONLY,
       check=altered_is_what_was_injected),
]
