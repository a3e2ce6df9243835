// stepscope's TensorBoard tab: an ES module that TensorBoard loads into the plugin's iframe and calls
// render() on. Everything comes from this host: the JSON routes of plugin.py and the vendored uPlot
// (static/vendor, MIT). No build step; no request leaves the host.
//
// Views: the runs list (verdict badge, step, busy, trend over cycles), one run (verdict card, verification,
// breakdown per cycle, top operators and kernels, memory per cycle and step, a window of steps for the
// PyTorch Profiler tab), a multi-rank job (per-rank breakdown with the stragglers marked and why; a sorted
// distribution beyond MAX_BARS ranks), and two runs side by side.

const MAX_BARS = 64;
// the window tool's POST carries this: plugin.py writes its process's token here as it serves this file
const WINDOW_TOKEN = '%STEPSCOPE_TOKEN%';
const POLL_MS = 1500;  // the runs table, redrawn while any run is analysed
// a run asked for and being analysed: asked again this often, so that it shows within a fraction of a second of
// being ready (an answer of 202 costs the plugin a lookup)
const ANSWER_POLL_MS = 250;

let root;
// The names the page shows and their colours: buckets, phases, findings and verdicts, as the plugin's
// vocabulary route gives them from the registries (analysis/vocabulary.py, analysis/verdicts.py).
let vocab;

export async function render() {
  addStyle();
  await loadUPlot();
  vocab = await getJSON('vocabulary');
  root = el('div', {id: 'stepscope'});
  document.body.appendChild(root);
  showRuns();
}

// ---------------------------------------------------------------- plumbing

function el(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'text') node.textContent = v;
    else if (k === 'onclick') node.addEventListener('click', v);
    else if (k === 'class') node.className = v;
    else node.setAttribute(k, v === true ? '' : v);
  }
  for (const c of [].concat(children)) {
    if (c === null || c === undefined) continue;
    node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return node;
}

function loadUPlot() {
  const css = el('link', {rel: 'stylesheet', href: './static/vendor/uPlot.min.css'});
  document.head.appendChild(css);
  return new Promise((resolve, reject) => {
    const s = el('script', {src: './static/vendor/uPlot.iife.min.js'});
    s.onload = resolve;
    s.onerror = () => reject(new Error('uPlot did not load'));
    document.head.appendChild(s);
  });
}

async function getJSON(route, params = {}) {
  // Answers 202 while the run is analysed in the background: ask again until it is ready.
  for (;;) {
    const r = await fetch('./' + route + '?' + new URLSearchParams(params));
    const body = await r.json();
    if (r.status === 202) {
      await new Promise((ok) => setTimeout(ok, ANSWER_POLL_MS));
      continue;
    }
    if (!r.ok) throw new Error(body.error || `${route}: HTTP ${r.status}`);
    return body;
  }
}

function page(title, back) {
  root.replaceChildren();
  const head = el('div', {class: 'head'}, [
    back ? el('a', {href: '#', class: 'back', text: '\u2190 all runs', onclick: (e) => {
      e.preventDefault();
      showRuns();
    }}) : null,
    el('h1', {text: title}),
  ]);
  root.appendChild(head);
  return root;
}

function fail(where, err) {
  where.appendChild(el('p', {class: 'error', text: String(err.message || err)}));
}

// x with d decimals as Python writes it (format(x, '.2f'), the console's and the report's text): the nearest,
// and on an exact tie the even one. toFixed takes the larger on a tie, so a step of exactly 80.625 ms would
// read 80.63 here and 80.62 everywhere else. A double is an exact tie at d decimals when x * 2^(d+1) is an odd
// integer; x * 10^d is then exactly n + 0.5.
const fixed = (x, d) => {
  const t = x * 2 ** (d + 1);
  if (!Number.isInteger(t) || t % 2 === 0) return x.toFixed(d);
  const n = Math.floor(Math.abs(x) * 10 ** d);
  return `${x < 0 ? '-' : ''}${((n % 2 === 0 ? n : n + 1) / 10 ** d).toFixed(d)}`;
};
const fmt = (x, d = 2) => (x === null || x === undefined ? 'n/a' : fixed(Number(x), d));
const pct = (x) => (x === null || x === undefined ? 'n/a' : `${fixed(Number(x), 1)}%`);

