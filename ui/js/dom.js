// Building the page without HTML strings: every value from the server (a
// tenant's variables, codes, messages, ids) becomes a text node, never markup.
// Nothing in the console assigns innerHTML, outerHTML or insertAdjacentHTML.

/** An element: h('td', {class: 'x', onclick: fn, dataset: {id}}, 'text', child, [more]). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'class') el.className = v;
    else if (k === 'style') throw new Error('no inline styles (CSP): use a class');
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const TIME_MODE = 'sutra.console.time';

/** 'utc' (the default: server time) or 'local' (the browser's zone); kept in localStorage (not secret). */
export function timeMode() {
  return localStorage.getItem(TIME_MODE) === 'local' ? 'local' : 'utc';
}

export function setTimeMode(mode) {
  localStorage.setItem(TIME_MODE, mode === 'local' ? 'local' : 'utc');
}

/**
 * An ISO instant as `YYYY-MM-DD HH:MM:SS.mmm UTC` (server time), or in the
 * browser's zone with its offset (`... UTC+01:00`) when the user chose local time.
 */
export function when(iso) {
  if (!iso) return '—';
  if (timeMode() === 'local') {
    const d = new Date(iso);
    if (!Number.isNaN(d.getTime())) {
      const p = (n, w = 2) => String(n).padStart(w, '0');
      const off = -d.getTimezoneOffset();
      const zone = `UTC${off >= 0 ? '+' : '-'}${p(Math.floor(Math.abs(off) / 60))}:${p(Math.abs(off) % 60)}`;
      return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)} ${zone}`;
    }
  }
  return String(iso).replace('T', ' ').replace(/(\.\d{3})\d*/, '$1').replace(/Z$|\+00:00$/, ' UTC');
}

export function ms(n) {
  if (n === null || n === undefined) return '—';
  return n < 1000 ? `${n} ms` : `${(n / 1000).toFixed(n < 10000 ? 2 : 1)} s`;
}

export function bytes(n) {
  if (n === null || n === undefined) return '—';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

export function badge(state) {
  return h('span', { class: `badge state-${String(state).toLowerCase()}` }, state);
}

/** A link inside the console (hash routes only: nothing secret ever goes in a URL). */
export function link(route, ...children) {
  return h('a', { href: `#${route}` }, ...children);
}

/** Strings longer than this are folded to their start (the rest on demand). */
const LONG_STRING = 300;
/** At most this many entries of an array or object are drawn at first. */
const MANY_ENTRIES = 100;

/**
 * A JSON value as a collapsible tree (<details>), open to `openDepth` levels.
 * Strings are shown JSON-quoted, as text. Large values are folded, so a
 * 400 KB variable never draws in full: a long string shows its start and
 * its length (the whole on a click), a large array or object its first
 * entries and a "show N more" control, and neither opens by itself.
 */
export function jsonTree(value, name, openDepth = 1, depth = 0) {
  const label = name === undefined ? [] : [h('span', { class: 'json-key' }, name), ': '];
  if (value !== null && typeof value === 'object') {
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    const summary = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
    if (entries.length === 0) {
      return h('div', { class: 'json-leaf' }, label, h('span', { class: 'json-empty' }, Array.isArray(value) ? '[]' : '{}'));
    }
    const children = h('div', { class: 'json-children' });
    const drawFrom = (start) => {
      const end = Math.min(entries.length, start + MANY_ENTRIES);
      children.append(...entries.slice(start, end).map(([k, v]) => jsonTree(v, k, openDepth, depth + 1)));
      if (end < entries.length) {
        const more = h('button', { type: 'button', class: 'json-more' }, `show ${Math.min(MANY_ENTRIES, entries.length - end)} more of ${entries.length - end}`);
        more.addEventListener('click', () => { more.remove(); drawFrom(end); });
        children.append(more);
      }
    };
    drawFrom(0);
    return h('details', { class: 'json-node', open: depth < openDepth && entries.length <= MANY_ENTRIES },
      h('summary', {}, label, h('span', { class: 'json-count' }, summary)), children);
  }
  const kind = value === null ? 'null' : typeof value;
  const text = JSON.stringify(value);
  if (kind === 'string' && text.length > LONG_STRING) {
    return h('details', { class: 'json-leaf json-long' },
      h('summary', {}, label, h('span', { class: 'json-string' }, `${text.slice(0, LONG_STRING)}…`), ' ',
        h('span', { class: 'json-count' }, `${value.length} characters`)),
      h('span', { class: 'json-string json-whole' }, text));
  }
  return h('div', { class: 'json-leaf' }, label, h('span', { class: `json-${kind}` }, text));
}

/** A section with a heading. */
export function section(title, ...children) {
  return h('section', { class: 'card' }, h('h2', {}, title), ...children);
}

/** A table: columns [{title, cell: row => node|string}], rows. */
export function table(columns, rows, attrs = {}) {
  return h('table', attrs,
    h('thead', {}, h('tr', {}, columns.map(c => h('th', {}, c.title)))),
    h('tbody', {}, rows.map(r => h('tr', c0(columns, r), columns.map(c => h('td', {}, c.cell(r)))))));
}

function c0(columns, r) {
  return columns.rowAttrs ? columns.rowAttrs(r) : {};
}

/** The error of a failed call, as text. */
export function errorBox(e) {
  return h('div', { class: 'error', role: 'alert' },
    e && e.code ? h('code', {}, e.code) : null, ' ', e && e.message ? e.message : String(e));
}
