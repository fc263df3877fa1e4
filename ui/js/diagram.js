// One renderer for every dialect: the bpmn-js viewer (window.BpmnJS, from
// ui/vendor/) draws the BPMN XML of GET /v1/deployments/{id}/diagram — the
// deployed file when it has complete DI, else the server's export of the IR
// with a generated layout. Exported elements carry their IR node id in
// `sutra:node`; original BPMN elements are their node ids.

import { get } from './api.js';
import { h } from './dom.js';

export class Diagram {
  constructor(container) {
    this.container = container;
    this.viewer = new window.BpmnJS({ container });
    this.byNode = new Map();
    this.overlayIds = [];
    this.markers = [];
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
    this.viewer.get('canvas').zoom('fit-viewport', 'auto');
    return source;
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

  /** The diagram element of IR node `node`, if drawn. */
  element(node) {
    return this.byNode.get(node);
  }

  clear() {
    const canvas = this.viewer.get('canvas');
    for (const [id, cls] of this.markers) canvas.removeMarker(id, cls);
    this.markers = [];
    const overlays = this.viewer.get('overlays');
    for (const id of this.overlayIds) overlays.remove(id);
    this.overlayIds = [];
  }

  mark(node, cls) {
    const id = this.element(node);
    if (!id) return;
    this.viewer.get('canvas').addMarker(id, cls);
    this.markers.push([id, cls]);
  }

  /** A text badge on a node (a DOM element, never HTML text). */
  badge(node, position, cls, text, title) {
    const id = this.element(node);
    if (!id) return;
    const html = h('div', { class: `overlay ${cls}`, title: title || null }, text);
    html.dataset.node = node;
    this.overlayIds.push(this.viewer.get('overlays').add(id, { position, html }));
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
    for (const [node, state] of Object.entries(view.nodes || {})) {
      this.mark(node, `sutra-${state.toLowerCase()}`);
    }
    for (const [node, c] of perNode) {
      this.badge(node, { top: -12, right: 12 }, 'attempts', `×${c.n}`, `${c.n} attempt(s)`);
    }
    for (const [node, state] of Object.entries(view.nodes || {})) {
      if (state !== 'FAILED') continue;
      const last = perNode.get(node)?.last;
      const code = (last && last.code) || (view.error && view.error.code) || 'FAILED';
      this.badge(node, { bottom: -6, left: 0 }, 'failed-code', code, last && last.message);
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
      this.badge(w.node, { bottom: -6, left: 0 }, 'wait', text);
    }
  }

  destroy() {
    this.viewer.destroy();
  }
}

function short(iso) {
  return iso ? String(iso).replace(/^\d{4}-\d{2}-\d{2}T/, '').replace(/\.\d+/, '').replace('Z', 'Z') : '?';
}
