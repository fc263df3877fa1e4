// Deployments: every version of every process (ACTIVE / DRAINING / RETIRED),
// and one deployment with its modules and its diagram.

import { get, api } from './api.js';
import { h, fill, badge, when, bytes, link, section, table, errorBox } from './dom.js';
import { Diagram } from './diagram.js';
import { confirmAction } from './app.js';

export async function deploymentsPage(page) {
  const { deployments } = await get('/v1/deployments');
  const byProcess = new Map();
  for (const d of deployments) {
    if (!byProcess.has(d.process)) byProcess.set(d.process, []);
    byProcess.get(d.process).push(d);
  }
  const cols = [
    { title: 'Process', cell: d => link(`/deployments/${encodeURIComponent(d.id)}`, d.process) },
    { title: 'Version', cell: d => `v${d.version}` },
    { title: 'State', cell: d => badge(d.state) },
    { title: 'Dialect', cell: d => d.dialect },
    { title: 'Modules', cell: d => Object.keys(d.modules).join(', ') || '—' },
    { title: 'Deployed', cell: d => when(d.createdAt) },
    { title: '', cell: d => link(`/instances?process=${encodeURIComponent(d.process)}`, 'instances') },
  ];
  cols.rowAttrs = d => ({ dataset: { deployment: d.id, process: d.process } });
  const rows = [...byProcess.values()].flatMap(v => v.sort((a, b) => b.version - a.version));
  fill(page,
    h('h1', {}, 'Deployments'),
    rows.length === 0
      ? h('p', { class: 'muted' }, 'Nothing deployed yet: `sutra deploy <definition> --task name=file.wasm` or POST /v1/deployments.')
      : table(cols, rows, { id: 'deployments' }));
  return null;
}

export async function deploymentPage(page, id) {
  const [d, { modules }, sched] = await Promise.all([
    get(`/v1/deployments/${encodeURIComponent(id)}`),
    get(`/v1/deployments/${encodeURIComponent(id)}/modules`),
    get(`/v1/deployments/${encodeURIComponent(id)}/schedules`).catch(() => ({ schedules: [], events: [] })),
  ]);
  const canvas = h('div', { id: 'diagram', class: 'diagram' });
  const note = h('p', { class: 'muted', id: 'diagram-note' });
  const actions = h('div', { class: 'actions' });
  if (d.state === 'ACTIVE') {
    actions.append(h('button', {
      id: 'undeploy', type: 'button', onclick: async () => {
        if (!await confirmAction(`Undeploy ${d.process} v${d.version}?`,
          h('p', {}, 'No new instances start on it; it retires once its instances have ended.'))) return;
        try { await api('DELETE', `/v1/deployments/${encodeURIComponent(id)}`); location.reload(); }
        catch (e) { actions.append(errorBox(e)); }
      },
    }, 'Undeploy'));
  }
  fill(page,
    h('h1', {}, d.process, ' ', h('span', { class: 'muted' }, `v${d.version}`), ' ', badge(d.state)),
    h('p', { class: 'meta' }, `${d.dialect} · deployed ${when(d.createdAt)} · `, h('code', {}, d.id), ' · ',
      link(`/instances?process=${encodeURIComponent(d.process)}`, 'its instances')),
    actions,
    section('Diagram', canvas, note),
    section('Modules', modules.length === 0 ? h('p', { class: 'muted' }, 'No task modules.') :
      table([
        { title: 'Task', cell: m => m.name },
        { title: 'Digest (sha256)', cell: m => h('code', {}, m.digest) },
        { title: 'Size', cell: m => bytes(m.bytes) },
      ], modules, { id: 'modules' })),
    section('Schedules', schedules(sched)),
    section('Definition', h('details', {}, h('summary', {}, 'Source'), h('pre', { class: 'source' }, d.source || ''))));
  const diagram = new Diagram(canvas);
  try {
    const source = await diagram.load(id, d.process);
    fill(note, source === 'original' ? 'Drawn as in the deployed file.' : 'Exported from the process model and laid out automatically.',
      ' Badges: instances active at a node, failed at it, that completed it, and its open incidents.');
    const stats = await get(`/v1/deployments/${encodeURIComponent(id)}/statistics`);
    diagram.showStatistics(stats);
  } catch (e) {
    canvas.append(errorBox(e));
  }
  return () => diagram.destroy();
}

// A deployment's timer start events: each schedule's state, next fire and
// counts, then its journal (fires and refusals), newest first.
function schedules({ schedules: list, events }) {
  if (list.length === 0) return h('p', { class: 'muted', id: 'no-schedules' }, 'No timer start event: instances start only when asked.');
  const cols = [
    { title: 'Start event', cell: s => s.startNode },
    { title: 'State', cell: s => badge(s.state) },
    { title: 'Next fire', cell: s => when(s.nextDue) },
    { title: 'Fires', cell: s => String(s.fires) },
    { title: 'Skipped', cell: s => String(s.skipped) },
    { title: 'Refused', cell: s => String(s.refused) },
    { title: 'Armed', cell: s => when(s.armedAt) },
  ];
  cols.rowAttrs = s => ({ dataset: { start: s.startNode, state: s.state } });
  const journal = events.slice().reverse();
  return [table(cols, list, { id: 'schedules' }),
    journal.length === 0 ? h('p', { class: 'muted' }, 'It has not fired yet.') : h('details', { id: 'schedule-journal' },
      h('summary', {}, `Journal: ${journal.length} event(s)`),
      table([
        { title: 'At', cell: e => when(e.at) },
        { title: 'Outcome', cell: e => h('span', { class: `outcome-${e.outcome}` }, e.outcome) },
        { title: 'Instance', cell: e => (e.instance ? link(`/instances/${encodeURIComponent(e.instance)}`, h('code', {}, e.instance)) : '') },
        { title: 'Skipped', cell: e => String(e.skipped) },
        { title: 'Code', cell: e => (e.code ? h('code', {}, e.code) : '') },
        { title: 'Message', cell: e => e.message || '' },
      ], journal))];
}
