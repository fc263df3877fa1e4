// One renderer for every dialect: the bpmn-js viewer (window.BpmnJS, from
// ui/vendor/) draws the BPMN XML of GET /v1/deployments/{id}/diagram — the
// deployed file when it has complete DI, else the server's export of the IR
// with a generated layout. Exported elements carry their IR node id in
// `sutra:node`; original BPMN elements are their node ids.

import { get } from './api.js';
import { h, when } from './dom.js';

export class Diagram {
  constructor(container) {
    this.container = container;
    // The drawing gets its own box; zoom and fit buttons sit over it.
    const canvasBox = h('div', { class: 'diagram-canvas' });
    const button = (cls, label, title, act) => h('button', { type: 'button', class: `zoom ${cls}`, title, 'aria-label': title, onclick: act }, label);
    this.controls = h('div', { class: 'diagram-controls' },
      button('zoom-in', '+', 'Zoom in', () => this.zoomBy(1.25)),
      button('zoom-out', '−', 'Zoom out', () => this.zoomBy(0.8)),
      button('zoom-fit', 'Fit', 'Fit the whole diagram', () => this.fit()));
    container.append(canvasBox, this.controls);
    this.viewer = new window.BpmnJS({ container: canvasBox });
    // Refit when the box changes size (a window resize), unless the user zoomed.
    this.userZoomed = false;
    this.resize = new ResizeObserver(() => {
      const canvas = this.viewer.get('canvas');
      canvas.resized();
      if (!this.userZoomed) this.fit(true);
    });
    this.resize.observe(canvasBox);
    this.byNode = new Map();
    this.overlayIds = [];
    this.markers = [];
    this.stacks = new Map();
  }

  /** Load a deployment's diagram for `process`; answers 'original' or 'generated'. */
  async load(deploymentId, process) {
    const resp = await fetch(`/v1/deployments/${encodeURIComponent(deploymentId)}/diagram`, {
      headers: { Authorization: `Bearer ${sessionStorage.getItem('sutra.console.key')}` },
      credentials: 'omit', cache: 'no-store',
    });
    if (!resp.ok) {
      const e = await resp.json().catch(() => ({}));
      throw Object.assign(new Error(e.message || `HTTP ${resp.status}`), { code: e.code });
    }
    const source = resp.headers.get('x-sutra-diagram') || 'generated';
    const xml = await resp.text();
    await this.viewer.importXML(xml);
    // A definition with several processes: open the diagram showing this one.
    const defs = this.viewer.getDefinitions();
    const wanted = (defs.diagrams || []).find(d => {
      const el = d.plane && d.plane.bpmnElement;
      if (!el) return false;
      if (el.id === process) return true;
      return (el.participants || []).some(p => p.processRef && p.processRef.id === process);
    });
    if (wanted && defs.diagrams.length > 1) await this.viewer.open(wanted);
    this.index();
    this.container.dataset.diagram = source;
    this.fit(true);
    return source;
  }

  /**
   * Fit the whole drawing in the box with a margin (badges above the top
   * row stay inside), centred; `auto` keeps a later window resize refitting.
   */
  fit(auto) {
    const canvas = this.viewer.get('canvas');
    canvas.zoom('fit-viewport', 'auto');
    const box = canvas.viewbox();
    const margin = 40;
    const scale = Math.min(1, box.outer.width / (box.inner.width + 2 * margin), box.outer.height / (box.inner.height + 2 * margin + 40));
    canvas.viewbox({
      x: box.inner.x - (box.outer.width / scale - box.inner.width) / 2,
      y: box.inner.y - (box.outer.height / scale - box.inner.height) / 2,
      width: box.outer.width / scale,
      height: box.outer.height / scale,
    });
    if (!auto) this.userZoomed = false;
  }

  zoomBy(factor) {
    const canvas = this.viewer.get('canvas');
    canvas.zoom(canvas.zoom() * factor, 'auto');
    this.userZoomed = true;
  }

  index() {
    this.byNode.clear();
    for (const el of this.viewer.get('elementRegistry').getAll()) {
      const bo = el.businessObject;
      if (!bo || el.type === 'label') continue;
      const node = (bo.$attrs && bo.$attrs['sutra:node']) || bo.id;
      if (!this.byNode.has(node)) this.byNode.set(node, el.id);
    }
  }

