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
import os
import time
import urllib.parse
import xml.etree.ElementTree as ET

AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
SAS_VERSION = "2021-08-06"
CHUNK = 1 << 20                 # streaming buffer
SINGLE_PUT_MAX = 32 << 20       # above this, Put Block + Put Block List
BLOCK_SIZE = 8 << 20
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
        self._created = set()

    @property
    def configured(self):
        return self.endpoint is not None

    def container_url(self, container=None):
        return self.url(container)

    def sas_query(self, permissions="racwl", lifetime=3600, now=None, container=None):
        now = now or time.time()
        se = datetime.datetime.fromtimestamp(now + lifetime, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        fields = [permissions, "", se, "/blob/%s/%s" % (self.account, container or self.container), "", "", "",
                  SAS_VERSION, "c", "", "", "", "", "", "", ""]
        sig = _sign(self.key, "\n".join(fields))
        return urllib.parse.urlencode([("sv", SAS_VERSION), ("se", se), ("sr", "c"), ("sp", permissions),
                                       ("sig", sig)])

    def sas_uri(self):
        return self.container_url() + "?" + self.sas_query()

    # -- Shared Key requests the double itself makes ---------------------------
    # One signer (_shared_key) for every call; _open sends a request and hands
    # back the open response so that a blob's body can be streamed to a file.

    def url(self, container=None, name=None):
        """The URL of a container (the configured one by default) or of a blob in it."""
        u = "%s/%s" % (self.endpoint or NOWHERE, container or self.container)
        return u + "/" + urllib.parse.quote(name) if name is not None else u

    def _shared_key(self, method, url, params, headers=None, length=0):
        """The headers of a Shared Key request (x-ms-date, x-ms-version, Authorization, Content-Length)."""
        u = urllib.parse.urlsplit(url)
        headers = dict(headers or {})
        headers.update({"x-ms-date": _rfc1123(), "x-ms-version": SAS_VERSION})
        xms = {k.lower(): str(v).strip() for k, v in headers.items() if k.lower().startswith("x-ms-")}
        canon_headers = "".join("%s:%s\n" % (k, xms[k]) for k in sorted(xms))
        canon_res = "/" + self.account + u.path
        for k in sorted(params, key=str.lower):
            canon_res += "\n%s:%s" % (k.lower(), params[k])
        std = {k.lower(): v for k, v in headers.items()}
        sts = "\n".join([method, std.get("content-encoding", ""), std.get("content-language", ""),
                         str(length) if length else "", std.get("content-md5", ""), std.get("content-type", ""),
                         "", "", "", "", "", std.get("range", "")]) + "\n" + canon_headers + canon_res
        headers["Authorization"] = "SharedKey %s:%s" % (self.account, _sign(self.key, sts))
        if method in ("PUT", "POST") or length:
            headers["Content-Length"] = str(length)
        return headers

    def _open(self, method, url, params, headers=None, body=None, length=0, timeout=30):
        """(connection, response): the caller reads the response and closes the connection."""
        u = urllib.parse.urlsplit(url)
        headers = self._shared_key(method, url, params, headers, length)
        conn_class = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = conn_class(u.hostname, u.port, timeout=timeout)
        try:
            target = u.path + ("?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote) if params else "")
            conn.request(method, target, body=body, headers=headers)
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def _call(self, method, url, params, headers=None, body=None, length=0, timeout=30):
        """(status, body bytes) of a request whose answer is small."""
        conn, r = self._open(method, url, params, headers, body, length, timeout)
        try:
            return r.status, r.read()
        finally:
            conn.close()

    def ensure_container(self, container=None):
        """Creates the container once; returns None or why it failed."""
        container = container or self.container
        if not self.configured or container in self._created:
            return None
        try:
            status, body = self._call("PUT", self.url(container), {"restype": "container"}, timeout=5)
        except OSError as e:
            return "blob endpoint %s unreachable: %s" % (self.endpoint, e)
        if status in (201, 409):
            self._created.add(container)
            return None
        return "creating container %s at %s: HTTP %d %s" % (container, self.endpoint, status,
                                                              body[:300].decode(errors="replace"))

    def list_blobs(self, prefix, container=None, sizes=False):
        """Names of the blobs under prefix (with sizes: (name, bytes) pairs), or None if storage cannot be asked."""
        if not self.configured:
            return None
        names, marker = [], None
        try:
            while True:
                params = {"restype": "container", "comp": "list", "prefix": prefix}
                if marker:
                    params["marker"] = marker
                status, body = self._call("GET", self.url(container), params, timeout=10)
                if status != 200:
                    return None
                root = ET.fromstring(body)
                for b in root.iter("Blob"):
                    n = b.findtext("Name")
                    names.append((n, int(b.findtext("Properties/Content-Length") or 0)) if sizes else n)
                marker = root.findtext("NextMarker")
                if not marker:
                    return names
        except (OSError, ET.ParseError):
            return None

    def get_to_file(self, name, path, container=None):
        """Downloads a blob into path, streaming; returns None or why it failed."""
        try:
            conn, r = self._open("GET", self.url(container, name), {}, timeout=60)
        except OSError as e:
            return "GET %s: %s" % (name, e)
        try:
            if r.status != 200:
                return "GET %s: HTTP %d %s" % (name, r.status, r.read()[:300].decode(errors="replace"))
            with open(path, "wb") as f:
                while True:
                    chunk = r.read(CHUNK)
                    if not chunk:
                        break
                    f.write(chunk)
            return None
        except OSError as e:
            return "GET %s: %s" % (name, e)
        finally:
            conn.close()

    def put_bytes(self, name, data, container=None):
        """Put Blob of a small body; returns None or why it failed."""
        try:
            st, body = self._call("PUT", self.url(container, name), {}, {"x-ms-blob-type": "BlockBlob"}, data,
                                  len(data))
        except OSError as e:
            return "Put Blob %s: %s" % (name, e)
        return None if st == 201 else "Put Blob %s: HTTP %d %s" % (name, st, body[:300].decode(errors="replace"))

    def get_bytes(self, name, container=None):
        """(status, body) of Get Blob (small blobs)."""
        return self._call("GET", self.url(container, name), {})

    def put_from_file(self, name, path, container=None, block_size=BLOCK_SIZE, single_max=SINGLE_PUT_MAX):
        """Uploads a file as a block blob, streaming: one Put Blob up to single_max bytes, else Put Block
        (block_size each) + Put Block List.  Returns None or why it failed."""
        url = self.url(container, name)
        size = os.path.getsize(path)
        try:
            with open(path, "rb") as f:
                if size <= single_max:
                    st, body = self._call("PUT", url, {}, {"x-ms-blob-type": "BlockBlob"}, f, size, timeout=120)
                    return None if st == 201 else "Put Blob %s: HTTP %d %s" % (
                        name, st, body[:300].decode(errors="replace"))
                ids, i = [], 0
                while True:
                    chunk = f.read(block_size)
                    if not chunk:
                        break
                    bid = base64.b64encode(b"flow-double-%08d" % i).decode()
                    st, body = self._call("PUT", url, {"comp": "block", "blockid": bid}, None, chunk, len(chunk),
                                          timeout=120)
                    if st != 201:
                        return "Put Block %s #%d: HTTP %d %s" % (name, i, st, body[:300].decode(errors="replace"))
                    ids.append(bid)
                    i += 1
            xml = ('<?xml version="1.0" encoding="utf-8"?><BlockList>%s</BlockList>' % "".join(
                "<Latest>%s</Latest>" % b for b in ids)).encode()
            st, body = self._call("PUT", url, {"comp": "blocklist"}, {"Content-Type": "application/xml"}, xml,
                                  len(xml), timeout=60)
            return None if st == 201 else "Put Block List %s: HTTP %d %s" % (
                name, st, body[:300].decode(errors="replace"))
        except OSError as e:
            return "uploading %s: %s" % (name, e)
