#!/usr/bin/python3
"""http_server.py DIR — the HTTPS server test_aml_http talks to (standard library only).

Makes two throwaway CAs with the openssl CLI in DIR (ca_a.pem, ca_b.pem; capath_b/ is
ca_b as a hashed CA directory), serves HTTP/1.1 with keep-alive on 127.0.0.1 with a
certificate from CA A on one port and from CA B on another, and writes "PORT_A PORT_B"
to DIR/ports once both listen.  Runs until killed, or until its parent is gone.

Behaviour by path; `key` (default: the path) names a counter of requests, so
"the first N times" holds across retries:
  /echo              200, the request as JSON: method, path, headers (lower-case
                     names), body_len, sha256 of the body, hit (the key's count)
  /status/N          N for the first `times` requests (default: always), then /echo;
                     with `retry_after` as Retry-After, `retry_after_ms` as
                     x-ms-retry-after-ms, `body` as the body
  /drop              closes the connection without answering, the first `times` requests
  /delay             answers after `s` seconds
  /arm               400 with an ARM error body; /entra: 401 with an Entra one
  /seen              {"ids": x-ms-client-request-id of each request with this key}
  /stats             {"connections": TCP connections accepted on this port}; reset=1 zeroes it
  /changing[/NAME]   a blob container holding one blob that is rewritten as it is read (test_aml_blob);
                     see Changing below
Every answer carries x-ms-request-id.
"""
import hashlib
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

LOCK = threading.Lock()
HITS = {}       # key -> count
SEEN = {}       # key -> [client request ids]
REQUESTS = [0]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN=flow test {name}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=d)


def make_server_cert(d, ca, name):
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-set_serial",
            str(int.from_bytes(os.urandom(8), "big")), "-days", "2", "-extfile", "ext.cnf", "-out", f"{name}.pem",
            cwd=d)


def make_capath(d, ca, dirname):
    h = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", f"{ca}.pem"], cwd=d, check=True,
                       capture_output=True, text=True).stdout.strip()
    os.makedirs(os.path.join(d, dirname), exist_ok=True)
    shutil.copy(os.path.join(d, f"{ca}.pem"), os.path.join(d, dirname, f"{h}.0"))


