// Connections (GET /v1/connections): the tenant's named connections that
// HTTP tasks authenticate with — each one's endpoint base and how it
// authorizes (an API key's header, a basic user name, bearer, or an OAuth 2
// client's token URL, client id and scope). The credential itself is
// write-only: the API never answers it, so it is never shown; set one with
// `sutra connection set` or `PUT /v1/connections/{name}`. Delete asks first.

import { get, api } from './api.js';
import { h, fill, when, table, errorBox } from './dom.js';
import { confirmAction } from './app.js';

// How a connection authorizes, in words (never the credential).
function authorization(a) {
  switch (a.type) {
    case 'api_key': return ['API key in header ', h('code', {}, a.header)];
    case 'basic': return ['basic, user ', h('code', {}, a.username)];
    case 'bearer': return 'bearer token';
    case 'oauth2_client_credentials':
      return ['OAuth 2 client ', h('code', {}, a.client_id), ' from ', h('code', {}, a.token_url), a.scope ? [' scope ', h('code', {}, a.scope)] : ''];
    default: return a.type;
  }
}

export async function connectionsPage(page) {
  const list = h('div', { id: 'connection-list' });
  const feedback = h('div', { id: 'connections-feedback' });
  fill(page, h('h1', {}, 'Connections'),
    h('p', { class: 'meta' }, 'Named credentials that HTTP tasks (sutra:http, q:http, HX http nodes) authenticate with. A credential is write-only: it is sealed on the server and never shown here.'),
    feedback, list);
  async function refresh() {
    const r = await get('/v1/connections');
    fill(list, r.connections.length === 0 ? h('p', { class: 'muted', id: 'no-connections' }, 'No connection yet: `sutra connection set NAME --endpoint URL --bearer` (the credential on stdin).')
      : table([
        { title: 'Name', cell: c => h('code', {}, c.name) },
        { title: 'Endpoint', cell: c => (c.endpoint ? h('code', {}, c.endpoint) : '') },
        { title: 'Authorization', cell: c => h('span', { class: 'auth' }, authorization(c.authorization)) },
        { title: 'Credential', cell: () => h('span', { class: 'muted' }, 'set (write-only)') },
        { title: 'Updated', cell: c => when(c.updatedAt) },
        { title: '', cell: c => h('button', { type: 'button', class: 'delete-connection', dataset: { name: c.name }, onclick: async () => {
          if (!(await confirmAction(`Delete connection ${c.name}?`, h('p', {}, 'HTTP tasks that name it fail with Credential.NotFound until it is set again.')))) return;
          try { await api('DELETE', `/v1/connections/${encodeURIComponent(c.name)}`); } catch (e) { fill(feedback, errorBox(e)); }
          refresh().catch((e) => fill(feedback, errorBox(e)));
        } }, 'Delete') },
      ], r.connections, { id: 'connections' }));
    list.querySelectorAll('#connections tbody tr').forEach((tr, i) => { tr.dataset.connection = r.connections[i].name; });
  }
  await refresh();
  return () => {};
}