function badge(verdict) {
  const tone = (vocab.verdicts[verdict] || {}).tone || 'warn';
  return el('span', {class: `badge ${tone}`, 'data-verdict': verdict, text: verdict || 'n/a'});
}

// Remedies and evidence carry stepscope flags and code in `backticks`: shown as code.
function withCode(text) {
  return String(text).split('`').map((part, i) => (i % 2 ? el('code', {text: part}) : part));
}

// TensorBoard's own page, whatever its --path_prefix: this document's base is <prefix>/data/plugin/stepscope/.
function tensorBoardHome() {
  return new URL('../../../', document.baseURI).pathname;
}

// A bucket's colour, or a phase's (a phase named after a bucket wears its colour), else one by position.
function colorOf(name, i) {
  const known = vocab.buckets[name] || vocab.phases[name];
  return (known && known.colour) || vocab.fallback_colours[i % vocab.fallback_colours.length];
}

function findingLabel(id) {
  return (vocab.findings[id] || {}).label || id;
}

// ---------------------------------------------------------------- charts (uPlot)

// Stacked bars: one bar per label, one layer per bucket. uPlot has no stacking of its own, so each layer
// is drawn as the cumulative sum up to it, tallest first; the legend shows each layer's own value.
function stackedBars(title, labels, buckets, rows, opts = {}) {
  const n = labels.length;
  const x = labels.map((_, i) => i);
  const cum = [];
  let run = new Array(n).fill(0);
  for (const b of buckets) {
    run = run.map((v, i) => v + (rows[i][b] || 0));
    cum.push(run.slice());
  }
  const series = [{label: opts.xLabel || 'bar', value: (u, v) => (v === null ? '' : labels[v])}];
  const data = [x];
  for (let k = buckets.length - 1; k >= 0; k--) {
    const b = buckets[k];
    series.push({
      label: b, fill: colorOf(b, k), stroke: colorOf(b, k), width: 0,
      paths: uPlot.paths.bars({size: [0.7, 80]}), points: {show: false},
      value: (u, v, si, idx) => (idx === null || idx === undefined ? '' : fmt(rows[idx][b])),
    });
    data.push(cum[k]);
  }
  const marks = opts.marked || [];
  if (marks.length) {
    const top = Math.max(...(cum.length ? cum[cum.length - 1] : [0]));
    series.push({label: 'straggler', stroke: '#b71c1c', fill: '#b71c1c', paths: () => null,
      points: {show: true, size: 12, stroke: '#b71c1c', fill: '#b71c1c'}});
    data.push(x.map((i) => (marks.includes(i) ? cum[cum.length - 1][i] + 0.04 * top : null)));
  }
  const box = el('div', {class: 'chart', 'data-kind': opts.kind || 'bars', 'data-bars': String(n),
    'data-marked': String(marks.length)});
  box.appendChild(el('div', {class: 'chart-title', text: title}));
  const width = Math.min(1100, Math.max(360, 60 * n + 200));
  // eslint-disable-next-line no-new
  new uPlot({
    width, height: 260,
    scales: {x: {time: false, range: [-0.5, n - 0.5]}, y: {range: (u, lo, hi) => [0, hi * 1.08 || 1]}},
    axes: [
      {splits: () => x, values: (u, splits) => splits.map((i) => labels[i] ?? ''), grid: {show: false}},
      {label: 'ms per step', size: 60},
    ],
    series, legend: {live: true},
  }, data, box);
  return box;
}

function sparkline(points) {
  const box = el('div', {class: 'spark', 'data-points': String(points.length)});
  if (points.length < 2) {
    box.textContent = points.length ? `${fmt(points[0])} ms` : '';
    return box;
  }
  // eslint-disable-next-line no-new
  new uPlot({
    width: 140, height: 34, cursor: {show: false}, legend: {show: false},
    scales: {x: {time: false}}, axes: [{show: false}, {show: false}],
    series: [{}, {stroke: '#1565c0', width: 1.5, points: {show: true, size: 4}}],
  }, [points.map((_, i) => i + 1), points], box);
  return box;
}