class Changing:
    """The blob NAME (any name; under a listing's prefix, PREFIX + "x.bin") of the key's
    container, as Blob Storage serves it: HEAD (size, ETag quoted, no Content-MD5), List
    Blobs (ETag unquoted, as the service lists it), Get Blob with x-ms-range and If-Match
    (412 ConditionNotMet when the ETag is not the blob's, quoted or not).  Version v is
    `size` + 1000 v bytes, byte i being (7 i + 13 v) mod 251.  The blob is rewritten
    (v + 1) `times` times in all: with change=listing right after a HEAD or a listing is
    answered, with change=range right after the first range of a version is answered.
    Which version an answer is from is decided under the lock, so a download's ranges
    meet the change at the same point whatever the threads' timing."""

    STATE = {}      # key -> {"v": version, "left": rewrites to come, "ranged": versions a range came from}

    def __init__(self, handler, q, key):
        self.h, self.q = handler, q
        with LOCK:
            self.st = Changing.STATE.setdefault(key, {"v": 0, "left": int(q.get("times", "1")), "ranged": set()})

    def size(self, v):
        return int(self.q.get("size", "1000")) + 1000 * v

    @staticmethod
    def etag(v):
        return f"0x8DC0FFEE{v:08X}"

    def rewrite(self, when):
        """Under LOCK."""
        if self.q.get("change") == when and self.st["left"] > 0:
            self.st["left"] -= 1
            self.st["v"] += 1

    @staticmethod
    def content(v, size):
        period = bytes((7 * i + 13 * v) % 251 for i in range(251))
        return (period * (size // 251 + 1))[:size]

    def answer(self, status, body=b"", headers=(), length=None):
        h = self.h
        h.send_response(status)
        h.send_header("Content-Length", str(len(body) if length is None else length))
        h.send_header("x-ms-request-id", "changing")
        for k, v in headers:
            h.send_header(k, v)
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def list(self):
        with LOCK:
            v = self.st["v"]
            self.rewrite("listing")
        name = self.q.get("prefix", "") + "x.bin"
        xml = (f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Blobs><Blob><Name>{name}</Name>'
               f'<Properties><Content-Length>{self.size(v)}</Content-Length><Etag>{self.etag(v)}</Etag>'
               f'</Properties></Blob></Blobs><NextMarker /></EnumerationResults>')
        self.answer(200, xml.encode(), [("Content-Type", "application/xml")])

    def head(self):
        with LOCK:
            v = self.st["v"]
            self.rewrite("listing")
        self.answer(200, headers=[("ETag", f'"{self.etag(v)}"'), ("x-ms-blob-type", "BlockBlob")],
                    length=self.size(v))

    def get(self):
        first, last = (int(n) for n in self.h.headers["x-ms-range"].split("=")[1].split("-"))
        want = self.h.headers.get("If-Match")
        with LOCK:
            v = self.st["v"]
            if want is not None and want.strip('"') != self.etag(v):
                v = None
            elif v not in self.st["ranged"]:
                self.st["ranged"].add(v)
                self.rewrite("range")
        if v is None:
            body = (b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ConditionNotMet</Code><Message>'
                    b'The condition specified using HTTP conditional header(s) is not met.</Message></Error>')
            self.answer(412, body, [("x-ms-error-code", "ConditionNotMet"), ("Content-Type", "application/xml")])
            return
        size = self.size(v)
        body = self.content(v, size)[first:last + 1]
        self.answer(206, body, [("ETag", f'"{self.etag(v)}"'),
                                ("Content-Range", f"bytes {first}-{first + len(body) - 1}/{size}")])

    def serve(self, is_container):
        if is_container:
            self.list()
        elif self.h.command == "HEAD":
            self.head()
        else:
            self.get()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, *args):
        pass

    def setup(self):
        self.request.do_handshake()     # here, in the connection's thread, not in accept()
        super().setup()

    def send(self, status, body, content_type="application/json", headers=()):
        data = body if isinstance(body, bytes) else body.encode()
        with LOCK:
            REQUESTS[0] += 1
            rid = f"req-{REQUESTS[0]:06d}"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-ms-request-id", rid)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def echo(self, body, hit):
        self.send(200, json.dumps({
            "method": self.command, "path": self.path.split("?")[0],
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body_len": len(body), "sha256": hashlib.sha256(body).hexdigest(), "hit": hit,
        }), headers=[("Location", "https://127.0.0.1/somewhere/else")])

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        key = q.get("key", url.path)
        with LOCK:
            HITS[key] = hit = HITS.get(key, 0) + 1
            SEEN.setdefault(key, []).append(self.headers.get("x-ms-client-request-id"))
        parts = url.path.strip("/").split("/")
        times = int(q.get("times", "1000000000"))
        if parts[0] == "status" and hit <= times:
            extra = [("Retry-After", q["retry_after"])] if "retry_after" in q else []
            if "retry_after_ms" in q:
                extra.append(("x-ms-retry-after-ms", q["retry_after_ms"]))
            self.send(int(parts[1]), q.get("body", ""), "text/plain", extra)
        elif parts[0] == "drop" and hit <= times:
            self.close_connection = True
        elif parts[0] == "delay":
            time.sleep(float(q.get("s", "1")))
            self.echo(body, hit)
        elif parts[0] == "arm":
            self.send(400, json.dumps({"error": {"code": "BadThing", "message": "what went wrong",
                                                 "details": []}}))
        elif parts[0] == "entra":
            self.send(401, json.dumps({"error": "invalid_client", "error_description":
                                       "AADSTS7000215: Invalid client secret provided.\r\nTrace ID: abc\r\n"}))
        elif parts[0] == "seen":
            with LOCK:
                ids = list(SEEN.get(q.get("of", ""), []))
            self.send(200, json.dumps({"ids": ids}))
        elif parts[0] == "changing":
            Changing(self, q, q.get("key", "changing")).serve(len(parts) == 1)
        elif parts[0] == "stats":
            with self.server.lock:
                n = self.server.connections
                if q.get("reset"):
                    self.server.connections = 0
            self.send(200, json.dumps({"connections": n}))
        else:
            self.echo(body, hit)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = handle_any


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, context):
        super().__init__(("127.0.0.1", 0), Handler)
        self.context = context
        self.connections = 0
        self.lock = threading.Lock()

    def get_request(self):
        sock, addr = self.socket.accept()
        # headers and body are two writes: without this, Nagle and the client's
        # delayed ACK stall each keep-alive answer by 40 ms
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.lock:
            self.connections += 1
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request, client_address):
        pass        # refused handshakes and dropped connections are what the tests do


def main():
    d = sys.argv[1]
    make_ca(d, "ca_a")
    make_ca(d, "ca_b")
    make_server_cert(d, "ca_a", "server_a")
    make_server_cert(d, "ca_b", "server_b")
    make_capath(d, "ca_b", "capath_b")
    servers = []
    for name in ("server_a", "server_b"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}.key"))
        servers.append(Server(ctx))
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    with open(os.path.join(d, "ports.tmp"), "w") as f:
        f.write(" ".join(str(s.server_address[1]) for s in servers) + "\n")
    os.rename(os.path.join(d, "ports.tmp"), os.path.join(d, "ports"))
    # A test that crashed cannot stop this server: it goes when its parent
    # goes (and after two minutes in any case), taking DIR with it.
    parent, deadline = os.getppid(), time.monotonic() + 120
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.2)
    shutil.rmtree(d, ignore_errors=True)
    os._exit(0)


if __name__ == "__main__":
    main()
