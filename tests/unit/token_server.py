#!/usr/bin/python3
"""token_server.py CONFIG LOG — a strict little Entra ID / managed-identity
token server for tests/unit/test_aml_auth.c (plain HTTP on 127.0.0.1).

Prints its port on the first line of stdout, then serves until killed.  Each
request reads CONFIG (JSON, rewritten by the test between cases) and appends
one JSON line to LOG: {"kind", "ok", "why", "assertion"?}.  A request that
breaks the protocol is answered as Entra would refuse it (400/401 with
error, error_description), and "ok": false says why in the log.

CONFIG: tenant, client_id, secret (client secret flow), cert (PEM path: the
certificate an assertion must be signed for), assertion (workload identity:
the expected federated token), msi_secret, identity_header, resource,
expires_in (seconds; default 3600), delay (seconds before answering), imds
("token", "absent": 404 with HTML, "no-identity": 400, "busy-once": 503 on
the first request for each busy_key).
"""
import base64
import hashlib
import http.server
import json
import os
import sys
import threading
import time
import urllib.parse

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding
    HAVE_CRYPTO = True
except ImportError:  # the structure is still checked
    HAVE_CRYPTO = False

CONFIG, LOG = sys.argv[1], sys.argv[2]
counter = 0
busy_answered = set()
lock = threading.Lock()


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def check_assertion(jwt, cfg, token_url):
    """Why the client assertion is wrong, or None."""
    parts = jwt.split(".")
    if len(parts) != 3:
        return "assertion is not header.claims.signature"
    header = json.loads(b64url_decode(parts[0]))
    claims = json.loads(b64url_decode(parts[1]))
    if header.get("alg") != "RS256" or header.get("typ") != "JWT":
        return "header alg/typ %r" % header
    pem = open(cfg["cert"], "rb").read()
    now = time.time()
    if claims.get("aud") != token_url:
        return "aud %r, not %r" % (claims.get("aud"), token_url)
    if claims.get("iss") != cfg["client_id"] or claims.get("sub") != cfg["client_id"]:
        return "iss/sub"
    if not claims.get("jti") or len(claims["jti"]) != 36:
        return "jti"
    if not (claims["nbf"] == claims["iat"] and claims["exp"] == claims["nbf"] + 600 and abs(claims["iat"] - now) < 60):
        return "nbf/iat/exp"
    if not HAVE_CRYPTO:
        return None
    cert = x509.load_pem_x509_certificate(pem)
    der = cert.public_bytes(serialization.Encoding.DER)
    x5t = base64.urlsafe_b64encode(hashlib.sha1(der).digest()).decode().rstrip("=")
    if header.get("x5t") != x5t:
        return "x5t %r, not %r" % (header.get("x5t"), x5t)
    try:
        cert.public_key().verify(b64url_decode(parts[2]), (parts[0] + "." + parts[1]).encode(),
                                 padding.PKCS1v15(), hashes.SHA256())
    except Exception:  # InvalidSignature
        return "signature does not verify"
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body, kind, why=None, extra=None, content_type="application/json"):
        entry = {"kind": kind, "ok": why is None, "why": why}
        entry.update(extra or {})
        with lock:
            with open(LOG, "a") as f:
                f.write(json.dumps(entry) + "\n")
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-ms-request-id", "req-%d" % counter)
        self.end_headers()
        self.wfile.write(data)

    def token(self, cfg):
        global counter
        with lock:
            counter += 1
            return "tok-%d" % counter

    def refuse(self, kind, code, desc, why, status=401, extra=None):
        self.answer(status, {"error": code, "error_description": desc, "error_codes": [7000215]}, kind, why, extra)

    def do_POST(self):
        cfg = json.load(open(CONFIG))
        time.sleep(cfg.get("delay", 0))
        kind = "entra"
        n = int(self.headers.get("Content-Length", "0"))
        form = urllib.parse.parse_qs(self.rfile.read(n).decode(), keep_blank_values=True, strict_parsing=True)
        form = {k: v[0] for k, v in form.items()}
        port = self.server.server_address[1]
        token_url = "http://127.0.0.1:%d/%s/oauth2/v2.0/token" % (port, cfg.get("tenant"))
        if self.path != "/%s/oauth2/v2.0/token" % cfg.get("tenant"):
            return self.refuse(kind, "invalid_request", "AADSTS90002: Tenant not found.", "path " + self.path, 400)
        if self.headers.get("Content-Type") != "application/x-www-form-urlencoded":
            return self.refuse(kind, "invalid_request", "AADSTS900144: bad content type", "content type", 400)
        if form.get("grant_type") != "client_credentials":
            return self.refuse(kind, "unsupported_grant_type", "AADSTS70003", "grant_type", 400)
        if form.get("scope") != cfg.get("resource", "https://management.azure.com") + "/.default":
            return self.refuse(kind, "invalid_scope", "AADSTS70011: The provided value for scope is not valid.",
                               "scope %r" % form.get("scope"), 400)
        if form.get("client_id") != cfg.get("client_id"):
            return self.refuse(kind, "unauthorized_client", "AADSTS700016: Application not found.", "client_id", 400)
        extra = {}
        if "client_secret" in form:
            kind = "secret"
            if form["client_secret"] != cfg.get("secret"):
                return self.refuse(kind, "invalid_client", "AADSTS7000215: Invalid client secret provided. "
                                   "Ensure the secret being sent in the request is the client secret value.",
                                   "secret")
        elif form.get("client_assertion_type") == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer":
            assertion = form.get("client_assertion", "")
            if cfg.get("cert"):
                kind = "certificate"
                extra["signature_checked"] = HAVE_CRYPTO
                why = check_assertion(assertion, cfg, token_url)
            else:
                kind = "workload"
                extra["assertion"] = assertion
                why = None if assertion == cfg.get("assertion") else "assertion"
            if why:
                return self.refuse(kind, "invalid_client", "AADSTS700027: Client assertion failed signature "
                                   "validation.", why, extra=extra)
        else:
            return self.refuse(kind, "invalid_request", "AADSTS7000216: client_assertion or client_secret required",
                               "no credential", 400)
        self.answer(200, {"token_type": "Bearer", "expires_in": cfg.get("expires_in", 3600),
                          "ext_expires_in": 3600, "access_token": self.token(cfg)}, kind, None, extra)

    def do_GET(self):
        cfg = json.load(open(CONFIG))
        time.sleep(cfg.get("delay", 0))
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        resource = cfg.get("resource", "https://management.azure.com")
        now = int(time.time())
        exp = cfg.get("expires_in", 3600)
        if url.path == "/metadata/identity/oauth2/token":
            kind = "imds"
            mode = cfg.get("imds", "token")
            if mode == "absent":
                return self.answer(404, "<html>not here</html>", kind, None, content_type="text/html")
            if self.headers.get("Metadata") != "true":
                return self.refuse(kind, "invalid_request", "Required metadata header not specified", "header", 400)
            if q.get("api-version") != "2018-02-01" or q.get("resource") != resource:
                return self.refuse(kind, "invalid_request", "bad query", "query %r" % q, 400)
            if mode == "no-identity":
                return self.refuse(kind, "invalid_request", "Identity not found", None, 400)
            if mode == "busy-once" and cfg.get("busy_key") not in busy_answered:
                busy_answered.add(cfg.get("busy_key"))
                return self.refuse(kind, "temporarily_unavailable", "IMDS is busy", None, 503)
            return self.answer(200, {"access_token": self.token(cfg), "expires_in": str(exp),
                                     "expires_on": str(now + exp), "resource": resource, "token_type": "Bearer"},
                               kind, None, {"client_id": q.get("client_id")})
        if url.path == "/msi/token":
            kind = "msi"
            if self.headers.get("secret") != cfg.get("msi_secret"):
                return self.refuse(kind, "invalid_request", "bad secret header", "secret", 400)
            if q.get("api-version") != "2017-09-01" or q.get("resource") != resource:
                return self.refuse(kind, "invalid_request", "bad query", "query %r" % q, 400)
            return self.answer(200, {"access_token": self.token(cfg), "expires_on": now + exp, "resource": resource,
                                     "token_type": "Bearer"}, kind, None, {"clientid": q.get("clientid")})
        if url.path == "/identity/token":
            kind = "identity"
            if self.headers.get("X-IDENTITY-HEADER") != cfg.get("identity_header"):
                return self.refuse(kind, "invalid_request", "bad identity header", "header", 400)
            if q.get("api-version") != "2019-08-01" or q.get("resource") != resource:
                return self.refuse(kind, "invalid_request", "bad query", "query %r" % q, 400)
            return self.answer(200, {"access_token": self.token(cfg), "expires_on": str(now + exp),
                                     "resource": resource, "token_type": "Bearer"}, kind, None,
                               {"client_id": q.get("client_id")})
        self.answer(404, {"error": "not_found", "error_description": self.path}, "unknown", "path " + self.path)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)  # a client that hung up is expected


server = Server(("127.0.0.1", 0), Handler)
os.write(1, b"%d\n" % server.server_address[1])  # one write: the test stops reading at the newline
os.close(1)
server.serve_forever()