function distribution(title, ranks, stragglers) {
  // Hundreds of ranks: each rank's work outside communication (what tells a straggler: collectives make
  // every rank's step equally long), sorted, the stragglers as red points.
  const work = (r) => (r.outside_comm_ms ?? r.step_ms);
  const sorted = ranks.slice().sort((a, b) => work(a) - work(b));
  const x = sorted.map((_, i) => i);
  const box = el('div', {class: 'chart', 'data-kind': 'distribution', 'data-bars': '0',
    'data-points': String(sorted.length), 'data-marked': String(stragglers.length)});
  box.appendChild(el('div', {class: 'chart-title', text: title}));
  // eslint-disable-next-line no-new
  new uPlot({
    width: 900, height: 260, scales: {x: {time: false}},
    axes: [{label: 'ranks, sorted'}, {label: 'ms per step outside communication', size: 60}],
    series: [{label: 'position', value: (u, v) => (v === null ? '' : `rank ${sorted[v].rank}`)},
      {label: 'ms outside communication', stroke: '#1565c0', width: 1.5, points: {show: false}},
      {label: 'straggler', stroke: '#b71c1c', paths: () => null, points: {show: true, size: 9, fill: '#b71c1c'}}],
  }, [x, sorted.map(work), sorted.map((r) => (stragglers.includes(r.rank) ? work(r) : null))], box);
  return box;
}

// ---------------------------------------------------------------- runs list

async function showRuns() {
  const p = page('stepscope runs', false);
  const holder = el('div', {id: 'runs'});
  p.appendChild(holder);
  let body;
  try {
    body = await getJSON('runs');
  } catch (err) {
    fail(holder, err);
    return;
  }
  const picked = new Set();
  const compare = el('button', {id: 'compare', disabled: true, text: 'Compare the two selected runs',
    onclick: () => showDiff(...picked)});
  const table = el('table', {class: 'runs'}, [el('tr', {}, ['', 'run', 'verdict', 'step ms', 'profiled ms',
    'GPU busy', 'ranks', 'profiled step over cycles'].map((h) => el('th', {text: h})))]);
  for (const r of body.runs) {
    const box = el('input', {type: 'checkbox', 'data-run': r.name});
    box.addEventListener('change', () => {
      if (box.checked) picked.add(r.name);
      else picked.delete(r.name);
      compare.disabled = picked.size !== 2;
    });
    const link = el('a', {href: '#', class: 'run-link', 'data-run': r.name, text: r.name, onclick: (e) => {
      e.preventDefault();
      showRun(r.name);
    }});
    if (r.state !== 'ready') {
      table.appendChild(el('tr', {class: 'run', 'data-run': r.name, 'data-state': r.state}, [
        el('td', {}, box), el('td', {}, link),
        el('td', {colspan: 6, class: r.state === 'error' ? 'error' : 'muted',
          text: r.state === 'error' ? r.error : 'analysing\u2026'})]));
      continue;
    }
    table.appendChild(el('tr', {class: 'run', 'data-run': r.name, 'data-state': r.state}, [
      el('td', {}, box), el('td', {}, link), el('td', {}, badge(r.verdict)),
      el('td', {class: 'num step', text: fmt(r.step_ms)}), el('td', {class: 'num', text: fmt(r.profiled_step_ms)}),
      el('td', {class: 'num busy', text: pct(r.gpu_busy_pct)}), el('td', {class: 'num', text: String(r.ranks)}),
      // each cycle as measured: a trainer run's unprofiled figure is one for the whole run
      el('td', {}, sparkline(r.trend.map((c) => c.profiled_step_ms ?? c.step_ms))),
    ]));
  }
  holder.append(table, el('p', {}, compare),
    el('p', {class: 'muted', text: `${body.runs.length} run(s) under ${body.logdir}`}));
  const pending = body.runs.some((r) => r.state === 'analysing');
  holder.dataset.complete = String(!pending);  // every run analysed (or failed): what a test waits for
  if (pending) {
    setTimeout(() => {
      if (holder.isConnected) showRuns();
    }, POLL_MS);
  }
}

// ---------------------------------------------------------------- one run

