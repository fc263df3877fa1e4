// Incidents across every instance of the tenant: the open ones grouped by
// process, kind, task, channel and message (how many of each; the groups of
// one process together, the process with most incidents first, its name a
// link to its instances), then each incident
// with its instance and a Resolve action (asks first). The state filter and
// the page are in the URL (#/incidents?state=OPEN&after=...), so Back and
// reload keep them; the page refreshes itself every 5 s.

import { get, post, query } from './api.js';
import { h, fill, badge, when, link, table, errorBox } from './dom.js';
import { confirmAction } from './app.js';

const REFRESH_MS = 5000;
const PAGE = 100;

export async function incidentsPage(page, params) {
  const state = params.has('state') ? params.get('state') : 'OPEN';
  const after = params.get('after') || '';
  const groups = h('div', { id: 'incident-groups' });
  const list = h('div', { id: 'incident-list' });
  const feedback = h('div', { id: 'incidents-feedback' });
  const stateSel = h('select', { id: 'incident-state' },
    [['OPEN', 'open'], ['RESOLVED', 'resolved'], ['any', 'any state']].map(([v, t]) => h('option', { value: v, selected: v === state }, t)));
  stateSel.addEventListener('change', () => { location.hash = `#/incidents${query({ state: stateSel.value })}`; });
  fill(page, h('h1', {}, 'Incidents'),
    h('p', { class: 'meta' }, 'A delivery that kept failing or an external task whose worker gave up stops its task until an operator resolves the incident.'),
    h('div', { class: 'filters' }, h('label', {}, 'State ', stateSel)), feedback, groups, list);

  let timer = null;
  let stopped = false;

  async function refresh() {
    const filter = state === 'any' ? '' : state;
    const r = await get(`/v1/incidents${query({ state: filter, after, limit: PAGE })}`);
    if (stopped) return;
    // Newest first: the API pages oldest first, so each page is reversed.
    const incidents = r.incidents.slice().reverse();
    const byGroup = new Map();
    for (const i of incidents) {
      const key = JSON.stringify([i.process || '', i.kind, i.task, i.channel, i.message]);
      const g = byGroup.get(key) || { process: i.process || '', kind: i.kind, task: i.task, channel: i.channel, message: i.message, n: 0, open: 0, latest: i.createdAt };
      g.n += 1;
      if (i.state === 'OPEN') g.open += 1;
      if (i.createdAt > g.latest) g.latest = i.createdAt;
      byGroup.set(key, g);
    }
    const perProcess = new Map();
    for (const g of byGroup.values()) perProcess.set(g.process, (perProcess.get(g.process) || 0) + g.n);
    const rows = [...byGroup.values()].sort((a, b) => (perProcess.get(b.process) - perProcess.get(a.process))
      || (a.process < b.process ? -1 : a.process > b.process ? 1 : 0)
      || b.n - a.n || (a.latest < b.latest ? 1 : -1));
    rows.rowAttrs = g => ({ dataset: { process: g.process } });
    const processCell = p => (p ? link(`/instances${query({ process: p })}`, h('code', {}, p)) : h('span', { class: 'muted' }, '(instance gone)'));
    fill(groups, rows.length === 0 ? h('p', { class: 'muted', id: 'no-incidents' }, state === 'OPEN' ? 'No open incident.' : 'No incident matches.')
      : h('section', { class: 'card' }, h('h2', {}, `${incidents.length} incident(s) of ${perProcess.size} process(es) in ${rows.length} group(s)${r.next ? ' on this page' : ''}`),
        table(Object.assign([
          { title: 'Process', cell: g => processCell(g.process) },
          { title: 'Count', cell: g => h('span', { class: 'n' }, String(g.n)) },
          { title: 'Kind', cell: g => g.kind.replace(/_/g, ' ') },
          { title: 'Task', cell: g => g.task },
          { title: 'Channel', cell: g => h('code', {}, g.channel) },
          { title: 'Message', cell: g => h('span', { class: 'message' }, g.message) },
          { title: 'Latest', cell: g => when(g.latest) },
        ], { rowAttrs: rows.rowAttrs }), rows, { id: 'incident-groups-table' })));
    const cols = [
      { title: 'Incident', cell: i => h('code', {}, i.id) },
      { title: 'State', cell: i => badge(i.state) },
      { title: 'Instance', cell: i => link(`/instances/${encodeURIComponent(i.instance)}`, h('code', {}, i.instance)) },
      { title: 'Process', cell: i => processCell(i.process) },
      { title: 'Task', cell: i => i.task },
      { title: 'Kind', cell: i => i.kind.replace(/_/g, ' ') },
      { title: 'Message', cell: i => h('span', { class: 'message' }, i.message) },
      { title: 'Opened', cell: i => when(i.createdAt) },
      { title: '', cell: i => (i.state === 'OPEN' ? h('button', { type: 'button', class: 'resolve', onclick: () => resolve(i) }, 'Resolve') : '') },
    ];
    cols.rowAttrs = i => ({ dataset: { incident: i.id, state: i.state, instance: i.instance } });
    const next = r.next ? h('a', { id: 'next-page', href: `#/incidents${query({ state, after: r.next })}` }, 'Next page →') : null;
    const first = after ? h('a', { id: 'first-page', href: `#/incidents${query({ state })}` }, '← First page') : null;
    fill(list, incidents.length ? table(cols, incidents, { id: 'incidents-table' }) : null, h('div', { class: 'pager' }, first, next));
    clearTimeout(timer);
    timer = setTimeout(() => refresh().catch(e => fill(feedback, errorBox(e))), REFRESH_MS);
  }

  async function resolve(i) {
    if (!await confirmAction(`Resolve incident ${i.id}?`, h('p', {}, `Its ${i.kind.replace(/_/g, ' ')} request (task ${i.task} of ${i.instance}) is tried again.`))) return;
    try {
      const r = await post(`/v1/incidents/${encodeURIComponent(i.id)}/resolve`);
      fill(feedback, h('p', { class: 'muted', id: 'resolve-outcome', dataset: { outcome: r.outcome } },
        r.outcome === 'rearmed' ? `Incident ${i.id} resolved: its request is pending again.` : `Incident ${i.id} resolved: its call no longer waits.`));
    } catch (e) {
      fill(feedback, errorBox(e));
    }
    await refresh();
  }

  await refresh();
  return () => { stopped = true; clearTimeout(timer); };
}
