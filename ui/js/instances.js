// Instances: counts per state, filters (state, process, started since /
// until, business key, one variable as NAME=VALUE, the error code, the
// failed node), newest or oldest first, a page size, keyset paging ("Next
// page" follows the API's `next`). Every choice and the page are in the URL
// (#/instances?state=&process=&since=&until=&key=&var=&code=&node=&order=&limit=&after=),
// so Back and reload keep them. Instances ticked in the list, or every
// instance the filters select, are retried, cancelled, have their open
// incidents resolved or are migrated to another deployment of their process
// as one batch operation on the server (POST /v1/batches; its page shows the
// progress). Each row says what failed (its code and node: a click filters
// on it; the node by its name, its id as the tooltip) and its open
// incidents. The counts and the page refresh themselves every 5 s.

import { get, post, query } from './api.js';
import { h, fill, badge, when, link, table, errorBox } from './dom.js';
import { confirmAction } from './app.js';

const STATES = ['RUNNING', 'WAITING', 'COMPLETED', 'FAILED', 'TERMINATED', 'COMPENSATED'];
const SIZES = [10, 25, 50, 100, 200];
const REFRESH_MS = 5000;

// The node names of each deployment (IR node id → its name), read once from
// the diagram the instance page draws (GET /v1/deployments/{id}/diagram: an
// exported element carries its IR id in `sutra:node`, an original BPMN
// element is its node id). A deployment never changes, so they are kept.
const NAMES = new Map();
function nodeNames(deployment) {
  if (!NAMES.has(deployment)) {
    NAMES.set(deployment, get(`/v1/deployments/${encodeURIComponent(deployment)}/diagram`).then((xml) => {
      const names = new Map();
      const doc = new DOMParser().parseFromString(String(xml), 'application/xml');
      for (const el of doc.getElementsByTagName('*')) {
        const name = el.getAttribute('name');
        if (!name || el.localName === 'message' || el.localName === 'signal' || el.localName === 'error') continue;
        const node = el.getAttribute('sutra:node') || el.getAttribute('id');
        if (node && !names.has(node)) names.set(node, name);
      }
      return names;
    }).catch(() => { NAMES.delete(deployment); return new Map(); }));
  }
  return NAMES.get(deployment);
}

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
  const code = params.get('code') || '';
  const node = params.get('node') || '';
  const here = (changes) => `#/instances${query({ state, process, since, until, key, var: variable, code, node, order, limit, ...changes })}`;
  // The API's own spelling of the search: businessKey= and var.NAME=VALUE.
  const eq = variable.indexOf('=');
  const search = `${key ? `&businessKey=${encodeURIComponent(key)}` : ''}${code ? `&errorCode=${encodeURIComponent(code)}` : ''}${node ? `&failedNode=${encodeURIComponent(node)}` : ''}${eq > 0
    ? `&var.${encodeURIComponent(variable.slice(0, eq))}=${encodeURIComponent(variable.slice(eq + 1))}` : ''}`;

  const counts = h('div', { id: 'counts', class: 'counts' });
  const list = h('div', { id: 'instance-list' });
  const stateSel = h('select', { id: 'filter-state' }, h('option', { value: '' }, 'any state'),
    STATES.map(s => h('option', { value: s, selected: s === state }, s)));
  const processIn = h('input', { id: 'filter-process', value: process, placeholder: 'process id' });
  const keyIn = h('input', { id: 'filter-key', value: key, placeholder: 'business key' });
  const varIn = h('input', { id: 'filter-var', value: variable, placeholder: 'name=value', title: 'a top-level variable: a string as itself, a number or true/false' });
  const codeIn = h('input', { id: 'filter-code', value: code, placeholder: 'error code' });
  const nodeIn = h('input', { id: 'filter-node', value: node, placeholder: 'node id', title: 'the node whose failure ended the instance' });
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
    h('label', {}, 'Error code ', codeIn), h('label', {}, 'Failed at ', nodeIn),
    h('label', {}, 'Started since ', sinceIn), h('label', {}, 'until (UTC) ', untilIn),
    h('label', {}, 'Sort ', orderSel), h('label', {}, 'Show ', sizeSel), h('button', { type: 'submit' }, 'Filter'));
  const apply = () => {
    location.hash = `#/instances${query({ state: stateSel.value, process: processIn.value.trim(), since: utc(sinceIn.value), until: utc(untilIn.value), key: keyIn.value.trim(), var: varIn.value.trim(), code: codeIn.value.trim(), node: nodeIn.value.trim(), order: orderSel.value, limit: sizeSel.value })}`;
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
    businessKey: key || undefined, errorCode: code || undefined, failedNode: node || undefined,
    // As text, as the listing's var. filter compares it (a number's text matches the number).
    variables: eq > 0 ? { [variable.slice(0, eq)]: variable.slice(eq + 1) } : {},
  };
  const TITLES = { retry: 'Retry', cancel: 'Cancel', resolve: 'Resolve the open incidents of', migrate: 'Migrate' };
  const bulk = async (action, selection) => {
    const what = selection.instances ? `${selection.instances.length} ticked instance(s)` : 'every instance the filters select';
    const mode = h('select', { id: 'batch-mode' }, h('option', { value: 'full' }, 'from the start'), h('option', { value: 'from-failure' }, 'from the failure'));
    const target = h('select', { id: 'batch-target' });
    const extra = [];
    if (action === 'retry') extra.push(h('label', {}, 'Retry ', mode));
    if (action === 'migrate') {
      // The deployments the instances may move to: those of the process
      // (the filter's, else every process of the ticked instances), not RETIRED.
      const { deployments } = await get('/v1/deployments');
      const procs = process ? [process] : [...new Set(shown.filter(i => !selection.instances || selection.instances.includes(i.id)).map(i => i.process))];
      const targets = deployments.filter(d => d.state !== 'RETIRED' && (procs.length === 0 || procs.includes(d.process)))
        .sort((a, b) => (a.process < b.process ? -1 : a.process > b.process ? 1 : b.version - a.version));
      if (targets.length === 0) { fill(feedback, errorBox({ message: 'no deployment to migrate to' })); return; }
      fill(target, targets.map(d => h('option', { value: d.id }, `${d.process} v${d.version} (${d.state.toLowerCase()})`)));
      extra.push(h('label', {}, 'To ', target),
        h('p', { class: 'muted' }, 'Each instance moves node by node to the deployment of the same process; one whose nodes have no counterpart is refused (its outcome says why), a FAILED one resumes there.'));
    }
    if (action === 'resolve') extra.push(h('p', { class: 'muted' }, 'Each instance\u2019s stopped deliveries and external tasks are tried again.'));
    if (!(await confirmAction(`${TITLES[action]} ${what}?`,
      h('p', {}, 'The server carries this out as one batch, a few instances a second; its page shows each instance\u2019s outcome.'), ...extra))) return;
    try {
      const b = await post('/v1/batches', { action, ...selection, ...(action === 'retry' ? { mode: mode.value } : {}),
        ...(action === 'migrate' ? { deployment: target.value } : {}) });
      location.hash = `#/batches/${encodeURIComponent(b.id)}`;
    } catch (e) {
      fill(feedback, errorBox(e));
    }
  };
  const needPick = (f) => () => (picked.size === 0 ? fill(feedback, errorBox({ message: 'tick some instances first' })) : f());
  const bar = h('div', { class: 'bulk', id: 'bulk' }, pickedN,
    h('button', { id: 'retry-picked', type: 'button', onclick: needPick(() => bulk('retry', { instances: [...picked] })) }, 'Retry ticked'),
    h('button', { id: 'cancel-picked', type: 'button', onclick: needPick(() => bulk('cancel', { instances: [...picked] })) }, 'Cancel ticked'),
    h('button', { id: 'resolve-picked', type: 'button', onclick: needPick(() => bulk('resolve', { instances: [...picked] })) }, 'Resolve incidents of ticked'),
    h('button', { id: 'migrate-picked', type: 'button', onclick: needPick(() => bulk('migrate', { instances: [...picked] })) }, 'Migrate ticked'),
    h('span', { class: 'muted' }, ' · '),
    h('button', { id: 'retry-matching', type: 'button', onclick: () => bulk('retry', { filter }) }, 'Retry all matching'),
    h('button', { id: 'cancel-matching', type: 'button', onclick: () => bulk('cancel', { filter }) }, 'Cancel all matching'),
    h('button', { id: 'resolve-matching', type: 'button', onclick: () => bulk('resolve', { filter }) }, 'Resolve incidents of all matching'),
    h('button', { id: 'migrate-matching', type: 'button', onclick: () => bulk('migrate', { filter }) }, 'Migrate all matching'),
    h('a', { href: '#/batches', class: 'batches-link' }, 'Batches'));
  const showPicked = () => fill(pickedN, picked.size ? `${picked.size} ticked` : 'none ticked');
  fill(page, h('h1', {}, 'Instances'), counts, form, bar, feedback, list);

  let timer = null;
  let stopped = false;
  let shown = [];

  async function refresh() {
    const [c, r, inc] = await Promise.all([
      get(`/v1/instances/counts${query({ process, since, until })}`),
      get(`/v1/instances${joined(query({ state, process, since, until, after, limit, order }), search)}`),
      get(`/v1/incidents${query({ state: 'OPEN', limit: 500 })}`).catch(() => ({ incidents: [] })),
    ]);
    // The failed nodes by name: one diagram read per deployment listed.
    const failedIn = [...new Set(r.instances.filter(i => i.failedNode).map(i => i.deployment))];
    const names = new Map(await Promise.all(failedIn.map(async d => [d, await nodeNames(d)])));
    if (stopped) return;
    shown = r.instances;
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
      { title: 'Error', cell: i => (i.errorCode ? [h('a', { href: here({ code: i.errorCode, after: '' }), title: 'only instances with this error code' }, h('code', { class: 'error-code' }, i.errorCode)),
        i.causeCode ? h('div', { class: 'cause-code muted' }, 'cause ', h('code', {}, i.causeCode)) : null] : '') },
      { title: 'Failed at', cell: i => {
        if (!i.failedNode) return '';
        const name = names.get(i.deployment)?.get(i.failedNode);
        return h('a', { class: 'failed-node', href: here({ node: i.failedNode, after: '' }), dataset: { node: i.failedNode },
          title: `${i.failedNode} (a click: only the instances that failed at this node)` }, name || i.failedNode);
      } },
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