async function showRun(name) {
  const p = page(name, true);
  let v;
  try {
    v = await getJSON('run', {run: name});
  } catch (err) {
    fail(p, err);
    return;
  }
  // one cycle at a time, the latest first: its headline, figures, evidence, remedies and operators
  const latest = v.cycles.length ? v.cycles[v.cycles.length - 1].cycle : 0;
  const card = el('div', {id: 'cycle-card'});
  const top = el('div', {id: 'cycle-top'});
  const pick = (c) => {
    card.replaceChildren(verdictCard(v, c));
    top.replaceChildren(topTable(v.spans.filter((s) => s.cycle === c)));
    card.dataset.cycle = String(c);
  };
  if (v.cycles.length > 1) p.appendChild(cyclePicker(v.cycles, latest, pick));
  p.appendChild(card);
  pick(latest);
  if (v.verification) p.appendChild(verificationCard(v.verification));
  if (v.distributed && v.distributed.length) {
    const ranks = el('div', {id: 'ranks'});
    p.appendChild(ranks);
    showRanks(name, ranks);
  }
  const buckets = [...new Set(v.cycles.flatMap((c) => Object.keys(c.breakdown_ms)))];
  p.appendChild(stackedBars('Step breakdown per profiling cycle (unprofiled ms per step; mean over ranks)',
    v.cycles.map((c) => `cycle ${c.cycle}`), buckets, v.cycles.map((c) => c.breakdown_ms),
    {kind: 'cycles', xLabel: 'cycle'}));
  p.appendChild(top);
  if (v.memory && (v.memory.devices.length || v.memory.oom.length)) p.appendChild(memoryCard(v.memory));
  p.appendChild(windowForm(name));
}

// Cycles are numbered from 0, as diagnosis.md and cycles.jsonl number them.
function cyclePicker(cycles, selected, onPick) {
  const select = el('select', {id: 'cycle-pick'}, cycles.map((c) => el('option',
    {value: String(c.cycle), text: `cycle ${c.cycle}: ${c.verdict || c.verdicts.join(', ')}`})));
  select.value = String(selected);
  select.addEventListener('change', () => onPick(Number(select.value)));
  return el('p', {class: 'cycle-picker'}, [el('label', {for: 'cycle-pick', text: 'profiling cycle '}), select,
    el('span', {class: 'muted', text: ` of ${cycles.length} (the latest shown first)`})]);
}

function verdictCard(v, c) {
  const f = v.cycles.find((x) => x.cycle === c) || v.figures;
  const spans = v.spans.filter((s) => s.cycle === c);
  const run = v.cycles.length > 1 ? `; the run: ${v.verdict}, the most common over its ${v.cycles.length} cycles` : '';
  const card = el('div', {class: 'card verdict', id: 'verdict', 'data-cycle': String(c)}, [
    el('div', {class: 'verdict-line'}, [el('span', {class: 'verdict-name', text: f.verdict || v.verdict}),
      el('span', {class: 'muted', text: ` \u2014 cycle ${c}, ${spans.length} trace(s)${run}`})]),
    el('table', {class: 'figures'}, [
      el('tr', {}, [el('th', {text: ''}), el('th', {text: 'without the profiler'}), el('th', {text: 'as profiled'})]),
      el('tr', {}, [el('td', {text: 'step'}), el('td', {class: 'num', id: 'step-unprofiled', text: `${fmt(f.step_ms)} ms`}),
        el('td', {class: 'num', id: 'step-profiled', text: `${fmt(f.profiled_step_ms)} ms`})]),
      el('tr', {}, [el('td', {text: 'GPU busy'}), el('td', {class: 'num', id: 'busy-unprofiled', text: pct(f.gpu_busy_pct)}),
        el('td', {class: 'num', id: 'busy-profiled', text: pct(f.profiled_gpu_busy_pct)})]),
    ]),
  ]);
  for (const span of spans) {
    const who = span.rank === null ? span.worker : `rank ${span.rank} (${span.worker})`;
    card.appendChild(el('h3', {}, [`${who}, span ${span.span}: `, badge(span.verdict)]));
    card.appendChild(el('ul', {class: 'evidence'}, span.evidence.map((e) => el('li', {}, withCode(e)))));
    if (span.remedies.length) {
      card.appendChild(el('div', {class: 'remedies-title', text: 'Remedies'}));
      card.appendChild(el('ul', {class: 'remedies'}, span.remedies.map((r) => el('li', {}, withCode(r)))));
    }
    if (card.querySelectorAll('ul.evidence').length >= 4) break;  // the rest: the ranks section
  }
  return card;
}

