"""aml_entra.py — the Entra ID v2 token endpoint and the managed-identity
endpoints, issuing opaque bearer tokens the ARM half then accepts.

Token endpoint: POST /{tenant}/oauth2/v2.0/token (form-encoded), grant_type
client_credentials, scope https://management.azure.com/.default, and one of
  client_secret                                   the configured secret
  client_assertion (jwt-bearer), certificate      RS256 + x5t (SHA-1) or PS256 + x5t#S256 of the
                                                  registered certificate; aud = this token URL;
                                                  iss = sub = client_id; exp in (now, now + 1 h];
                                                  nbf/iat not in the future; jti present
  client_assertion (jwt-bearer), federated        exactly the configured federated token
Errors are shaped as Entra's ({"error", "error_description": "AADSTSnnnn: ...",
"error_codes", "timestamp", "trace_id", "correlation_id", "error_uri"}); the
AADSTS numbers are the ones Entra uses for these cases as far as known, the
descriptions are abridged.

Managed identity (tokens for resource https://management.azure.com[/]):
  GET /msi/token?api-version=2017-09-01&resource=R[&clientid=C]      header secret: MSI_SECRET
      (AML compute's MSI_ENDPOINT; expires_on is an integer)
  GET /identity?api-version=2019-08-01&resource=R[&client_id=C]      header X-IDENTITY-HEADER
      (App Service's IDENTITY_ENDPOINT; expires_on is a string)
  GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource=R   header Metadata: true (IMDS)
"""
import base64
import binascii
import json
import secrets
import threading
import time

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from aml_http import Reply, new_id, utcnow

ARM_SCOPE = "https://management.azure.com/.default"
ARM_RESOURCES = ("https://management.azure.com", "https://management.azure.com/")
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


class TokenStore:
    """Issued access tokens: token -> {exp, kind, client_id}."""

    def __init__(self):
        self.lock = threading.Lock()
        self.tokens = {}
        self.issued = {}            # credential kind -> count

    def issue(self, lifetime, kind, client_id):
        tok = "dbl." + secrets.token_urlsafe(40)
        now = time.time()
        with self.lock:
            self.tokens[tok] = {"exp": now + lifetime, "iat": now, "kind": kind, "client_id": client_id}
            self.issued[kind] = self.issued.get(kind, 0) + 1
        return tok

    def lookup(self, tok):
        with self.lock:
            return self.tokens.get(tok)

    def expire_all(self):
        now = time.time()
        with self.lock:
            for rec in self.tokens.values():
                rec["exp"] = min(rec["exp"], now - 1)
            return len(self.tokens)

    def counts(self):
        with self.lock:
            return dict(self.issued), sum(self.issued.values())


