// `js-fetch`: a Sutra task in JavaScript that calls an HTTP API with the
// standard `fetch()` (componentize-js backs it with wasi:http's outgoing
// handler, which the host links only under the module's egress grant).
//
// Input: {"url", "method"?, "headers"?: {name: value}, "body"?: string}.
// Completes with {"status", "headers", "body"} (the body as text; parsed
// when it is JSON). A header or the body may carry a `{{secret:NAME}}`
// placeholder: the host fills it in on the wire, this code never sees it.
//
// Failures: a 5xx answer fails with `HTTP.<status>` (class `transient`, so
// a retry policy retries it), a 429 with class `rate_limit`; a request the
// host denied (not granted, a denied address, a secret not bound) or that
// could not be sent fails with `HTTP.REQUEST_FAILED`; malformed input with
// SUTRA.TASK.VALIDATION. No exception escapes `run`.

const VALIDATION = 'SUTRA.TASK.VALIDATION';

function failure(code, message, klass) {
  return { tag: 'failure', val: { code, message, details: klass ? JSON.stringify({ class: klass }) : undefined } };
}

async function attempt(text) {
  let req;
  try {
    req = JSON.parse(text);
  } catch (e) {
    throw failure(VALIDATION, `input is not JSON: ${e.message}`, 'invalid_input');
  }
  if (!req || typeof req.url !== 'string') throw failure(VALIDATION, 'input needs a "url" string', 'invalid_input');
  let resp;
  try {
    resp = await fetch(req.url, { method: req.method || 'GET', headers: req.headers || {}, body: req.body });
  } catch (e) {
    throw failure('HTTP.REQUEST_FAILED', `${req.method || 'GET'} ${req.url}: ${e && e.message ? e.message : e}`, 'transient');
  }
  const body = await resp.text();
  if (resp.status >= 500) throw failure(`HTTP.${resp.status}`, body.slice(0, 512), 'transient');
  if (resp.status === 429) throw failure('HTTP.429', body.slice(0, 512), 'rate_limit');
  let parsed = body;
  try { parsed = JSON.parse(body); } catch (_) { /* text */ }
  const headers = {};
  resp.headers.forEach((v, k) => { headers[k] = v; });
  return JSON.stringify({ status: resp.status, headers, body: parsed });
}

/** The task world's export: one attempt (a thrown value is the `task-error`). */
export async function run(ctx, input) {
  try {
    return await attempt(input);
  } catch (e) {
    if (e && (e.tag === 'failure' || e.tag === 'business')) throw e;
    throw failure(e && e.name ? e.name : 'Error', String(e && e.message ? e.message : e));
  }
}