  /** Call `fn(node)` with the IR node id of every shape clicked. */
  onNodeClick(fn) {
    this.viewer.get('eventBus').on('element.click', (e) => {
      const bo = e.element && e.element.businessObject;
      if (!bo || e.element.type === 'label' || e.element.type === 'bpmn:Process') return;
      fn((bo.$attrs && bo.$attrs['sutra:node']) || bo.id);
    });
  }

  /** The name drawn for IR node `node` (its BPMN `name`), if any. */
  name(node) {
    const id = this.element(node);
    if (!id) return null;
    const el = this.viewer.get('elementRegistry').get(id);
    const name = el && el.businessObject && el.businessObject.name;
    return name ? String(name) : null;
  }

  /**
   * The diagram element of IR node `node`, if drawn: its own shape, else
   * (a layer the loader made for a repeated activity, `A#body` or
   * `A#instance`, which no XML element holds) the shape of `A`.
   */
  element(node) {
    const own = this.byNode.get(node);
    if (own || !node.includes('#')) return own;
    return this.byNode.get(node.slice(0, node.indexOf('#')));
  }

  clear() {
    const canvas = this.viewer.get('canvas');
    for (const [id, cls] of this.markers) canvas.removeMarker(id, cls);
    this.markers = [];
    const overlays = this.viewer.get('overlays');
    for (const id of this.overlayIds) overlays.remove(id);
    this.overlayIds = [];
    this.stacks.clear();
  }

  mark(node, cls) {
    const id = this.element(node);
    if (id) this.markElement(id, cls);
  }

  markElement(id, cls) {
    this.viewer.get('canvas').addMarker(id, cls);
    this.markers.push([id, cls]);
  }

  /**
   * A text badge on a node (a DOM element, never HTML text). A node's badges
   * stack in one column that grows upward from just above its shape, so they
   * cover neither each other nor the node's label (drawn inside a task, below
   * an event or a gateway); each shows its whole text and a tooltip.
   */
  badge(node, cls, text, title) {
    const id = this.element(node);
    if (!id) return;
    // One stack per shape: a repeated activity's layers share A's.
    let stack = this.stacks.get(id);
    if (!stack) {
      stack = h('div', { class: 'badges', dataset: { node } });
      this.overlayIds.push(this.viewer.get('overlays').add(id, { position: { top: -4, left: 0 }, html: stack }));
      this.stacks.set(id, stack);
    }
    const el = h('div', { class: `overlay ${cls}`, title: title || text }, text);
    el.dataset.node = node;
    stack.append(el);
  }

  /**
   * Show an instance on the diagram: node states as markers, attempt counts,
   * the failed node's code, and what each waiting node waits for.
   */
  showInstance(view, attempts) {
    this.clear();
    const perNode = new Map();
    // A worker's failure is not an attempt of the task (its call goes on).
    for (const a of attempts.filter(a => a.outcome !== 'worker_failed')) {
      const c = perNode.get(a.task) || { n: 0, last: null };
      c.n += 1;
      c.last = a;
      perNode.set(a.task, c);
    }
    // One state per shape. A repeated activity's shape A shows its body's
    // (`A#body`: running while any iteration runs, succeeded once all
    // ended), not the last iteration's; `A#instance` shows nothing.
    const shapeState = new Map();
    for (const [node, state] of Object.entries(view.nodes || {})) {
      const id = this.element(node);
      if (!id) continue;
      const rank = node.endsWith('#body') ? 2 : this.byNode.get(node) === id ? 1 : 0;
      const had = shapeState.get(id);
      if (!had || rank > had.rank) shapeState.set(id, { rank, state });
    }
    for (const [id, { state }] of shapeState) {
      this.markElement(id, `sutra-${state.toLowerCase()}`);
    }
    this.showItems(view.items || []);
    for (const [node, c] of perNode) {
      this.badge(node, 'attempts', `×${c.n}`, `${c.n} attempt(s)`);
    }
    for (const [node, state] of Object.entries(view.nodes || {})) {
      if (state !== 'FAILED') continue;
      const last = perNode.get(node)?.last;
      const code = (last && last.code) || (view.error && view.error.code) || 'FAILED';
      this.badge(node, 'failed-code', code, last && last.message ? `${code}: ${last.message}` : code);
    }
    for (const w of view.waits || []) {
      let text = w.kind;
      if (w.kind === 'retry') text = `retry #${w.attempt} at ${short(w.due)}`;
      else if (w.kind === 'timer') text = `timer at ${short(w.due)}`;
      else if (w.kind === 'event') text = `event ${w.event}`;
      else if (w.kind === 'message') text = `message ${w.message}${w.correlationKey ? ` (${w.correlationKey})` : ''}`;
      else if (w.kind === 'attempt') text = `attempt #${w.attempt} running`;
      else if (w.kind === 'child') text = `child ${w.child}`;
      else if (w.kind === 'channel' && w.channel) text = `channel ${w.channel}`;
      this.mark(w.node, 'sutra-token');
      this.badge(w.node, 'wait', text, w.due ? `${text} (due ${when(w.due)})` : text);
    }
  }

