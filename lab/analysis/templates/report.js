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
