#!/usr/bin/env python3
"""A local stub API for examples/http-task: POST /charges answers a charge.

An amount of 0 is refused (422); an amount of 13 is unlucky: the first call
answers 503 with Retry-After: 2, the next one succeeds. Every request is
printed with its Idempotency-Key.  Usage: python3 stub.py [PORT]  (8080)
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

seen = {}


class Stub(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)) or 0)
        key = self.headers.get("idempotency-key", "")
        print(f"POST {self.path} key={key} body={body.decode()}", flush=True)
        try:
            amount = json.loads(body or b"{}").get("amount")
        except ValueError:
            amount = None
        seen[key] = seen.get(key, 0) + 1
        if amount == 0:
            return self.answer(422, {"error": "amount must be positive"})
        if amount == 13 and seen[key] == 1:
            return self.answer(503, {"error": "busy"}, {"Retry-After": "2"})
        return self.answer(201, {"id": f"ch_{abs(hash(key)) % 10**8}", "amount": amount})

    def answer(self, status, doc, headers=None):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
    HTTPServer(("127.0.0.1", port), Stub).serve_forever()
