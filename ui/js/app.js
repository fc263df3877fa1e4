// The Sutra console: a hash-routed page over the public /v1 API.
//   #/                      → deployments (tenant) or tenants (admin)
//   #/deployments[/<id>]    #/instances[?state=&process=&since=]    #/instances/<id>    #/incidents
//   #/batches[/<id>]        #/connections    #/tenants
// Routes carry ids and filters only; the API key never appears in a URL.

import { session, whoIs } from './api.js';
import { h, fill, errorBox, timeMode, setTimeMode } from './dom.js';
import { deploymentsPage, deploymentPage } from './deployments.js';
import { instancesPage } from './instances.js';
import { instancePage } from './instance.js';
import { incidentsPage } from './incidents.js';
import { batchesPage, batchPage } from './batches.js';
import { connectionsPage } from './connections.js';
import { tenantsPage } from './tenants.js';

// Any Content-Security-Policy violation is kept for the browser tests to read.
window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`);
});

const main = document.getElementById('main');
let leave = null; // the current page's cleanup (timers, viewers)

/** Ask before an action; `body` is extra content (inputs). Answers true on confirm. */
export function confirmAction(title, ...body) {
  const dialog = document.getElementById('confirm');
  fill(document.getElementById('confirm-title'), title);
  fill(document.getElementById('confirm-body'), ...body);
  return new Promise((resolve) => {
    const done = (ok) => {
      ok_.removeEventListener('click', yes);
      cancel.removeEventListener('click', no);
      dialog.removeEventListener('cancel', no);
      dialog.close();
      resolve(ok);
    };
    const ok_ = document.getElementById('confirm-ok');
    const cancel = document.getElementById('confirm-cancel');
    const yes = () => done(true);
    const no = (e) => { if (e) e.preventDefault(); done(false); };
    ok_.addEventListener('click', yes);
    cancel.addEventListener('click', no);
    dialog.addEventListener('cancel', no);
    dialog.showModal();
  });
}

function nav() {
  const items = session.role === 'admin'
    ? [['#/tenants', 'Tenants']]
    : [['#/deployments', 'Deployments'], ['#/instances', 'Instances'], ['#/incidents', 'Incidents'], ['#/batches', 'Batches'], ['#/connections', 'Connections']];
  fill(document.getElementById('nav'), items.map(([href, t]) => h('a', { href }, t)));
  fill(document.getElementById('who'), session.role === 'admin' ? 'admin' : (session.role ? ['tenant ', h('strong', { id: 'who-tenant' }, session.tenant || '?')] : ''));
  document.getElementById('signout').hidden = !session.role;
  const tz = document.getElementById('time-mode');
  fill(tz, timeMode() === 'local' ? 'Times: local' : 'Times: UTC');
  tz.title = timeMode() === 'local' ? 'Times in this browser\u2019s zone; click for UTC' : 'Times in UTC (server time); click for this browser\u2019s zone';
}

function signIn() {
  const key = h('input', { id: 'key', type: 'password', autocomplete: 'off', spellcheck: 'false', placeholder: 'sutra_… or the admin key', required: true });
  const status = h('div', { id: 'signin-status' });
  const form = h('form', { id: 'signin-form', class: 'card signin' },
    h('h2', {}, 'Sign in'),
    h('p', { class: 'muted' }, 'A tenant API key shows that tenant\u2019s deployments and instances; the admin key shows the tenants. The key is kept for this tab only.'),
    h('label', { for: 'key' }, 'API key'), key,
    h('button', { id: 'signin', type: 'submit', class: 'primary' }, 'Sign in'), status);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    fill(status, 'Checking…');
    try {
      const who = await whoIs(key.value.trim());
      session.set(key.value.trim(), who);
      key.value = '';
      location.hash = who.role === 'admin' ? '#/tenants' : '#/deployments';
      route();
    } catch (err) {
      fill(status, errorBox(err.status === 401 ? { code: err.code, message: 'this key is not accepted' } : err));
    }
  });
  return form;
}

async function route() {
  if (leave) { leave(); leave = null; }
  nav();
  if (!session.key) {
    fill(main, signIn());
    document.getElementById('key').focus();
    return;
  }
  const [path, qs] = (location.hash.slice(1) || '/').split('?');
  const params = new URLSearchParams(qs || '');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const page = h('div', { class: 'page' });
  fill(main, page);
  try {
    if (session.role === 'admin') {
      leave = await tenantsPage(page, parts[1]);
    } else if (parts[0] === 'deployments' && parts[1]) {
      leave = await deploymentPage(page, parts[1]);
    } else if (parts[0] === 'instances' && parts[1]) {
      leave = await instancePage(page, parts[1]);
    } else if (parts[0] === 'instances') {
      leave = await instancesPage(page, params);
    } else if (parts[0] === 'connections') {
      leave = await connectionsPage(page);
    } else if (parts[0] === 'batches' && parts[1]) {
      leave = await batchPage(page, parts[1]);
    } else if (parts[0] === 'batches') {
      leave = await batchesPage(page);
    } else if (parts[0] === 'incidents') {
      leave = await incidentsPage(page, params);
    } else {
      leave = await deploymentsPage(page);
    }
  } catch (e) {
    if (e.status === 401) { session.clear(); return route(); }
    page.append(errorBox(e));
  }
}

document.getElementById('time-mode').addEventListener('click', () => {
  setTimeMode(timeMode() === 'local' ? 'utc' : 'local');
  route();
});
document.getElementById('signout').addEventListener('click', () => {
  session.clear();
  location.hash = '#/';
  route();
});
window.addEventListener('hashchange', route);
route();
