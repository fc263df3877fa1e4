// Instances: counts per state, filters (state, process, started since /
// until, business key, one variable as NAME=VALUE), newest or oldest first,
// a page size, keyset paging ("Next page" follows the API's `next`). Every
// choice and the page are in the URL
// (#/instances?state=&process=&since=&until=&key=&var=&order=&limit=&after=),
// so Back and reload keep them. Instances ticked in the list, or every
// instance the filters select, are retried or cancelled as one batch
// operation on the server (POST /v1/batches; its page shows the progress). Each row says what failed (its code and node) and
// its open incidents. The counts and the page refresh themselves every 5 s.

import { get, post, query } from './api.js';
import { h, fill, badge, when, link, table, errorBox } from './dom.js';
import { confirmAction } from './app.js';

const STATES = ['RUNNING', 'WAITING', 'COMPLETED', 'FAILED', 'TERMINATED', 'COMPENSATED'];
const SIZES = [10, 25, 50, 100, 200];
const REFRESH_MS = 5000;

// A query string and more `&k=v` parameters as one query string.
const joined = (q, more) => (more ? (q ? `${q}${more}` : `?${more.slice(1)}`) : q);

export async function instancesPage(page, params) {
  const state = params.get('state') || '';
  const process = params.get('process') || '';
  const since = params.get('since') || '';
  const until = params.get('until') || '';
  const order = params.get('order') === 'oldest' ? 'oldest' : 'newest';
  const limit = SIZES.includes(Number(params.get('limit'))) ? Number(params.get('limit')) : 25;
  const after = params.get('after') || '';
  const key = params.get('key') || '';
  const variable = params.get('var') || '';
  const here = (changes) => `#/instances${query({ state, process, since, until, key, var: variable, order, limit, ...changes })}`;
  // The API's own spelling of the search: businessKey= and var.NAME=VALUE.
  const eq = variable.indexOf('=');
  const search = `${key ? `&businessKey=${encodeURIComponent(key)}` : ''}${eq > 0
    ? `&var.${encodeURIComponent(variable.slice(0, eq))}=${encodeURIComponent(variable.slice(eq + 1))}` : ''}`;

  const counts = h('div', { id: 'counts', class: 'counts' });
  const list = h('div', { id: 'instance-list' });
  const stateSel = h('select', { id: 'filter-state' }, h('option', { value: '' }, 'any state'),
    STATES.map(s => h('option', { value: s, selected: s === state }, s)));
  const processIn = h('input', { id: 'filter-process', value: process, placeholder: 'process id' });
  const keyIn = h('input', { id: 'filter-key', value: key, placeholder: 'business key' });
  const varIn = h('input', { id: 'filter-var', value: variable, placeholder: 'name=value', title: 'a top-level variable: a string as itself, a number or true/false' });
  const local = v => (v ? v.replace(/Z$/, '').slice(0, 19) : '');
  const utc = v => (v ? `${v.length === 16 ? `${v}:00` : v}Z` : '');
  const sinceIn = h('input', { id: 'filter-since', type: 'datetime-local', step: '1', value: local(since) });
  const untilIn = h('input', { id: 'filter-until', type: 'datetime-local', step: '1', value: local(until) });
  const orderSel = h('select', { id: 'sort-order' },
    [['newest', 'newest first'], ['oldest', 'oldest first']].map(([v, t]) => h('option', { value: v, selected: v === order }, t)));
  const sizeSel = h('select', { id: 'page-size' }, SIZES.map(n => h('option', { value: String(n), selected: n === limit }, `${n} a page`)));
  const form = h('form', { class: 'filters', id: 'filters' },
    h('label', {}, 'State ', stateSel), h('label', {}, 'Process ', processIn),
    h('label', {}, 'Business key ', keyIn), h('label', {}, 'Variable ', varIn),
    h('label', {}, 'Started since ', sinceIn), h('label', {}, 'until (UTC) ', untilIn),
    h('label', {}, 'Sort ', orderSel), h('label', {}, 'Show ', sizeSel), h('button', { type: 'submit' }, 'Filter'));
  const apply = () => {
    location.hash = `#/instances${query({ state: stateSel.value, process: processIn.value.trim(), since: utc(sinceIn.value), until: utc(untilIn.value), key: keyIn.value.trim(), var: varIn.value.trim(), order: orderSel.value, limit: sizeSel.value })}`;
  };
  form.addEventListener('submit', (e) => { e.preventDefault(); apply(); });
  orderSel.addEventListener('change', apply);
  sizeSel.addEventListener('change', apply);
  // Bulk actions: over the ticked instances, or over the filter's selection.
  const picked = new Set();
  const pickedN = h('span', { id: 'picked-count', class: 'muted' }, 'none ticked');
  const feedback = h('div', { id: 'batch-feedback' });
  const filter = {
    state: state || undefined, process: process || undefined, since: since || undefined, until: until || undefined,
    businessKey: key || undefined,
    // As text, as the listing's var. filter compares it (a number's text matches the number).
    variables: eq > 0 ? { [variable.slice(0, eq)]: variable.slice(eq + 1) } : {},
  };
  const bulk = async (action, selection) => {
    const what = selection.instances ? `${selection.instances.length} ticked instance(s)` : 'every instance the filters select';
    const mode = h('select', { id: 'batch-mode' }, h('option', { value: 'full' }, 'from the start'), h('option', { value: 'from-failure' }, 'from the failure'));
    const extra = action === 'retry' ? [h('label', {}, 'Retry ', mode)] : [];
    if (!(await confirmAction(`${action === 'retry' ? 'Retry' : 'Cancel'} ${what}?`,
      h('p', {}, 'The server carries this out as one batch, a few instances a second; its page shows each instance\u2019s outcome.'), ...extra))) return;
    try {
      const b = await post('/v1/batches', { action, ...selection, ...(action === 'retry' ? { mode: mode.value } : {}) });
      location.hash = `#/batches/${encodeURIComponent(b.id)}`;
    } catch (e) {
      fill(feedback, errorBox(e));
    }
  };
  const needPick = (f) => () => (picked.size === 0 ? fill(feedback, errorBox({ message: 'tick some instances first' })) : f());
  const bar = h('div', { class: 'bulk', id: 'bulk' }, pickedN,
    h('button', { id: 'retry-picked', type: 'button', onclick: needPick(() => bulk('retry', { instances: [...picked] })) }, 'Retry ticked'),
    h('button', { id: 'cancel-picked', type: 'button', onclick: needPick(() => bulk('cancel', { instances: [...picked] })) }, 'Cancel ticked'),
    h('span', { class: 'muted' }, ' · '),
    h('button', { id: 'retry-matching', type: 'button', onclick: () => bulk('retry', { filter }) }, 'Retry all matching'),
    h('button', { id: 'cancel-matching', type: 'button', onclick: () => bulk('cancel', { filter }) }, 'Cancel all matching'),
    h('a', { href: '#/batches', class: 'batches-link' }, 'Batches'));
  const showPicked = () => fill(pickedN, picked.size ? `${picked.size} ticked` : 'none ticked');
  fill(page, h('h1', {}, 'Instances'), counts, form, bar, feedback, list);

  let timer = null;
  let stopped = false;

  async function refresh() {
    const [c, r, inc] = await Promise.all([
      get(`/v1/instances/counts${query({ process, since, until })}`),
      get(`/v1/instances${joined(query({ state, process, since, until, after, limit, order }), search)}`),
      get(`/v1/incidents${query({ state: 'OPEN', limit: 500 })}`).catch(() => ({ incidents: [] })),
    ]);
    if (stopped) return;
    const span = [since ? ` since ${when(since)}` : '', until ? ` until ${when(until)}` : ''].join('');
    fill(counts, h('span', { class: 'muted', id: 'counts-total' }, `${c.total} instance(s)${process ? ` of ${process}` : ''}${span}: `),
      STATES.map(s => h('a', {
        class: `count ${s === state ? 'active' : ''}`, dataset: { state: s },
        href: here({ state: s === state ? '' : s }),
      }, badge(s), ' ', h('span', { class: 'n' }, String(c.counts[s] || 0)),
        s === 'FAILED' && c.retried ? h('span', { class: 'retried muted', title: 'retried: a retry took these over; the rest still need attention' }, ` (${c.retried} retried)`) : null)));
    const open = new Map();
    for (const i of inc.incidents) open.set(i.instance, (open.get(i.instance) || 0) + 1);
    const cols = [
      { title: '', cell: i => h('input', { type: 'checkbox', class: 'pick', 'aria-label': `tick ${i.id}`, checked: picked.has(i.id),
        dataset: { instance: i.id }, onchange: (e) => { if (e.target.checked) picked.add(i.id); else picked.delete(i.id); showPicked(); } }) },
      { title: 'Instance', cell: i => link(`/instances/${encodeURIComponent(i.id)}`, h('code', {}, i.id)) },
      { title: 'Process', cell: i => i.process },
      { title: 'Business key', cell: i => i.businessKey || '' },
      { title: 'State', cell: i => badge(i.state) },
      { title: 'Error', cell: i => (i.errorCode ? [h('code', { class: 'error-code' }, i.errorCode),
        i.causeCode ? h('div', { class: 'cause-code muted' }, 'cause ', h('code', {}, i.causeCode)) : null] : '') },
      { title: 'Failed at', cell: i => i.failedNode || '' },
      { title: 'Incidents', cell: i => (open.get(i.id) ? h('span', { class: 'badge state-open incidents' }, `${open.get(i.id)} open`) : '') },
      { title: 'Started', cell: i => when(i.startedAt) },
      { title: 'Ended', cell: i => when(i.endedAt) },
      { title: 'Retry of', cell: i => (i.retryOf ? link(`/instances/${encodeURIComponent(i.retryOf)}`, h('code', {}, i.retryOf)) : '') },
    ];
    cols.rowAttrs = i => ({ dataset: { instance: i.id, state: i.state } });
    const first = after ? h('a', { id: 'first-page', href: here({}) }, '← First page') : null;
    const next = r.next ? h('a', { id: 'next-page', href: here({ after: r.next }) }, 'Next page →') : null;
    fill(list, r.instances.length === 0 ? h('p', { class: 'muted' }, 'No instance matches.') : table(cols, r.instances, { id: 'instances' }),
      h('div', { class: 'pager' }, first, next));
    clearTimeout(timer);
    timer = setTimeout(() => refresh().catch(() => {}), REFRESH_MS);
  }
  await refresh();
  return () => { stopped = true; clearTimeout(timer); };
}
