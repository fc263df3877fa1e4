// An instance's timeline: one row per task, its attempts as bars on one time
// axis (coloured by outcome), the backoff between two attempts as a dashed
// line, and what the instance waits for now as a marker at its due time.
// Drawn as SVG geometry (x, width attributes), never inline styles (CSP).

import { h, when } from './dom.js';

const SVG = 'http://www.w3.org/2000/svg';
const ROW = 22;
const LEFT = 160;
const WIDTH = 900;

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** The timeline of `view` (GET /v1/instances/{id}) and its `attempts` (…/attempts). */
export function timeline(view, attempts, label) {
  const runs = attempts.filter(a => a.outcome !== 'worker_failed');
  if (runs.length === 0) return h('p', { class: 'muted' }, 'No attempts yet.');
  const t = iso => new Date(iso).getTime();
  const start = t(view.startedAt);
  const dues = (view.waits || []).filter(w => w.due).map(w => t(w.due));
  const end = Math.max(view.endedAt ? t(view.endedAt) : 0, ...runs.map(a => t(a.endedAt)), ...dues, start + 1);
  const x = ms => LEFT + ((ms - start) / (end - start)) * (WIDTH - LEFT - 10);
  const tasks = [...new Set(runs.map(a => a.task))];
  const height = ROW * (tasks.length + 1) + 10;
  const svg = s('svg', { id: 'timeline-svg', class: 'timeline-svg', viewBox: `0 0 ${WIDTH} ${height}`, width: WIDTH, height, role: 'img', 'aria-label': 'attempts on a time axis' });
  svg.append(s('line', { class: 'axis', x1: LEFT, x2: WIDTH - 10, y1: height - 14, y2: height - 14 }));
  svg.append(s('text', { class: 'tick', x: LEFT, y: height - 2 }, when(view.startedAt)));
  svg.append(s('text', { class: 'tick', x: WIDTH - 10, y: height - 2, 'text-anchor': 'end' }, when(new Date(end).toISOString())));
  tasks.forEach((task, row) => {
    const y = 6 + row * ROW;
    svg.append(s('text', { class: 'task', x: 4, y: y + 13 }, label(task)));
    const mine = runs.filter(a => a.task === task).sort((a, b) => t(a.startedAt) - t(b.startedAt));
    mine.forEach((a, i) => {
      if (i > 0) {
        const prev = mine[i - 1];
        svg.append(s('line', { class: 'backoff', x1: x(t(prev.endedAt)), x2: x(t(a.startedAt)), y1: y + 8, y2: y + 8 },
          s('title', {}, `backoff before attempt #${a.attempt}: ${when(prev.endedAt)} → ${when(a.startedAt)}`)));
      }
      const x0 = x(t(a.startedAt));
      const w = Math.max(3, x(t(a.endedAt)) - x0);
      svg.append(s('rect', { class: `attempt outcome-${a.outcome}`, x: x0, y, width: w, height: 16, rx: 2, 'data-attempt': a.attempt, 'data-task': task },
        s('title', {}, `${task} attempt #${a.attempt}: ${a.outcome}${a.code ? ` ${a.code}` : ''} · ${when(a.startedAt)} → ${when(a.endedAt)}`)));
    });
  });
  for (const w of (view.waits || []).filter(w => w.due)) {
    const row = tasks.indexOf(w.node);
    const y = 6 + (row < 0 ? tasks.length : row) * ROW;
    svg.append(s('circle', { class: `due due-${w.kind}`, cx: x(t(w.due)), cy: y + 8, r: 5, 'data-kind': w.kind },
      s('title', {}, `${w.kind} at ${w.node} due ${when(w.due)}`)));
  }
  return svg;
}