function verificationCard(x) {
  return el('div', {class: `card verification ${x.result}`, id: 'verification'}, [
    el('div', {class: 'verdict-line'}, [el('span', {class: 'verdict-name', text: `verification: ${x.result}`})]),
    el('p', {}, [`remedy `, el('code', {text: (x.remedy || []).join(' ')}), ` (${x.why || ''}): step `,
      `${fmt(x.baseline_step_ms, 3)} \u2192 ${fmt(x.remedy_step_ms, 3)} ms, `,
      el('b', {text: `${fmt(x.measured_speedup)}x measured`}), ` vs ${fmt(x.predicted_speedup)}x predicted`]),
  ]);
}

function topTable(spans) {
  const box = el('div', {class: 'card', id: 'top'});
  box.appendChild(el('h2', {text: 'Top operators and kernels'}));
  for (const s of spans.slice(0, 4)) {
    const who = s.rank === null ? s.worker : `rank ${s.rank}`;
    box.appendChild(el('h3', {text: `${who}, span ${s.span} (${s.device})`}));
    box.appendChild(el('table', {class: 'top'}, [
      el('tr', {}, ['name', 'ms per step', 'calls per step', 'share of step'].map((h) => el('th', {text: h}))),
      ...s.top.map((op) => el('tr', {}, [el('td', {class: 'name', title: op.name, text: op.name}),
        el('td', {class: 'num', text: fmt(op.ms_per_step, 3)}), el('td', {class: 'num', text: fmt(op.count_per_step, 1)}),
        el('td', {class: 'num', text: pct(op.share_of_step_pct)})])),
    ]));
  }
  return box;
}

function windowForm(name) {
  const input = el('input', {id: 'steps', placeholder: 'A:B', size: 8});
  const out = el('div', {id: 'window-result'});
  const go = el('button', {id: 'window-go', text: 'Write as its own run', onclick: async () => {
    out.replaceChildren(el('span', {class: 'muted', text: 'writing\u2026'}));
    try {
      const r = await fetch('./window', {method: 'POST', headers: {'X-Stepscope-Token': WINDOW_TOKEN},
        body: new URLSearchParams({run: name, steps: input.value})});
      const w = await r.json();
      if (!r.ok) throw new Error(w.error);
      out.replaceChildren(el('p', {}, ['Written as the run ', el('b', {class: 'window-run', text: w.run}),
        w.in_logdir ? ': ' : el('span', {class: 'window-folder', text: ` in ${w.folder} (this TensorBoard's logdir is never written; `
          + 'serve that folder with tensorboard --logdir to list it there, or use stepscope tensorboard): '}),
        el('a', {href: tensorBoardHome() + '#pytorch_profiler', target: '_top', id: 'open-profiler',
          text: 'open it in the PyTorch Profiler tab'}),
        ' (pick the run there), or download for Perfetto: ',
        ...w.traces.map((t) => el('a', {class: 'perfetto', href: './trace?' + new URLSearchParams({run: w.run, i: t.i}),
          download: t.file.split('/').pop(), text: t.worker}))]),
      el('a', {href: '#', class: 'run-link', text: `its summary here`, onclick: (e) => {
        e.preventDefault();
        showRun(w.run);
      }}));
    } catch (err) {
      out.replaceChildren(el('p', {class: 'error', text: String(err.message || err)}));
    }
  }});
  return el('div', {class: 'card', id: 'window'}, [
    el('h2', {text: 'A window of steps'}),
    el('p', {class: 'muted', text: 'For a trace too large for the PyTorch Profiler tab: steps A:B (ProfilerStep#A to #B-1) '
      + 'are written as a small run of their own (beside this one under stepscope tensorboard; in your cache, never in the logdir, under a plain tensorboard).'}),
    el('p', {}, [input, ' ', go]), out]);
}

// ---------------------------------------------------------------- memory

const gib = (x) => (x === null || x === undefined ? 'n/a' : `${fixed(Number(x), 3)} GiB`);

