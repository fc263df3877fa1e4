// Batch operations (POST /v1/batches): #/batches lists the tenant's batches,
// newest first; #/batches/<id> shows one's progress (how many instances
// succeeded, failed, were skipped, are pending) and each instance's outcome,
// refreshing itself every 1.5 s while it runs, with a Stop action.

import { get, post } from './api.js';
import { h, fill, badge, when, link, table, errorBox } from './dom.js';
import { confirmAction } from './app.js';

const REFRESH_MS = 1500;
const OUTCOMES = ['SUCCEEDED', 'FAILED', 'SKIPPED', 'PENDING'];

function progress(b) {
  return h('span', { class: 'batch-progress' }, OUTCOMES.filter(o => b.counts[o]).map(o =>
    h('span', { class: `count outcome-${o.toLowerCase()}`, dataset: { outcome: o } }, badge(o), ' ', h('span', { class: 'n' }, String(b.counts[o])))));
}

export async function batchesPage(page) {
  const r = await get('/v1/batches');
  fill(page, h('h1', {}, 'Batches'),
    h('p', { class: 'meta' }, 'Retries and cancellations of many instances, carried out by the server a few a second. Start one from the Instances page.'),
    r.batches.length === 0 ? h('p', { class: 'muted' }, 'No batch yet.')
      : table([
        { title: 'Batch', cell: b => link(`/batches/${encodeURIComponent(b.id)}`, h('code', {}, b.id)) },
        { title: 'Action', cell: b => b.action },
        { title: 'State', cell: b => badge(b.state) },
        { title: 'Instances', cell: b => String(b.total) },
        { title: 'Progress', cell: progress },
        { title: 'Created', cell: b => when(b.createdAt) },
        { title: 'Ended', cell: b => when(b.endedAt) },
      ], r.batches, { id: 'batches' }));
}

export async function batchPage(page, id) {
  const head = h('div', { id: 'batch-head' });
  const list = h('div', { id: 'batch-items' });
  const feedback = h('div', { id: 'batch-feedback' });
  fill(page, h('h1', {}, 'Batch ', h('code', {}, id)), head, feedback, list);
  let timer = null;
  let stopped = false;
  async function refresh() {
    const [b, items] = await Promise.all([
      get(`/v1/batches/${encodeURIComponent(id)}`),
      get(`/v1/batches/${encodeURIComponent(id)}/items?limit=1000`),
    ]);
    if (stopped) return;
    const stop = b.state === 'RUNNING' ? h('button', {
      id: 'stop-batch', type: 'button', onclick: async () => {
        if (!(await confirmAction('Stop this batch?', h('p', {}, 'The instances not yet done are skipped; those done stay done.')))) return;
        try { await post(`/v1/batches/${encodeURIComponent(id)}/cancel`); } catch (e) { fill(feedback, errorBox(e)); }
        refresh().catch(() => {});
      },
    }, 'Stop') : null;
    fill(head, h('p', { class: 'meta' }, `${b.action} of ${b.total} instance(s)`,
      b.params && b.params.mode ? ` (${b.params.mode})` : '', ' · started ', when(b.createdAt), b.endedAt ? [' · ended ', when(b.endedAt)] : ''),
    h('div', { class: 'counts' }, badge(b.state), ' ', progress(b), ' ', stop));
    fill(list, table([
      { title: '#', cell: i => String(i.seq) },
      { title: 'Instance', cell: i => link(`/instances/${encodeURIComponent(i.instance)}`, h('code', {}, i.instance)) },
      { title: 'Outcome', cell: i => badge(i.state) },
      { title: 'Code', cell: i => (i.code ? h('code', { class: 'error-code' }, i.code) : '') },
      { title: 'Message', cell: i => i.message || '' },
      { title: 'Result', cell: i => (i.result && b.action === 'retry' ? link(`/instances/${encodeURIComponent(i.result)}`, h('code', {}, i.result)) : (i.result || '')) },
      { title: 'Done', cell: i => when(i.endedAt) },
    ], items.items, { id: 'batch-item-list' }));
    clearTimeout(timer);
    if (b.state === 'RUNNING') timer = setTimeout(() => refresh().catch(() => {}), REFRESH_MS);
  }
  await refresh();
  return () => { stopped = true; clearTimeout(timer); };
}
