#!/usr/bin/python3
"""double.py — a strict test double of Azure Machine Learning's control plane
(ARM, api-version 2024-10-01) and of the Entra ID token endpoint, for flow's
end-to-end tests.  Blob storage is not faked: point --blob-endpoint at Azurite.

    /usr/bin/python3 tests/aml/double.py --dir DIR [--port 0] [--http-port 0]
        [--config FILE] [--tenant T] [--client-id C] [--client-secret S]
        [--subscription S] [--resource-group RG] [--workspace WS] [--api-version V]
        [--token-lifetime SECONDS] [--phase-seconds SECONDS]
        [--blob-endpoint http://127.0.0.1:10000/devstoreaccount1] [--blob-key KEY]
        [--datastore-secrets AccountKey|Sas] [--execute-jobs] [--keep-job-dirs]

Needs Python 3 with python3-jsonschema and python3-cryptography, and openssl.
Settings come from the defaults (aml_config.DEFAULTS), then DIR/config.json or
--config (any key of DEFAULTS), then the flags.  Runs until SIGTERM or SIGINT.

What it writes in DIR (DIR/port last, atomically: wait for it)
  ca.pem                 CA of the server certificate (curl --cacert, flow's ca_file)
  client.pem             key + certificate registered for the client id (AZURE_CLIENT_CERTIFICATE_PATH)
  client-encrypted.pem   the same, key encrypted with client_certificate_password
  federated-token        the accepted workload-identity assertion (AZURE_FEDERATED_TOKEN_FILE)
  settings.json          every id, secret, URL and path a test needs
  env.sh                 the same as AML_DOUBLE_* shell variables (sourcing it sets no AZURE_* variable)
  requests.jsonl         one JSON line per request served (not the control API): seq, time, t, listener,
                         conn, method, path, query, headers (Authorization as "Bearer <redacted>", other
                         secrets "<redacted>"), body (JSON, or the token form with secrets redacted), assertion
                         (a client assertion's decoded header and claims), status, op (e.g. "jobs.put",
                         "token", "msi"), error_code, client_request_id, fault, duration_ms
  http_port, port        the plain-HTTP and the HTTPS port
  jobs/<job>/            executed jobs (execute_jobs): std_log.txt, and the working directory wd.XXXX
                         while the job runs (kept afterwards with keep_job_dirs)
settings.json also holds datastore (workspaceblobstore), datastore_container (its container's URL:
AML_DOUBLE_DATASTORE_CONTAINER in env.sh), datastore_containers ({name: URL}, settings.json only),
blob_account and jobs_dir.

Listeners (both on 127.0.0.1, HTTP/1.1 keep-alive, Content-Length on every reply)
  https://127.0.0.1:PORT      everything: Entra token endpoint, ARM, managed identity, control API
  http://127.0.0.1:HTTP_PORT  managed identity (as in reality, plain HTTP) and the control API only
Services
  POST /{tenant}/oauth2/v2.0/token                     Entra v2 client credentials (aml_entra.py):
                                                       authority host = https://127.0.0.1:PORT
  GET  /msi/token?api-version=2017-09-01&resource=...  MSI_ENDPOINT (AML compute), header secret
  GET  /identity?api-version=2019-08-01&resource=...   IDENTITY_ENDPOINT (App Service), header X-IDENTITY-HEADER
  GET  /metadata/identity/oauth2/token?...             IMDS (IMDS_ENDPOINT = http://127.0.0.1:HTTP_PORT)
  /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.MachineLearningServices/workspaces/{ws}/...
      jobs (GET list; GET/PUT/DELETE {id}; POST {id}/cancel), codes/{name}[/versions[/{v}[/startPendingUpload]]],
      environments/{name}[/versions[/{v}]], computes[/{name}]        (aml_arm.py; life cycle: aml_jobs.py)
      datastores (GET list: count, isDefault, names, searchText, orderBy, orderByAsc), datastores/{name} (GET),
      datastores/{name}/listSecrets (POST, no body; op "datastores.listSecrets"; its answer is logged as
      "response" with the secret "<redacted>").  Each configured datastore (config datastores) is an AzureBlob
      datastore on the blob endpoint's account, with its own container (workspaceblobstore: blob_container, the
      one startPendingUpload hands out), created at start when a blob endpoint is set.  listSecrets answers
      {"secretsType": "AccountKey", "key": blob_key}, or with datastore_secrets "Sas"
      {"secretsType": "Sas", "sasToken": <container SAS query, sp=racwdl, no leading ?>}.
  GET  /subscriptions/{s}/providers/Microsoft.MachineLearningServices/locations/{loc}/mfeOperationResults/{op}
      the Location of a 202 cancel/delete: 202 while pending, 200 when done
With a blob endpoint, a uri_file/uri_folder input on azureml://datastores/<ds>/paths/<p> that holds no
blob (uri_file: the blob <p>; uri_folder: nothing under <p>/) fails the job at Preparing with a UserError
naming the input and its URI (checked when the job is PUT).
Jobs that really run (execute_jobs; aml_exec.py has the whole model): code snapshot and inputs are
downloaded from blob storage, ${{inputs.X}}/${{outputs.X}} become local paths, the command runs as
`/bin/bash -c` in N processes on this machine with the rank variables Azure ML sets (PyTorch, Mpi,
TensorFlow), outputs are uploaded; the job is Running while they run, Failed with the exit status and
stderr tail when one fails; cancel, timeout and shutdown kill them.  Every "node" is this machine.
Without --blob-endpoint, startPendingUpload still answers, with a blobUri/sasUri on
https://127.0.0.1:1/... that refuses every upload.

Control API (no auth; loopback only), on both listeners
  GET  /_double/health                        "ok"
  GET  /_double/settings                      what settings.json holds
  GET  /_double/config  POST {key: value}     read / change runtime settings (token_lifetime, phase_seconds,
                                              phases, cancel_seconds, cancel_mode, cancel_retry_after,
                                              page_size, clock_skew, assertion_max_lifetime, check_snapshot,
                                              datastore_secrets, execute_jobs, keep_job_dirs; execute_jobs
                                              applies to jobs PUT after the change)
  POST /_double/faults {fault}                add a fault (see aml_faults.py), answers {"id": N}
  GET  /_double/faults   DELETE /_double/faults[/{id}]
  POST /_double/expire_tokens                 every token issued so far is expired from now on
  GET  /_double/requests[?since=SEQ]          the request log as a JSON array
  GET  /_double/stats                         connections, tls handshakes, requests by op and status,
                                              tokens issued by credential, faults served
  POST /_double/reset                         forget jobs (killing executed ones), code versions, faults,
                                              requests, counters
  GET  /_double/jobs   GET /_double/jobs/{name}   the double's view: status history, error, request, and for
                                              an executed job "run": {dir, log, done, error, pids}
  GET  /_double/jobs/{name}/std_log.txt       the job's user_logs/std_log.txt (a convention of the double:
                                              real logs live on AML's data plane); an executed job's holds
                                              its processes' stdout and stderr ("[rank R] " before each line
                                              when there are several)
  POST /_double/jobs/{name}/outcome {"status": "Failed"|"Completed", "message": "..."}
  POST /_double/jobs/{name}/hold              stays Running until
  POST /_double/jobs/{name}/release
  POST /_double/jobs/{name}/force {"status": S} S at once; the clock stops until another force
"""
import argparse
import base64
import json
import os
import secrets
import shlex
import signal
import socket
import ssl
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import aml_config  # noqa: E402
from aml_arm import ArmApi  # noqa: E402
from aml_blob import BlobStore  # noqa: E402
from aml_entra import Entra, TokenStore  # noqa: E402
from aml_exec import Runner  # noqa: E402
from aml_faults import Faults  # noqa: E402
from aml_http import Reply, Request, arm_error, iso  # noqa: E402
from aml_jobs import ALL_STATUSES  # noqa: E402
from aml_pki import ClientCert, b64url, make_all  # noqa: E402
from aml_schema import StrictSchema  # noqa: E402

