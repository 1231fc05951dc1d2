"""aml_blob.py — the real blob storage behind startPendingUpload (Azurite in
tests): a container service SAS the client uploads with, and Shared Key calls
the double makes itself (create the container, list what was uploaded).

SAS: service SAS on a container (sr=c), sv=2021-08-06, string-to-sign of
versions >= 2020-12-06 (learn.microsoft.com "Create a service SAS"):
  sp \n st \n se \n /blob/<account>/<container> \n si \n sip \n spr \n sv \n sr \n
  snapshot-time \n ses \n rscc \n rscd \n rsce \n rscl \n rsct
signed with HMAC-SHA256 under the base64-decoded account key.
"""
import base64
import datetime
import hashlib
import hmac
import http.client
import time
import urllib.parse
import xml.etree.ElementTree as ET

AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
SAS_VERSION = "2021-08-06"
# where uploads go when no --blob-endpoint is given: nothing listens on port 1,
# so a client's upload fails with "connection refused"
NOWHERE = "https://127.0.0.1:1/no-blob-endpoint-configured"


def _sign(key_b64, text):
    return base64.b64encode(hmac.new(base64.b64decode(key_b64), text.encode("utf-8"), hashlib.sha256).digest()).decode()


def _rfc1123(t=None):
    return datetime.datetime.fromtimestamp(t or time.time(), datetime.timezone.utc).strftime(
        "%a, %d %b %Y %H:%M:%S GMT")


class BlobStore:
    def __init__(self, endpoint, key, container, account=None):
        self.endpoint = endpoint.rstrip("/") if endpoint else None
        self.key = key
        self.container = container
        if account:
            self.account = account
        elif self.endpoint:
            u = urllib.parse.urlsplit(self.endpoint)
            seg = [s for s in u.path.split("/") if s]
            # path style (Azurite: http://127.0.0.1:10000/devstoreaccount1) or acct.blob.core.windows.net
            self.account = seg[0] if seg else u.hostname.split(".")[0]
        else:
            self.account = AZURITE_ACCOUNT
        self._created = False

    @property
    def configured(self):
        return self.endpoint is not None

    def container_url(self):
        return "%s/%s" % (self.endpoint or NOWHERE, self.container)

    def sas_query(self, permissions="racwl", lifetime=3600, now=None):
        now = now or time.time()
        se = datetime.datetime.fromtimestamp(now + lifetime, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        fields = [permissions, "", se, "/blob/%s/%s" % (self.account, self.container), "", "", "",
                  SAS_VERSION, "c", "", "", "", "", "", "", ""]
        sig = _sign(self.key, "\n".join(fields))
        return urllib.parse.urlencode([("sv", SAS_VERSION), ("se", se), ("sr", "c"), ("sp", permissions),
                                       ("sig", sig)])

    def sas_uri(self):
        return self.container_url() + "?" + self.sas_query()

    # -- Shared Key requests the double itself makes ---------------------------

    def _shared_key(self, method, url, params):
        u = urllib.parse.urlsplit(url)
        headers = {"x-ms-date": _rfc1123(), "x-ms-version": SAS_VERSION}
        canon_headers = "".join("%s:%s\n" % (k, headers[k]) for k in sorted(headers))
        canon_res = "/" + self.account + u.path
        for k in sorted(params):
            canon_res += "\n%s:%s" % (k.lower(), params[k])
        sts = "\n".join([method, "", "", "", "", "", "", "", "", "", "", ""]) + "\n" + canon_headers + canon_res
        headers["Authorization"] = "SharedKey %s:%s" % (self.account, _sign(self.key, sts))
        if method == "PUT":
            headers["Content-Length"] = "0"
        conn_class = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = conn_class(u.hostname, u.port, timeout=5)
        try:
            conn.request(method, u.path + "?" + urllib.parse.urlencode(params), headers=headers)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def ensure_container(self):
        """Creates the container once; returns None or why it failed."""
        if not self.configured or self._created:
            return None
        try:
            status, body = self._shared_key("PUT", self.container_url(), {"restype": "container"})
        except OSError as e:
            return "blob endpoint %s unreachable: %s" % (self.endpoint, e)
        if status in (201, 409):
            self._created = True
            return None
        return "creating container %s at %s: HTTP %d %s" % (self.container, self.endpoint, status,
                                                              body[:300].decode(errors="replace"))

    def list_blobs(self, prefix):
        """Names of the blobs under prefix, or None if storage cannot be asked."""
        if not self.configured:
            return None
        names, marker = [], None
        try:
            while True:
                params = {"restype": "container", "comp": "list", "prefix": prefix}
                if marker:
                    params["marker"] = marker
                status, body = self._shared_key("GET", self.container_url(), params)
                if status != 200:
                    return None
                root = ET.fromstring(body)
                names += [n.text for n in root.iter("Name")]
                marker = root.findtext("NextMarker")
                if not marker:
                    return names
        except (OSError, ET.ParseError):
            return None
