// Smoke test of the built guests, without the Sutra engine: each component in
// <repo>/target/guests is transpiled to JavaScript with jco (installed by
// build.sh as a dependency of componentize-js) and its `run` export called
// under Node with a stub `sutra:task/host`.
//
//   guest-examples/build.sh && node guest-examples/smoke.mjs
//
// Invariant: every case states the one outcome a user of that guest relies on
// (ok output, or error variant + code, or a trap), and the run ends with the
// line `N passed, N failed` and a non-zero exit if any case failed. `loop` is
// not run here (Node cannot interrupt it); the engine's sandbox tests cover it.

import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

// py-task uses the extended-const proposal, behind a flag on Node 20.
const FLAG = '--experimental-wasm-extended-const';
if (!process.execArgv.includes(FLAG) && Number(process.versions.node.split('.')[0]) < 22) {
  const r = spawnSync(process.execPath, [FLAG, ...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
  });
  process.exit(r.status ?? 1);
}

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const guests = join(root, 'target', 'guests');
const tools = join(root, 'target', 'guest-tools', 'js');
const jco = join(tools, 'node_modules', '.bin', 'jco');
// Under tools/ so the transpiled code finds @bytecodealliance/preview2-shim.
const work = join(tools, 'smoke');

rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });
writeFileSync(
  join(work, 'host.js'),
  'export const lines = [];\nexport function log(level, message) { lines.push([level, message]); }\n',
);

const transpiled = new Set();
const loaded = {};
let generation = 0;
async function guest(name) {
  if (!transpiled.has(name)) {
    execFileSync(jco, [
      'transpile', join(guests, `${name}.wasm`), '-o', join(work, name), '--quiet',
      '--map', 'sutra:task/host@0.1.0=../host.js', '--map', 'sutra:task/types@0.1.0=../host.js',
    ]);
    transpiled.add(name);
  }
  if (!loaded[name]) {
    // A query makes a fresh module instance (a trapped instance cannot be re-entered).
    generation += 1;
    loaded[name] = await import(`${pathToFileURL(join(work, name, `${name}.js`)).href}?${generation}`);
  }
  return loaded[name];
}

const host = await import(pathToFileURL(join(work, 'host.js')).href);

/** Runs one attempt: {ok} or {err: {tag, val}} or {trap: message}. */
async function attempt(name, input, attempt = 1) {
  const m = await guest(name);
  const ctx = { tenant: 'acme', instanceId: 'inst-1', taskId: 'task-1', attempt, idempotencyKey: 'idem-1' };
  host.lines.length = 0;
  try {
    return { ok: m.run(ctx, typeof input === 'string' ? input : JSON.stringify(input)) };
  } catch (e) {
    if (e && e.payload && e.payload.tag) return { err: e.payload };
    if (e && e.tag) return { err: e };
    delete loaded[name];
    return { trap: String(e) };
  }
}

function expectOk(r, check) {
  if (!('ok' in r)) throw new Error(`expected ok, got ${JSON.stringify(r)}`);
  check(JSON.parse(r.ok), r.ok);
}
function expectErr(r, tag, code, check = () => {}) {
  if (!r.err || r.err.tag !== tag || r.err.val.code !== code) {
    throw new Error(`expected ${tag} ${JSON.stringify(code)}, got ${JSON.stringify(r)}`);
  }
  check(r.err.val);
}
function expectTrap(r) {
  if (!('trap' in r)) throw new Error(`expected a trap, got ${JSON.stringify(r)}`);
}
function eq(a, b, what) {
  if (JSON.stringify(a) !== JSON.stringify(b)) {
    throw new Error(`${what}: expected ${JSON.stringify(b)}, got ${JSON.stringify(a)}`);
  }
}

const VALIDATION = 'SUTRA.TASK.VALIDATION';
const INVALID = JSON.stringify({ class: 'invalid_input' });
const applicant = { name: 'Ada', income: 85000, debts: 12000, age: 36, missedPayments: 1 };
const cases = [];
const test = (name, fn) => cases.push([name, fn]);

// chaos
test('chaos echo returns the input unchanged', async () => {
  const input = '{"do":"echo", "x": [1, 2]}';
  eq((await attempt('chaos', input)).ok, input, 'output');
});
test('chaos fail fails with the code while attempt < until', async () =>
  expectErr(await attempt('chaos', { do: 'fail', code: 'Api.Timeout', until: 3, class: 'transient' }, 2),
    'failure', 'Api.Timeout', (v) => eq(v.details, '{"class":"transient"}', 'details')));
