"""aml_http.py — the request and reply objects the double's handlers pass around."""
import datetime
import json
import urllib.parse
import uuid


class Request:
    def __init__(self, method, target, headers, body, listener, conn_id, host):
        self.method = method
        split = urllib.parse.urlsplit(target)
        self.raw_path = split.path
        self.path = urllib.parse.unquote(split.path)
        self.raw_query = split.query
        self.query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
        self.headers = headers
        self.body = body
        self.listener = listener          # "https" or "http"
        self.conn_id = conn_id
        self.host = host                  # what the client put in Host:
        self._json = None
        self.json_error = None

    def header(self, name, default=None):
        return self.headers.get(name, default)

    def q(self, name):
        """A query parameter's value (the last if repeated), or None."""
        v = self.query.get(name)
        return v[-1] if v else None

    def base_url(self):
        return "%s://%s" % (self.listener, self.host)

    def json(self):
        """The body parsed as JSON; None (and json_error set) if it is not."""
        if self._json is None and self.json_error is None:
            try:
                self._json = json.loads(self.body.decode("utf-8")) if self.body else None
            except (UnicodeDecodeError, ValueError) as e:
                self.json_error = str(e)
        return self._json

    def form(self):
        """application/x-www-form-urlencoded body: dict name -> list of values."""
        try:
            return urllib.parse.parse_qs(self.body.decode("utf-8"), keep_blank_values=True)
        except UnicodeDecodeError:
            return {}


class Reply:
    """What to answer.  body: dict/list (sent as JSON), bytes/str, or None (empty)."""

    def __init__(self, status, body=None, headers=None, content_type=None):
        self.status = status
        self.body = body
        self.headers = list(headers or [])
        self.content_type = content_type
        self.error_code = None      # for the request log
        self.drop = False           # close the connection without answering
        self.delay = 0.0            # seconds to wait before answering
        self.fault = None           # the fault id that produced or shaped this reply

    def encoded(self):
        if self.body is None:
            return b"", self.content_type
        if isinstance(self.body, bytes):
            return self.body, self.content_type or "application/octet-stream"
        if isinstance(self.body, str):
            return self.body.encode(), self.content_type or "text/plain; charset=utf-8"
        return (json.dumps(self.body, indent=None) + "\n").encode(), self.content_type or "application/json; charset=utf-8"


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def iso(t):
    """Epoch seconds -> '2025-01-01T12:00:00.123456+00:00' (what ARM's systemData uses)."""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat()


def new_id():
    return str(uuid.uuid4())


def arm_error(status, code, message, target=None, details=None, headers=None, inner=None):
    """The common-types v3 ErrorResponse body ARM and MFE answer with."""
    err = {"code": code, "message": message}
    if target is not None:
        err["target"] = target
    err["details"] = details or []
    err["additionalInfo"] = []
    if inner:
        err["innerError"] = {"code": inner}
    r = Reply(status, {"error": err}, headers)
    r.error_code = code
    return r
