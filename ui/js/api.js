// The console's only way to the server: the public /v1 API with the key
// the user signed in with. The key lives in sessionStorage (this tab only,
// gone when it closes) and travels only in the Authorization header —
// never in a URL, never in localStorage or a cookie.

const KEY = 'sutra.console.key';
const ROLE = 'sutra.console.role';

export const session = {
  get key() { return sessionStorage.getItem(KEY); },
  get role() { return sessionStorage.getItem(ROLE); },
  set(key, role) { sessionStorage.setItem(KEY, key); sessionStorage.setItem(ROLE, role); },
  clear() { sessionStorage.removeItem(KEY); sessionStorage.removeItem(ROLE); },
};

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** Call the API; answers the parsed JSON (or text for non-JSON answers). */
export async function api(method, path, body, key = session.key) {
  const headers = { Accept: 'application/json, application/xml' };
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let resp;
  try {
    resp = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer',
    });
  } catch (e) {
    throw new ApiError(0, 'NETWORK', `the server cannot be reached: ${e.message}`);
  }
  const type = resp.headers.get('content-type') || '';
  const data = type.includes('json') ? await resp.json().catch(() => null) : await resp.text();
  if (!resp.ok) {
    const err = data && typeof data === 'object' ? data : {};
    throw new ApiError(resp.status, err.code || `HTTP ${resp.status}`, err.message || String(data), err.details);
  }
  return data;
}

export const get = (path) => api('GET', path);
export const post = (path, body) => api('POST', path, body === undefined ? {} : body);

/** `?a=1&b=2` from an object, skipping empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}

/**
 * Who a key belongs to: 'admin' when it may list tenants, 'tenant' when it may
 * list deployments; an ApiError (401) otherwise.
 */
export async function whoIs(key) {
  try {
    await api('GET', '/v1/admin/tenants', undefined, key);
    return 'admin';
  } catch (e) {
    if (e.status !== 401 && e.status !== 403 && e.status !== 404) throw e;
  }
  await api('GET', '/v1/deployments', undefined, key);
  return 'tenant';
}
