"""Upload -> first attempt done, through a real `sutra serve` (issue 17).

    python3 benches/http_deploy.py <sutra binary> <guest.wasm> <runs>

Starts `sutra serve` on a fresh SQLite file (port 18080, its own cache dir),
creates a tenant, then per run: POSTs a multipart bundle (a one-task BPMN
process and the guest, made a fresh module by a random custom section, so no
compile cache hits), then starts an instance with {"do": "echo"}; the start
answers once the attempt completed. Prints deploy and upload -> first attempt
wall times. Runs are 12 s apart so that the previous upload's optimised
compile (behind the quick tier, 7-8 s on a quiet machine) does not overlap.
"""
import json, os, subprocess, sys, tempfile, time, urllib.request
BIN, GUEST, RUNS = sys.argv[1], sys.argv[2], int(sys.argv[3])
ADMIN = "admin-key-0123456789abcdef"
d = tempfile.mkdtemp()
env = dict(os.environ, SUTRA_ADMIN_KEY=ADMIN, HOME=d, XDG_CACHE_HOME=d)
srv = subprocess.Popen([BIN, "serve", "--db", f"sqlite://{d}/s.db", "--listen", "127.0.0.1:18080"],
                       env=env, stdout=subprocess.DEVNULL, stderr=open(f"{d}/log", "w"))
base = "http://127.0.0.1:18080"
def req(method, path, key, body=None, ctype="application/json"):
    r = urllib.request.Request(base + path, data=body, method=method,
                               headers={"Authorization": f"Bearer {key}", "Content-Type": ctype})
    with urllib.request.urlopen(r, timeout=600) as resp:
        return json.loads(resp.read() or b"null")
for _ in range(200):
    try:
        urllib.request.urlopen(base + "/healthz", timeout=1); break
    except Exception:
        time.sleep(0.05)
key = req("POST", "/v1/admin/tenants", ADMIN, json.dumps({"name": "t"}).encode())["key"]
BPMN = '''<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="s"/><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:guest"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="e"/><bpmn:endEvent id="e"/>
  </bpmn:process></bpmn:definitions>'''
wasm = open(GUEST, "rb").read()
def leb(n):
    out = bytearray()
    while True:
        b = n & 0x7f; n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n: return bytes(out)
for i in range(RUNS):
    if i:
        time.sleep(12)  # let the previous upload's optimised compile (7-8 s quiet) finish
    name = b"bench-nonce"; payload = os.urandom(16)
    body_sec = leb(len(name)) + name + payload
    fresh = wasm + b"\x00" + leb(len(body_sec)) + body_sec
    boundary = "----sutra%d" % i
    parts = [(b'Content-Disposition: form-data; name="definition"; filename="p.bpmn"\r\nContent-Type: application/xml\r\n\r\n', BPMN.encode()),
             (b'Content-Disposition: form-data; name="guest"; filename="g.wasm"\r\nContent-Type: application/wasm\r\n\r\n', fresh)]
    mp = b"".join(b"--" + boundary.encode() + b"\r\n" + h + c + b"\r\n" for h, c in parts) + b"--" + boundary.encode() + b"--\r\n"
    t0 = time.perf_counter()
    req("POST", "/v1/deployments", key, mp, f"multipart/form-data; boundary={boundary}")
    t1 = time.perf_counter()
    inst = req("POST", "/v1/processes/p/instances", key, json.dumps({"variables": {"do": "echo"}}).encode())
    t2 = time.perf_counter()
    print(f"{os.path.basename(GUEST)} run {i+1}: deploy {t1-t0:.2f} s, upload -> first attempt done {t2-t0:.2f} s, state {inst.get('state')}, load {os.getloadavg()[0]:.2f}", flush=True)
srv.terminate(); srv.wait()