test('chaos fail completes with the attempt once attempt >= until', async () =>
  expectOk(await attempt('chaos', { do: 'fail', until: 3 }, 3), (o) => eq(o, { attempt: 3 }, 'output')));
test('chaos fail without until always fails, default code empty', async () =>
  expectErr(await attempt('chaos', { do: 'fail' }, 99), 'failure', ''));
test('chaos business raises a business error with the code', async () =>
  expectErr(await attempt('chaos', { do: 'business', code: 'Order.Rejected' }), 'business', 'Order.Rejected'));
test('chaos unknown action is a validation failure', async () =>
  expectErr(await attempt('chaos', { do: 'nope' }), 'failure', VALIDATION,
    (v) => eq(v.details, INVALID, 'details')));
test('chaos context reports the context fields', async () =>
  expectOk(await attempt('chaos', { do: 'context' }, 4), (o) => eq(o, {
    attempt: 4, idempotencyKey: 'idem-1', instanceId: 'inst-1', taskId: 'task-1', tenant: 'acme',
  }, 'context')));
test('chaos big-output returns exactly `bytes` bytes of JSON', async () =>
  expectOk(await attempt('chaos', { do: 'big-output', bytes: 1000 }), (o, raw) => {
    eq(raw.length, 1000, 'length');
    eq(typeof o, 'string', 'type');
  }));
test('chaos alloc allocates and touches the bytes', async () =>
  expectOk(await attempt('chaos', { do: 'alloc', bytes: 1 << 20 }), (o) => eq(o.allocated, 1 << 20, 'allocated')));
test('chaos log calls the host log', async () => {
  expectOk(await attempt('chaos', { do: 'log', message: 'hello', level: 'warn' }), () => {});
  eq(host.lines, [['warn', 'hello']], 'host log');
});
test('chaos sleep sleeps on the WASI clock', async () => {
  const t = Date.now();
  expectOk(await attempt('chaos', { do: 'sleep', ms: 50 }), (o) => eq(o, { slept: 50 }, 'output'));
  if (Date.now() - t < 45) throw new Error('returned before 50 ms');
});
test('chaos probe reports files, env and socket', async () =>
  expectOk(await attempt('chaos', { do: 'probe' }), (o) => {
    eq(Array.isArray(o.files) && Array.isArray(o.env) && typeof o.socket === 'boolean', true, 'shape');
  }));
test('chaos panic traps', async () => expectTrap(await attempt('chaos', { do: 'panic' })));
test('chaos recurse overflows the stack', async () => expectTrap(await attempt('chaos', { do: 'recurse' })));
test('chaos recurse with a depth completes', async () =>
  expectOk(await attempt('chaos', { do: 'recurse', depth: 100 }), () => {}));

// score
test('score scores a good applicant', async () =>
  expectOk(await attempt('score', { applicant }), (o) => eq(o, { approved: true, band: 'B', score: 744 }, 'score')));
test('score refuses a poor applicant', async () =>
  expectOk(await attempt('score', { applicant: { ...applicant, income: 20000, debts: 40000, missedPayments: 4 } }),
    (o) => eq([o.band, o.approved], ['E', false], 'band')));
for (const [field, value] of [['income', -1], ['age', 17], ['name', ''], ['missedPayments', 1.5]]) {
  test(`score names a bad ${field}`, async () =>
    expectErr(await attempt('score', { applicant: { ...applicant, [field]: value } }), 'failure', VALIDATION, (v) => {
      if (!v.message.includes(`applicant.${field}`)) throw new Error(`message ${v.message} does not name ${field}`);
      eq(v.details, INVALID, 'details');
    }));
}

// py-task and js-task
for (const name of ['py-task', 'js-task']) {
  test(`${name} echo`, async () => {
    const input = '{"do":"echo","a":[1]}';
    eq((await attempt(name, input)).ok, input, 'output');
  });
  test(`${name} fail keeps the code`, async () =>
    expectErr(await attempt(name, { do: 'fail', code: 'Api.Timeout' }), 'failure', 'Api.Timeout'));
  test(`${name} business keeps the code`, async () =>
    expectErr(await attempt(name, { do: 'business', code: 'Order.Rejected' }), 'business', 'Order.Rejected'));
  test(`${name} a plain exception becomes a failure, not a trap`, async () =>
    expectErr(await attempt(name, { do: 'throw' }), 'failure', ''));
  test(`${name} bad input is a validation failure`, async () =>
    expectErr(await attempt(name, 'not json'), 'failure', VALIDATION));
}

let passed = 0;
let failed = 0;
for (const [name, fn] of cases) {
  try {
    await fn();
    passed += 1;
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e.message}`);
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
