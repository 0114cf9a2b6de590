"""`lab report --html`: the study as one self-contained HTML page.

The page holds the recipe, the report's tables (with their statistics and notes), the figures,
each arm's pre-training loss curves (the Trainer's logged history, the data TensorBoard shows),
the probes, and a sample browser: for each test sample its source and reference and, side by
side, every arm's prediction with per-sample scores and a token diff against the reference,
filtered by model, seed, epochs, training-set size, group and id, sorted by the score gap
between two arms. Nothing is fetched at view time: styles, script, data and figures are inlined.
Data are stored once (each source and reference once, predictions as compact arrays) and the
browser draws one page of rows at a time, so a paper-size study stays responsive.
"""
from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from typing import Any

import yaml

from lab.common import read_jsonl, write_text_atomic
from lab.contamination import settings as settings_table

HTML_FILE = "report.html"
PAGE_ROWS = 50  # rows the sample browser draws at once


# --- gathering the study ------------------------------------------------------------------------

def _stage_labels(study: Path) -> dict[str, dict[str, Any]]:
    """Stage key -> its labels (arm, seed, model, ...) from the study's recipe; empty for a
    folder without recipe.json (tables copied without their stages)."""
    from lab.study.recipe import recipe_from_dict
    from lab.study.runner import expand, model_name

    path = study / "recipe.json"
    if not path.is_file():
        return {}
    recipe = recipe_from_dict(json.loads(path.read_text(encoding="utf-8")))
    return {stage.key: {**stage.labels, "model": model_name(stage.labels)}
            for stage in expand(recipe) if "model" in stage.labels}


def _evaluations(study: Path) -> tuple[dict, list]:
    """(samples: id -> [source, reference], evaluations): every evaluation of samples.csv, the
    rows it scored, with each sample's prediction, source and reference from the evaluation's
    predictions.jsonl where the stage folder is there."""
    from lab.study.report import SAMPLE_LABELS, _read_csv
    from lab.study.runner import SAMPLES

    path = study / SAMPLES
    if not path.is_file():
        return {}, []
    evaluations: dict[tuple, dict[str, Any]] = {}
    for row in _read_csv(path, SAMPLE_LABELS, lambda column: column.startswith("score_")):
        key = (row["model"], row["arm"], row.get("seed"), row["epochs"], row["train_size"],
               row.get("stage"))
        entry = evaluations.setdefault(key, {
            "model": row["model"], "arm": row["arm"],
            "seed": int(row["seed"]) if str(row.get("seed", "")).isdigit() else row.get("seed"),
            "epochs": int(row["epochs"]),
            "train_size": int(row["train_size"]) if row["train_size"].isdigit() else None,
            "stage": row.get("stage", ""), "ids": [], "groups": [], "scores": {}})
        entry["ids"].append(row["id"])
        entry["groups"].append(row["group"])
        for column, value in row.items():
            if column.startswith("score_"):
                entry["scores"].setdefault(column[len("score_"):], []).append(
                    None if value is None else round(value, 4))
    samples: dict[str, list[str]] = {}
    for entry in evaluations.values():
        found: dict[str, str] = {}
        predictions = study / "stages" / entry.pop("stage") / "predictions.jsonl"
        if predictions.is_file():
            for _number, row in read_jsonl(predictions):
                found[row.get("id")] = row.get("prediction", "")
                samples.setdefault(row.get("id"), [row.get("source", ""), row.get("reference", "")])
        entry["predictions"] = [found.get(i, "(prediction not in the study folder)")
                                for i in entry["ids"]]
    return samples, list(evaluations.values())


