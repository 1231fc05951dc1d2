"""aml_faults.py — injected failures (POST /_double/faults).

A fault: {"match": {"method": "PUT", "path_regex": "/jobs/", "kind": "arm"},
          "action": "status" | "drop" | "drop_after" | "html_after" | "delay",
          "status": 429, "retry_after": 1, "retry_after_http_date": false,
          "delay": 2.0, "count": 3, "skip": 0, "code": "...", "message": "..."}
match: every given key must match (method exactly, path_regex by re.search on
the path, kind one of token, msi, arm); none given matches every request
except the control API.  count: how many matching requests it applies to
(default 1; null = until deleted); skip: let that many matching requests pass
first.  Actions:
  status      answer `status` (with an ARM error body, or an Entra one on the
              token endpoint) without doing anything; Retry-After when
              retry_after is given (seconds, or an HTTP date with
              retry_after_http_date); "delay" first if given;
  drop        read the request, then reset the connection without answering
              (nothing is done);
  drop_after  do the request (a PUT creates the job), then reset the connection
              without answering: the client cannot know it succeeded;
  html_after  do the request, then answer 200 with an HTML page in place of
              its answer (a proxy's or a gateway's): what the client reads is
              no resource;
  delay       wait `delay` seconds, then do the request and answer normally.
"""
import re
import threading

ACTIONS = ("status", "drop", "drop_after", "html_after", "delay")
KINDS = ("token", "msi", "arm")
CODES = {408: "RequestTimeout", 409: "Conflict", 429: "TooManyRequests", 500: "InternalServerError",
         502: "BadGateway", 503: "ServiceUnavailable", 504: "GatewayTimeout"}


class Fault:
    def __init__(self, fid, spec):
        m = spec.get("match") or {}
        self.id = fid
        self.spec = spec
        self.method = m.get("method")
        self.path_regex = re.compile(m["path_regex"]) if m.get("path_regex") else None
        self.kind = m.get("kind")
        self.action = spec["action"]
        self.status = spec.get("status")
        self.retry_after = spec.get("retry_after")
        self.retry_after_http_date = bool(spec.get("retry_after_http_date"))
        self.delay = float(spec.get("delay") or 0)
        self.count = spec.get("count", 1)
        self.skip = int(spec.get("skip") or 0)
        self.code = spec.get("code") or CODES.get(self.status, "InjectedFault")
        self.message = spec.get("message") or "Fault %d injected by the AML double (HTTP %s)." % (fid, self.status)
        self.seen = 0
        self.hits = 0

    def matches(self, req, kind):
        return ((self.method is None or self.method.upper() == req.method)
                and (self.kind is None or self.kind == kind)
                and (self.path_regex is None or self.path_regex.search(req.path)))

    def live(self):
        return self.count is None or self.hits < self.count

    def view(self):
        return dict(self.spec, id=self.id, hits=self.hits, seen=self.seen, live=self.live())


def validate(spec):
    if not isinstance(spec, dict):
        return "a fault is a JSON object"
    unknown = set(spec) - {"match", "action", "status", "retry_after", "retry_after_http_date", "delay", "count",
                           "skip", "code", "message"}
    if unknown:
        return "unknown fault keys: %s" % ", ".join(sorted(unknown))
    m = spec.get("match") or {}
    if not isinstance(m, dict) or set(m) - {"method", "path_regex", "kind"}:
        return "match takes method, path_regex, kind"
    if m.get("kind") is not None and m["kind"] not in KINDS:
        return "match.kind must be one of %s" % ", ".join(KINDS)
    if m.get("path_regex"):
        try:
            re.compile(m["path_regex"])
        except re.error as e:
            return "match.path_regex: %s" % e
    if spec.get("action") not in ACTIONS:
        return "action must be one of %s" % ", ".join(ACTIONS)
    if spec["action"] == "status" and not (isinstance(spec.get("status"), int) and 100 <= spec["status"] <= 599):
        return "action status needs \"status\": an HTTP status code"
    if spec["action"] == "delay" and not isinstance(spec.get("delay"), (int, float)):
        return "action delay needs \"delay\": seconds"
    c = spec.get("count", 1)
    if c is not None and not (isinstance(c, int) and c >= 1):
        return "count must be a positive integer or null (unlimited)"
    return None


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.faults = []
        self.next_id = 1
        self.served = 0

    def add(self, spec):
        why = validate(spec)
        if why:
            return None, why
        with self.lock:
            f = Fault(self.next_id, spec)
            self.next_id += 1
            self.faults.append(f)
            return f, None

    def take(self, req, kind):
        """The first live fault matching this request (counted as used), or None."""
        with self.lock:
            for f in self.faults:
                if f.live() and f.matches(req, kind):
                    f.seen += 1
                    if f.seen <= f.skip:
                        continue
                    f.hits += 1
                    self.served += 1
                    return f
        return None

    def views(self):
        with self.lock:
            return [f.view() for f in self.faults]

    def delete(self, fid=None):
        with self.lock:
            before = len(self.faults)
            self.faults = [f for f in self.faults if fid is not None and f.id != fid]
            return before - len(self.faults)