// Each profiled step's peak allocated and reserved, against the device's capacity, on the step numbers of
// the time view (ProfilerStep#N; the window form's A:B).
function memorySteps(d) {
  const steps = d.steps.map((x) => x.step);
  const box = el('div', {class: 'chart', 'data-kind': 'memory-steps', 'data-points': String(steps.length)});
  box.appendChild(el('div', {class: 'chart-title',
    text: `cycle ${d.cycle}, ${d.device}: peak per step (GiB) vs capacity`}));
  const series = [{label: 'step', value: (u, v) => (v === null ? '' : `#${v}`)},
    {label: 'peak allocated', stroke: '#1565c0', width: 2, points: {show: true, size: 6}},
    {label: 'peak reserved', stroke: '#e65100', width: 2, points: {show: true, size: 6}}];
  const data = [steps, d.steps.map((x) => x.peak_allocated_gib), d.steps.map((x) => x.peak_reserved_gib)];
  if (d.capacity_gib) {
    series.push({label: 'capacity', stroke: '#c62828', dash: [6, 4], width: 1.5, points: {show: false}});
    data.push(steps.map(() => d.capacity_gib));
  }
  // eslint-disable-next-line no-new
  new uPlot({
    width: 560, height: 220,
    scales: {x: {time: false, range: (u, lo, hi) => [lo - 0.5, hi + 0.5]}, y: {range: (u, lo, hi) => [0, hi * 1.08 || 1]}},
    axes: [{label: 'ProfilerStep#', splits: () => steps, values: (u, sp) => sp.map((x) => `#${x}`)},
      {label: 'GiB', size: 60}],
    series, legend: {live: true},
  }, data, box);
  return box;
}

function memoryDevice(d) {
  const who = d.rank === null || d.rank === undefined ? d.worker : `rank ${d.rank}`;
  const sec = el('div', {class: 'mem-device', 'data-cycle': String(d.cycle), 'data-device': d.device,
    'data-worker': d.worker});
  sec.appendChild(el('h3', {text: `cycle ${d.cycle}: ${who}, ${d.device}`}));
  sec.appendChild(el('table', {class: 'mem-figures'}, [
    ['peak allocated', 'peak-allocated', gib(d.peak_allocated_gib)],
    ['peak reserved', 'peak-reserved', gib(d.peak_reserved_gib)],
    ['capacity', 'capacity', gib(d.capacity_gib)],
    ['headroom', 'headroom', `${gib(d.headroom_gib)} (${pct(d.headroom_pct)})`],
    ['fragmentation (reserved \u2212 allocated at the peak)', 'fragmentation',
      `${gib(d.fragmentation_gib)} (${pct(d.fragmentation_pct)} of reserved)`],
    ['creep', 'creep', d.creep_mib_per_step === null || d.creep_mib_per_step === undefined ? 'n/a'
      : `${fmt(d.creep_mib_per_step)} MiB per step`],
  ].map(([label, key, text]) => el('tr', {}, [el('td', {text: label}), el('td', {class: 'num', 'data-key': key, text})]))));
  if (d.steps.length) sec.appendChild(memorySteps(d));
  sec.appendChild(el('div', {class: 'chart-title', text: `at the peak (step #${d.peak_step}, in the ${d.peak_phase || 'n/a'})`}));
  sec.appendChild(el('table', {class: 'top mem-composition'}, [
    el('tr', {}, ['part', 'GiB'].map((h) => el('th', {text: h}))),
    ...Object.entries(d.composition_gib).map(([k, x]) => el('tr', {'data-part': k}, [el('td', {text: k}),
      el('td', {class: 'num', text: fmt(x, 4)})]))]));
  sec.appendChild(liveTable('mem-allocators', 'top allocator at the peak', d.top_allocators));
  if (d.top_modules) {  // only for a trace with module frames (with_stack)
    sec.appendChild(liveTable('mem-modules', 'top module at the peak', d.top_modules,
      [el('tr', {class: 'muted'}, [el('td', {text: '(outside any module)'}),
        el('td', {class: 'num', text: fmt(d.outside_modules_gib, 4)})])]));
  }
  return sec;
}

// a table of the bytes live at the peak by owner ({name, gib} rows), with any rows after them
function liveTable(cls, heading, rows, after = []) {
  return el('table', {class: `top ${cls}`}, [
    el('tr', {}, [heading, 'GiB live'].map((h) => el('th', {text: h}))),
    ...rows.map((a) => el('tr', {}, [el('td', {class: 'name', title: a.name, text: a.name}),
      el('td', {class: 'num', text: fmt(a.gib, 4)})])),
    ...after]);
}

