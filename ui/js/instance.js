// One instance: the diagram with its state on it, the error, the waits,
// the child instances its calls started (a click on a call activity opens
// its child; a child links back to its parent), the variables, the
// attempts, the history, and the operator's actions (each asks first). A
// live instance is polled every 1.5 s.

import { get, post, query } from './api.js';
import { h, fill, badge, when, ms, link, section, table, jsonTree, errorBox } from './dom.js';
import { Diagram } from './diagram.js';
import { confirmAction } from './app.js';
import { timeline } from './timeline.js';

const LIVE = new Set(['RUNNING', 'WAITING']);
const POLL_MS = 1500;

export async function instancePage(page, id) {
  const enc = encodeURIComponent(id);
  const head = h('div', { id: 'instance-head' });
  const actions = h('div', { class: 'actions', id: 'actions' });
  const feedback = h('div', { id: 'action-feedback' });
  const errorSec = h('div', { id: 'instance-error' });
  const canvas = h('div', { id: 'diagram', class: 'diagram' });
  const waits = h('div', { id: 'waits' });
  const vars = h('div', { id: 'variables', class: 'json' });
  const attemptsBox = h('div', { id: 'attempts' });
  const timelineBox = h('div', { id: 'timeline', class: 'timeline-box' });
  const historyBox = h('div', { id: 'history' });
  const incidentsBox = h('div', { id: 'incidents' });
  const childrenBox = h('div', { id: 'children' });
  const itemsBox = h('div', { id: 'items' });
  fill(page, head, actions, feedback, errorSec,
    section('Diagram', canvas), section('Waiting for', waits), itemsBox, childrenBox, section('Variables', vars),
    section('Timeline', timelineBox), section('Attempts', attemptsBox), section('Incidents', incidentsBox), section('History', historyBox));

  let view = await get(`/v1/instances/${enc}`);
  const diagram = new Diagram(canvas);
  const loadDiagram = v => diagram.load(v.deployment, v.process).catch(e => { canvas.append(errorBox(e)); });
  let drawn = view.deployment;
  let diagramReady = loadDiagram(view);
  let timer = null;
  let stopped = false;
  let lastVars = null;
  let lastAttempts = null;
  let versionOf = { id: null, version: null };
  // The steps table shows one node's attempts after a click on its shape.
  let stepsOf = null;
  let allAttempts = [];
  // A call activity's child: the last one it started (a retried call
  // started one per attempt; the children's table lists them all).
  const childOf = node => (view.children || []).filter(c => c.node === node).pop();
  diagram.onNodeClick((node) => {
    const child = childOf(node);
    if (child) { location.hash = `#/instances/${encodeURIComponent(child.instance)}`; return; }
    stepsOf = node;
    renderAttempts(allAttempts);
    attemptsBox.scrollIntoView({ block: 'nearest' });
  });

  async function refresh(first) {
    const [v, a, hist, inc] = await Promise.all([
      first ? view : get(`/v1/instances/${enc}`),
      get(`/v1/instances/${enc}/attempts`),
      get(`/v1/instances/${enc}/history`),
      get(`/v1/incidents${query({ instance: id })}`).catch(() => ({ incidents: [] })),
    ]);
    if (v.deployment !== drawn) { drawn = v.deployment; diagramReady = loadDiagram(v); } // migrated
    await diagramReady;
    if (stopped) return;
    if (v.deployment !== versionOf.id) {
      versionOf = { id: v.deployment, version: await get(`/v1/deployments/${encodeURIComponent(v.deployment)}`).then(d => d.version).catch(() => null) };
    }
    view = v;
    renderHead(v);
    renderActions(v, inc.incidents);
    renderError(v);
    renderWaits(v);
    renderChildren(v);
    renderItems(v, a.attempts);
    const varsText = JSON.stringify(v.variables);
    if (varsText !== lastVars) { fill(vars, jsonTree(v.variables, undefined, 2)); lastVars = varsText; }
    const attemptsText = JSON.stringify([a.attempts, v.items || []]);
    if (attemptsText !== lastAttempts) { renderAttempts(a.attempts); lastAttempts = attemptsText; }
    fill(timelineBox, timeline(v, a.attempts, node => diagram.name(node) || node));
    renderIncidents(inc.incidents);
    renderHistory(hist);
    if (!stopped) {
      diagram.showInstance(v, a.attempts);
      // An open incident stops its task until an operator resolves it.
      for (const i of inc.incidents.filter(i => i.state === 'OPEN')) {
        diagram.badge(i.task, 'incident', 'incident', i.message);
      }
    }
    page.dataset.state = v.state;
    // One poll at a time: an action's reload may overlap a poll in flight.
    clearTimeout(timer);
    if (LIVE.has(v.state)) timer = setTimeout(() => refresh(false).catch(showError), POLL_MS);
  }

  function showError(e) { fill(feedback, errorBox(e)); }

  // A node as a person reads it: its name from the diagram (a modeler's
  // GUID or an internal id is kept as a tooltip), else its id.
  function nodeLabel(node) {
    const name = diagram.name(node);
    return name && name !== node ? h('span', { class: 'node-name', title: node, dataset: { node } }, name) : h('span', { dataset: { node } }, node);
  }

  // A message as a person reads it: every `id` quoted in it that names a
  // node with a name shows the name (the id as its tooltip); other quoted
  // parts stay code. Text nodes only.
  function named(text) {
    if (!text) return '';
    return String(text).split(/`([^`]+)`/).map((part, i) => {
      if (i % 2 === 0) return part;
      const name = diagram.name(part);
      return name && name !== part ? h('span', { class: 'node-name', title: part, dataset: { node: part } }, `“${name}”`) : h('code', {}, part);
    });
  }

  function renderHead(v) {
    fill(head,
      h('h1', {}, 'Instance ', h('code', { id: 'instance-id' }, v.instance), ' ', h('span', { id: 'instance-state' }, badge(v.state)),
        LIVE.has(v.state) ? h('span', { class: 'live', title: `refreshing every ${POLL_MS / 1000} s` }, '● live') : null),
      h('p', { class: 'meta' },
        'process ', link(`/deployments/${encodeURIComponent(v.deployment)}`, v.process),
        versionOf.version !== null ? [' ', h('span', { id: 'instance-version', title: v.deployment }, `v${versionOf.version}`)] : '',
        ` · started ${when(v.startedAt)}`, v.endedAt ? ` · ended ${when(v.endedAt)}` : '',
        v.retryOf ? [' · retry of ', link(`/instances/${encodeURIComponent(v.retryOf)}`, h('code', {}, v.retryOf))] : '',
        v.parent ? [' · child of ', link(`/instances/${encodeURIComponent(v.parent)}`, h('code', {}, v.parent))] : '',
        (v.retriedBy || []).length ? [' · retried as ', h('span', { id: 'retried-by' }, v.retriedBy.map((r, i) => [i ? ', ' : '', link(`/instances/${encodeURIComponent(r)}`, h('code', {}, r))]))] : ''));
  }

  function renderError(v) {
    if (!v.error) { fill(errorSec); return; }
    const e = v.error;
    fill(errorSec, h('section', { class: 'card failure' }, h('h2', {}, 'Error'),
      h('p', {}, h('code', { id: 'error-code' }, e.code), ' ', h('span', { id: 'error-message' }, named(e.message))),
      e.node ? h('p', { id: 'error-node' }, 'At ', nodeLabel(e.node)) : null,
      e.cause ? h('p', { class: 'cause' }, 'Cause: ', h('code', {}, e.cause.code), ' ', named(e.cause.message)) : null,
      (e.compensationFailures || []).length ? h('div', {}, 'Compensation failures: ', jsonTree(e.compensationFailures, undefined, 1)) : null));
  }

  function renderWaits(v) {
    // An attempt in flight is work being done, not a wait: it is listed
    // apart, with its lease (when a lost runner's attempt is run again).
    const running = (v.waits || []).filter(w => w.kind === 'attempt');
    const parked = (v.waits || []).filter(w => w.kind !== 'attempt');
    const runningNow = running.length ? h('ul', { id: 'running-now', class: 'running' }, running.map(w => h('li', { dataset: { node: w.node } },
      'Running now: ', nodeLabel(w.node), ` attempt #${w.attempt}`, h('span', { class: 'muted' }, ` (run again if its runner is lost, after ${when(w.due)})`)))) : null;
    if (parked.length === 0) {
      fill(waits, runningNow, h('p', { class: 'muted' }, LIVE.has(v.state) ? (running.length ? 'Nothing else parked.' : 'Nothing parked.') : 'Nothing: the instance has ended.'));
      return;
    }
    const cols = [
      { title: 'Kind', cell: w => w.kind },
      { title: 'Node', cell: w => nodeLabel(w.node) },
      { title: 'Due', cell: w => when(w.due) },
      { title: 'Detail', cell: w => [w.message ? `message ${w.message}` : '', w.correlationKey ? ` key ${w.correlationKey}` : '', w.attempt ? `attempt #${w.attempt}` : '', w.child ? [' child ', link(`/instances/${encodeURIComponent(w.child)}`, w.child)] : '',
        w.channel ? ['channel ', h('code', { class: 'channel' }, w.channel)] : '', w.request ? [' request ', h('code', { class: 'request' }, w.request)] : ''] },
    ];
    cols.rowAttrs = w => ({ dataset: { kind: w.kind, node: w.node } });
    fill(waits, runningNow, table(cols, parked, { id: 'waits-table' }));
  }

  // The item (branch) of a fan-out an attempt ran in: its own (kept with
  // the attempt), else (an attempt recorded before items were kept) the
  // live item whose tokens hold its token.
  function itemOf(a) {
    if (a.item) return (view.items || []).find(i => i.node === a.item.node && i.index === a.item.index) || a.item;
    return (view.items || []).find(i => (i.tokens || []).includes(a.token));
  }
  const itemLabel = i => `${diagram.name(i.node) || i.node} #${i.index}`;
  const sameItem = (i, x) => (x.item ? x.item.node === i.node && x.item.index === i.index : (i.tokens || []).includes(x.token));

  // The items of the fan-outs that ended (none left in the snapshot), from
  // the attempts that name them: one per (fan-out, index) that ran an
  // attempt, by fan-out (in the order of its first attempt) then index.
  function endedItems(live, attempts) {
    const running = new Set(live.map(i => i.node));
    const byNode = new Map();
    for (const x of attempts) {
      if (!x.item || running.has(x.item.node)) continue;
      const seen = byNode.get(x.item.node) || new Set();
      byNode.set(x.item.node, seen.add(x.item.index));
    }
    return [...byNode].flatMap(([node, seen]) => [...seen].sort((a, b) => a - b).map(index => ({ node, index, state: 'ended' })));
  }

  // Each item of a Map, a Parallel or a multi-instance activity: while its
  // fan-out runs (or failed) from the snapshot, its index, state and
  // attempts; once it ended, rebuilt from the attempts that ran in it.
  function renderItems(v, attempts) {
    const live = v.items || [];
    const ended = endedItems(live, attempts);
    const items = live.concat(ended);
    if (items.length === 0) { fill(itemsBox); return; }
    const cols = [
      { title: 'Fan-out', cell: i => nodeLabel(i.node) },
      { title: 'Item', cell: i => `#${i.index}` },
      { title: 'State', cell: i => h('span', { class: `item-state item-${i.state}` }, i.state) },
      { title: 'Attempts', cell: (i) => {
        const mine = attempts.filter(x => sameItem(i, x) && x.outcome !== 'worker_failed');
        return mine.length ? mine.map((x, k) => [k ? ', ' : '', nodeLabel(x.task), ` #${x.attempt} `, h('span', { class: `outcome-${x.outcome}` }, x.outcome)]) : '';
      } },
    ];
    cols.rowAttrs = i => ({ dataset: { node: i.node, index: i.index, state: i.state } });
    const note = live.length === 0
      ? 'The fan-out has ended: each item that ran an attempt, with its attempts, from the attempts recorded in it (an item that ran none is not listed).'
      : ended.length
        ? 'The items of the fan-outs running now, then those of the fan-outs that ended (from their attempts). Each attempt below names its item.'
        : 'Each item with the attempts that ran in it (an item that ended keeps them). Each attempt below names its item.';
    fill(itemsBox, section('Items', table(cols, items, { id: 'items-table' }), h('p', { class: 'muted', id: 'items-note' }, note)));
  }

  function renderChildren(v) {
    const kids = v.children || [];
    if (kids.length === 0) { fill(childrenBox); return; }
    const cols = [
      { title: 'Child instance', cell: c => link(`/instances/${encodeURIComponent(c.instance)}`, h('code', {}, c.instance)) },
      { title: 'Started by', cell: c => (c.node ? nodeLabel(c.node) : '') },
      { title: 'Process', cell: c => c.process },
      { title: 'State', cell: c => badge(c.state) },
    ];
    cols.rowAttrs = c => ({ dataset: { child: c.instance, ...(c.node ? { node: c.node } : {}) } });
    fill(childrenBox, section('Child instances', table(cols, kids, { id: 'children-table' })));
  }

  function renderAttempts(all) {
    allAttempts = all;
    const attempts = stepsOf ? all.filter(a => a.task === stepsOf) : all;
    const only = stepsOf ? h('p', { id: 'steps-of', dataset: { node: stepsOf } }, 'Steps of ', nodeLabel(stepsOf), ` (${attempts.length}) \u00b7 `,
      h('a', { href: '#', id: 'steps-all', onclick: (e) => { e.preventDefault(); stepsOf = null; renderAttempts(allAttempts); } }, 'show every step')) : null;
    if (attempts.length === 0) { fill(attemptsBox, only, h('p', { class: 'muted' }, stepsOf ? 'This node ran no task.' : 'No attempts yet.')); return; }
    const cols = [
      { title: 'Task', cell: a => [nodeLabel(a.task), childLink(a)] },
      { title: '#', cell: a => String(a.attempt) },
      { title: 'Outcome', cell: a => h('span', { class: `outcome-${a.outcome}` }, a.outcome) },
      { title: 'Code', cell: a => (a.code ? h('code', {}, a.code) : '') },
      { title: 'Class', cell: a => a.class || '' },
      { title: 'Started', cell: a => when(a.startedAt) },
      { title: 'Duration', cell: a => ms(a.durationMs) },
      { title: 'Message', cell: a => [reporter(a), a.message ? h('span', { class: 'message' }, named(a.message)) : ''] },
      { title: 'Input', cell: a => stepJson(a.input, 'input') },
      { title: 'Result', cell: a => stepJson(a.output, a.outcome === 'completed' ? 'output' : 'details') },
      { title: 'Calls', cell: calls },
      { title: 'Output', cell: output },
    ];
    // The item each attempt ran in, when the instance has (or had) fan-out items.
    if ((view.items || []).length || all.some(a => a.item)) {
      cols.splice(1, 0, { title: 'Item', cell: (a) => { const i = itemOf(a); return i ? h('span', { class: 'item', dataset: { node: i.node, index: i.index } }, itemLabel(i)) : ''; } });
    }
    cols.rowAttrs = a => ({ dataset: { task: a.task, attempt: a.attempt, outcome: a.outcome, ...(a.worker ? { worker: a.worker } : {}) } });
    fill(attemptsBox, only, table(cols, attempts, { id: 'attempts-table', class: 'timeline' }));
  }

  // A call activity's attempt: the child it started (the call's n-th
  // attempt started its n-th child, children being listed oldest first).
  function childLink(a) {
    const kids = (view.children || []).filter(c => c.node === a.task);
    const runs = allAttempts.filter(x => x.task === a.task && x.outcome !== 'worker_failed');
    const c = kids.length === runs.length ? kids[runs.indexOf(a)] : kids.length === 1 ? kids[0] : null;
    return c ? h('div', { class: 'child-link' }, 'child ', link(`/instances/${encodeURIComponent(c.instance)}`, h('code', {}, c.instance))) : '';
  }

  // An attempt's input or result (kept up to 64 KiB each by the server; a
  // longer one arrives cut, as text ending in its marker), folded.
  function stepJson(value, what) {
    if (value === undefined || value === null) return '';
    const cut = typeof value === 'string' && /\[cut: \d+ bytes in all\]$/.test(value);
    return h('details', { class: `step-${what}` }, h('summary', {}, cut ? `${what} (cut at 64 KiB)` : what),
      cut ? h('pre', { class: 'cut' }, value) : jsonTree(value, undefined, 1));
  }

  // Who reported a worker failure (an external task's worker) and the
  // worker retries it left (0: it opened an incident).
  function reporter(a) {
    if (!a.worker) return '';
    const left = a.retriesLeft === undefined ? '' : ` · ${a.retriesLeft} ${a.retriesLeft === 1 ? 'retry' : 'retries'} left`;
    return h('span', { class: 'worker' }, 'worker ', h('code', {}, a.worker), `${left}: `);
  }

  // The attempt's outbound HTTP calls (a task with an egress grant): one
  // line each, the request then its status or the denial's code and reason,
  // folded behind a count; denials are marked.
  function calls(a) {
    const rec = a.calls;
    const list = (rec && rec.calls) || [];
    if (list.length === 0) return '';
    const denied = list.filter(c => c.code).length;
    const more = rec.dropped ? ` (+${rec.dropped} not kept)` : '';
    const summary = `${list.length} call${list.length === 1 ? '' : 's'}${denied ? ` · ${denied} denied` : ''}${more}`;
    const line = c => {
      const port = (c.scheme === 'https' && c.port === 443) || (c.scheme === 'http' && c.port === 80) ? '' : `:${c.port}`;
      const target = `${c.method} ${c.scheme}://${c.host}${port}${c.path}`;
      const result = c.code ? `${c.code} ${c.reason || ''}` : c.status !== undefined ? `→ ${c.status} · ${ms(Math.round(c.duration_us / 100) / 10)}` : `failed: ${c.reason || ''}`;
      return h('li', { class: c.code ? 'call denied' : 'call' }, h('code', {}, target), ' ', result);
    };
    return h('details', { class: 'calls' }, h('summary', {}, summary), h('ul', {}, list.map(line)));
  }

  // What the guest wrote (the tails the server keeps: its last log lines and
  // the end of its stderr), folded; text only.
  function output(a) {
    const logs = a.logs || [];
    if (logs.length === 0 && !a.stderr) return '';
    const parts = [logs.length ? `${logs.length} log line(s)` : '', a.stderr ? 'stderr' : ''].filter(Boolean).join(' · ');
    return h('details', { class: 'output' }, h('summary', {}, parts),
      logs.length ? h('pre', { class: 'logs' }, logs.map(l => h('span', { class: `log log-${l.level}` }, `${l.level.toUpperCase().padEnd(5)} ${l.message}\n`))) : null,
      a.stderr ? h('pre', { class: 'stderr' }, a.stderr) : null);
  }

  function renderIncidents(incidents) {
    if (!incidents.length) { fill(incidentsBox, h('p', { class: 'muted' }, 'None.')); return; }
    const cols = [
      { title: 'Incident', cell: i => h('code', {}, i.id) },
      { title: 'Kind', cell: i => i.kind },
      { title: 'State', cell: i => badge(i.state) },
      { title: 'Task', cell: i => nodeLabel(i.task) },
      { title: 'Message', cell: i => named(i.message) },
      { title: '', cell: i => (i.state === 'OPEN' ? h('button', { type: 'button', class: 'resolve', onclick: () => resolve(i) }, 'Resolve') : '') },
    ];
    cols.rowAttrs = i => ({ dataset: { incident: i.id, state: i.state } });
    fill(incidentsBox, table(cols, incidents, { id: 'incidents-table' }));
  }

  function renderHistory(hist) {
    if (!hist.audit) { fill(historyBox, h('p', { class: 'muted' }, hist.note || 'No history kept.')); return; }
    fill(historyBox, table([
      { title: '#', cell: e => String(e.seq) },
      { title: 'At', cell: e => when(e.at) },
      { title: 'Kind', cell: e => e.kind },
      { title: 'Node', cell: e => (e.node ? nodeLabel(e.node) : '') },
      { title: 'Data', cell: e => jsonTree(e.data, undefined, 0) },
    ], hist.entries, { id: 'history-table' }));
  }

  // ---- actions ---------------------------------------------------------------

  async function act(title, body, call, after) {
    if (!await confirmAction(title, ...body)) return;
    fill(feedback, 'Working…');
    try {
      const r = await call();
      fill(feedback);
      after(r);
    } catch (e) {
      showError(e);
    }
  }

  const reload = () => { clearTimeout(timer); refresh(false).catch(showError); };
  const goTo = (r) => { location.hash = `#/instances/${encodeURIComponent(r.instance)}`; };

  function renderActions(v, incidents) {
    const buttons = [];
    if (LIVE.has(v.state)) {
      // Each dialog's inputs are made when it opens, filled from the instance
      // as it is then (not from what an earlier, cancelled dialog held).
      buttons.push(h('button', { type: 'button', id: 'cancel', class: 'danger', onclick: cancelDialog }, 'Cancel'));
      // Offered only when the instance waits for one (a message or a named event).
      if ((v.waits || []).some(w => w.kind === 'message')) {
        buttons.push(h('button', { type: 'button', id: 'send-message', onclick: messageDialog }, 'Send message…'));
      }
      if ((v.waits || []).some(w => w.kind === 'event')) {
        buttons.push(h('button', { type: 'button', id: 'send-event', onclick: eventDialog }, 'Send event…'));
      }
    } else {
      buttons.push(h('button', {
        type: 'button', id: 'retry-full', onclick: () => act(`Retry ${id} from the start?`,
          [h('p', {}, 'A new instance, linked to this one, runs on its original input.')],
          () => post(`/v1/instances/${enc}/retry${query({ mode: 'full' })}`), goTo),
      }, 'Retry (full)'));
      if (v.state === 'FAILED') {
        buttons.push(h('button', {
          type: 'button', id: 'retry-from-failure', class: 'primary', onclick: () => act(`Retry ${id} from its failure?`,
            [h('p', {}, 'A new instance, linked to this one, resumes at the failed step with its variables.')],
            () => post(`/v1/instances/${enc}/retry${query({ mode: 'from-failure' })}`), goTo),
        }, 'Retry from failure'));
      }
    }
    if (v.state === 'FAILED' || v.state === 'WAITING') {
      buttons.push(h('button', { type: 'button', id: 'edit-variables', onclick: () => editVariables(v) }, 'Edit variables…'));
      buttons.push(h('button', { type: 'button', id: 'migrate', onclick: () => migrate(v) }, 'Migrate…'));
    }
    for (const i of incidents.filter(i => i.state === 'OPEN')) {
      buttons.push(h('button', { type: 'button', class: 'resolve', dataset: { incident: i.id }, onclick: () => resolve(i) }, `Resolve incident ${i.id}`));
    }
    fill(actions, buttons);
  }

  // What the instance waits for by message, and by event (a States-language
  // `EventName` wait: kind `event`, its name in `event`).
  const messageWait = () => (view.waits || []).find(w => w.kind === 'message') || {};
  const eventWait = () => (view.waits || []).find(w => w.kind === 'event') || {};

  function cancelDialog() {
    const reason = h('input', { id: 'cancel-reason', placeholder: 'reason (optional)' });
    return act(`Cancel instance ${id}?`,
      [h('p', {}, 'It ends TERMINATED; everything it waits for is withdrawn.'), h('label', {}, 'Reason ', reason)],
      () => post(`/v1/instances/${enc}/cancel`, reason.value ? { reason: reason.value } : {}), reload);
  }

  function messageDialog() {
    const w = messageWait();
    const name = h('input', { id: 'message-name', placeholder: 'message name', value: w.message || '' });
    const key = h('input', { id: 'message-key', placeholder: 'correlation key', value: w.correlationKey || '' });
    const varsIn = h('textarea', { id: 'message-variables', rows: 4 }, '{}');
    return act('Send a message',
      [h('label', {}, 'Name ', name), h('label', {}, 'Correlation key ', key), h('label', {}, 'Variables (JSON) ', varsIn)],
      () => post('/v1/messages', { name: name.value, correlationKey: key.value || null, variables: JSON.parse(varsIn.value || '{}') }), reload);
  }

  function eventDialog() {
    const evName = h('input', { id: 'event-name', placeholder: 'event name', value: eventWait().event || '' });
    const evData = h('textarea', { id: 'event-data', rows: 3 }, '{}');
    return act('Resume a wait on an event',
      [h('label', {}, 'Event ', evName), h('label', {}, 'Data (JSON) ', evData)],
      () => post(`/v1/instances/${enc}/events/${encodeURIComponent(evName.value)}`, JSON.parse(evData.value || '{}')), reload);
  }

  async function resolve(i) {
    await act(`Resolve incident ${i.id}?`, [h('p', {}, `Its ${i.kind.replace(/_/g, ' ')} request (task ${i.task}) is tried again.`)],
      () => post(`/v1/incidents/${encodeURIComponent(i.id)}/resolve`), (r) => {
        fill(feedback, h('p', { class: 'muted', id: 'resolve-outcome', dataset: { outcome: r.outcome } }, r.outcome === 'rearmed'
          ? `Incident ${i.id} resolved: its request is pending again.`
          : `Incident ${i.id} resolved: its call no longer waits, nothing to send.`));
        reload();
      });
  }

  // Fix the data (then retry from the failure): the variables as JSON, the
  // changes sent as what is set and what is removed, with who edits.
  function editVariables(v) {
    const text = h('textarea', { id: 'variables-json', rows: 10, spellcheck: 'false' }, JSON.stringify(v.variables, null, 2));
    const by = h('input', { id: 'variables-by', placeholder: 'your name (kept in the history)' });
    return act(`Edit the variables of ${id}?`,
      [h('p', {}, v.state === 'FAILED' ? 'A retry from the failure then runs on them.' : 'What runs next reads them.'),
        h('label', {}, 'Variables (JSON object) ', text), h('label', {}, 'By ', by)],
      () => {
        let next;
        try { next = JSON.parse(text.value); } catch (e) { return Promise.reject({ code: 'NOT JSON', message: e.message }); }
        if (!next || typeof next !== 'object' || Array.isArray(next)) return Promise.reject({ code: 'NOT AN OBJECT', message: 'the variables are a JSON object' });
        const set = {};
        for (const [k, val] of Object.entries(next)) if (JSON.stringify(v.variables[k]) !== JSON.stringify(val)) set[k] = val;
        const unset = Object.keys(v.variables).filter(k => !(k in next));
        return post(`/v1/instances/${enc}/variables`, { set, unset, by: by.value.trim() || null });
      }, reload);
  }

  async function migrate(v) {
    const { deployments } = await get('/v1/deployments');
    const targets = deployments.filter(d => d.process === v.process && d.id !== v.deployment);
    if (targets.length === 0) { showError({ code: 'NOTHING TO MIGRATE TO', message: `no other deployment of ${v.process}` }); return; }
    const sel = h('select', { id: 'migrate-target' }, targets.map(d => h('option', { value: d.id }, `v${d.version} (${d.state}) ${d.id}`)));
    const mapping = h('textarea', { id: 'migrate-mapping', rows: 3 }, '{}');
    await act(`Migrate ${id}?`, [h('label', {}, 'To ', sel), h('label', {}, 'Node mapping (JSON, old → new) ', mapping)],
      () => post(`/v1/instances/${enc}/migrate`, { targetDeployment: sel.value, mapping: JSON.parse(mapping.value || '{}') }), reload);
  }

  await refresh(true);
  return () => { stopped = true; clearTimeout(timer); diagram.destroy(); };
}

