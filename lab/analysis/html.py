"""`lab report --html`: the study as one self-contained HTML page.

The page holds the recipe, the report's tables (with their statistics and notes), the figures,
each arm's pre-training loss curves (the Trainer's logged history, the data TensorBoard shows),
the probes, and a sample browser: for each test sample its source and reference and, side by
side, every arm's prediction with per-sample scores and a token diff against the reference,
filtered by model, seed, epochs, training-set size, group and id, sorted by the score gap
between two arms. Nothing is fetched at view time: styles, script, data and figures are inlined.
Data are stored once (each source and reference once, predictions as compact arrays) and the
browser draws one page of rows at a time, so a paper-size study stays responsive.

The page is templates/report.html (Jinja2, every value escaped unless marked safe here); its
style and script are templates/report.css and report.js, inlined as they are.
"""
from __future__ import annotations

import base64
import functools
import json
from pathlib import Path
from typing import Any

import yaml

from lab.common import write_text_atomic
from lab.contamination import settings as settings_table
from lab.analysis.report_data import baseline_arms
from lab.analysis.tables import MAIN_COLUMNS

HTML_FILE = "report.html"
PAGE_ROWS = 50  # rows the sample browser draws at once
TEMPLATES = Path(__file__).parent / "templates"


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True)


@functools.lru_cache(maxsize=1)
def _markdown() -> Any:
    """The report's Markdown (headings, pipe tables, lists, paragraphs, `code`, **bold**) with
    raw HTML, links and images turned off: the text comes from the study's data, so a
    `<script>` or `[x](javascript:...)` in a model or arm name stays text."""
    import markdown

    converter = markdown.Markdown(extensions=["tables"])
    converter.preprocessors.deregister("html_block")
    for pattern in ("html", "entity", "reference", "link", "image_link", "image_reference",
                    "short_reference", "short_image_ref", "autolink", "automail"):
        converter.inlinePatterns.deregister(pattern)
    return converter


def markdown_to_html(text: str) -> Any:
    """Markdown as HTML markup, escaped (see _markdown)."""
    from markupsafe import Markup

    return Markup(_markdown().reset().convert(text))


def _figures(paths: list[Path]) -> list[dict[str, str]]:
    return [{"stem": path.stem, "name": path.name,
             "png": base64.b64encode(path.read_bytes()).decode("ascii")}
            for path in map(Path, paths) if path.suffix == ".png" and path.is_file()]


def _json(payload: Any) -> Any:
    """The browser's data inside <script type='application/json'>: every "<" written as JSON's
    \\u003c, so no text of a sample ("</script>", "<!--<script>") can end the element or change
    how the browser parses it; JSON.parse gives the "<" back."""
    from markupsafe import Markup

    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return Markup(text.replace("<", "\\u003c"))


def _secondary(table: dict[str, Any]) -> dict[str, Any]:
    """The secondary table's main columns (MAIN_COLUMNS, a laptop screen wide) and the others
    (behind the page's 'All columns')."""
    main = [i for i, column in enumerate(table["header"]) if column in MAIN_COLUMNS]
    return {**table, "main": main,
            "more": [c for i, c in enumerate(table["header"]) if i not in main]}


def render_html(title: str, recipe_yaml: str, data: dict[str, Any],
                sections: list[dict[str, Any]] = (), figures: list[Path] = ()) -> str:
    """The page: the report's sections ({"heading", "markdown"}; the secondary one's "table" is
    drawn from its rows, the others from their Markdown), the figures (their PNG inlined) and
    the data the browser script draws from."""
    from markupsafe import Markup

    environment = _environment()
    source = lambda name: Markup(environment.loader.get_source(environment, name)[0])  # noqa: E731
    shown = [{"heading": s["heading"], "table": _secondary(s["table"])} if "table" in s else
             {"heading": s["heading"], "table": None, "html": markdown_to_html(s["markdown"])}
             for s in sections]
    return environment.get_template("report.html").render(
        title=title, recipe=recipe_yaml, sections=shown, figures=_figures(list(figures)),
        data=_json(data), page_rows=PAGE_ROWS, style=source("report.css"),
        script=source("report.js"))


def write_html_report(study: Path, report: dict[str, Any], page: dict[str, Any]) -> Path:
    """STUDY/report/report.html from report_data.study_page_data and `lab report`'s result."""
    study, recipe = Path(study), page["recipe"]
    text = render_html(recipe.get("name", study.name),
                       yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True) if recipe
                       else "(no recipe.json in this study folder)",
                       page["data"], report["sections"], report["figure"])
    out = study / "report" / HTML_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, text)
    return out


def study_arms() -> tuple[str, str, str]:
    """The three arms of a full study: the control, the study's paired setting and its
    placebo."""
    paired = settings_table.PAIRED.name
    return settings_table.CONTROL.name, paired, settings_table.placebo_of(paired)


def synthetic_study_data(samples: int, arms: tuple[str, ...] | None = None, seeds: int = 5,
                         epochs: tuple[int, ...] = (0, 1, 5, 10), seed: int = 0) -> dict[str, Any]:
    """The browser's data for a made-up study of a given size (code-like sources, references
    and predictions, split-half groups in the contaminated arm, BLEU/METEOR/EM scores): what
    the tests drive in a browser and benchmarks/html_report.py measures. Arms: study_arms() by
    default. Seeded: equal arguments, equal data."""
    import random

    arms = arms or study_arms()
    split_arm = study_arms()[1]
    rng = random.Random(seed)
    words = ("int", "return", "public", "void", "value", "count", "index", "List", "get", "set",
             "size", "for", "if", "null", "this", "new", "String", "result", "item", "key")

    def code(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n)) + " ;"

    ids = [f"synthetic:test:{i}" for i in range(samples)]
    data_samples = {i: [code(rng.randint(20, 60)), code(rng.randint(20, 60))] for i in ids}
    evaluations = []
    for arm in arms:
        for s in range(seeds):
            injected = set(random.Random(f"{seed}/{s}").sample(ids, samples // 2))
            for e in epochs:
                groups = [("injected" if i in injected else "held_out") if arm == split_arm
                          else "held_out" for i in ids]
                predictions, bleu = [], []
                for i, group in zip(ids, groups):
                    reference = data_samples[i][1].split()
                    keep = 0.9 if group == "injected" and e == 0 else 0.4
                    predicted = [t if rng.random() < keep else rng.choice(words) for t in reference]
                    predictions.append(" ".join(predicted))
                    bleu.append(round(100 * sum(a == b for a, b in zip(predicted, reference))
                                      / len(reference), 4))
                evaluations.append({
                    "model": "gpt2", "arm": arm, "seed": s, "epochs": e, "train_size": None,
                    "ids": ids, "predictions": predictions, "groups": groups,
                    "scores": {"bleu": bleu, "meteor": [round(b * 0.9 + 5, 4) for b in bleu],
                               "em": [100.0 if b == 100 else 0.0 for b in bleu]}})
    curves = [{"model": "gpt2", "arm": arm, "seed": s,
               "points": [[step, round(8 * 0.99 ** step + 0.1 * s, 4)] for step in range(1, 400, 10)]}
              for arm in arms for s in range(seeds)]
    return {"samples": data_samples, "evaluations": evaluations, "curves": curves, "probes": [],
            **baseline_arms()}


def write_synthetic_report(out: Path, **sizes: Any) -> Path:
    """A report page over synthetic_study_data(**sizes) (no tables or figures)."""
    page = render_html("synthetic", "name: synthetic\n", synthetic_study_data(**sizes))
    write_text_atomic(Path(out), page)
    return Path(out)
