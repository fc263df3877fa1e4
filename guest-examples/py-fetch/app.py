"""`py-fetch`: a Sutra task in Python that calls an HTTP API through
`wasi:http/outgoing-handler` (componentize-py bindings), which the host links
only under the module's egress grant.

Input: `{"url", "method"?, "headers"?: {name: value}, "body"?: string}`.
Completes with `{"status", "headers", "body"}` (the body parsed when it is
JSON). A header or the body may carry a `{{secret:NAME}}` placeholder: the host
fills it in on the wire, this code never sees the value.

Failures: a 5xx answer fails with `HTTP.<status>` (class `transient`, so a retry
policy retries it), a 429 with class `rate_limit`; a request the host denied
(not granted, a denied address, a secret not bound) or that could not be sent
fails with `HTTP.REQUEST_FAILED` and the wasi:http error code; malformed input
with `SUTRA.TASK.VALIDATION`. No exception escapes `run`.
"""

import json
from urllib.parse import urlsplit

import wit_world
from componentize_py_types import Err, Ok
from wit_world.imports import outgoing_handler, streams
from wit_world.imports import wasi_http_types as http
from wit_world.imports.sutra_task_types import ErrorInfo, TaskError_Failure

VALIDATION = "SUTRA.TASK.VALIDATION"
METHODS = {
    "GET": http.Method_Get(),
    "HEAD": http.Method_Head(),
    "POST": http.Method_Post(),
    "PUT": http.Method_Put(),
    "DELETE": http.Method_Delete(),
    "PATCH": http.Method_Patch(),
    "OPTIONS": http.Method_Options(),
}


class Failure(Exception):
    def __init__(self, code, message, klass=None):
        super().__init__(message)
        self.code = code
        self.klass = klass


def send(req):
    url = urlsplit(req["url"])
    if url.scheme not in ("http", "https") or not url.netloc:
        raise Failure(VALIDATION, f"not an http(s) URL: {req['url']}", "invalid_input")
    method = str(req.get("method", "GET")).upper()
    headers = [(k, str(v).encode()) for k, v in (req.get("headers") or {}).items()]
    request = http.OutgoingRequest(http.Fields.from_list(headers))
    request.set_method(METHODS.get(method) or http.Method_Other(method))
    request.set_scheme(http.Scheme_Https() if url.scheme == "https" else http.Scheme_Http())
    request.set_authority(url.netloc)
    request.set_path_with_query(url.path + (f"?{url.query}" if url.query else "") or "/")
    body = request.body()
    future = outgoing_handler.handle(request, None)
    out = body.write()
    data = req.get("body")
    if data is not None:
        data = data.encode() if isinstance(data, str) else json.dumps(data).encode()
        for i in range(0, len(data), 4096):
            out.blocking_write_and_flush(data[i : i + 4096])
    out.__exit__(None, None, None)
    http.OutgoingBody.finish(body, None)
    future.subscribe().block()
    answer = future.get()
    if answer is None or isinstance(answer, Err) or isinstance(answer.value, Err):
        error = answer.value.value if answer is not None and isinstance(answer, Ok) else answer
        raise Failure("HTTP.REQUEST_FAILED", f"{method} {req['url']}: {error}", "transient")
    response = answer.value.value
    status = response.status()
    names = {}
    for name, value in response.headers().entries():
        names[name] = value.decode(errors="replace")
    incoming = response.consume()
    stream = incoming.stream()
    chunks = []
    while True:
        try:
            chunks.append(stream.blocking_read(65536))
        except Err as e:
            if isinstance(e.value, streams.StreamError_Closed):
                break
            raise Failure("HTTP.REQUEST_FAILED", f"reading the body: {e.value}", "transient")
    text = b"".join(chunks).decode(errors="replace")
    if status >= 500:
        raise Failure(f"HTTP.{status}", text[:512], "transient")
    if status == 429:
        raise Failure("HTTP.429", text[:512], "rate_limit")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    return {"status": status, "headers": names, "body": parsed}


class WitWorld(wit_world.WitWorld):
    def run(self, ctx, input):
        try:
            try:
                req = json.loads(input)
            except ValueError as e:
                raise Failure(VALIDATION, f"input is not JSON: {e}", "invalid_input")
            if not isinstance(req, dict) or not isinstance(req.get("url"), str):
                raise Failure(VALIDATION, 'input needs a "url" string', "invalid_input")
            return json.dumps(send(req))
        except Failure as f:
            details = json.dumps({"class": f.klass}) if f.klass else None
            raise Err(TaskError_Failure(ErrorInfo(f.code, str(f), details)))
        except Exception as e:  # noqa: BLE001 — no exception escapes
            raise Err(TaskError_Failure(ErrorInfo(type(e).__name__, f"{type(e).__name__}: {e}", None)))