def _b64url_decode(s):
    if not isinstance(s, str) or not s or any(c in s for c in "+/="):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class Entra:
    def __init__(self, cfg, store, client_cert):
        self.cfg = cfg
        self.store = store
        self.client_cert = client_cert      # aml_pki.ClientCert of the registered certificate

    # -- Entra error replies ------------------------------------------------

    def _error(self, req, status, error, aadsts, description):
        cid = req.header("client-request-id") or new_id()
        now = utcnow()
        body = {
            "error": error,
            "error_description": "AADSTS%d: %s Trace ID: %s Correlation ID: %s Timestamp: %s" % (
                aadsts, description, new_id(), cid, now.strftime("%Y-%m-%d %H:%M:%SZ")),
            "error_codes": [aadsts],
            "timestamp": now.strftime("%Y-%m-%d %H:%M:%SZ"),
            "trace_id": new_id(),
            "correlation_id": cid,
            "error_uri": "%s/error?code=%d" % (req.base_url(), aadsts),
        }
        r = Reply(status, body, [("Cache-Control", "no-store, no-cache"), ("Pragma", "no-cache"),
                                 ("x-ms-request-id", body["trace_id"])])
        r.error_code = "%s/AADSTS%d" % (error, aadsts)
        return r

    # -- POST /{tenant}/oauth2/v2.0/token ------------------------------------

    def token(self, req, tenant):
        c = self.cfg
        if req.method != "POST":
            return self._error(req, 400, "invalid_request", 900561,
                               "The endpoint only accepts POST requests. Received a %s request." % req.method)
        if tenant != c["tenant"]:
            return self._error(req, 400, "invalid_request", 90002,
                               "Tenant '%s' not found. Check to make sure you have the correct tenant ID and are "
                               "signing into the correct cloud." % tenant)
        ctype = (req.header("Content-Type") or "").split(";")[0].strip().lower()
        form = req.form() if ctype == "application/x-www-form-urlencoded" else {}
        for k, v in form.items():
            if len(v) > 1:
                return self._error(req, 400, "invalid_request", 9000411,
                                   "The request is not properly formatted. The parameter '%s' is duplicated." % k)
        f = {k: v[0] for k, v in form.items()}
        for name in ("grant_type", "client_id", "scope"):
            if not f.get(name):
                hint = "" if ctype == "application/x-www-form-urlencoded" else \
                    " (the body must be application/x-www-form-urlencoded, got Content-Type '%s')" % ctype
                return self._error(req, 400, "invalid_request", 900144,
                                   "The request body must contain the following parameter: '%s'.%s" % (name, hint))
        if f["grant_type"] != "client_credentials":
            return self._error(req, 400, "unsupported_grant_type", 70003,
                               "The app requested an unsupported grant type '%s'." % f["grant_type"])
        client_id = f["client_id"]
        if client_id != c["client_id"]:
            return self._error(req, 400, "unauthorized_client", 700016,
                               "Application with identifier '%s' was not found in the directory '%s'." % (
                                   client_id, tenant))
        scope = f["scope"]
        if scope != ARM_SCOPE:
            if scope.endswith("/.default"):
                return self._error(req, 400, "invalid_resource", 500011,
                                   "The resource principal named %s was not found in the tenant named %s "
                                   "(the double knows only %s)." % (scope[:-len("/.default")], tenant, ARM_SCOPE))
            return self._error(req, 400, "invalid_scope", 1002012,
                               "The provided value for scope %s is not valid. Client credential flows must have a "
                               "scope value with /.default suffixed to the resource identifier (application ID URI)."
                               % scope)
        has_secret = "client_secret" in f
        has_assertion = "client_assertion" in f or "client_assertion_type" in f
        if has_secret and has_assertion:
            return self._error(req, 400, "invalid_request", 50027,
                               "Only one of client_secret and client_assertion may be sent.")
        if has_secret:
            if f["client_secret"] != c["client_secret"]:
                return self._error(req, 401, "invalid_client", 7000215,
                                   "Invalid client secret provided. Ensure the secret being sent in the request is "
                                   "the client secret value, not the client secret ID, for a secret added to app "
                                   "'%s'." % client_id)
            return self._grant(req, "client_secret", client_id)
        if not has_assertion:
            return self._error(req, 401, "invalid_client", 7000218,
                               "The request body must contain the following parameter: 'client_assertion' or "
                               "'client_secret'.")
        if f.get("client_assertion_type") != JWT_BEARER:
            return self._error(req, 400, "invalid_request", 700008 if "client_assertion_type" in f else 900144,
                               "client_assertion_type must be '%s', got '%s'." % (
                                   JWT_BEARER, f.get("client_assertion_type", "")))
        assertion = f.get("client_assertion", "")
        fed = c["federated_token"]
        if fed and secrets.compare_digest(assertion.encode(), fed.encode()):
            return self._grant(req, "workload_identity", client_id)
        return self._certificate(req, tenant, client_id, assertion)

    def _certificate(self, req, tenant, client_id, assertion):
        c = self.cfg
        parts = assertion.split(".")
        try:
            if len(parts) != 3:
                raise ValueError("a JWT has three dot-separated parts, this one has %d" % len(parts))
            header = json.loads(_b64url_decode(parts[0]))
            claims = json.loads(_b64url_decode(parts[1]))
            sig = _b64url_decode(parts[2])
            if not isinstance(header, dict) or not isinstance(claims, dict):
                raise ValueError("header and claims must be JSON objects")
        except (ValueError, binascii.Error, UnicodeDecodeError) as e:
            return self._error(req, 400, "invalid_request", 50027, "JWT token is invalid or malformed (%s)." % e)
        if "x5t" not in header and "x5t#S256" not in header:
            # not a certificate assertion: a federated token the app does not trust
            return self._error(req, 400, "invalid_client", 70021,
                               "No matching federated identity record found for presented assertion. "
                               "(No x5t/x5t#S256 header either, so it is no certificate assertion.)")
        alg = header.get("alg")
        if alg not in ("RS256", "PS256"):
            return self._error(req, 400, "invalid_client", 5002738,
                               "Invalid JWT token. '%s' is not a supported signature algorithm (RS256, PS256)." % alg)
        if alg == "PS256" and "x5t#S256" not in header:
            return self._error(req, 401, "invalid_client", 700027,
                               "Client assertion contains an invalid signature. [Reason - PS256 assertions must "
                               "name the key by x5t#S256.]")
        cert = self.client_cert
        bad_thumb = None
        if "x5t" in header and header["x5t"] != cert.x5t:
            bad_thumb = header["x5t"]
        if "x5t#S256" in header and header["x5t#S256"] != cert.x5t_s256:
            bad_thumb = header["x5t#S256"]
        if bad_thumb is not None:
            return self._error(req, 401, "invalid_client", 700027,
                               "Client assertion contains an invalid signature. [Reason - The key was not found., "
                               "Thumbprint of key used by client: '%s'; the registered certificate's x5t is '%s']"
                               % (bad_thumb, cert.x5t))
        signed = (parts[0] + "." + parts[1]).encode()
        try:
            if alg == "RS256":
                cert.public_key.verify(sig, signed, padding.PKCS1v15(), hashes.SHA256())
            else:
                cert.public_key.verify(sig, signed, padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32),
                                       hashes.SHA256())
        except InvalidSignature:
            return self._error(req, 401, "invalid_client", 700027,
                               "Client assertion failed signature validation. [Reason - The provided signature "
                               "value did not match the expected signature value (%s).]" % alg)
        want_aud = req.base_url() + req.path
        if claims.get("aud") != want_aud:
            return self._error(req, 401, "invalid_client", 700212,
                               "Client assertion audience claim '%s' does not match the token endpoint '%s'." % (
                                   claims.get("aud"), want_aud))
        if claims.get("iss") != client_id or claims.get("sub") != client_id:
            return self._error(req, 401, "invalid_client", 700021,
                               "Client assertion application identifier doesn't match 'client_id' parameter "
                               "(iss '%s', sub '%s', client_id '%s')." % (
                                   claims.get("iss"), claims.get("sub"), client_id))
        if not isinstance(claims.get("jti"), str) or not claims["jti"]:
            return self._error(req, 401, "invalid_client", 700024, "Client assertion has no jti claim.")
        now = time.time()
        skew = c["clock_skew"]
        for name in ("exp", "nbf", "iat"):
            v = claims.get(name)
            if name in claims and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                return self._error(req, 401, "invalid_client", 700024,
                                   "Client assertion claim '%s' must be a number of seconds." % name)
        exp = claims.get("exp")
        if exp is None:
            return self._error(req, 401, "invalid_client", 700024, "Client assertion has no exp claim.")
        if exp <= now - skew or exp > now + c["assertion_max_lifetime"] + skew:
            return self._error(req, 401, "invalid_client", 700024,
                               "Client assertion is not within its valid time range. Current time: %d, expiry "
                               "time of assertion %d (it must lie in the next %d s)." % (
                                   now, exp, c["assertion_max_lifetime"]))
        for name in ("nbf", "iat"):
            if name in claims and claims[name] > now + skew:
                return self._error(req, 401, "invalid_client", 700024,
                                   "Client assertion is not within its valid time range. Current time: %d, "
                                   "%s of assertion %d is in the future." % (now, name, claims[name]))
        return self._grant(req, "client_certificate", client_id)

    def _grant(self, req, kind, client_id):
        life = int(self.cfg["token_lifetime"])
        tok = self.store.issue(life, kind, client_id)
        r = Reply(200, {"token_type": "Bearer", "expires_in": life, "ext_expires_in": life, "access_token": tok},
                  [("Cache-Control", "no-store, no-cache"), ("Pragma", "no-cache"), ("x-ms-request-id", new_id())])
        r.credential = kind
        return r

    # -- managed identity ------------------------------------------------------

    def _mi_error(self, status, error, description):
        r = Reply(status, {"error": error, "error_description": description})
        r.error_code = error
        return r

    def _mi_common(self, req, api_version):
        if req.method != "GET":
            return self._mi_error(405, "invalid_request", "Only GET is supported.")
        if req.q("api-version") != api_version:
            return self._mi_error(400, "invalid_request",
                                  "api-version must be %s, got %s" % (api_version, req.q("api-version")))
        if req.q("resource") not in ARM_RESOURCES:
            return self._mi_error(400, "invalid_resource",
                                  "resource must be https://management.azure.com (the double issues ARM tokens "
                                  "only), got %s" % req.q("resource"))
        return None

    def msi(self, req):
        """AML compute (MSI_ENDPOINT, MSI_SECRET)."""
        bad = self._mi_common(req, "2017-09-01")
        if bad:
            return bad
        if req.header("secret") != self.cfg["msi_secret"]:
            return self._mi_error(401, "invalid_request", "The 'secret' header is missing or wrong.")
        cid = req.q("clientid")
        if cid is not None and cid != self.cfg["msi_client_id"]:
            return self._mi_error(400, "invalid_request", "No user-assigned identity with client id %s." % cid)
        life = int(self.cfg["token_lifetime"])
        tok = self.store.issue(life, "aml_msi", self.cfg["msi_client_id"])
        r = Reply(200, {"access_token": tok, "expires_on": int(time.time()) + life, "resource": req.q("resource"),
                        "token_type": "Bearer", "client_id": self.cfg["msi_client_id"]})
        r.credential = "aml_msi"
        return r

    def identity(self, req):
        """App Service (IDENTITY_ENDPOINT, IDENTITY_HEADER)."""
        bad = self._mi_common(req, "2019-08-01")
        if bad:
            return bad
        if req.header("X-IDENTITY-HEADER") != self.cfg["identity_header"]:
            return self._mi_error(401, "invalid_request", "The X-IDENTITY-HEADER header is missing or wrong.")
        life = int(self.cfg["token_lifetime"])
        tok = self.store.issue(life, "app_service_mi", self.cfg["msi_client_id"])
        r = Reply(200, {"access_token": tok, "expires_on": str(int(time.time()) + life),
                        "resource": req.q("resource"), "token_type": "Bearer",
                        "client_id": self.cfg["msi_client_id"]})
        r.credential = "app_service_mi"
        return r

    def imds(self, req):
        """IMDS (169.254.169.254 in reality; IMDS_ENDPOINT points here)."""
        bad = self._mi_common(req, "2018-02-01")
        if bad:
            return bad
        if req.header("Metadata") != "true":
            return self._mi_error(400, "invalid_request", "Required metadata header not specified")
        life = int(self.cfg["token_lifetime"])
        now = int(time.time())
        tok = self.store.issue(life, "imds", self.cfg["msi_client_id"])
        r = Reply(200, {"access_token": tok, "refresh_token": "", "expires_in": str(life),
                        "expires_on": str(now + life), "ext_expires_in": str(life), "not_before": str(now),
                        "resource": req.q("resource"), "token_type": "Bearer",
                        "client_id": self.cfg["msi_client_id"]})
        r.credential = "imds"
        return r