def _curves(study: Path, labels: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pre-training's logged loss (step, loss), labelled by model, arm and seed."""
    curves = []
    for path in sorted((study / "stages").glob("pretrain-*/manifest.json")):
        label = labels.get(path.parent.name)
        if label is None:
            continue
        history = json.loads(path.read_text(encoding="utf-8"))["loss"]["history"]
        curves.append({"model": label["model"], "arm": label["arm"], "seed": label["seed"],
                       "points": [[h["step"], round(h["loss"], 4)] for h in history
                                  if "loss" in h and "step" in h]})
    return curves


def _probes(study: Path) -> list[dict[str, Any]]:
    """probes.csv summarised: per model, arm, groups probed and sample group, the mean of
    each probe (over seeds and samples)."""
    from lab.study.report import _read_csv
    from lab.study.runner import PROBE_COLUMNS, PROBES

    path = study / PROBES
    if not path.is_file() or path.stat().st_size == 0:
        return []
    sums: dict[tuple, dict[str, list[float]]] = {}
    for row in _read_csv(path, ("model", "arm", "group"), lambda c: c in PROBE_COLUMNS):
        bucket = sums.setdefault((row["model"], row["arm"], row.get("groups", ""), row["group"]),
                                 {c: [] for c in PROBE_COLUMNS})
        for column in PROBE_COLUMNS:
            if row.get(column) is not None:
                bucket[column].append(row[column])
    return [{"model": m, "arm": a, "probed split of": g, "group": grp,
             "samples": max((len(v) for v in values.values()), default=0),
             **{c: round(sum(v) / len(v), 4) if v else None for c, v in values.items()}}
            for (m, a, g, grp), values in sorted(sums.items())]


# --- rendering ----------------------------------------------------------------------------------

def markdown_to_html(text: str) -> str:
    """The report's Markdown (headings, pipe tables, paragraphs; `code` and **bold**) as HTML."""
    def inline(cell: str) -> str:
        cell = html.escape(cell)
        cell = re.sub(r"`([^`]+)`", r"<code>\1</code>", cell)
        return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", cell)

    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + 1, 6)
            out.append(f"<h{level}>{inline(line.lstrip('#').strip())}</h{level}>")
            i += 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            body = [r for r in rows[1:] if not all(set(c) <= set("-: ") for c in r)]
            out.append("<table class='results'><thead><tr>"
                       + "".join(f"<th>{inline(c)}</th>" for c in rows[0]) + "</tr></thead><tbody>"
                       + "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>"
                                 for r in body) + "</tbody></table>")
        elif line.strip():
            paragraph = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "|")):
                paragraph.append(lines[i])
                i += 1
            out.append(f"<p class='note'>{inline(' '.join(paragraph))}</p>")
        else:
            i += 1
    return "\n".join(out)


def _figure_tags(figures: list[Path]) -> str:
    tags = []
    for path in figures:
        if Path(path).suffix == ".png" and Path(path).is_file():
            data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            tags.append(f"<figure><img alt='{html.escape(Path(path).stem)}' "
                        f"src='data:image/png;base64,{data}'><figcaption>"
                        f"{html.escape(Path(path).name)}</figcaption></figure>")
    return "\n".join(tags)


def _json_script(name: str, payload: Any) -> str:
    # "</" cannot end the script element early when escaped; the browser's JSON.parse undoes it.
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    return f"<script type='application/json' id='{name}'>{text}</script>"


def render_html(title: str, recipe_yaml: str, tables_html: str, figures_html: str,
                data: dict[str, Any]) -> str:
    """The page: static sections plus the data the browser script draws from."""
    parts = {"TITLE": html.escape(title), "RECIPE": html.escape(recipe_yaml),
             "TABLES": tables_html, "FIGURES": figures_html or "<p>No figure.</p>",
             "DATA": _json_script("lab-data", data), "PAGE_ROWS": str(PAGE_ROWS),
             "STYLE": STYLE, "SCRIPT": SCRIPT}
    # One pass: a placeholder-like string inside the study's own text stays as it is.
    return re.sub(r"__([A-Z_]+?)__", lambda m: parts.get(m.group(1), m.group(0)), PAGE)


def baseline_arms() -> dict[str, Any]:
    """What the browser's gap subtracts by default: a contaminated arm's placebo (same form,
    other pairs: the gap is the contamination alone) where the study has it, else the control
    (which also never saw the task's format)."""
    placebos = {name: settings_table.placebo_of(name) for name in settings_table.names()}
    return {"control": settings_table.CONTROL.name,
            "placebos": {name: placebo for name, placebo in placebos.items() if placebo}}


