// Tenants (the admin key): each tenant with its quotas and keys (ids only).

import { get } from './api.js';
import { h, fill, when, section, table } from './dom.js';

const limit = v => (v === null || v === undefined ? 'unlimited' : String(v));

export async function tenantsPage(page) {
  const { tenants } = await get('/v1/admin/tenants');
  const cols = [
    { title: 'Tenant', cell: t => t.name },
    { title: 'Created', cell: t => when(t.createdAt) },
    { title: 'Max instances', cell: t => limit(t.limits.maxInstances) },
    { title: 'Max module bytes', cell: t => limit(t.limits.maxModuleBytes) },
    { title: 'Fuel', cell: t => limit(t.limits.fuel) },
    { title: 'Deadline (ms)', cell: t => limit(t.limits.deadlineMs) },
    { title: 'Memory (bytes)', cell: t => limit(t.limits.memoryBytes) },
    { title: 'Keys', cell: t => h('span', { class: 'keys', dataset: { tenant: t.name } }, '…') },
  ];
  cols.rowAttrs = t => ({ dataset: { tenant: t.name } });
  fill(page, h('h1', {}, 'Tenants'),
    h('p', { class: 'muted' }, 'Signed in with the admin key. Deployments and instances are seen with a tenant\u2019s own key.'),
    section('Tenants', table(cols, tenants, { id: 'tenants' })));
  await Promise.all(tenants.map(async t => {
    const cell = page.querySelector(`span.keys[data-tenant="${CSS.escape(t.name)}"]`);
    try {
      const { keys } = await get(`/v1/admin/tenants/${encodeURIComponent(t.name)}/keys`);
      fill(cell, keys.map(k => h('code', { title: `created ${when(k.createdAt)}` }, k.prefix)));
    } catch (e) {
      fill(cell, '?');
    }
  }));
  return null;
}
