// The console's only way to the server: the public /v1 API with the key
// the user signed in with. The key lives in sessionStorage (this tab only,
// gone when it closes) and travels only in the Authorization header —
// never in a URL, never in localStorage or a cookie.

const KEY = 'sutra.console.key';
const ROLE = 'sutra.console.role';
const TENANT = 'sutra.console.tenant';

export const session = {
  get key() { return sessionStorage.getItem(KEY); },
  get role() { return sessionStorage.getItem(ROLE); },
  get tenant() { return sessionStorage.getItem(TENANT); },
  set(key, who) {
    sessionStorage.setItem(KEY, key);
    sessionStorage.setItem(ROLE, who.role);
    if (who.tenant) sessionStorage.setItem(TENANT, who.tenant); else sessionStorage.removeItem(TENANT);
  },
  clear() { for (const k of [KEY, ROLE, TENANT]) sessionStorage.removeItem(k); },
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
 * Who a key belongs to (GET /v1/whoami): {role: 'admin'} or {role: 'tenant',
 * tenant}; an ApiError (401) for a key the server does not accept.
 */
export async function whoIs(key) {
  return api('GET', '/v1/whoami', undefined, key);
}
