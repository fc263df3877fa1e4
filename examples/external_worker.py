#!/usr/bin/env python3
"""A Sutra external-task worker (pull channels), Python standard library only.

It long-polls `POST /v1/external-tasks/fetch-and-lock` for the channels it
serves, runs a handler on each task's variables, and answers:

- the handler returns a dict  -> `complete` (the dict is the call's output);
- it raises BpmnError(code)   -> `bpmn-error` (routed to the task's error boundary);
- it raises anything else     -> `failure` (spends one of the task's worker
  retries, `sutra.external-task.retries`; none left opens an incident).

Usage:
    SUTRA_SERVER=http://127.0.0.1:8080 SUTRA_TOKEN=sutra_... \
        python3 examples/external_worker.py reviews

Configure the channel first: `sutra channel set reviews --pull`.
"""

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request

SERVER = os.environ.get("SUTRA_SERVER", "http://127.0.0.1:8080").rstrip("/")
TOKEN = os.environ.get("SUTRA_TOKEN", "")
WORKER = os.environ.get("SUTRA_WORKER_ID", f"{socket.gethostname()}-{os.getpid()}")
LOCK_MS = 60_000
POLL_MS = 30_000


class BpmnError(Exception):
    """A modelled outcome: routed to the task's error boundary."""

    def __init__(self, code, message=""):
        super().__init__(message or code)
        self.code = code


def call(path, body, timeout=POLL_MS / 1000 + 10):
    """POST JSON; answers the decoded JSON (None for 204). Raises on an error answer."""
    req = urllib.request.Request(
        SERVER + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read().decode()
            return json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")
        raise RuntimeError(f"{path}: HTTP {e.code}: {detail}") from None


def handle(task):
    """Your work. Here: approve documents whose `pages` is at most 100."""
    variables = task["variables"] or {}
    pages = variables.get("pages", 1)
    if not isinstance(pages, int):
        raise ValueError(f"pages is not a number: {pages!r}")
    if pages > 100:
        raise BpmnError("TOO_LONG", f"{pages} pages")
    return {"approved": True, "reviewedBy": WORKER}


def serve(channels):
    print(f"worker {WORKER} serving {', '.join(channels)} on {SERVER}", file=sys.stderr)
    while True:
        try:
            fetched = call(
                "/v1/external-tasks/fetch-and-lock",
                {
                    "workerId": WORKER,
                    "channels": channels,
                    "maxTasks": 10,
                    "lockDuration": LOCK_MS,
                    "asyncResponseTimeout": POLL_MS,
                },
            )
        except (OSError, RuntimeError) as e:
            print(f"fetch failed: {e}; retrying in 5 s", file=sys.stderr)
            time.sleep(5)
            continue
        for task in fetched["tasks"]:
            base = f"/v1/external-tasks/{task['id']}"
            try:
                output = handle(task)
                call(base + "/complete", {"workerId": WORKER, "variables": output})
            except BpmnError as e:
                call(base + "/bpmn-error",
                     {"workerId": WORKER, "errorCode": e.code, "errorMessage": str(e)})
            except RuntimeError as e:
                # An answer the server refused (e.g. the lock was lost): nothing to undo.
                print(f"task {task['id']}: {e}", file=sys.stderr)
            except Exception as e:  # the handler failed: a worker-side failure
                try:
                    call(base + "/failure",
                         {"workerId": WORKER, "errorMessage": f"{type(e).__name__}: {e}",
                          "retryTimeout": 10_000})
                except RuntimeError as refused:
                    print(f"task {task['id']}: {refused}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: external_worker.py CHANNEL [CHANNEL...]")
    serve(sys.argv[1:])