function memoryCard(m) {
  const box = el('div', {class: 'card', id: 'memory'});
  box.appendChild(el('h2', {text: 'Memory'}));
  for (const o of m.oom) {
    box.appendChild(el('div', {class: 'oom', 'data-capture': o.capture}, [
      el('b', {text: `out of memory (${o.worker}): ${o.cause || 'cause unknown'}`}),
      el('div', {text: o.message || ''}),
      o.why ? el('div', {text: `why: ${o.why}`}) : null,
      o.live ? el('div', {text: `live: ${o.live}`}) : null,
      o.remedy ? el('div', {}, ['remedy: ', ...withCode(o.remedy)]) : null,
      el('div', {class: 'muted', text: `capture oom/${o.capture}: allocator snapshot ${o.snapshot ? 'saved' : 'absent'}`
        + `${o.snapshot ? (o.stacks ? ', with allocation stacks' : ', without allocation stacks') : ''}`}),
    ]));
  }
  if (m.findings.length) {
    box.appendChild(el('ul', {class: 'mem-findings'}, m.findings.map((f) => el('li', {'data-id': f.id}, [
      el('b', {text: f.id, title: findingLabel(f.id)}), ` (cycle ${f.cycle}): `, ...withCode(f.text)]))));
  }
  for (const d of m.devices.slice(0, 8)) box.appendChild(memoryDevice(d));
  if (m.creep.length) {
    box.appendChild(el('h3', {text: 'Across cycles'}));
    box.appendChild(el('table', {class: 'top mem-creep'}, [
      el('tr', {}, ['device', 'cycle', 'worker', 'peak allocated', 'allocated at the first step\u2019s start']
        .map((h) => el('th', {text: h}))),
      ...m.creep.flatMap((c) => c.cycles.map((x) => el('tr', {'data-device': c.device, 'data-cycle': String(x.cycle)}, [
        el('td', {text: c.device}), el('td', {class: 'num', text: String(x.cycle)}), el('td', {text: x.worker}),
        el('td', {class: 'num', text: gib(x.peak_allocated_gib)}), el('td', {class: 'num', text: gib(x.at_start_gib)})])))]));
  }
  const keys = Object.keys(m.measured || {});
  if (keys.length) {
    box.appendChild(el('div', {class: 'muted mem-measured', text: 'the run\u2019s own counters over its unprofiled steps: '
      + keys.map((k) => `${k} ${m.measured[k]}`).join(', ')}));
  }
  return box;
}

// ---------------------------------------------------------------- ranks

async function showRanks(name, holder) {
  let v;
  try {
    v = await getJSON('ranks', {run: name});
  } catch (err) {
    fail(holder, err);
    return;
  }
  holder.appendChild(el('h2', {text: 'Ranks'}));
  for (const job of v.jobs) {
    const section = el('div', {class: 'card job', 'data-cycle': String(job.cycle)});
    section.appendChild(el('h3', {}, [`cycle ${job.cycle}: ${job.world_size} ranks, median step ${fmt(job.median_step_ms)} ms, `,
      badge(job.verdict)]));
    const strag = job.stragglers.map((s) => s.rank);
    if (job.ranks.length > MAX_BARS) {
      section.appendChild(distribution('Each rank\u2019s work outside communication, sorted', job.ranks, strag));
    } else {
      const index = job.ranks.map((r) => r.rank);
      section.appendChild(stackedBars('Breakdown per rank (ms per step)', index.map((r) => `rank ${r}`), job.buckets,
        job.ranks.map((r) => r.breakdown_ms), {kind: 'ranks', xLabel: 'rank', marked: strag.map((r) => index.indexOf(r))}));
    }
    const list = el('ul', {class: 'stragglers'});
    for (const s of job.stragglers) {
      list.appendChild(el('li', {class: 'straggler', 'data-rank': String(s.rank)}, [
        el('b', {text: `rank ${s.rank} straggles`}), ` (${fmt(s.step_ms)} ms per step, ${s.verdict}): `, ...withCode(s.why),
        s.top_differing.length ? el('div', {class: 'muted', text: 'differing most: ' + s.top_differing.slice(0, 3)
          .map((t) => `${t.name} (${t.phase}) ${t.delta_ms >= 0 ? '+' : ''}${fmt(t.delta_ms)} ms`).join('; ')}) : null]));
    }
    if (!job.stragglers.length) list.appendChild(el('li', {class: 'muted', text: 'no straggler'}));
    section.appendChild(list);
    holder.appendChild(section);
  }
}

// ---------------------------------------------------------------- two runs

