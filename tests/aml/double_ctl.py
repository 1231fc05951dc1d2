"""double_ctl.py — drive the AML double from Python tests (stdlib only).

    from double_ctl import Double
    with Double.start() as d:                      # a fresh double in a temporary directory
        tok = d.token()                            # client-secret token
        st, hdrs, body = d.arm("PUT", "/jobs/j1", {"properties": {...}}, token=tok)
        d.fault(match={"method": "GET", "path_regex": "/jobs/"}, action="status", status=429, retry_after=1, count=2)
        d.stats(); d.requests(); d.expire_tokens(); d.reset()

From bash the same is curl --cacert DIR/ca.pem against $AML_DOUBLE_URL/_double/...
(source DIR/env.sh for the AML_DOUBLE_* variables).
"""
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


class Response:
    def __init__(self, status, headers, raw):
        self.status = status
        self.headers = headers          # dict, lower-case names
        self.raw = raw
        try:
            self.json = json.loads(raw) if raw else None
        except ValueError:
            self.json = None

    def __iter__(self):                 # st, hdrs, body = response
        return iter((self.status, self.headers, self.json if self.json is not None else self.raw))

    def __repr__(self):
        return "<%d %s>" % (self.status, self.raw[:300])


class Double:
    def __init__(self, d, proc=None, owns_dir=False):
        self.dir = d
        self.proc = proc
        self.owns_dir = owns_dir
        with open(os.path.join(d, "settings.json")) as f:
            self.s = json.load(f)
        self.url = self.s["url"]
        self.port = int(urllib.parse.urlsplit(self.url).port)
        self.http_port = int(urllib.parse.urlsplit(self.s["http_url"]).port)
        self.ssl = ssl.create_default_context(cafile=self.s["ca_file"])

    # -- life ----------------------------------------------------------------

    @classmethod
    def start(cls, d=None, args=(), timeout=30):
        owns = d is None
        d = d or tempfile.mkdtemp(prefix="aml-double.")
        os.makedirs(d, exist_ok=True)
        for stale in ("port", "settings.json"):
            if os.path.exists(os.path.join(d, stale)):
                os.unlink(os.path.join(d, stale))
        log = open(os.path.join(d, "double.log"), "w")
        proc = subprocess.Popen([PYTHON, os.path.join(HERE, "double.py"), "--dir", d, *args],
                                stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.time() + timeout
        while not os.path.exists(os.path.join(d, "port")):
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                with open(os.path.join(d, "double.log")) as f:
                    raise RuntimeError("the double did not start:\n" + f.read())
            time.sleep(0.02)
        return cls(d, proc, owns)

    def stop(self):
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait()
            self.proc = None
            if self.owns_dir:
                shutil.rmtree(self.dir, ignore_errors=True)
            return rc
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- HTTP ----------------------------------------------------------------

    def connection(self, timeout=10):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ssl, timeout=timeout)

    def request(self, method, target, body=None, headers=None, conn=None, plain=False, timeout=10):
        """One request (a new connection unless conn is given); body: dict (JSON), str/bytes (as is)."""
        hdrs = dict(headers or {})
        data = None
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            data = body.encode()
        elif isinstance(body, bytes):
            data = body
        own = conn is None
        if own:
            conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=timeout) if plain \
                else self.connection(timeout)
        try:
            conn.request(method, target, body=data, headers=hdrs)
            r = conn.getresponse()
            raw = r.read()
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, raw.decode("utf-8", "replace"))
        finally:
            if own:
                conn.close()

    def token(self, **form):
        """A client-secret token (form fields override the defaults)."""
        f = {"grant_type": "client_credentials", "client_id": self.s["client_id"],
             "client_secret": self.s["client_secret"], "scope": "https://management.azure.com/.default"}
        f.update(form)
        r = self.token_request(f)
        if r.status != 200:
            raise RuntimeError("token: %r" % r)
        return r.json["access_token"]

    def token_request(self, form, tenant=None):
        path = "/%s/oauth2/v2.0/token" % (tenant or self.s["tenant"])
        return self.request("POST", path, urllib.parse.urlencode({k: v for k, v in form.items() if v is not None}),
                            {"Content-Type": "application/x-www-form-urlencoded"})

    def arm(self, method, rel, body=None, token=None, api_version=None, query=None, headers=None, conn=None):
        """rel is relative to the workspace ("/jobs/x"); api_version False: none sent."""
        q = dict(query or {})
        if api_version is not False:
            q["api-version"] = api_version or self.s["api_version"]
        target = self.s["workspace_id"] + rel + ("?" + urllib.parse.urlencode(q) if q else "")
        hdrs = dict(headers or {})
        if token:
            hdrs["Authorization"] = "Bearer " + token
        return self.request(method, target, body, hdrs, conn=conn)

    # -- control API -----------------------------------------------------------

    def ctl(self, method, path, body=None):
        r = self.request(method, "/_double/" + path.lstrip("/"), body)
        if r.status >= 300:
            raise RuntimeError("control %s %s: %r" % (method, path, r))
        return r.json if r.json is not None else r.raw

    def fault(self, **spec):
        return self.ctl("POST", "faults", spec)["id"]

    def config(self, **values):
        return self.ctl("POST", "config", values)

    def expire_tokens(self):
        return self.ctl("POST", "expire_tokens")

    def reset(self):
        return self.ctl("POST", "reset")

    def stats(self):
        return self.ctl("GET", "stats")

    def requests(self, since=0):
        return self.ctl("GET", "requests?since=%d" % since)

    def job(self, name):
        return self.ctl("GET", "jobs/" + name)

    def std_log(self, name):
        return self.ctl("GET", "jobs/%s/std_log.txt" % name)