  /**
   * A fan-out's items (a multi-instance activity, a Map, a Parallel) while it
   * runs: one badge on its shape, how many ended of how many, and in its
   * tooltip how many run, wait, failed or have not started.
   */
  showItems(items) {
    const byNode = new Map();
    for (const i of items) {
      const c = byNode.get(i.node) || { total: 0 };
      c.total += 1;
      c[i.state] = (c[i.state] || 0) + 1;
      byNode.set(i.node, c);
    }
    for (const [node, c] of byNode) {
      const parts = ['running', 'waiting', 'failed', 'pending']
        .filter(k => c[k]).map(k => `${c[k]} ${k}`);
      const text = `${c.ended || 0}/${c.total} items`;
      this.badge(node, 'items', text, `${c.ended || 0} of ${c.total} items ended${parts.length ? `; ${parts.join(', ')}` : ''}`);
    }
  }

  /**
   * A deployment's per-node figures (GET /v1/deployments/{id}/statistics)
   * as badges: instances active there, failed there, that completed it, and
   * its open incidents (zeros are not drawn).
   */
  showStatistics(stats) {
    this.clear();
    // A repeated activity's shape A counts instances, not iterations: those
    // active at its body (`A#body`) and that completed it; the failures and
    // incidents of its task (`A`, inside) and of the body. Its other layers
    // draw nothing of their own.
    const nodes = stats.nodes || {};
    const shown = new Map();
    for (const [node, own] of Object.entries(nodes)) {
      if (this.byNode.has(node)) {
        const body = nodes[`${node}#body`];
        shown.set(node, !body ? own : {
          active: body.active, completed: body.completed,
          failed: Math.max(own.failed || 0, body.failed || 0),
          incidents: (own.incidents || 0) + (body.incidents || 0),
        });
      } else if (node.endsWith('#body') && !(node.slice(0, -5) in nodes)) {
        shown.set(node.slice(0, -5), own);
      }
    }
    for (const [node, s] of shown) {
      if (s.active) this.badge(node, 'stat-active', `${s.active} active`, `${s.active} instance(s) at this node now`);
      if (s.failed) this.badge(node, 'stat-failed', `${s.failed} failed`, `${s.failed} instance(s) failed here`);
      if (s.incidents) this.badge(node, 'incident', `${s.incidents} incident${s.incidents === 1 ? '' : 's'}`, `${s.incidents} open incident(s)`);
      if (s.completed) this.badge(node, 'stat-completed', `${s.completed} done`, `${s.completed} instance(s) completed this node`);
    }
  }

  destroy() {
    this.resize.disconnect();
    this.viewer.destroy();
  }
}

/**
 * A due time for a badge: the time of day when it falls today (UTC, as
 * every time in the console), else its date and time, so a timer due
 * tomorrow never reads as already overdue.
 */
function short(iso) {
  if (!iso) return '?';
  const s = String(iso);
  const today = new Date().toISOString().slice(0, 10);
  const time = s.replace(/^\d{4}-\d{2}-\d{2}T/, '').replace(/\.\d+/, '').replace(/Z$|\+00:00$/, '');
  return s.slice(0, 10) === today ? `${time} UTC` : `${s.slice(0, 10)} ${time} UTC`;
}
