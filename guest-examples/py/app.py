"""`py-task`: the Sutra task world in Python (built with componentize-py).

Invariant: `run` never lets an exception escape. Every exception is caught and
becomes a `task-error`, so the code a caller asked for survives (an escaping
exception would trap, and the host would only see `SUTRA.TASK.TRAP`).

Input: `{"do": "echo"|"fail"|"business", "code": ..., "message": ...}`
- `echo` completes with the input text unchanged;
- `fail` raises a failure with `code` (default empty: the host reports
  `SUTRA.TASK.FAILED`);
- `business` raises a business error with `code`;
- `throw` raises a plain `RuntimeError` (no code): it becomes a failure whose
  code is the exception's simple class name (`RuntimeError`), showing that no
  exception escapes.
Malformed input or an unknown `do` fails with `SUTRA.TASK.VALIDATION`; any
other exception becomes a failure coded with its simple class name (seed 004's
`<ExceptionName>`, e.g. `ValueError`) and the exception as message.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host
from wit_world.imports.types import (
    Context,
    ErrorInfo,
    TaskError_Business,
    TaskError_Failure,
)

VALIDATION = "SUTRA.TASK.VALIDATION"


class TaskFailure(Exception):
    """A failed attempt with a code, raised anywhere below `run`."""

    def __init__(self, code, message, details=None, business=False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
        self.business = business


def attempt(ctx, text):
    try:
        args = json.loads(text)
    except ValueError as e:
        raise TaskFailure(VALIDATION, f"input is not JSON: {e}", '{"class":"invalid_input"}')
    if not isinstance(args, dict):
        raise TaskFailure(VALIDATION, "input must be a JSON object", '{"class":"invalid_input"}')
    action = args.get("do")
    code = str(args.get("code") or "")
    if action == "echo":
        host.log(host.Level.INFO, f"py-task: echo on attempt {ctx.attempt}")
        return text
    if action == "fail":
        raise TaskFailure(code, args.get("message") or f"failure requested on attempt {ctx.attempt}")
    if action == "business":
        details = args.get("details")
        raise TaskFailure(
            code,
            args.get("message") or "business error requested",
            None if details is None else json.dumps(details),
            business=True,
        )
    if action == "throw":
        raise RuntimeError(args.get("message") or "exception requested")
    raise TaskFailure(VALIDATION, f'unknown action {action!r} in field "do"', '{"class":"invalid_input"}')


class WitWorld(wit_world.WitWorld):
    def run(self, ctx: Context, input: str) -> str:
        try:
            return attempt(ctx, input)
        except TaskFailure as e:
            info = ErrorInfo(code=e.code, message=e.message, details=e.details)
            raise Err(TaskError_Business(info) if e.business else TaskError_Failure(info))
        except Exception as e:  # noqa: BLE001 - wrapping every exception is the point
            name = type(e).__name__
            info = ErrorInfo(code=name, message=f"{name}: {e}", details=None)
            raise Err(TaskError_Failure(info))
