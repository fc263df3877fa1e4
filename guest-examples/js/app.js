// `js-task`: the Sutra task world in JavaScript (built with componentize-js).
//
// Invariant: `run` never lets an arbitrary exception escape. Every exception is
// caught and rethrown as a `task-error` variant, so the code a caller asked for
// survives (an unwrapped exception would lose its code or trap, and the host
// would only see `SUTRA.TASK.TRAP`).
//
// Input: {"do": "echo"|"fail"|"business", "code": ..., "message": ...}
// - `echo` completes with the input text unchanged;
// - `fail` fails with `code` (default empty: the host reports SUTRA.TASK.FAILED);
// - `business` raises a business error with `code`;
// - `throw` throws a plain TypeError (no code): it becomes a failure whose code
//   is the exception's simple class name (`TypeError`), showing that no
//   exception escapes.
// Malformed input or an unknown `do` fails with SUTRA.TASK.VALIDATION; any other
// exception becomes a failure coded with its simple class name (seed 004's
// `<ExceptionName>`, e.g. `RangeError`) and the exception as message.

import { log } from 'sutra:task/host@0.1.0';

const VALIDATION = 'SUTRA.TASK.VALIDATION';
const INVALID_INPUT = JSON.stringify({ class: 'invalid_input' });

/** A failed attempt with a code, thrown anywhere below `run`. */
class TaskFailure extends Error {
  constructor(code, message, details, business = false) {
    super(message);
    this.code = code;
    this.details = details;
    this.business = business;
  }
}

function attempt(ctx, text) {
  let args;
  try {
    args = JSON.parse(text);
  } catch (e) {
    throw new TaskFailure(VALIDATION, `input is not JSON: ${e.message}`, INVALID_INPUT);
  }
  if (args === null || typeof args !== 'object' || Array.isArray(args)) {
    throw new TaskFailure(VALIDATION, 'input must be a JSON object', INVALID_INPUT);
  }
  const code = args.code == null ? '' : String(args.code);
  switch (args.do) {
    case 'echo':
      log('info', `js-task: echo on attempt ${ctx.attempt}`);
      return text;
    case 'fail':
      throw new TaskFailure(code, args.message || `failure requested on attempt ${ctx.attempt}`);
    case 'business':
      throw new TaskFailure(
        code,
        args.message || 'business error requested',
        args.details === undefined ? undefined : JSON.stringify(args.details),
        true,
      );
    case 'throw':
      throw new TypeError(args.message || 'exception requested');
    default:
      throw new TaskFailure(VALIDATION, `unknown action ${JSON.stringify(args.do)} in field "do"`, INVALID_INPUT);
  }
}

/** The task world's export: one attempt. A thrown value is the `task-error`. */
export function run(ctx, input) {
  try {
    return attempt(ctx, input);
  } catch (e) {
    if (e instanceof TaskFailure) {
      throw {
        tag: e.business ? 'business' : 'failure',
        val: { code: e.code, message: e.message, details: e.details },
      };
    }
    const name = e instanceof Error ? e.name || (e.constructor && e.constructor.name) || 'Error' : 'Error';
    const message = e instanceof Error ? `${name}: ${e.message}` : String(e);
    throw { tag: 'failure', val: { code: name, message, details: undefined } };
  }
}