async function showDiff(a, b) {
  const p = page(`${a} vs ${b}`, true);
  let d;
  try {
    d = await getJSON('diff', {a, b});
  } catch (err) {
    fail(p, err);
    return;
  }
  p.appendChild(el('div', {class: `card diff ${d.significant ? 'changed' : 'same'}`, id: 'diff-summary'}, [
    el('div', {class: 'verdict-line', text: d.summary}),
    el('p', {class: 'muted', text: `per-step times: ${d.source === 'run.json' ? 'the runs\u2019 unprofiled timed steps' : 'the traced steps'}`}),
  ]));
  const side = (s) => el('td', {}, [el('div', {}, [el('b', {text: s.run}), ' ', badge(s.verdict)]),
    el('div', {class: 'num', text: `step ${fmt(s.step_ms)} ms (${fmt(s.profiled_step_ms)} profiled)`}),
    el('div', {class: 'num', text: `GPU busy ${pct(s.gpu_busy_pct)}`})]);
  p.appendChild(el('table', {class: 'sides'}, [el('tr', {}, [side(d.a), side(d.b)])]));
  const buckets = d.breakdown.map((r) => r.bucket);
  const rows = [Object.fromEntries(d.breakdown.map((r) => [r.bucket, r.a_ms])),
    Object.fromEntries(d.breakdown.map((r) => [r.bucket, r.b_ms]))];
  p.appendChild(stackedBars('Breakdown (unprofiled ms per step)', [d.a.run, d.b.run], buckets, rows, {kind: 'compare', xLabel: 'run'}));
  p.appendChild(el('div', {class: 'card', id: 'ops-changed'}, [el('h2', {text: 'Operators and kernels that changed most'}),
    el('table', {class: 'top'}, [
      el('tr', {}, ['name', `${d.a.run} ms`, `${d.b.run} ms`, 'change ms'].map((h) => el('th', {text: h}))),
      ...d.ops.map((o) => el('tr', {}, [el('td', {class: 'name', title: o.name, text: o.name}),
        el('td', {class: 'num', text: fmt(o.a_ms, 3)}), el('td', {class: 'num', text: fmt(o.b_ms, 3)}),
        el('td', {class: 'num', text: (o.delta_ms >= 0 ? '+' : '') + fmt(o.delta_ms, 3)})]))])]));
}

// ---------------------------------------------------------------- style

function addStyle() {
  document.head.appendChild(el('style', {text: `
    body { font: 14px/1.4 Roboto, Arial, sans-serif; color: #212121; margin: 16px 24px; background: #fafafa; }
    h1 { font-size: 20px; margin: 4px 0 12px; } h2 { font-size: 16px; margin: 6px 0; } h3 { font-size: 14px; margin: 10px 0 4px; }
    .head { display: flex; gap: 16px; align-items: baseline; }
    table { border-collapse: collapse; } th, td { padding: 3px 10px; text-align: left; vertical-align: middle; }
    th { border-bottom: 1px solid #bdbdbd; font-weight: 500; color: #616161; }
    table.runs tr.run:hover { background: #eef3fb; }
    .num { text-align: right; font-variant-numeric: tabular-nums; }
    .badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 500; color: #fff; background: #e65100; }
    .badge.good { background: #2e7d32; }
    .card { background: #fff; border: 1px solid #e0e0e0; border-radius: 6px; padding: 10px 14px; margin: 10px 0; }
    .verdict-name { font-size: 22px; font-weight: 600; }
    .verification.confirmed { border-left: 5px solid #2e7d32; } .verification.refuted { border-left: 5px solid #c62828; }
    .verification.inconclusive { border-left: 5px solid #f9a825; }
    .diff.changed { border-left: 5px solid #c62828; } .diff.same { border-left: 5px solid #2e7d32; }
    code { background: #f1f1f1; padding: 0 3px; border-radius: 3px; }
    td.name { max-width: 640px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; font-family: monospace; font-size: 12px; }
    .chart { background: #fff; border: 1px solid #e0e0e0; border-radius: 6px; padding: 8px; margin: 10px 0; display: inline-block; }
    .chart-title { font-weight: 500; margin-bottom: 4px; }
    .straggler b { color: #b71c1c; }
    .oom { border-left: 5px solid #c62828; padding: 4px 10px; margin: 6px 0; } .oom b { color: #b71c1c; }
    .u-legend { font-size: 11px; } .u-legend th { font-weight: 500; }
    .muted { color: #757575; } .error { color: #c62828; }
    a { color: #1565c0; }
  `}));
}