def study_page_data(study: Path) -> dict[str, Any]:
    """Everything the page shows from the study folder, read (and any defect refused) before
    lab report writes a file."""
    study = Path(study)
    labels = _stage_labels(study)
    samples, evaluations = _evaluations(study)
    recipe_path = study / "recipe.json"
    recipe = json.loads(recipe_path.read_text(encoding="utf-8")) if recipe_path.is_file() else {}
    return {"recipe": recipe, "data": {
        "samples": samples, "evaluations": evaluations, "curves": _curves(study, labels),
        "probes": _probes(study), **baseline_arms()}}


def write_html_report(study: Path, report: dict[str, Any], page: dict[str, Any]) -> Path:
    """STUDY/report/report.html from study_page_data and `lab report`'s result."""
    study, recipe = Path(study), page["recipe"]
    text = render_html(recipe.get("name", study.name),
                       yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True) if recipe
                       else "(no recipe.json in this study folder)",
                       markdown_to_html(report["markdown"]),
                       _figure_tags([Path(p) for p in report["figure"]]), page["data"])
    out = study / "report" / HTML_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, text)
    return out


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1500px;padding:0 16px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid #ddd;padding:3px 6px;
vertical-align:top;text-align:left}th{background:#f3f3f3}table.results td{font-variant-numeric:
tabular-nums}p.note{color:#555;font-size:12px;max-width:1100px}figure{display:inline-block;
margin:6px}figure img{max-width:720px;border:1px solid #eee}pre{background:#f7f7f7;padding:8px;
overflow:auto;max-height:320px;font-size:12px}.controls{display:flex;flex-wrap:wrap;gap:10px;
align-items:end;position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #ddd;
z-index:1}.controls label{display:flex;flex-direction:column;font-size:12px;color:#555}
#samples{table-layout:fixed;width:100%}#samples th:first-child{width:130px}#samples th:last-child
{width:90px}#samples code{white-space:pre-wrap;word-break:break-word;font-size:12px}
.score{font-size:11px;color:#666}.gap-pos{color:#0a6b0a}.gap-neg{color:#a01010}ins{background:
#d4f7d4;text-decoration:none}del{background:#f9d0d0}.group{font-size:11px;padding:1px 4px;
border-radius:3px;background:#eee}.group.injected{background:#fde2c0}.group.held_out{background:
#d8e8fb}tr.sample{cursor:pointer}tr.detail td{background:#fafafa}svg.curve{border:1px solid #eee}
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__: lab study report</title>
<style>__STYLE__</style></head><body>
<h1>Study <code>__TITLE__</code></h1>
<details><summary>Recipe</summary><pre id="recipe">__RECIPE__</pre></details>
<h2>Results</h2>
<div id="tables">__TABLES__</div>
<h2>Figures</h2>
<div id="figures">__FIGURES__</div>
<h2>Pre-training loss</h2>
<div id="curves"></div>
<h2>Probes</h2>
<div id="probes"></div>
<h2>Samples</h2>
<div class="controls" id="controls">
<label>model<select id="f-model"></select></label>
<label>seed<select id="f-seed"></select></label>
<label>epochs<select id="f-epochs"></select></label>
<label>train size<select id="f-train"></select></label>
<label>metric<select id="f-metric"></select></label>
<label>group in arm<select id="f-group-arm"></select></label>
<label>group<select id="f-group"></select></label>
<label>gap: arm<select id="f-gap-a"></select></label>
<label>minus arm<select id="f-gap-b"></select></label>
<label>sort<select id="f-sort"><option value="gap-desc">gap, largest first</option>
<option value="gap-asc">gap, smallest first</option><option value="id">sample id</option></select></label>
<label>id contains<input id="f-id" size="14"></label>
<span id="count"></span>
<button id="prev">&lt;</button><span id="page"></span><button id="next">&gt;</button>
</div>
<p class="note">Gap: the per-sample score of one arm minus another's, same model, seed, epochs
and training set. By default a contaminated arm minus its placebo when the study has one (same
format and languages, other pairs: the gap is the contamination alone), else minus the control
(which also never saw the task's format).</p>
<table id="samples"><thead></thead><tbody></tbody></table>
__DATA__
<script>const PAGE_ROWS = __PAGE_ROWS__;
__SCRIPT__</script>
</body></html>
"""

SCRIPT = r"""
const DATA = JSON.parse(document.getElementById('lab-data').textContent);
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? '').replace(/[&<>"']/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]));
const uniq = (xs) => [...new Set(xs)];
const label = (v) => v === null || v === undefined ? 'all' : String(v);
const EVALS = DATA.evaluations;
EVALS.forEach(e => { e.index = new Map(e.ids.map((id, i) => [id, i])); });
const arms = uniq(EVALS.map(e => e.arm));

function fill(id, values, keep) {
  const select = $(id), old = keep ? select.value : null;
  select.innerHTML = values.map(v => `<option value="${esc(label(v))}">${esc(label(v))}</option>`).join('');
  if (old !== null && values.map(label).includes(old)) select.value = old;
}
function fillControls() {
  fill('f-model', uniq(EVALS.map(e => e.model)), true);
  const ofModel = EVALS.filter(e => e.model === $('f-model').value);
  fill('f-seed', uniq(ofModel.map(e => e.seed)).sort((a, b) => a - b), true);
  fill('f-epochs', uniq(ofModel.map(e => e.epochs)).sort((a, b) => a - b), true);
  fill('f-train', uniq(ofModel.map(e => e.train_size)), true);
  fill('f-metric', uniq(ofModel.flatMap(e => Object.keys(e.scores))), true);
  fill('f-group-arm', arms, true);
  fill('f-gap-a', arms, true);
  fill('f-gap-b', arms, true);
  if (!$('f-gap-a').dataset.touched) $('f-gap-a').value = arms.find(a => a !== DATA.control) || arms[0];
  if (!$('f-gap-b').dataset.touched) {
    const placebo = DATA.placebos[$('f-gap-a').value];
    const baseline = arms.includes(placebo) ? placebo : arms.includes(DATA.control) ? DATA.control : null;
    if (baseline) $('f-gap-b').value = baseline;
  }
  if (!$('f-group-arm').dataset.touched) $('f-group-arm').value = $('f-gap-a').value;
  const groupArm = selected().find(e => e.arm === $('f-group-arm').value);
  fill('f-group', ['all', ...uniq(groupArm ? groupArm.groups : [])], true);
}
function selected() {
  return EVALS.filter(e => e.model === $('f-model').value && label(e.seed) === $('f-seed').value
    && label(e.epochs) === $('f-epochs').value && label(e.train_size) === $('f-train').value);
}
let page = 0, rows = [];
function score(e, id, metric) {
  if (!e) return null;
  const i = e.index.get(id);
  return i === undefined || !e.scores[metric] ? null : e.scores[metric][i];
}
function compute() {
  const evals = selected(), metric = $('f-metric').value;
  const byArm = Object.fromEntries(evals.map(e => [e.arm, e]));
  const groupEval = byArm[$('f-group-arm').value], group = $('f-group').value;
  const needle = $('f-id').value.trim();
  const ids = uniq(evals.flatMap(e => e.ids));
  const a = byArm[$('f-gap-a').value], b = byArm[$('f-gap-b').value];
  rows = ids.filter(id => (group === 'all' || (groupEval && groupEval.groups[groupEval.index.get(id)] === group))
                   && (!needle || id.includes(needle)))
    .map(id => { const sa = score(a, id, metric), sb = score(b, id, metric);
                 return {id, gap: sa === null || sb === null ? null : sa - sb}; });
  const sort = $('f-sort').value;
  const key = (r) => r.gap === null ? -Infinity : r.gap;
  if (sort === 'gap-desc') rows.sort((x, y) => key(y) - key(x) || (x.id < y.id ? -1 : 1));
  else if (sort === 'gap-asc') rows.sort((x, y) => key(x) - key(y) || (x.id < y.id ? -1 : 1));
  else rows.sort((x, y) => (x.id < y.id ? -1 : 1));
  page = 0;
  draw(evals, metric);
}
function tokens(s) { return String(s ?? '').match(/\w+|\s+|[^\w\s]/g) || []; }
function diff(reference, prediction) {
  // LCS over code tokens (words, punctuation, whitespace): <del> what the reference has and the prediction
  // lacks, <ins> what the prediction adds. Capped so that a huge pair cannot freeze the page.
  const a = tokens(reference), b = tokens(prediction);
  if (a.length * b.length > 400000) return esc(prediction);
  const m = a.length, n = b.length, L = Array.from({length: m + 1}, () => new Uint16Array(n + 1));
  for (let i = m - 1; i >= 0; i--) for (let j = n - 1; j >= 0; j--)
    L[i][j] = a[i] === b[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  let i = 0, j = 0, out = '';
  while (i < m && j < n) {
    if (a[i] === b[j]) { out += esc(a[i]); i++; j++; }
    else if (L[i + 1][j] >= L[i][j + 1]) { out += `<del>${esc(a[i])}</del>`; i++; }
    else { out += `<ins>${esc(b[j])}</ins>`; j++; }
  }
  while (i < m) out += `<del>${esc(a[i++])}</del>`;
  while (j < n) out += `<ins>${esc(b[j++])}</ins>`;
  return out;
}
const short = (s, n) => { s = String(s ?? ''); return s.length > n ? s.slice(0, n) + '…' : s; };
function draw(evals, metric) {
  evals = evals || selected(); metric = metric || $('f-metric').value;
  const shownArms = arms.filter(a => evals.some(e => e.arm === a));
  $('samples').tHead.innerHTML = '<tr><th>sample</th><th>source</th><th>reference</th>'
    + shownArms.map(a => `<th>${esc(a)}</th>`).join('') + `<th>gap (${esc(metric)})</th></tr>`;
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_ROWS));
  page = Math.min(page, pages - 1);
  $('count').textContent = `${rows.length} samples`;
  $('page').textContent = ` page ${page + 1} / ${pages} `;
  const html = rows.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS).map(r => {
    const [source, reference] = DATA.samples[r.id] || ['', ''];
    const cells = shownArms.map(arm => {
      const e = evals.find(x => x.arm === arm), i = e ? e.index.get(r.id) : undefined;
      if (i === undefined) return '<td></td>';
      const s = e.scores[metric] ? e.scores[metric][i] : null;
      return `<td class="pred"><span class="group ${esc(e.groups[i])}">${esc(e.groups[i])}</span> `
        + `<span class="score">${esc(metric)} ${s === null ? '–' : s.toFixed(2)}</span><br>`
        + `<code>${esc(short(e.predictions[i], 240))}</code></td>`;
    }).join('');
    const gap = r.gap === null ? '' : `<span class="${r.gap > 0 ? 'gap-pos' : r.gap < 0 ? 'gap-neg' : ''}">${r.gap.toFixed(2)}</span>`;
    return `<tr class="sample" data-id="${esc(r.id)}"><td>${esc(r.id)}</td><td><code>${esc(short(source, 160))}</code></td>`
      + `<td><code>${esc(short(reference, 200))}</code></td>${cells}<td>${gap}</td></tr>`;
  }).join('');
  $('samples').tBodies[0].innerHTML = html;
  window.labReady = performance.now();
}
function toggle(tr) {
  const next = tr.nextElementSibling;
  if (next && next.classList.contains('detail')) { next.remove(); return; }
  const id = tr.dataset.id, evals = selected(), metric = $('f-metric').value;
  const [source, reference] = DATA.samples[id] || ['', ''];
  const parts = evals.map(e => { const i = e.index.get(id); if (i === undefined) return '';
    const scores = Object.entries(e.scores).map(([k, v]) => `${esc(k)} ${v[i] === null ? '–' : v[i].toFixed(2)}`).join(', ');
    return `<p><b>${esc(e.arm)}</b> (${esc(e.groups[i])}; ${scores})<br><code>${diff(reference, e.predictions[i])}</code></p>`; }).join('');
  const row = document.createElement('tr');
  row.className = 'detail';
  row.innerHTML = `<td colspan="${tr.children.length}"><p><b>source</b><br><code>${esc(source)}</code></p>`
    + `<p><b>reference</b><br><code>${esc(reference)}</code></p>${parts}`
    + '<p class="note">diff against the reference: <del>missing</del> <ins>added</ins></p></td>';
  tr.after(row);
}
function drawCurves() {
  const curves = DATA.curves;
  if (!curves.length) { $('curves').textContent = 'No pre-training in this study.'; return; }
  const W = 640, H = 260, P = 40, colours = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];
  const models = uniq(curves.map(c => c.model));
  $('curves').innerHTML = models.map(model => {
    const mine = curves.filter(c => c.model === model), points = mine.flatMap(c => c.points);
    if (!points.length) return '';
    const xs = points.map(p => p[0]), ys = points.map(p => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    const X = (x) => P + (x - x0) / Math.max(1e-9, x1 - x0) * (W - 2 * P), Y = (y) => H - P - (y - y0) / Math.max(1e-9, y1 - y0) * (H - 2 * P);
    const lines = mine.map(c => { const colour = colours[arms.indexOf(c.arm) % colours.length];
      return `<polyline fill="none" stroke="${colour}" stroke-width="1.5" points="${c.points.map(p => X(p[0]).toFixed(1) + ',' + Y(p[1]).toFixed(1)).join(' ')}"><title>${esc(c.arm)} seed ${c.seed}</title></polyline>`; }).join('');
    const legend = uniq(mine.map(c => c.arm)).map((arm, k) => `<text x="${W - P - 110}" y="${P + 14 * k}" fill="${colours[arms.indexOf(arm) % colours.length]}" font-size="12">${esc(arm)}</text>`).join('');
    return `<svg class="curve" width="${W}" height="${H}" role="img"><title>${esc(model)} pre-training loss</title>`
      + `<text x="${P}" y="16" font-size="13">${esc(model)}: training loss by step (every seed)</text>`
      + `<text x="4" y="${Y(y1) + 4}" font-size="11">${y1.toFixed(2)}</text><text x="4" y="${Y(y0)}" font-size="11">${y0.toFixed(2)}</text>`
      + `<text x="${P}" y="${H - 8}" font-size="11">step ${x0}</text><text x="${W - P - 40}" y="${H - 8}" font-size="11">${x1}</text>`
      + lines + legend + '</svg>';
  }).join(' ');
}
function drawProbes() {
  const rows = DATA.probes;
  if (!rows.length) { $('probes').textContent = 'No probes in this study.'; return; }
  const columns = Object.keys(rows[0]);
  $('probes').innerHTML = '<table><thead><tr>' + columns.map(c => `<th>${esc(c)}</th>`).join('') + '</tr></thead><tbody>'
    + rows.map(r => '<tr>' + columns.map(c => `<td>${esc(typeof r[c] === 'number' ? +r[c].toFixed(4) : r[c])}</td>`).join('') + '</tr>').join('')
    + '</tbody></table><p class="note">Means over seeds and samples (probes.csv): a lower loss on injected than on held-out samples of the same model means memorised.</p>';
}
for (const id of ['f-model', 'f-seed', 'f-epochs', 'f-train', 'f-metric', 'f-group-arm', 'f-group', 'f-gap-a', 'f-gap-b', 'f-sort']) {
  $(id).addEventListener('change', () => { $(id).dataset.touched = '1'; fillControls(); compute(); });
}
$('f-id').addEventListener('input', compute);
$('prev').addEventListener('click', () => { page = Math.max(0, page - 1); draw(); });
$('next').addEventListener('click', () => { page += 1; draw(); });
$('samples').tBodies[0].addEventListener('click', (ev) => { const tr = ev.target.closest('tr.sample'); if (tr) toggle(tr); });
drawCurves(); drawProbes();
if (EVALS.length) { fillControls(); compute(); } else { $('count').textContent = 'No evaluations in this study.'; window.labReady = performance.now(); }
"""


def study_arms() -> tuple[str, str, str]:
    """The three arms of a full study: the control, the study's paired setting (the last
    contaminated setting of the table) and its placebo."""
    contaminated = [n for n in settings_table.names()
                    if settings_table.get(n).injects_test and settings_table.placebo_of(n)]
    return settings_table.CONTROL.name, contaminated[-1], settings_table.placebo_of(contaminated[-1])


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
    page = render_html("synthetic", "name: synthetic\n", "<p>synthetic study</p>", "",
                       synthetic_study_data(**sizes))
    write_text_atomic(Path(out), page)
    return Path(out)
