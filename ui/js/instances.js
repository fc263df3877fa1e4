// Instances: counts per state, filters (state, process, started since / until),
// keyset paging ("Next page" follows the API's `next`).

import { get, query } from './api.js';
import { h, fill, badge, when, link, section, table } from './dom.js';

const STATES = ['RUNNING', 'WAITING', 'COMPLETED', 'FAILED', 'TERMINATED', 'COMPENSATED'];

export async function instancesPage(page, params) {
  const state = params.get('state') || '';
  const process = params.get('process') || '';
  const since = params.get('since') || '';
  const until = params.get('until') || '';
  const pages = [params.get('after') || ''];

  const counts = h('div', { id: 'counts', class: 'counts' });
  const list = h('div', { id: 'instance-list' });
  const stateSel = h('select', { id: 'filter-state' }, h('option', { value: '' }, 'any state'),
    STATES.map(s => h('option', { value: s, selected: s === state }, s)));
  const processIn = h('input', { id: 'filter-process', value: process, placeholder: 'process id' });
  const local = v => (v ? v.replace(/Z$/, '').slice(0, 19) : '');
  const utc = v => (v ? `${v.length === 16 ? `${v}:00` : v}Z` : '');
  const sinceIn = h('input', { id: 'filter-since', type: 'datetime-local', step: '1', value: local(since) });
  const untilIn = h('input', { id: 'filter-until', type: 'datetime-local', step: '1', value: local(until) });
  const form = h('form', { class: 'filters', id: 'filters' },
    h('label', {}, 'State ', stateSel), h('label', {}, 'Process ', processIn),
    h('label', {}, 'Started since ', sinceIn), h('label', {}, 'until (UTC) ', untilIn), h('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    location.hash = `#/instances${query({ state: stateSel.value, process: processIn.value.trim(), since: utc(sinceIn.value), until: utc(untilIn.value) })}`;
  });
  fill(page, h('h1', {}, 'Instances'), counts, form, list);

  const c = await get(`/v1/instances/counts${query({ process, since, until })}`);
  const span = [since ? ` since ${when(since)}` : '', until ? ` until ${when(until)}` : ''].join('');
  fill(counts, h('span', { class: 'muted', id: 'counts-total' }, `${c.total} instance(s)${process ? ` of ${process}` : ''}${span}: `),
    STATES.map(s => h('a', {
      class: `count ${s === state ? 'active' : ''}`, dataset: { state: s },
      href: `#/instances${query({ state: s === state ? '' : s, process, since, until })}`,
    }, badge(s), ' ', h('span', { class: 'n' }, String(c.counts[s] || 0)))));

  async function show() {
    const after = pages[pages.length - 1];
    const r = await get(`/v1/instances${query({ state, process, since, until, after, limit: 25 })}`);
    const cols = [
      { title: 'Instance', cell: i => link(`/instances/${encodeURIComponent(i.id)}`, h('code', {}, i.id)) },
      { title: 'Process', cell: i => i.process },
      { title: 'State', cell: i => badge(i.state) },
      { title: 'Started', cell: i => when(i.startedAt) },
      { title: 'Ended', cell: i => when(i.endedAt) },
      { title: 'Retry of', cell: i => (i.retryOf ? link(`/instances/${encodeURIComponent(i.retryOf)}`, h('code', {}, i.retryOf)) : '') },
    ];
    cols.rowAttrs = i => ({ dataset: { instance: i.id, state: i.state } });
    const prev = pages.length > 1 ? h('button', { type: 'button', id: 'prev-page', onclick: () => { pages.pop(); show(); } }, '← Previous') : null;
    const next = r.next ? h('button', { type: 'button', id: 'next-page', onclick: () => { pages.push(r.next); show(); } }, 'Next page →') : null;
    fill(list, r.instances.length === 0 ? h('p', { class: 'muted' }, 'No instance matches.') : table(cols, r.instances, { id: 'instances' }),
      h('div', { class: 'pager' }, prev, next));
  }
  await show();
  return null;
}