MAX_BODY = 16 << 20
LOGGED_HEADERS = ("Content-Type", "Content-Length", "Transfer-Encoding", "Accept", "User-Agent", "Connection",
                  "Expect", "x-ms-client-request-id", "x-ms-correlation-request-id",
                  "x-ms-return-client-request-id", "client-request-id", "Metadata")
SECRET_HEADERS = ("secret", "X-IDENTITY-HEADER")


class App:
    """Everything a request needs, shared by both listeners' threads."""

    def __init__(self, cfg, d, client_cert):
        self.cfg = cfg
        self.dir = d
        self.tokens = TokenStore()
        self.entra = Entra(cfg, self.tokens, client_cert)
        self.blob = BlobStore(cfg["blob_endpoint"], cfg["blob_key"], cfg["blob_container"], cfg["blob_account"])
        self.arm = ArmApi(cfg, self.tokens, StrictSchema(), self.blob)
        self.runner = Runner(self.arm, os.path.join(d, "jobs"))
        self.runner.start()
        self.faults = Faults()
        self.lock = threading.Lock()
        self.log_path = os.path.join(d, "requests.jsonl")
        self.settings = {}
        self._reset_counters()
        open(self.log_path, "w").close()

    def _reset_counters(self):
        self.records = []
        self.seq = 0
        self.conn_seq = getattr(self, "conn_seq", 0)
        self.connections = {"https": 0, "http": 0}
        self.tls_handshakes = 0
        self.tls_failures = 0
        self.by_op = {}
        self.by_status = {}

    # -- counters -----------------------------------------------------------

    def count_connection(self, listener):
        with self.lock:
            self.connections[listener] += 1

    def count_tls(self, ok):
        with self.lock:
            if ok:
                self.tls_handshakes += 1
            else:
                self.tls_failures += 1

    def next_conn_id(self):
        with self.lock:
            self.conn_seq += 1
            return self.conn_seq

    # -- dispatch -------------------------------------------------------------

    def classify(self, req):
        p = req.path
        if p.startswith("/subscriptions/") or p == "/subscriptions":
            return "arm", self.arm.handle
        if p == "/msi/token":
            return "msi", self.entra.msi
        if p == "/identity":
            return "msi", self.entra.identity
        if p == "/metadata/identity/oauth2/token":
            return "msi", self.entra.imds
        parts = p.split("/")
        if len(parts) == 5 and parts[2:] == ["oauth2", "v2.0", "token"] and parts[1]:
            return "token", lambda r: self.entra.token(r, parts[1])
        return None, None

    def dispatch(self, req):
        if req.path.startswith("/_double/") or req.path == "/_double":
            r = self.control(req)
            r.kind = "control"
            return r
        kind, fn = self.classify(req)
        if kind is None or (req.listener == "http" and kind != "msi"):
            r = arm_error(404, "NotFound", "Nothing is served at %s %s on the %s listener." % (
                req.method, req.path, req.listener))
            r.op, r.kind = "unknown", "unknown"
            return r
        fault = self.faults.take(req, kind)
        if fault is not None and fault.action in ("delay", "status") and fault.delay:
            time.sleep(fault.delay)
        if fault is not None and fault.action == "drop":
            r = Reply(0)
            r.drop = True
        elif fault is not None and fault.action == "status":
            r = self._fault_reply(req, kind, fault)
        else:
            r = fn(req)
            if fault is not None and fault.action == "drop_after":
                r.drop = True
            if fault is not None and fault.action == "html_after":
                done = r
                r = Reply(200, "<html><body>502 Bad Gateway (from a proxy)</body></html>",
                          content_type="text/html")
                if hasattr(done, "op"):
                    r.op = done.op
        if fault is not None:
            r.fault = fault.id
        r.kind = kind
        if not hasattr(r, "op"):
            r.op = kind
        return r

    def _fault_reply(self, req, kind, f):
        headers = []
        if f.retry_after is not None:
            if f.retry_after_http_date:
                headers.append(("Retry-After", time.strftime("%a, %d %b %Y %H:%M:%S GMT",
                                                             time.gmtime(time.time() + f.retry_after))))
            else:
                headers.append(("Retry-After", str(f.retry_after)))
        if kind == "token":
            r = Reply(f.status, {"error": "temporarily_unavailable", "error_description": f.message,
                                 "error_codes": [], "timestamp": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()),
                                 "trace_id": "", "correlation_id": ""}, headers)
            r.error_code = "temporarily_unavailable"
        else:
            r = arm_error(f.status, f.code, f.message, headers=headers)
            if kind == "arm":
                self.arm._arm_headers(req, r)
        r.op = "fault"
        return r

    # -- the request log --------------------------------------------------------

    def record(self, req, reply, t0):
        headers = {}
        for h in LOGGED_HEADERS:
            if req.header(h) is not None:
                headers[h] = req.header(h)
        auth = req.header("Authorization")
        if auth is not None:
            headers["Authorization"] = "Bearer <redacted>" if auth.startswith("Bearer ") else "<redacted>"
        for h in SECRET_HEADERS:
            if req.header(h) is not None:
                headers[h] = "<redacted>"
        rec = {"time": iso(t0), "t": round(t0, 6), "listener": req.listener, "conn": req.conn_id,
               "method": req.method, "path": req.path,
               "query": {k: (v[0] if len(v) == 1 else v) for k, v in req.query.items()},
               "headers": headers, "body": None, "status": None if reply.drop else reply.status,
               "op": getattr(reply, "op", None), "error_code": reply.error_code,
               "client_request_id": req.header("x-ms-client-request-id"), "fault": reply.fault,
               "duration_ms": round((time.time() - t0) * 1000, 1)}
        if getattr(reply, "credential", None):
            rec["credential"] = reply.credential
        if getattr(reply, "log_response", None) is not None:
            rec["response"] = reply.log_response        # the answer, its secret redacted
        ctype = (req.header("Content-Type") or "").split(";")[0].strip().lower()
        if getattr(reply, "kind", None) == "token" and ctype != "application/x-www-form-urlencoded":
            rec["body"] = {"_raw": "(%d bytes, not form-encoded; not logged: it may hold a secret)" % len(req.body)}
        elif getattr(reply, "kind", None) == "token":
            form = {k: (v[0] if len(v) == 1 else v) for k, v in req.form().items()}
            assertion = form.get("client_assertion")
            for k in ("client_secret", "client_assertion"):
                if k in form:
                    form[k] = "<redacted>"
            rec["body"] = form
            if isinstance(assertion, str):
                rec["assertion"] = _decode_jwt(assertion)
        elif req.body:
            j = req.json()
            rec["body"] = j if req.json_error is None else {"_raw": req.body[:2000].decode("utf-8", "replace")}
        with self.lock:
            self.seq += 1
            rec = dict({"seq": self.seq}, **rec)
            self.records.append(rec)
            op = rec["op"] or "unknown"
            self.by_op[op] = self.by_op.get(op, 0) + 1
            st = str(rec["status"] if rec["status"] is not None else "dropped")
            self.by_status[st] = self.by_status.get(st, 0) + 1
            with open(self.log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")

    # -- control API ------------------------------------------------------------

    def control(self, req):
        parts = [p for p in req.path.split("/") if p][1:]
        m = req.method
        body = req.json() if req.body else None
        if req.body and req.json_error:
            return Reply(400, {"error": "body is not JSON: %s" % req.json_error})
        key = "/".join(parts[:1])
        if key == "health" and m == "GET":
            return Reply(200, "ok\n")
        if key == "settings" and m == "GET":
            return Reply(200, self.settings)
        if key == "config":
            if m == "GET":
                return Reply(200, self.cfg.snapshot())
            if m == "POST":
                bad = self.cfg.update(body or {}) if isinstance(body, dict) else ["expected a JSON object"]
                return Reply(400, {"error": "; ".join(bad)}) if bad else Reply(200, self.cfg.snapshot())
        if key == "faults":
            if m == "GET":
                return Reply(200, self.faults.views())
            if m == "POST":
                f, why = self.faults.add(body)
                return Reply(400, {"error": why}) if why else Reply(201, {"id": f.id})
            if m == "DELETE":
                fid = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
                return Reply(200, {"deleted": self.faults.delete(fid)})
        if key == "expire_tokens" and m == "POST":
            return Reply(200, {"expired": self.tokens.expire_all()})
        if key == "requests" and m == "GET":
            since = int(req.q("since") or 0)
            with self.lock:
                return Reply(200, [r for r in self.records if r["seq"] > since])
        if key == "stats" and m == "GET":
            return Reply(200, self.stats())
        if key == "reset" and m == "POST":
            self.arm.reset()
            self.faults.delete()
            with self.lock:
                self._reset_counters()
                open(self.log_path, "w").close()
            return Reply(200, {"reset": True})
        if key == "jobs":
            return self._control_job(req, parts[1:], body)
        return Reply(404, {"error": "no control endpoint %s %s (see the docstring of tests/aml/double.py)" % (
            m, req.path)})

    def _control_job(self, req, parts, body):
        arm = self.arm
        m = req.method
        with arm.lock:
            if not parts:
                if m == "GET":
                    return Reply(200, [arm.job_debug(j) for j in arm.jobs.values()])
                return Reply(405, {"error": "GET only"})
            job = arm.jobs.get(parts[0])
            if job is None:
                return Reply(404, {"error": "no job %s" % parts[0]})
            now = time.time()
            action = parts[1] if len(parts) > 1 else None
            if action is None and m == "GET":
                return Reply(200, arm.job_debug(job))
            if action in ("std_log.txt", "user_logs") and m == "GET":
                return Reply(200, arm.std_log(job), content_type="text/plain; charset=utf-8")
            if m != "POST":
                return Reply(405, {"error": "POST only"})
            body = body if isinstance(body, dict) else {}
            if action == "outcome":
                st = body.get("status")
                if st not in ("Failed", "Completed"):
                    return Reply(400, {"error": "status must be Failed or Completed"})
                ok = job.set_outcome(st, body.get("message"), now)
            elif action in ("hold", "release"):
                ok = job.set_hold(action == "hold", now)
            elif action == "force":
                st = body.get("status")
                if st not in ALL_STATUSES:
                    return Reply(400, {"error": "status must be one of %s" % ", ".join(ALL_STATUSES)})
                job.force(st, now)
                ok = True
            else:
                return Reply(404, {"error": "no job action %s" % action})
            if not ok:
                return Reply(409, {"error": "job %s already ended (%s)" % (job.name, job.status)})
            return Reply(200, arm.job_debug(job))

    def stats(self):
        issued_by, issued = self.tokens.counts()
        now = time.time()
        with self.arm.lock:
            for j in self.arm.jobs.values():
                j.advance(now)
            jobs = {name: j.status for name, j in self.arm.jobs.items()}
        with self.lock:
            return {"connections": sum(self.connections.values()), "connections_by_listener": dict(self.connections),
                    "tls_handshakes": self.tls_handshakes, "tls_handshake_failures": self.tls_failures,
                    "requests": self.seq, "requests_by_op": dict(self.by_op), "requests_by_status": dict(self.by_status),
                    "tokens_issued": issued, "tokens_by_credential": issued_by,
                    "faults_served": self.faults.served,
                    "jobs": jobs}


def _decode_jwt(s):
    """A JWT's header and claims (not the signature), for the log; None if it is no JWT."""
    parts = s.split(".")
    if len(parts) != 3:
        return None
    try:
        dec = [json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in parts[:2]]
        return {"header": dec[0], "claims": dec[1]}
    except (ValueError, UnicodeDecodeError):
        return None


# -- HTTP plumbing -------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30                  # an idle keep-alive connection is closed after this
    # TCP_NODELAY (StreamRequestHandler.setup): headers and body are two writes,
    # and without it Nagle and the client's delayed ACK stall every keep-alive
    # answer by 40 ms (as tests/unit/http_server.py says) — 0.04 s per request
    # that Azure ML does not charge, which hid most of a client's own cost.
    disable_nagle_algorithm = True

    def version_string(self):
        return "flow-aml-double/1.0"

    def setup(self):
        super().setup()
        self.conn_id = self.server.app.next_conn_id()

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("double: %s\n" % (fmt % args))

    def do_GET(self):
        self._serve()

    do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    def _read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if te == "chunked":
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                total += size
                if total > MAX_BODY:
                    raise ValueError("body too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
        n = self.headers.get("Content-Length")
        if n is None:
            return b""
        n = int(n)
        if n < 0 or n > MAX_BODY:
            raise ValueError("bad Content-Length")
        return self.rfile.read(n) if n else b""

    def _serve(self):
        app = self.server.app
        t0 = time.time()
        try:
            body = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            self._send(Reply(400, {"error": {"code": "InvalidRequest", "message": "unreadable body"}}), "")
            return
        req = Request(self.command, self.path, self.headers, body, self.server.listener, self.conn_id,
                      self.headers.get("Host") or "127.0.0.1:%d" % self.server.server_address[1])
        try:
            reply = app.dispatch(req)
        except Exception as e:          # a bug in the double: say so loudly, keep serving
            import traceback
            traceback.print_exc()
            reply = arm_error(500, "DoubleInternalError", "The AML double failed: %r" % e)
            reply.op = "double-bug"
        if reply.delay:
            time.sleep(reply.delay)
        if reply.drop:
            self._drop()
        else:
            self._send(reply, req.method)
        if getattr(reply, "kind", None) != "control":
            app.record(req, reply, t0)

    def _send(self, reply, method):
        data, ctype = reply.encoded()
        self.send_response(reply.status)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in reply.headers:
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if method != "HEAD" and data:
            self.wfile.write(data)
        self.wfile.flush()

    def _drop(self):
        """Reset the connection: no answer, no TLS close_notify."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, port, app, listener, tls=None, verbose=False):
        self.app = app
        self.listener = listener
        self.tls = tls
        self.verbose = verbose
        super().__init__(("127.0.0.1", port), Handler)

    def process_request(self, request, client_address):
        self.app.count_connection(self.listener)
        super().process_request(request, client_address)

    def finish_request(self, request, client_address):
        if self.tls is None:
            return super().finish_request(request, client_address)
        request.settimeout(10)
        try:
            conn = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            self.app.count_tls(False)
            return
        self.app.count_tls(True)
        try:
            super().finish_request(conn, client_address)
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, socket.timeout, TimeoutError, OSError)):
            return                      # a client went away; nothing to report
        super().handle_error(request, client_address)


# -- start-up ------------------------------------------------------------------------


def write_atomic(path, text):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def fake_federated_token():
    """A JWT-shaped workload-identity token (Entra compares it verbatim here)."""
    now = int(time.time())
    head = b64url(json.dumps({"alg": "RS256", "kid": "flow-aml-double", "typ": "JWT"}).encode())
    claims = b64url(json.dumps({"iss": "https://oidc.flow-aml-double.invalid/",
                                "sub": "system:serviceaccount:flow:runner", "aud": ["api://AzureADTokenExchange"],
                                "iat": now, "nbf": now, "exp": now + 86400, "jti": secrets.token_hex(8)}).encode())
    return "%s.%s.%s" % (head, claims, b64url(secrets.token_bytes(256)))


def parse_args(argv):
    ap = argparse.ArgumentParser(description="strict Azure ML control-plane double (see the module docstring)")
    ap.add_argument("--dir", required=True, help="where certificates, port files and the request log go")
    ap.add_argument("--port", type=int, default=0, help="HTTPS port (0: any free one, written to DIR/port)")
    ap.add_argument("--http-port", type=int, default=0, help="plain-HTTP port (managed identity, control API)")
    ap.add_argument("--config", help="JSON settings (default: DIR/config.json when it exists)")
    ap.add_argument("--verbose", action="store_true", help="log every request on stderr")
    flags = {"tenant": str, "client_id": str, "client_secret": str, "subscription": str, "resource_group": str,
             "workspace": str, "api_version": str, "location": str, "token_lifetime": int, "phase_seconds": float,
             "blob_endpoint": str, "blob_key": str, "blob_container": str, "federated_token": str,
             "msi_secret": str, "identity_header": str, "page_size": int, "datastore_secrets": str}
    for k, t in flags.items():
        ap.add_argument("--" + k.replace("_", "-"), dest="cfg_" + k, type=t, default=None)
    for k in ("execute_jobs", "keep_job_dirs"):
        ap.add_argument("--" + k.replace("_", "-"), dest="cfg_" + k, action="store_const", const=True, default=None,
                        help="sets %s (see aml_exec.py)" % k)
    a = ap.parse_args(argv)
    overrides = {k[4:]: v for k, v in vars(a).items() if k.startswith("cfg_") and v is not None}
    return a, overrides


def main(argv=None):
    a, flag_cfg = parse_args(argv if argv is not None else sys.argv[1:])
    d = os.path.abspath(a.dir)
    os.makedirs(d, exist_ok=True)
    for stale in ("port", "http_port"):
        try:
            os.unlink(os.path.join(d, stale))
        except FileNotFoundError:
            pass
    sources = []
    cfg_file = a.config or (os.path.join(d, "config.json") if os.path.exists(os.path.join(d, "config.json")) else None)
    if cfg_file:
        sources.append(aml_config.load_file(cfg_file))
    sources.append(flag_cfg)
    cfg = aml_config.Config()
    for s in sources:
        bad = cfg.update(s, startup=True)
        if bad:
            sys.exit("double: bad settings: %s" % "; ".join(bad))
    if not cfg["federated_token"]:
        cfg.update({"federated_token": fake_federated_token()}, startup=True)

    make_all(d, cfg["client_certificate_password"])
    client_cert = ClientCert.from_file(os.path.join(d, "client.pem"))
    with open(os.path.join(d, "federated-token"), "w") as f:
        f.write(cfg["federated_token"])

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.minimum_version = ssl.TLSVersion.TLSv1_2
    tls.load_cert_chain(os.path.join(d, "server.pem"), os.path.join(d, "server.key"))
    tls.set_alpn_protocols(["http/1.1"])

    app = App(cfg, d, client_cert)
    if app.blob.configured:
        for why in app.arm.ensure_datastore_containers():
            print("double: warning: %s (retried when a datastore is used)" % why, file=sys.stderr, flush=True)
    https = Server(a.port, app, "https", tls, a.verbose)
    http = Server(a.http_port, app, "http", None, a.verbose)
    port, hport = https.server_address[1], http.server_address[1]
    base, hbase = "https://127.0.0.1:%d" % port, "http://127.0.0.1:%d" % hport
    settings = {
        "url": base, "http_url": hbase, "authority_host": base, "arm_endpoint": base,
        "ca_file": os.path.join(d, "ca.pem"), "dir": d,
        "tenant": cfg["tenant"], "client_id": cfg["client_id"], "client_secret": cfg["client_secret"],
        "token_url": "%s/%s/oauth2/v2.0/token" % (base, cfg["tenant"]),
        "client_certificate": os.path.join(d, "client.pem"),
        "client_certificate_encrypted": os.path.join(d, "client-encrypted.pem"),
        "client_certificate_password": cfg["client_certificate_password"],
        "client_certificate_x5t": client_cert.x5t,
        "federated_token_file": os.path.join(d, "federated-token"),
        "msi_endpoint": hbase + "/msi/token", "msi_secret": cfg["msi_secret"],
        "identity_endpoint": hbase + "/identity", "identity_header": cfg["identity_header"],
        "imds_endpoint": hbase, "msi_client_id": cfg["msi_client_id"],
        "subscription": cfg["subscription"], "resource_group": cfg["resource_group"],
        "workspace": cfg["workspace"], "location": cfg["location"], "api_version": cfg["api_version"],
        "workspace_id": app.arm.ws_id(), "workspace_url": base + app.arm.ws_id(),
        "computes": [c["name"] for c in cfg["computes"]],
        "blob_endpoint": cfg["blob_endpoint"], "blob_container": cfg["blob_container"],
        "datastore": "workspaceblobstore",
        "datastore_container": app.blob.url(app.arm.datastore_container("workspaceblobstore")),
        "datastore_containers": {n: app.blob.url(app.arm.datastore_container(n)) for n in cfg["datastores"]},
        "blob_account": app.blob.account,
        "jobs_dir": os.path.join(d, "jobs"),
        "requests_log": app.log_path,
    }
    app.settings = settings
    write_atomic(os.path.join(d, "settings.json"), json.dumps(settings, indent=1) + "\n")
    write_atomic(os.path.join(d, "env.sh"), "".join(
        "AML_DOUBLE_%s=%s\n" % (k.upper(), shlex.quote(str(v) if not isinstance(v, list) else " ".join(v)))
        for k, v in settings.items() if v is not None and not isinstance(v, dict)))

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
               for s in (https, http)]
    for t in threads:
        t.start()
    write_atomic(os.path.join(d, "http_port"), "%d\n" % hport)
    write_atomic(os.path.join(d, "port"), "%d\n" % port)
    print("flow-aml-double: %s (plain HTTP %s), files in %s" % (base, hbase, d), flush=True)
    while not stop.wait(1.0):
        pass
    for s in (https, http):
        s.shutdown()
        s.server_close()
    app.runner.shutdown()               # kills the processes of executed jobs
    return 0


if __name__ == "__main__":
    sys.exit(main())
