#!/usr/bin/python3
"""selftest.py — starts the AML double in a temporary directory and checks that
it behaves like the service: tokens (secret, certificate, federated, managed
identity) and their refusals, strict job bodies, the job life cycle, cancel,
faults, connection reuse, code versions and their dedup by hash, environments,
paging.  Last line: "selftest: N passed, N failed"; exit status 1 on failure.

    /usr/bin/python3 tests/aml/selftest.py [-k SUBSTRING] [-v]

Blob storage is Azurite: AML_DOUBLE_BLOB_ENDPOINT if set, else azurite-blob from
PATH or from tools/azurite.sh (which installs it into .deps/azurite when missing);
AML_SELFTEST_NO_AZURITE=1 runs without it (the tests that need it are skipped).
Datastores, listSecrets, inputs missing at Preparing and executed jobs
(execute_jobs: real processes, real blobs) are covered too.
"""
import base64
import copy
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
import uuid
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import padding, rsa  # noqa: E402

from double_ctl import Double  # noqa: E402

ARM_SCOPE = "https://management.azure.com/.default"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
PASSED, FAILED, SKIPPED = [], [], []
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


class Fail(Exception):
    pass


def check(cond, what, detail=None):
    if not cond:
        raise Fail(what + ("" if detail is None else "\n      got: %s" % (detail,)))


def status_is(r, want, what):
    check(r.status == want, "%s: expected HTTP %d, got %d" % (what, want, r.status), r.raw[:800])


def arm_error_is(r, status, code, *needles, what=""):
    status_is(r, status, what or code)
    err = (r.json or {}).get("error") or {}
    check(err.get("code") == code, "%s: expected error.code %s" % (what or code, code), r.raw[:800])
    check("details" in err and "additionalInfo" in err, "ARM error body has details and additionalInfo", r.raw)
    for n in needles:
        check(n in err.get("message", ""), "%s: error.message should mention %r" % (what or code, n), err.get("message"))
    return err


# -- a JWT client assertion, as a client builds it --------------------------------


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def load_client(d):
    with open(d.s["client_certificate"], "rb") as f:
        pem = f.read()
    key = serialization.load_pem_private_key(pem, None)
    cert = x509.load_pem_x509_certificate(pem)
    return key, cert.public_bytes(serialization.Encoding.DER)


def assertion(d, key, der, alg="RS256", aud=None, iss=None, sub=None, exp=600, nbf=0, jti=True, x5t=None,
              tamper=False):
    now = int(time.time())
    header = {"alg": alg, "typ": "JWT"}
    if alg == "RS256":
        header["x5t"] = x5t or b64url(hashlib.sha1(der).digest())
    else:
        header["x5t#S256"] = x5t or b64url(hashlib.sha256(der).digest())
    claims = {"aud": aud or d.s["token_url"], "iss": iss or d.s["client_id"], "sub": sub or d.s["client_id"],
              "exp": now + exp, "nbf": now + nbf, "iat": now + nbf}
    if jti:
        claims["jti"] = str(uuid.uuid4())
    signing_input = (b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())).encode()
    if alg == "RS256":
        sig = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    else:
        sig = key.sign(signing_input, padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32), hashes.SHA256())
    if tamper:
        sig = bytes([sig[0] ^ 1]) + sig[1:]
    return signing_input.decode() + "." + b64url(sig)


def cert_form(d, jwt):
    return {"grant_type": "client_credentials", "client_id": d.s["client_id"], "scope": ARM_SCOPE,
            "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            "client_assertion": jwt}


def entra_error_is(r, status, error, aadsts, what):
    status_is(r, status, what)
    j = r.json or {}
    check(j.get("error") == error, "%s: error should be %s" % (what, error), r.raw)
    check(j.get("error_codes") == [aadsts], "%s: error_codes should be [%d]" % (what, aadsts), r.raw)
    check(j.get("error_description", "").startswith("AADSTS%d:" % aadsts), "%s: AADSTS in description" % what, r.raw)
    for k in ("timestamp", "trace_id", "correlation_id"):
        check(k in j, "%s: Entra error has %s" % (what, k), r.raw)


# -- job bodies ----------------------------------------------------------------------


def job_body(d, **over):
    ws = d.s["workspace_id"]
    p = {
        "jobType": "Command", "displayName": "ddp-train", "experimentName": "my-exp",
        "command": "python train.py --data ${{inputs.data}} --lr ${{inputs.lr}} --out ${{outputs.model}}",
        "environmentId": "azureml://registries/azureml/environments/acpt-pytorch-2.2-cuda12.1/labels/latest",
        "computeId": ws + "/computes/gpu-cluster",
        "resources": {"instanceCount": 2, "instanceType": "Standard_NC24ads_A100_v4", "shmSize": "16g"},
        "distribution": {"distributionType": "PyTorch", "processCountPerInstance": 1},
        "environmentVariables": {"NCCL_DEBUG": "INFO"},
        "inputs": {"data": {"jobInputType": "uri_folder", "uri": "azureml://datastores/workspaceblobstore/paths/data/",
                            "mode": "ReadOnlyMount"},
                   "lr": {"jobInputType": "literal", "value": "0.001"}},
        "outputs": {"model": {"jobOutputType": "uri_folder", "mode": "ReadWriteMount"}},
        "limits": {"jobLimitsType": "Command", "timeout": "PT6H"},
        "tags": {"submitted-by": "c-client"},
    }
    for k, v in over.items():
        if v is None:
            p.pop(k, None)
        else:
            p[k] = v
    return {"properties": p}


def wait_status(d, tok, name, want, timeout=8):
    deadline = time.time() + timeout
    seen = []
    while time.time() < deadline:
        r = d.arm("GET", "/jobs/" + name, token=tok)
        status_is(r, 200, "GET job " + name)
        st = r.json["properties"]["status"]
        if not seen or seen[-1] != st:
            seen.append(st)
        if st == want:
            return seen, r
        if st in ("Completed", "Failed", "Canceled"):
            break
        time.sleep(0.1)
    raise Fail("job %s: wanted %s, saw %s" % (name, want, seen))


# -- the tests ------------------------------------------------------------------------


@test
def startup_files(d, tok):
    for f in ("ca.pem", "client.pem", "client-encrypted.pem", "federated-token", "settings.json", "env.sh",
              "port", "http_port", "requests.jsonl"):
        check(os.path.exists(os.path.join(d.dir, f)), "DIR/%s exists" % f)
    with open(os.path.join(d.dir, "client.pem")) as f:
        pem = f.read()
    check("PRIVATE KEY-----" in pem and "BEGIN CERTIFICATE" in pem, "client.pem holds key and certificate")
    with open(os.path.join(d.dir, "port")) as f:
        check(int(f.read()) == d.port, "DIR/port is the HTTPS port")
    # the certificate is good for 127.0.0.1 and localhost, with the CA only
    for host in ("127.0.0.1", "localhost"):
        c = http.client.HTTPSConnection(host, d.port, context=d.ssl, timeout=5)
        c.request("GET", "/_double/health")
        check(c.getresponse().read() == b"ok\n", "health over TLS to " + host)
        c.close()
    try:
        c = http.client.HTTPSConnection("127.0.0.1", d.port, context=ssl.create_default_context(), timeout=5)
        c.request("GET", "/_double/health")
        raise Fail("a client without the double's CA must not verify it")
    except ssl.SSLCertVerificationError:
        pass
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(d.s["ca_file"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    try:
        c = http.client.HTTPSConnection("127.0.0.1", d.port, context=ctx, timeout=5)
        c.request("GET", "/_double/health")
        raise Fail("TLS 1.1 must be refused")
    except (ssl.SSLError, OSError):
        pass


@test
def token_by_secret(d, tok):
    r = d.token_request({"grant_type": "client_credentials", "client_id": d.s["client_id"],
                         "client_secret": d.s["client_secret"], "scope": ARM_SCOPE})
    status_is(r, 200, "token by secret")
    j = r.json
    check(j["token_type"] == "Bearer" and isinstance(j["expires_in"], int) and isinstance(j["ext_expires_in"], int),
          "token response fields", j)
    check(len(j["access_token"]) > 20, "an access token", j)
    check("no-store" in r.headers.get("cache-control", ""), "Cache-Control: no-store on tokens", r.headers)
    check(d.arm("GET", "/computes/cpu-cluster", token=j["access_token"]).status == 200, "the token opens ARM")


@test
def token_rejections(d, tok):
    base = {"grant_type": "client_credentials", "client_id": d.s["client_id"], "client_secret": d.s["client_secret"],
            "scope": ARM_SCOPE}
    entra_error_is(d.token_request(dict(base, client_secret="wrong")), 401, "invalid_client", 7000215, "bad secret")
    entra_error_is(d.token_request(base, tenant="99999999-0000-0000-0000-000000000000"), 400, "invalid_request",
                   90002, "unknown tenant")
    entra_error_is(d.token_request(dict(base, client_id=str(uuid.uuid4()))), 400, "unauthorized_client", 700016,
                   "unknown client id")
    entra_error_is(d.token_request(dict(base, scope="https://management.azure.com")), 400, "invalid_scope", 1002012,
                   "scope without /.default")
    entra_error_is(d.token_request(dict(base, scope="https://storage.azure.com/.default")), 400, "invalid_resource",
                   500011, "another resource")
    entra_error_is(d.token_request(dict(base, grant_type="password")), 400, "unsupported_grant_type", 70003,
                   "grant type")
    entra_error_is(d.token_request(dict(base, client_secret=None)), 401, "invalid_client", 7000218, "no credential")
    entra_error_is(d.token_request(dict(base, scope=None)), 400, "invalid_request", 900144, "no scope")
    r = d.request("POST", "/%s/oauth2/v2.0/token" % d.s["tenant"], json.dumps(base),
                  {"Content-Type": "application/json"})
    entra_error_is(r, 400, "invalid_request", 900144, "a JSON body instead of a form")
    r = d.request("POST", "/%s/oauth2/v2.0/token" % d.s["tenant"],
                  urllib.parse.urlencode(base) + "&client_id=" + d.s["client_id"],
                  {"Content-Type": "application/x-www-form-urlencoded"})
    entra_error_is(r, 400, "invalid_request", 9000411, "a duplicated parameter")
    with open(d.s["requests_log"]) as f:
        log = f.read()
    check(d.s["client_secret"] not in log, "the client secret never reaches requests.jsonl")


@test
def token_by_certificate(d, tok):
    key, der = load_client(d)
    for alg in ("RS256", "PS256"):
        r = d.token_request(cert_form(d, assertion(d, key, der, alg=alg)))
        status_is(r, 200, "certificate assertion " + alg)
    # the encrypted copy holds the same key
    with open(d.s["client_certificate_encrypted"], "rb") as f:
        ekey = serialization.load_pem_private_key(f.read(), d.s["client_certificate_password"].encode())
    status_is(d.token_request(cert_form(d, assertion(d, ekey, der))), 200, "key from client-encrypted.pem")
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    bad = [
        ("a signature by another key", assertion(d, other, der), 401, "invalid_client", 700027),
        ("a tampered signature", assertion(d, key, der, tamper=True), 401, "invalid_client", 700027),
        ("PS256 signed with PKCS#1 v1.5", assertion(d, key, der, alg="PS256").rsplit(".", 1)[0] + "." +
         assertion(d, key, der).rsplit(".", 1)[1], 401, "invalid_client", 700027),
        ("an unregistered thumbprint", assertion(d, key, der, x5t=b64url(b"\x01" * 20)), 401, "invalid_client",
         700027),
        ("the wrong audience", assertion(d, key, der, aud="https://login.microsoftonline.com/%s/oauth2/v2.0/token"
                                         % d.s["tenant"]), 401, "invalid_client", 700212),
        ("an expired assertion", assertion(d, key, der, exp=-600, nbf=-1200), 401, "invalid_client", 700024),
        ("an assertion valid for 2 h", assertion(d, key, der, exp=7200), 401, "invalid_client", 700024),
        ("an assertion from the future", assertion(d, key, der, nbf=600, exp=900), 401, "invalid_client", 700024),
        ("iss is not the client id", assertion(d, key, der, iss=str(uuid.uuid4())), 401, "invalid_client", 700021),
        ("no jti", assertion(d, key, der, jti=False), 401, "invalid_client", 700024),
        ("not a JWT", "abc.def", 400, "invalid_request", 50027),
    ]
    for what, jwt, st, err, code in bad:
        entra_error_is(d.token_request(cert_form(d, jwt)), st, err, code, what)
    reqs = [r for r in d.requests() if r["op"] == "token" and r.get("assertion")]
    check(reqs and reqs[-1]["body"]["client_assertion"] == "<redacted>" and "claims" in reqs[-1]["assertion"],
          "the log keeps the assertion's claims, not the assertion", reqs[-1:])


@test
def token_by_federated_assertion(d, tok):
    with open(d.s["federated_token_file"]) as f:
        fed = f.read()
    r = d.token_request(cert_form(d, fed))
    status_is(r, 200, "federated token")
    check(d.arm("GET", "/computes/gpu-cluster", token=r.json["access_token"]).status == 200, "it opens ARM")
    forged = fed.split(".")[0] + "." + b64url(b'{"sub":"someone-else"}') + "." + fed.split(".")[2]
    entra_error_is(d.token_request(cert_form(d, forged)), 400, "invalid_client", 70021, "another federated token")
    st = d.stats()["tokens_by_credential"]
    check(st.get("workload_identity", 0) >= 1 and st.get("client_certificate", 0) >= 1, "stats count credentials", st)


@test
def managed_identity(d, tok):
    res = urllib.parse.quote("https://management.azure.com", safe="")
    r = d.request("GET", "/msi/token?api-version=2017-09-01&resource=" + res, headers={"secret": d.s["msi_secret"]},
                  plain=True)
    status_is(r, 200, "AML compute MSI")
    check(isinstance(r.json["expires_on"], int), "MSI expires_on is an integer", r.json)
    check(d.arm("GET", "/computes/cpu-cluster", token=r.json["access_token"]).status == 200, "an MSI token opens ARM")
    status_is(d.request("GET", "/msi/token?api-version=2017-09-01&resource=" + res, headers={"secret": "nope"},
                        plain=True), 401, "MSI with a wrong secret")
    r = d.request("GET", "/identity?api-version=2019-08-01&resource=" + res,
                  headers={"X-IDENTITY-HEADER": d.s["identity_header"]}, plain=True)
    status_is(r, 200, "App Service identity endpoint")
    check(isinstance(r.json["expires_on"], str), "App Service expires_on is a string", r.json)
    r = d.request("GET", "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=" + res,
                  headers={"Metadata": "true"}, plain=True)
    status_is(r, 200, "IMDS")
    status_is(d.request("GET", "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=" + res, plain=True),
              400, "IMDS without Metadata: true")
    status_is(d.request("GET", d.s["workspace_id"] + "/computes?api-version=2024-10-01", plain=True), 404,
              "ARM is not served over plain HTTP")
    with open(d.s["requests_log"]) as f:
        log = f.read()
    check(d.s["msi_secret"] not in log and d.s["identity_header"] not in log, "MI secrets are redacted in the log")


@test
def arm_authentication(d, tok):
    err = arm_error_is(d.arm("GET", "/computes/gpu-cluster"), 401, "AuthenticationFailed", "Authorization",
                       what="no token")
    r = d.arm("GET", "/computes/gpu-cluster", token="not-a-token")
    arm_error_is(r, 401, "InvalidAuthenticationToken", what="an unknown token")
    check("www-authenticate" in r.headers, "401 carries WWW-Authenticate", r.headers)
    d.config(token_lifetime=1)
    try:
        short = d.token()
    finally:
        d.config(token_lifetime=3599)
    check(d.arm("GET", "/computes/gpu-cluster", token=short).status == 200, "a fresh short-lived token works")
    time.sleep(1.2)
    r = d.arm("GET", "/computes/gpu-cluster", token=short)
    arm_error_is(r, 401, "ExpiredAuthenticationToken", "expiry", what="a token past expires_in")
    check('error="invalid_token"' in r.headers.get("www-authenticate", ""), "WWW-Authenticate says invalid_token",
          r.headers)
    t2 = d.token()
    d.expire_tokens()
    arm_error_is(d.arm("GET", "/computes/gpu-cluster", token=t2), 401, "ExpiredAuthenticationToken",
                 what="after /_double/expire_tokens")
    check(d.arm("GET", "/computes/gpu-cluster", token=d.token()).status == 200, "a token issued afterwards works")
    with open(d.s["requests_log"]) as f:
        log = f.read()
    check(t2 not in log and short not in log, "no token in requests.jsonl")
    check('"Authorization": "Bearer <redacted>"' in log, "Authorization is logged redacted")
    del err


@test
def api_version(d, tok):
    arm_error_is(d.arm("GET", "/computes/gpu-cluster", token=tok, api_version=False), 400,
                 "MissingApiVersionParameter", "api-version", what="no api-version")
    arm_error_is(d.arm("GET", "/computes/gpu-cluster", token=tok, api_version="2023-04-01"), 400,
                 "InvalidApiVersionParameter", "2023-04-01", "2024-10-01", what="an unsupported api-version")
    arm_error_is(d.arm("PUT", "/jobs/no-api-version", job_body(d), token=tok, api_version=False), 400,
                 "MissingApiVersionParameter", what="PUT without api-version")
    status_is(d.arm("GET", "/jobs/no-api-version", token=tok), 404, "nothing was created")


@test
def arm_response_headers(d, tok):
    cid = str(uuid.uuid4())
    r = d.arm("GET", "/computes/gpu-cluster", token=tok, headers={"x-ms-client-request-id": cid})
    h = r.headers
    check(re.match(r"^[0-9a-f-]{36}$", h.get("x-ms-request-id", "")), "x-ms-request-id is a uuid", h)
    check(h.get("x-ms-correlation-request-id"), "x-ms-correlation-request-id", h)
    check(h.get("x-ms-client-request-id") == cid, "x-ms-client-request-id is echoed", h)
    check(h.get("x-ms-ratelimit-remaining-subscription-reads", "").isdigit(), "reads quota on a GET", h)
    check(int(h["content-length"]) == len(r.raw.encode()), "Content-Length", h)
    r = d.arm("PUT", "/jobs/hdr-job", job_body(d), token=tok)
    check(r.headers.get("x-ms-ratelimit-remaining-subscription-writes", "").isdigit(), "writes quota on a PUT",
          r.headers)
    r = d.arm("GET", "/jobs/does-not-exist", token=tok, headers={"x-ms-client-request-id": cid})
    check(r.headers.get("x-ms-client-request-id") == cid and r.headers.get("x-ms-request-id"),
          "the headers are on errors too", r.headers)
    recs = [x for x in d.requests() if x["client_request_id"] == cid]
    check(len(recs) == 2, "requests.jsonl records x-ms-client-request-id", recs)


@test
def job_runs_to_completed(d, tok):
    r = d.arm("PUT", "/jobs/train-ddp-0001", job_body(d), token=tok)
    status_is(r, 201, "PUT a distributed PyTorch command job")
    j = r.json
    ws = d.s["workspace_id"]
    check(j["id"] == ws + "/jobs/train-ddp-0001" and j["name"] == "train-ddp-0001"
          and j["type"] == "Microsoft.MachineLearningServices/workspaces/jobs", "the ARM envelope", j)
    check(set(j["systemData"]) >= {"createdAt", "createdBy", "lastModifiedAt"}, "systemData", j["systemData"])
    p = j["properties"]
    check(p["status"] in ("NotStarted", "Queued"), "a new job has not started", p["status"])
    studio = p["services"]["Studio"]
    check(studio["jobServiceType"] == "Studio" and studio["endpoint"] == (
        "https://ml.azure.com/runs/train-ddp-0001?wsid=/subscriptions/%s/resourcegroups/%s/workspaces/%s&tid=%s" % (
            d.s["subscription"], d.s["resource_group"], d.s["workspace"], d.s["tenant"])), "Studio endpoint", studio)
    check(p["services"]["Tracking"]["jobServiceType"] == "Tracking", "Tracking service", p["services"])
    check(p["outputs"]["model"]["uri"].startswith("azureml://datastores/workspaceblobstore/paths/"),
          "an output without uri gets the default one", p["outputs"])
    t0 = time.time()
    seen, r = wait_status(d, tok, "train-ddp-0001", "Completed", timeout=6)
    check(time.time() - t0 < 4, "the life cycle takes about 1.5 s", time.time() - t0)
    hist = [h["status"] for h in d.job("train-ddp-0001")["history"]]
    check(hist == ["NotStarted", "Queued", "Preparing", "Running", "Finalizing", "Completed"], "status history",
          hist)
    log = d.std_log("train-ddp-0001")
    check("ran: python train.py" in log and "--lr 0.001" in log and "2 node(s) x 1 process(es)" in log,
          "std_log.txt tells what ran", log)
    # re-PUT: same body is idempotent; tags may change; nothing else may
    r = d.arm("PUT", "/jobs/train-ddp-0001", job_body(d), token=tok)
    status_is(r, 200, "re-PUT of the same body")
    check(r.json["properties"]["status"] == "Completed", "re-PUT does not start a new run", r.json["properties"])
    r = d.arm("PUT", "/jobs/train-ddp-0001", job_body(d, tags={"k": "v"}), token=tok)
    status_is(r, 200, "re-PUT changing tags")
    check(r.json["properties"]["tags"] == {"k": "v"}, "tags replaced", r.json["properties"]["tags"])
    arm_error_is(d.arm("PUT", "/jobs/train-ddp-0001", job_body(d, command="python other.py"), token=tok), 400,
                 "UserError", "command", what="re-PUT changing the command")


def _reject(d, tok, name, body, status, code, *needles):
    r = d.arm("PUT", "/jobs/" + name, body, token=tok)
    err = arm_error_is(r, status, code, *needles, what="PUT %s" % name)
    if NAMEOK.match(name):
        status_is(d.arm("GET", "/jobs/" + name, token=tok), 404, "rejected job %s was not created" % name)
    return err


NAMEOK = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9\-_]{0,254}$")


@test
def job_body_rejections(d, tok):
    b = job_body(d)
    b["properties"]["priority"] = 5
    err = _reject(d, tok, "rej-unknown", b, 400, "UserError", "properties.priority", "unknown field")
    check(err.get("target") == "properties.priority", "error.target names the field", err)
    b = job_body(d, distribution={"distributionType": "Pytorch", "processCountPerInstance": 1})
    _reject(d, tok, "rej-enum", b, 400, "UserError", "properties.distribution.distributionType", "Pytorch",
            "PyTorch")
    _reject(d, tok, "rej-noenv", job_body(d, environmentId=None), 400, "UserError", "properties.environmentId",
            "required")
    _reject(d, tok, "bad.name!", job_body(d), 400, "UserError", "bad.name!")
    _reject(d, tok, "-leading-dash", job_body(d), 400, "UserError", "-leading-dash")
    _reject(d, tok, "x" * 256, job_body(d), 400, "UserError")
    b = job_body(d)
    b["properties"]["resources"]["instanceCount"] = "2"
    _reject(d, tok, "rej-type", b, 400, "UserError", "properties.resources.instanceCount", "integer")
    b = job_body(d)
    b["properties"]["inputs"]["data"]["mode"] = "Mount"
    _reject(d, tok, "rej-mode", b, 400, "UserError", "properties.inputs.data.mode", "Mount")
    b = job_body(d)
    b["properties"]["status"] = "Running"
    _reject(d, tok, "rej-readonly", b, 400, "UserError", "properties.status", "read-only")
    b = job_body(d)
    b["name"] = "x"
    _reject(d, tok, "rej-envelope", b, 400, "UserError", "name")
    _reject(d, tok, "rej-noprops", {"jobType": "Command"}, 400, "UserError", "jobType")
    ws = d.s["workspace_id"]
    _reject(d, tok, "rej-compute", job_body(d, computeId=ws + "/computes/tpu-cluster"), 400, "UserError",
            "tpu-cluster", "properties.computeId")
    _reject(d, tok, "rej-compute-short", job_body(d, computeId="gpu-cluster"), 400, "UserError",
            "properties.computeId", "ARM resource id")
    b = job_body(d)
    b["properties"]["resources"]["instanceCount"] = 9
    _reject(d, tok, "rej-nodes", b, 400, "UserError", "instanceCount", "at most 4")
    _reject(d, tok, "rej-code", job_body(d, codeId=ws + "/codes/nothere/versions/1"), 400, "UserError",
            "properties.codeId", "nothere")
    _reject(d, tok, "rej-envver", job_body(d, environmentId=ws + "/environments/flow-runtime/versions/9"), 400,
            "UserError", "flow-runtime", "9")
    _reject(d, tok, "rej-envform", job_body(d, environmentId="flow-runtime:2"), 400, "UserError",
            "properties.environmentId")
    _reject(d, tok, "rej-binding", job_body(d, command="python t.py ${{inputs.missing}}"), 400, "UserError",
            "inputs.missing")
    _reject(d, tok, "rej-timeout", job_body(d, limits={"jobLimitsType": "Command", "timeout": "6 hours"}), 400,
            "UserError", "properties.limits.timeout")
    _reject(d, tok, "rej-datastore", job_body(d, inputs={"data": {"jobInputType": "uri_folder",
                                                                  "uri": "azureml://datastores/nope/paths/x"}},
                                              command="python t.py ${{inputs.data}}", outputs=None), 400,
            "UserError", "nope")
    # several problems at once: all of them in details
    b = job_body(d, environmentId=None)
    b["properties"]["foo"] = 1
    err = _reject(d, tok, "rej-many", b, 400, "UserError")
    msgs = " ".join(x["message"] for x in err["details"])
    check("properties.foo" in msgs and "properties.environmentId" in msgs, "details list every problem", err)
    # the transport of the body
    r = d.arm("PUT", "/jobs/rej-ctype", json.dumps(job_body(d)), token=tok, headers={"Content-Type": "text/plain"})
    arm_error_is(r, 415, "UnsupportedMediaType", what="text/plain body")
    r = d.arm("PUT", "/jobs/rej-json", '{"properties": ', token=tok, headers={"Content-Type": "application/json"})
    arm_error_is(r, 400, "InvalidRequestContent", what="broken JSON")
    r = d.arm("PUT", "/jobs/rej-empty", None, token=tok, headers={"Content-Type": "application/json"})
    arm_error_is(r, 400, "InvalidRequestContent", what="no body")
    # a plain, minimal body is fine; so are other job types' strict checks
    status_is(d.arm("PUT", "/jobs/minimal-1", {"properties": {
        "jobType": "Command", "command": "echo hi", "environmentId": "azureml:AzureML-minimal-ubuntu22.04-py39-cpu@latest",
        "computeId": ws + "/computes/cpu-cluster"}}, token=tok), 201, "a minimal command job")


@test
def job_failure_and_hold(d, tok):
    # all submitted at once, so their clocks run side by side
    status_is(d.arm("PUT", "/jobs/fails-by-tag", job_body(d, tags={"FLOW_DOUBLE_OUTCOME": "Failed"}), token=tok),
              201, "PUT failing job")
    for name in ("fails-by-ctl", "held", "odd"):
        status_is(d.arm("PUT", "/jobs/" + name, job_body(d), token=tok), 201, "PUT " + name)
    status_is(d.arm("PUT", "/jobs/too-long", job_body(d, limits={"jobLimitsType": "Command", "timeout": "PT0.5S"},
                                                      tags={"FLOW_DOUBLE_RUNNING_SECONDS": "30"}), token=tok),
              201, "PUT too-long")
    d.ctl("POST", "jobs/fails-by-ctl/outcome", {"status": "Failed", "message": "CUDA out of memory"})
    d.ctl("POST", "jobs/held/hold")
    d.ctl("POST", "jobs/odd/force", {"status": "NotResponding"})
    # FLOW_DOUBLE_OUTCOME=Failed: it runs, then fails
    wait_status(d, tok, "fails-by-tag", "Failed")
    hist = [h["status"] for h in d.job("fails-by-tag")["history"]]
    check(hist[-2:] == ["Running", "Failed"], "it ran first", hist)
    check("error" in d.std_log("fails-by-tag"), "std_log tells the error", d.std_log("fails-by-tag"))
    check(d.job("fails-by-tag")["error"]["message"], "the double's view has the error")
    wait_status(d, tok, "fails-by-ctl", "Failed")
    check("CUDA out of memory" in d.std_log("fails-by-ctl"), "the given message is the error")
    # hold: stays Running until released
    wait_status(d, tok, "held", "Running")
    time.sleep(0.8)
    check(d.arm("GET", "/jobs/held", token=tok).json["properties"]["status"] == "Running", "held job stays Running")
    d.ctl("POST", "jobs/held/release")
    wait_status(d, tok, "held", "Completed", timeout=3)
    # a forced odd status sticks until forced again
    check(d.arm("GET", "/jobs/odd", token=tok).json["properties"]["status"] == "NotResponding", "forced status")
    # a timeout cancels a job that runs too long
    wait_status(d, tok, "too-long", "Canceled", timeout=5)
    check(d.job("too-long")["error"]["code"] == "JobTimeout", "timeout recorded", d.job("too-long"))
    r = d.request("POST", "/_double/jobs/held/hold")
    status_is(r, 409, "a finished job cannot be held")


@test
def cancel(d, tok):
    status_is(d.arm("PUT", "/jobs/to-cancel", job_body(d), token=tok), 201, "PUT")
    d.ctl("POST", "jobs/to-cancel/hold")
    wait_status(d, tok, "to-cancel", "Running")
    r = d.arm("POST", "/jobs/to-cancel/cancel", token=tok)
    status_is(r, 202, "cancel")
    loc, ra = r.headers.get("location"), r.headers.get("retry-after")
    check(loc and loc.startswith(d.url + "/subscriptions/") and "api-version=" in loc, "cancel gives a Location", loc)
    check(ra and ra.isdigit(), "cancel gives Retry-After", r.headers)
    check(d.arm("GET", "/jobs/to-cancel", token=tok).json["properties"]["status"] == "CancelRequested",
          "CancelRequested right after the cancel")
    target = loc[len(d.url):]
    r = d.request("GET", target, headers={"Authorization": "Bearer " + tok})
    status_is(r, 202, "the cancel operation is pending")
    wait_status(d, tok, "to-cancel", "Canceled", timeout=3)
    status_is(d.request("GET", target, headers={"Authorization": "Bearer " + tok}), 200, "the operation is done")
    status_is(d.request("GET", target), 401, "the operation URL needs a token too")
    status_is(d.arm("POST", "/jobs/to-cancel/cancel", token=tok), 200, "cancel of a finished job")
    arm_error_is(d.arm("POST", "/jobs/never-was/cancel", token=tok), 404, "UserError", what="cancel of no job")
    d.config(cancel_mode="sync")
    try:
        status_is(d.arm("PUT", "/jobs/to-cancel-sync", job_body(d), token=tok), 201, "PUT")
        status_is(d.arm("POST", "/jobs/to-cancel-sync/cancel", token=tok), 200, "cancel_mode sync answers 200")
        wait_status(d, tok, "to-cancel-sync", "Canceled", timeout=3)
    finally:
        d.config(cancel_mode="async")


@test
def fault_429_then_clears(d, tok):
    status_is(d.arm("PUT", "/jobs/faulty", job_body(d), token=tok), 201, "PUT")
    fid = d.fault(match={"method": "GET", "path_regex": "/jobs/faulty$"}, action="status", status=429, retry_after=1,
                  count=3)
    for i in range(3):
        r = d.arm("GET", "/jobs/faulty", token=tok)
        arm_error_is(r, 429, "TooManyRequests", what="throttled GET %d" % (i + 1))
        check(r.headers.get("retry-after") == "1", "429 carries Retry-After: 1", r.headers)
        check(r.headers.get("x-ms-request-id"), "a throttled answer still has x-ms-request-id", r.headers)
    status_is(d.arm("GET", "/jobs/faulty", token=tok), 200, "the 4th GET passes")
    status_is(d.arm("GET", "/computes/cpu-cluster", token=tok), 200, "other paths were never affected")
    f = [x for x in d.ctl("GET", "faults") if x["id"] == fid][0]
    check(f["hits"] == 3 and not f["live"], "the fault was used 3 times", f)
    recs = [x for x in d.requests() if x["fault"] == fid]
    check(len(recs) == 3 and all(x["status"] == 429 for x in recs), "faulted requests are logged with the fault id")
    d.fault(match={"kind": "token"}, action="status", status=503, retry_after=2, retry_after_http_date=True)
    r = d.token_request({"grant_type": "client_credentials", "client_id": d.s["client_id"],
                         "client_secret": d.s["client_secret"], "scope": ARM_SCOPE})
    status_is(r, 503, "token endpoint fault")
    check(r.headers.get("retry-after", "").endswith("GMT"), "Retry-After as an HTTP date", r.headers)
    d.token()
    d.fault(match={"method": "PUT"}, action="status", status=500, skip=1)
    status_is(d.arm("PUT", "/jobs/skip-1", job_body(d), token=tok), 201, "skip lets the first through")
    arm_error_is(d.arm("PUT", "/jobs/skip-2", job_body(d), token=tok), 500, "InternalServerError",
                 what="then the fault")
    status_is(d.arm("GET", "/jobs/skip-2", token=tok), 404, "a status fault does nothing")


@test
def fault_drop_and_delay(d, tok):
    status_is(d.arm("PUT", "/jobs/droppy", job_body(d), token=tok), 201, "PUT")
    d.fault(match={"method": "GET", "path_regex": "/jobs/droppy"}, action="drop")
    try:
        r = d.arm("GET", "/jobs/droppy", token=tok)
        raise Fail("a dropped request must not be answered, got %r" % r)
    except (http.client.RemoteDisconnected, ConnectionError, ssl.SSLError, http.client.BadStatusLine):
        pass
    status_is(d.arm("GET", "/jobs/droppy", token=tok), 200, "the next request is answered")
    check([x for x in d.requests() if x["fault"] and x["status"] is None], "a drop is logged with status null")
    # drop_after: the PUT takes effect, the answer is lost
    d.fault(match={"method": "PUT", "path_regex": "/jobs/lost-answer"}, action="drop_after")
    try:
        d.arm("PUT", "/jobs/lost-answer", job_body(d), token=tok)
        raise Fail("drop_after must not answer")
    except (http.client.RemoteDisconnected, ConnectionError, ssl.SSLError, http.client.BadStatusLine):
        pass
    status_is(d.arm("GET", "/jobs/lost-answer", token=tok), 200, "the job exists after a lost answer")
    status_is(d.arm("PUT", "/jobs/lost-answer", job_body(d), token=tok), 200, "retrying the PUT is idempotent")
    d.fault(match={"path_regex": "/computes/cpu-cluster"}, action="delay", delay=0.6)
    t0 = time.time()
    status_is(d.arm("GET", "/computes/cpu-cluster", token=tok), 200, "delayed GET")
    check(time.time() - t0 >= 0.6, "the answer came after the delay", time.time() - t0)
    try:
        conn = d.connection(timeout=0.3)
        d.fault(match={"path_regex": "/computes/cpu-cluster"}, action="delay", delay=1)
        d.arm("GET", "/computes/cpu-cluster", token=tok, conn=conn)
        raise Fail("a 0.3 s client timeout must fire on a 1 s delay")
    except (TimeoutError, OSError):
        pass


@test
def connection_reuse(d, tok):
    d.reset()
    conn = d.connection()
    for _ in range(5):
        r = d.arm("GET", "/computes/gpu-cluster", token=tok, conn=conn)
        status_is(r, 200, "GET on a kept-alive connection")
    r = d.arm("GET", "/jobs/nope", token=tok, conn=conn)       # an error answer keeps the connection too
    status_is(r, 404, "404 on the same connection")
    status_is(d.arm("GET", "/computes/cpu-cluster", token=tok, conn=conn), 200, "and it goes on")
    conn.close()
    st = d.stats()
    check(st["requests"] == 7, "7 requests counted", st)
    conns = {x["conn"] for x in d.requests()}
    check(len(conns) == 1, "all on one connection", conns)
    # the control API's own connections are counted too; the requests above used one
    check(st["connections"] <= 2, "stats count accepted connections", st)


def _sas_ok(d, sas_uri):
    u = urllib.parse.urlsplit(sas_uri)
    q = dict(urllib.parse.parse_qsl(u.query))
    check(set(q) >= {"sv", "se", "sr", "sp", "sig"} and q["sr"] == "c" and q["sp"] == "racwl", "SAS fields", q)
    account, container = u.path.strip("/").split("/")[-2:]
    sts = "\n".join([q["sp"], "", q["se"], "/blob/%s/%s" % (account, container), "", "", "", q["sv"], "c",
                     "", "", "", "", "", "", ""])
    key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    sig = base64.b64encode(hmac.new(base64.b64decode(key), sts.encode(), hashlib.sha256).digest()).decode()
    check(q["sig"] == sig, "the SAS signature is HMAC-SHA256 of the service-SAS string-to-sign", q)


@test
def code_versions(d, tok):
    r = d.arm("POST", "/codes/snap-a/versions/1/startPendingUpload", {"pendingUploadType": "TemporaryBlobReference"},
              token=tok)
    status_is(r, 200, "startPendingUpload")
    ref = r.json["blobReferenceForConsumption"]
    check(ref["credential"]["credentialType"] == "SAS" and ref["credential"]["sasUri"].startswith(ref["blobUri"] + "?"),
          "a container SAS beside blobUri", ref)
    check(r.json["pendingUploadType"] == "TemporaryBlobReference" and r.json["pendingUploadId"], "DTO fields", r.json)
    if not d.s.get("blob_endpoint"):
        check(ref["blobUri"].startswith("https://127.0.0.1:1/"), "without a blob endpoint uploads go nowhere", ref)
    else:
        _sas_ok(d, ref["credential"]["sasUri"])
    arm_error_is(d.arm("POST", "/codes/snap-a/versions/1/startPendingUpload", {"pendingUploadType": "Temp"},
                       token=tok), 400, "UserError", "pendingUploadType", what="bad pendingUploadType")
    arm_error_is(d.arm("POST", "/codes/snap-a/versions/1/startPendingUpload", {"type": "x"}, token=tok), 400,
                 "UserError", "type", what="unknown DTO field")
    h = hashlib.sha256(b"snapshot-a").hexdigest()
    body = {"properties": {"codeUri": ref["blobUri"] + "/snap", "isAnonymous": False,
                           "properties": {"hash_sha256": h, "hash_version": "202208"}}}
    r = d.arm("GET", "/codes/snap-a/versions", token=tok, query={"hash": h, "hashVersion": "202208"})
    status_is(r, 200, "dedup lookup before upload")
    check(r.json == {"value": []}, "nothing with that hash yet", r.json)
    r = d.arm("PUT", "/codes/snap-a/versions/1", body, token=tok)
    status_is(r, 201, "register a code version")
    code_id = r.json["id"]
    check(code_id == d.s["workspace_id"] + "/codes/snap-a/versions/1", "its id", code_id)
    check(r.json["properties"]["provisioningState"] == "Succeeded", "provisioningState", r.json)
    status_is(d.arm("PUT", "/codes/snap-a/versions/1", body, token=tok), 200, "re-PUT of the same version")
    other = copy.deepcopy(body)
    other["properties"]["codeUri"] += "2"
    arm_error_is(d.arm("PUT", "/codes/snap-a/versions/1", other, token=tok), 409, "UserError", "immutable",
                 what="changing a code version")
    r = d.arm("GET", "/codes/another-name/versions", token=tok, query={"hash": h, "hashVersion": "202208"})
    check(len(r.json["value"]) == 1 and r.json["value"][0]["id"] == code_id, "dedup by hash regardless of name",
          r.json)
    r = d.arm("GET", "/codes/snap-a/versions", token=tok, query={"hash": "0" * 64, "hashVersion": "202208"})
    check(r.json["value"] == [], "another hash finds nothing", r.json)
    status_is(d.arm("GET", "/codes/snap-a/versions/1", token=tok), 200, "GET the version")
    arm_error_is(d.arm("GET", "/codes/snap-a/versions/2", token=tok), 404, "UserError", what="no such version")
    bad = copy.deepcopy(body)
    bad["properties"]["hash"] = h
    arm_error_is(d.arm("PUT", "/codes/snap-a/versions/3", bad, token=tok), 400, "UserError", "properties.hash",
                 what="unknown code version field")
    arm_error_is(d.arm("PUT", "/codes/snap-a/versions/3", {"properties": {"isAnonymous": False}}, token=tok), 400,
                 "UserError", "properties.codeUri", what="no codeUri")
    r = d.arm("PUT", "/jobs/with-code", job_body(d, codeId=code_id), token=tok)
    status_is(r, 201, "a job with the registered codeId")
    check(r.json["properties"]["codeId"] == code_id, "codeId kept")


@test
def environments_and_computes(d, tok):
    r = d.arm("GET", "/environments/flow-runtime/versions", token=tok,
              query={"$orderBy": "createdtime desc", "$top": "1"})
    status_is(r, 200, "latest environment version")
    v = r.json["value"]
    check(len(v) == 1 and v[0]["name"] == "2" and v[0]["properties"]["tags"].get("flow_installed") == "true",
          "the newest version, with flow_installed", v)
    check(v[0]["id"] == d.s["workspace_id"] + "/environments/flow-runtime/versions/2", "its ARM id", v[0]["id"])
    r = d.arm("GET", "/environments/flow-runtime/versions", token=tok, query={"$orderBy": "createdtime asc"})
    check([x["name"] for x in r.json["value"]] == ["1", "2"], "ascending order", r.json)
    status_is(d.arm("GET", "/environments/flow-runtime/versions/1", token=tok), 200, "GET a version")
    arm_error_is(d.arm("GET", "/environments/flow-runtime/versions/7", token=tok), 404, "UserError",
                 what="no such environment version")
    arm_error_is(d.arm("GET", "/environments/flow-runtime/versions", token=tok, query={"$orderBy": "name"}), 400,
                 "UserError", "$orderBy", what="unsupported $orderBy")
    r = d.arm("PUT", "/jobs/with-ws-env", job_body(d, environmentId=v[0]["id"]), token=tok)
    status_is(r, 201, "a job with a workspace environment")
    r = d.arm("GET", "/computes/gpu-cluster", token=tok)
    check(r.json["properties"]["properties"]["scaleSettings"]["maxNodeCount"] == 4, "compute shape", r.json)
    arm_error_is(d.arm("GET", "/computes/nope", token=tok), 404, "UserError", what="no such compute")
    arm_error_is(d.arm("DELETE", "/computes/gpu-cluster", token=tok), 405, "MethodNotAllowed", what="wrong method")
    arm_error_is(d.arm("GET", "/widgets/x", token=tok), 404, "InvalidResourceType", what="unknown resource type")
    arm_error_is(d.arm("GET", "/data/my-dataset", token=tok), 404, "NotImplementedInDouble",
                 what="a resource the double does not model")
    r = d.request("GET", d.s["workspace_id"].replace(d.s["workspace"], "other-ws") +
                  "/jobs?api-version=2024-10-01", headers={"Authorization": "Bearer " + tok})
    arm_error_is(r, 404, "ResourceNotFound", "other-ws", what="another workspace")
    r = d.request("GET", "/nothing/here", headers={"Authorization": "Bearer " + tok})
    status_is(r, 404, "an unknown path")


@test
def paging(d, tok):
    d.config(page_size=3)
    try:
        for i in range(7):
            status_is(d.arm("PUT", "/jobs/page-%d" % i, job_body(d, tags={"batch": "p"}), token=tok), 201, "PUT")
        r = d.arm("GET", "/jobs", token=tok, query={"tag": "batch"})
        names, pages = [], 0
        while True:
            status_is(r, 200, "a page of jobs")
            pages += 1
            names += [x["name"] for x in r.json["value"]]
            check(len(r.json["value"]) <= 3, "at most page_size items", len(r.json["value"]))
            nl = r.json.get("nextLink")
            if not nl:
                break
            check(nl.startswith(d.url) and "api-version=2024-10-01" in nl and "tag=batch" in nl,
                  "nextLink carries api-version and the filter", nl)
            r = d.request("GET", nl[len(d.url):], headers={"Authorization": "Bearer " + tok})
        check(pages == 3 and sorted(names) == ["page-%d" % i for i in range(7)], "7 jobs over 3 pages",
              (pages, names))
        check(names == ["page-%d" % i for i in reversed(range(7))], "newest first", names)
        arm_error_is(d.arm("GET", "/jobs", token=tok, query={"tags": "batch"}), 400, "UserError", "tags",
                     what="an unknown query parameter")
        arm_error_is(d.arm("GET", "/jobs", token=tok, query={"$skipToken": "42"}), 400, "UserError", "$skipToken",
                     what="a made-up $skipToken")
    finally:
        d.config(page_size=10)


class Skip(Exception):
    pass


def _put_blob(sas_uri, name, data, headers=None):
    u = urllib.parse.urlsplit(sas_uri)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("PUT", "%s/%s?%s" % (u.path, urllib.parse.quote(name), u.query), body=data,
              headers=dict({"x-ms-blob-type": "BlockBlob", "x-ms-version": "2021-08-06"}, **(headers or {})))
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


@test
def azurite_upload(d, tok):
    """startPendingUpload's SAS works against real blob storage; the double inspects the snapshot."""
    if not d.s.get("blob_endpoint"):
        raise Skip("no Azurite (set AML_DOUBLE_BLOB_ENDPOINT, or let tools/azurite.sh install it)")
    r = d.arm("POST", "/codes/snap-z/versions/1/startPendingUpload", {"pendingUploadType": "TemporaryBlobReference"},
              token=tok)
    status_is(r, 200, "startPendingUpload")
    ref = r.json["blobReferenceForConsumption"]
    sas = ref["credential"]["sasUri"]
    _sas_ok(d, sas)
    for name, data in (("snap/train.py", b"print('hi')\n"), ("snap/lib/util.py", b"x = 1\n")):
        st, body = _put_blob(sas, name, data)
        check(st == 201, "Put Blob %s with the SAS -> 201" % name, (st, body[:300]))
    u = urllib.parse.urlsplit(sas)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", "%s?restype=container&comp=list&%s" % (u.path, u.query), headers={"x-ms-version": "2021-08-06"})
    r2 = c.getresponse()
    listing = r2.read().decode()
    c.close()
    check(r2.status == 200 and "snap/train.py" in listing, "the SAS lists the container (sp has l)", listing[:300])
    tampered = sas.replace("sp=racwl", "sp=racwdl")
    st, _ = _put_blob(tampered, "snap/evil.py", b"")
    check(st == 403, "a SAS whose permissions were changed is refused (the signature covers them)", st)
    h = hashlib.sha256(b"snapshot-z").hexdigest()
    r = d.arm("PUT", "/codes/snap-z/versions/1", {"properties": {
        "codeUri": ref["blobUri"] + "/snap", "isAnonymous": False,
        "properties": {"hash_sha256": h, "hash_version": "202208"}}}, token=tok)
    status_is(r, 201, "register the uploaded snapshot")
    status_is(d.arm("PUT", "/jobs/with-snapshot", job_body(d, codeId=r.json["id"]), token=tok), 201, "PUT job")
    wait_status(d, tok, "with-snapshot", "Completed")
    log = d.std_log("with-snapshot")
    check("2 file(s)" in log and "snap/train.py" in log, "std_log lists the snapshot", log)
    # a code version registered without uploading anything: the job fails while Preparing
    r = d.arm("PUT", "/codes/snap-empty/versions/1", {"properties": {"codeUri": ref["blobUri"] + "/nothing-here"}},
              token=tok)
    status_is(r, 201, "register an empty snapshot")
    status_is(d.arm("PUT", "/jobs/with-empty-snapshot", job_body(d, codeId=r.json["id"]), token=tok), 201, "PUT")
    wait_status(d, tok, "with-empty-snapshot", "Failed")
    check("empty" in d.job("with-empty-snapshot")["error"]["message"], "the error says the snapshot is empty")


@test
def datastores(d, tok):
    ws = d.s["workspace_id"]
    r = d.arm("GET", "/datastores/workspaceblobstore", token=tok)
    status_is(r, 200, "GET the default datastore")
    j = r.json
    check(j["id"] == ws + "/datastores/workspaceblobstore" and j["name"] == "workspaceblobstore"
          and j["type"] == "Microsoft.MachineLearningServices/workspaces/datastores", "the ARM envelope", j)
    p = j["properties"]
    check(p["datastoreType"] == "AzureBlob" and p["accountName"] == d.s["blob_account"]
          and p["endpoint"] == "core.windows.net" and p["protocol"] == "https"
          and p["credentials"] == {"credentialsType": "AccountKey"} and p["isDefault"] is True
          and p["serviceDataAccessAuthIdentity"] == "None", "AzureBlob datastore properties", p)
    check(d.s["datastore_container"].endswith("/" + p["containerName"]), "settings name its container",
          (d.s["datastore_container"], p["containerName"]))
    r = d.arm("GET", "/datastores/workspaceartifactstore", token=tok)
    check(r.json["properties"]["isDefault"] is False and r.json["properties"]["containerName"] != p["containerName"],
          "another datastore, another container, not default", r.json)
    arm_error_is(d.arm("GET", "/datastores/nope", token=tok), 404, "UserError", "nope", what="no such datastore")
    r = d.arm("GET", "/datastores", token=tok)
    status_is(r, 200, "list datastores")
    check(sorted(x["name"] for x in r.json["value"]) == sorted(
        ["workspaceblobstore", "workspaceartifactstore", "workspacefilestore", "workspaceworkingdirectory"]),
        "all four", r.json)
    r = d.arm("GET", "/datastores", token=tok, query={"isDefault": "true"})
    check([x["name"] for x in r.json["value"]] == ["workspaceblobstore"], "isDefault=true", r.json)
    r = d.arm("GET", "/datastores", token=tok, query={"count": "3"})
    check(len(r.json["value"]) == 3 and "nextLink" in r.json, "count pages", r.json)
    arm_error_is(d.arm("GET", "/datastores", token=tok, query={"isDefault": "yes"}), 400, "UserError", "isDefault",
                 what="bad isDefault")
    # listSecrets: the account key
    since = d.requests()[-1]["seq"]
    r = d.arm("POST", "/datastores/workspaceblobstore/listSecrets", token=tok)
    status_is(r, 200, "listSecrets without a body")
    check(r.json == {"secretsType": "AccountKey", "key": AZURITE_KEY}, "AccountKey secrets", r.json)
    arm_error_is(d.arm("POST", "/datastores/nope/listSecrets", token=tok), 404, "UserError", what="listSecrets 404")
    arm_error_is(d.arm("POST", "/datastores/workspaceblobstore/listSecrets", {"x": 1}, token=tok), 400, "UserError",
                 "no request body", what="listSecrets with a body")
    status_is(d.request("POST", "/_double/config", {"datastore_secrets": "Key"}), 400, "an unknown secrets type")
    d.config(datastore_secrets="Sas")
    try:
        r = d.arm("POST", "/datastores/workspaceblobstore/listSecrets", token=tok)
        status_is(r, 200, "listSecrets (Sas)")
        check(set(r.json) == {"secretsType", "sasToken"} and r.json["secretsType"] == "Sas", "Sas secrets", r.json)
        sas = r.json["sasToken"]
        q = dict(urllib.parse.parse_qsl(sas))
        check(not sas.startswith("?") and q.get("sr") == "c" and q.get("sp") == "racwdl" and q.get("sig"),
              "a container SAS query, racwdl, no leading ?", sas)
        sts = "\n".join([q["sp"], "", q["se"], "/blob/%s/%s" % (d.s["blob_account"], p["containerName"]), "", "",
                         "", q["sv"], "c", "", "", "", "", "", "", ""])
        sig = base64.b64encode(hmac.new(base64.b64decode(AZURITE_KEY), sts.encode(), hashlib.sha256).digest()).decode()
        check(q["sig"] == sig, "signed for the datastore's container", q)
    finally:
        d.config(datastore_secrets="AccountKey")
    recs = [x for x in d.requests() if x["seq"] > since and x["op"] == "datastores.listSecrets"]
    check(len(recs) == 4, "listSecrets is an op of its own in the request log", [x["op"] for x in d.requests()])
    check(recs[0]["response"] == {"secretsType": "AccountKey", "key": "<redacted>"}, "the answer, redacted", recs[0])
    with open(d.s["requests_log"]) as f:
        log = f.read()
    check(AZURITE_KEY not in log and sig not in log, "no account key or SAS signature in requests.jsonl")


def _need_azurite(d):
    if not d.s.get("blob_endpoint"):
        raise Skip("no Azurite (set AML_DOUBLE_BLOB_ENDPOINT, or install it with tools/azurite.sh)")


@test
def input_missing_fails_at_preparing(d, tok):
    _need_azurite(d)
    for name, inp in (("in-missing-folder", {"jobInputType": "uri_folder", "mode": "ReadOnlyMount",
                                             "uri": "azureml://datastores/workspaceblobstore/paths/no/such/dir/"}),
                      ("in-missing-file", {"jobInputType": "uri_file", "mode": "Download",
                                           "uri": "azureml://datastores/workspaceblobstore/paths/data/nope.csv"})):
        b = job_body(d)
        b["properties"]["inputs"]["data"] = inp
        status_is(d.arm("PUT", "/jobs/" + name, b, token=tok), 201, "PUT " + name)
        seen, _ = wait_status(d, tok, name, "Failed")
        check(seen[-2:] == ["Preparing", "Failed"], "fails while Preparing", seen)
        msg = d.job(name)["error"]["message"]
        check("input 'data'" in msg and inp["uri"] in msg and "not found" in msg, "the error names input and URI",
              msg)
    b = job_body(d)
    b["properties"]["inputs"]["data"] = {"jobInputType": "uri_file", "mode": "Download",
                                         "uri": "azureml://datastores/workspaceblobstore/paths/data/train.csv"}
    status_is(d.arm("PUT", "/jobs/in-present-file", b, token=tok), 201, "PUT with an existing uri_file")
    wait_status(d, tok, "in-present-file", "Completed")


TRAIN_PY = b"""import os, sys
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
assert world == 2 and os.environ["LOCAL_RANK"] == "0" and os.environ["NODE_RANK"] == str(rank), dict(os.environ)
assert os.environ["MASTER_ADDR"] == "127.0.0.1" and os.environ["MASTER_PORT"].isdigit()
assert os.environ["AZUREML_RUN_ID"] and os.environ["GREETING"] == "hej"
from lib.util import shout
data = open(sys.argv[1]).read()
with open(os.path.join(sys.argv[2], "out-%d.txt" % rank), "w") as f:
    f.write(shout(data) + " rank %d/%d" % (rank, world))
if rank == 0:
    open(sys.argv[3], "w").write("summary")
print("rank %d done" % rank)
"""


def _snapshot(d, tok, name, files):
    """Uploads files with startPendingUpload's SAS and registers a code version; returns its id."""
    r = d.arm("POST", "/codes/%s/versions/1/startPendingUpload" % name,
              {"pendingUploadType": "TemporaryBlobReference"}, token=tok)
    ref = r.json["blobReferenceForConsumption"]
    for rel, data in files.items():
        st, body = _put_blob(ref["credential"]["sasUri"], "%s/%s" % (name, rel), data)
        check(st == 201, "upload %s" % rel, (st, body[:200]))
    r = d.arm("PUT", "/codes/%s/versions/1" % name, {"properties": {"codeUri": ref["blobUri"] + "/" + name}},
              token=tok)
    status_is(r, 201, "register code " + name)
    return r.json["id"]


def _exec_body(d, code_id, command, **over):
    b = job_body(d, codeId=code_id, command=command, environmentVariables={"GREETING": "hej"},
                 inputs={}, outputs={}, **over)
    return b


def _put_executed(d, tok, *jobs, what="PUT"):
    """PUTs each (name, body) with the double executing jobs, then turns that off."""
    d.config(execute_jobs=True)
    try:
        for name, body in jobs:
            status_is(d.arm("PUT", "/jobs/" + name, body, token=tok), 201, what)
    finally:
        d.config(execute_jobs=False)


@test
def executed_job(d, tok):
    _need_azurite(d)
    store, cont = _store(d), _ds_container(d)
    check(store.put_bytes("exec/in/data.txt", b"hello", cont) is None, "upload the input")
    code_id = _snapshot(d, tok, "exec-code", {"train.py": TRAIN_PY, "lib/__init__.py": b"",
                                             "lib/util.py": b"def shout(s):\n    return s.upper()\n"})
    b = _exec_body(d, code_id, "python3 train.py ${{inputs.data}} ${{outputs.result}} ${{outputs.summary}}")
    p = b["properties"]
    p["inputs"] = {"data": {"jobInputType": "uri_file", "mode": "ReadOnlyMount",
                            "uri": "azureml://datastores/workspaceblobstore/paths/exec/in/data.txt"}}
    p["outputs"] = {"result": {"jobOutputType": "uri_folder", "mode": "ReadWriteMount",
                               "uri": "azureml://datastores/workspaceblobstore/paths/exec/out/"},
                    "summary": {"jobOutputType": "uri_file", "mode": "Upload",
                                "uri": "azureml://datastores/workspaceblobstore/paths/exec/summary.txt"}}
    _put_executed(d, tok, ("exec-ok", b), what="PUT an executed job")
    seen, _ = wait_status(d, tok, "exec-ok", "Completed", timeout=30)
    log = d.std_log("exec-ok")
    check("[rank 0] rank 0 done" in log and "[rank 1] rank 1 done" in log, "both ranks ran, lines prefixed", log)
    for rank in (0, 1):
        st, body = store.get_bytes("exec/out/out-%d.txt" % rank, cont)
        check(st == 200 and body == b"HELLO rank %d/2" % rank, "output blob of rank %d" % rank, (st, body))
    st, body = store.get_bytes("exec/summary.txt", cont)
    check(st == 200 and body == b"summary", "the uri_file output is the blob <path>", (st, body))
    check(not os.listdir(os.path.join(d.s["jobs_dir"], "exec-ok")) == [] and not any(
        x.startswith("wd.") for x in os.listdir(os.path.join(d.s["jobs_dir"], "exec-ok"))),
        "the working directory is removed", os.listdir(os.path.join(d.s["jobs_dir"], "exec-ok")))
    # a job that only uses the default output path and a 40 MB output (Put Block + Put Block List)
    big = _exec_body(d, code_id, "head -c 41943040 /dev/zero > ${{outputs.model}}/big.bin && echo ok",
                     distribution=None, resources={"instanceCount": 1})
    big["properties"]["outputs"] = {"model": {"jobOutputType": "uri_folder"}}
    _put_executed(d, tok, ("exec-big", big))
    wait_status(d, tok, "exec-big", "Completed", timeout=60)
    names = store.list_blobs("azureml/exec-big/model/", cont, sizes=True)
    check(names == [("azureml/exec-big/model/big.bin", 41943040)], "the default output path, 40 MB", names)


@test
def executed_job_fails(d, tok):
    _need_azurite(d)
    code_id = _snapshot(d, tok, "fail-code", {"run.sh": b"echo starting\necho 'bad things' >&2\nexit 3\n"})
    b = _exec_body(d, code_id, "bash run.sh", distribution=None, resources={"instanceCount": 1})
    _put_executed(d, tok, ("exec-fail", b))
    wait_status(d, tok, "exec-fail", "Failed", timeout=20)
    err = d.job("exec-fail")["error"]
    check("status code 3" in err["message"] and "bad things" in err["message"], "exit status and stderr tail", err)
    check("starting" in d.std_log("exec-fail"), "stdout in std_log.txt")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _run_pids(d, name):
    run = d.job(name)["run"]
    return run["pids"] if run else []


@test
def executed_job_cancel_and_timeout(d, tok):
    _need_azurite(d)
    code_id = _snapshot(d, tok, "sleep-code", {"sleep.sh": b"sleep 60\n"})
    _put_executed(d, tok, ("exec-cancel", _exec_body(d, code_id, "bash sleep.sh")),
                  ("exec-timeout", _exec_body(d, code_id, "bash sleep.sh",
                                              limits={"jobLimitsType": "Command", "timeout": "PT1S"})))
    wait_status(d, tok, "exec-cancel", "Running", timeout=10)
    deadline = time.time() + 10
    # "Running" is the clock's; the run that starts the processes comes on the executor's next tick
    while time.time() < deadline and len(_run_pids(d, "exec-cancel")) < 2:
        time.sleep(0.1)
    pids = _run_pids(d, "exec-cancel")
    check(len(pids) == 2 and all(_alive(p) for p in pids), "2 processes running", pids)
    time.sleep(1)
    check(d.arm("GET", "/jobs/exec-cancel", token=tok).json["properties"]["status"] == "Running",
          "still Running while the processes run")
    status_is(d.arm("POST", "/jobs/exec-cancel/cancel", token=tok), 202, "cancel")
    wait_status(d, tok, "exec-cancel", "Canceled", timeout=10)
    deadline = time.time() + 5
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    check(not any(_alive(p) for p in pids), "cancel killed the processes", pids)
    wait_status(d, tok, "exec-timeout", "Canceled", timeout=15)
    tpids = _run_pids(d, "exec-timeout")
    deadline = time.time() + 5
    while time.time() < deadline and any(_alive(p) for p in tpids):
        time.sleep(0.1)
    check(tpids and not any(_alive(p) for p in tpids), "limits.timeout killed the processes", tpids)
    check("timeout" in d.job("exec-timeout")["error"]["message"], "a timeout error")


def _component(d, code_id, name="flow_p_prep", version="v1", **over):
    spec = {"name": name, "version": version, "type": "command", "display_name": "prep",
            "command": "cat ${{inputs.raw}} > ${{outputs.out}}/x", "code": "azureml:" + code_id,
            "environment": "azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest",
            "inputs": {"raw": {"type": "uri_file"}}, "outputs": {"out": {"type": "uri_folder"}}}
    for k, v in over.items():
        if v is None:
            spec.pop(k, None)
        else:
            spec[k] = v
    return {"properties": {"componentSpec": spec, "isAnonymous": False}}


@test
def component_versions(d, tok):
    r = d.arm("PUT", "/codes/pcode/versions/1", {"properties": {"codeUri": "https://example.invalid/c/pcode"}},
              token=tok)
    status_is(r, 201, "register code")
    code_id = r.json["id"]
    r = d.arm("PUT", "/components/flow_p_prep/versions/v1", _component(d, code_id), token=tok)
    status_is(r, 201, "a new component version")
    check(r.json["id"].endswith("/components/flow_p_prep/versions/v1"), "its id", r.json["id"])
    status_is(d.arm("PUT", "/components/flow_p_prep/versions/v1", _component(d, code_id), token=tok), 200,
              "the same content again")
    arm_error_is(d.arm("PUT", "/components/flow_p_prep/versions/v1", _component(d, code_id, command="true"),
                       token=tok), 409, "UserError", "immutable", what="other content, same version")
    status_is(d.arm("GET", "/components/flow_p_prep/versions/v1", token=tok), 200, "GET it")
    for what, body, needle in (
            ("name not the URL's", _component(d, code_id, name="other"), "componentSpec.name"),
            ("version not the URL's", _component(d, code_id, version="v2"), "componentSpec.version"),
            ("a sweep", _component(d, code_id, type="sweep"), "componentSpec.type"),
            ("undeclared binding", _component(d, code_id, command="x ${{inputs.nope}}"), "${{inputs.nope}}"),
            ("unknown code", _component(d, code_id.replace("pcode", "nocode")), "does not exist"),
            ("camelCase field", _component(d, code_id, environmentVariables={"A": "1"}), "environmentVariables"),
            ("no environment", _component(d, code_id, environment=None), "componentSpec.environment")):
        r = d.arm("PUT", "/components/flow_p_prep/versions/v1", body, token=tok)
        arm_error_is(r, 400, "UserError", what=what)
        check(needle in r.raw, "%s: the error names %s" % (what, needle), r.raw[:600])
    r = d.arm("PUT", "/components/Bad-Name/versions/v1", _component(d, code_id, name="Bad-Name"), token=tok)
    arm_error_is(r, 400, "UserError", what="an upper-case component name")


def _pipeline(d, comp_id, **node_over):
    ws = d.s["workspace_id"]
    first = {"type": "command", "name": "first", "componentId": comp_id,
             "inputs": {"raw": {"job_input_type": "uri_file", "mode": "ReadOnlyMount",
                                "uri": "azureml://datastores/workspaceblobstore/paths/raw/a.csv"}},
             "outputs": {"out": {"job_output_type": "uri_folder", "mode": "ReadWriteMount"}},
             "resources": {"instance_count": 1}}
    second = {"type": "command", "name": "second", "componentId": comp_id,
              "inputs": {"raw": {"job_input_type": "literal", "value": "${{parent.jobs.first.outputs.out}}"}},
              "distribution": {"distribution_type": "PyTorch", "process_count_per_instance": 2}}
    second.update(node_over)
    return {"properties": {"jobType": "Pipeline", "displayName": "p", "computeId": ws + "/computes/cpu-cluster",
                           "settings": {"continue_on_step_failure": False},
                           "jobs": {"first": first, "second": second}}}


@test
def pipeline_jobs(d, tok):
    r = d.arm("PUT", "/codes/pcode2/versions/1", {"properties": {"codeUri": "https://example.invalid/c/p2"}},
              token=tok)
    code_id = r.json["id"]
    r = d.arm("PUT", "/components/flow_p_prep/versions/v9", _component(d, code_id, version="v9"), token=tok)
    status_is(r, 201, "the component")
    comp = r.json["id"]
    status_is(d.arm("PUT", "/jobs/pipe-ok", _pipeline(d, comp), token=tok), 201, "a pipeline job")
    wait_status(d, tok, "pipe-ok", "Completed", timeout=20)
    ws = d.s["workspace_id"]
    for what, body, needle in (
            ("an unknown component", _pipeline(d, comp, componentId=comp.replace("v9", "v8")), "does not exist"),
            ("a binding to a missing job", _pipeline(d, comp, inputs={"raw": {
                "job_input_type": "literal", "value": "${{parent.jobs.zeroth.outputs.out}}"}}), "zeroth"),
            ("a binding to a missing output", _pipeline(d, comp, inputs={"raw": {
                "job_input_type": "literal", "value": "${{parent.jobs.first.outputs.nope}}"}}), "nope"),
            ("a cycle", _pipeline(d, comp, inputs={"raw": {
                "job_input_type": "literal", "value": "${{parent.jobs.second.outputs.out}}"}}), "cycle"),
            ("a component input not given", _pipeline(d, comp, inputs={}), "is not given"),
            ("camelCase in a child", _pipeline(d, comp, resources={"instanceCount": 2}), "instanceCount"),
            ("a name not its key", _pipeline(d, comp, name="third"), "jobs.second.name"),
            ("an unknown compute", _pipeline(d, comp, computeId=ws + "/computes/nope"), "nope"),
            ("a bad distribution", _pipeline(d, comp, distribution={"distribution_type": "Horovod"}), "Horovod")):
        r = d.arm("PUT", "/jobs/pipe-bad", body, token=tok)
        arm_error_is(r, 400, "UserError", what=what)
        check(needle in r.raw, "%s: the error names %s" % (what, needle), r.raw[:800])
    b = _pipeline(d, comp)
    b["properties"]["settings"]["continueRunOnStepFailure"] = True
    arm_error_is(d.arm("PUT", "/jobs/pipe-bad", b, token=tok), 400, "UserError", what="a camelCase setting")


SWEEP_TRAIN_PY = b"""
import argparse, json, os, time
import mlflow
ap = argparse.ArgumentParser()
ap.add_argument("--lr", type=float)
ap.add_argument("--out")
a = ap.parse_args()
for epoch in range(4):
    mlflow.log_metric("loss", (a.lr - 0.5) ** 2 + 1.0 / (epoch + 1), step=epoch)
    time.sleep(0.05 if a.lr != 0.9 else 1.0)
os.makedirs(a.out, exist_ok=True)
open(os.path.join(a.out, "lr.txt"), "w").write(str(a.lr))
"""


def _sweep(d, code_id, **over):
    ws = d.s["workspace_id"]
    p = {"jobType": "Sweep", "displayName": "sw", "computeId": ws + "/computes/cpu-cluster",
         "samplingAlgorithm": {"samplingAlgorithmType": "Grid"},
         "searchSpace": {"lr": ["choice", [[0.1, 0.5, 0.9]]]},
         "objective": {"primaryMetric": "loss", "goal": "Minimize"},
         "limits": {"jobLimitsType": "Sweep", "maxTotalTrials": 3, "maxConcurrentTrials": 2,
                    "trialTimeout": "PT5M"},
         "trial": {"codeId": code_id, "command": "python3 train.py --lr ${{search_space.lr}} --out ${{outputs.model}}",
                   "environmentId": "azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest",
                   "resources": {"instanceCount": 1}},
         "outputs": {"model": {"jobOutputType": "uri_folder", "mode": "ReadWriteMount",
                               "uri": "azureml://datastores/workspaceblobstore/paths/sw/${{name}}/model/"}}}
    p.update(over)
    return {"properties": p}


@test
def sweep_jobs(d, tok):
    _need_azurite(d)
    code_id = _snapshot(d, tok, "sweep-code", {"train.py": SWEEP_TRAIN_PY})
    ws = d.s["workspace_id"]
    trial = _sweep(d, code_id)["properties"]["trial"]
    for what, body, needle in (
            ("a grid of a distribution", _sweep(d, code_id, searchSpace={"lr": ["uniform", [0.1, 0.9]]}),
             "only choice"),
            ("a binding to no parameter", _sweep(d, code_id, trial=dict(trial, command="x ${{search_space.bs}}")),
             "search_space.bs"),
            ("a random sweep without maxTotalTrials", _sweep(d, code_id, samplingAlgorithm={
                "samplingAlgorithmType": "Random"}, limits={"jobLimitsType": "Sweep"}), "maxTotalTrials"),
            ("the SDK's choice form missing", _sweep(d, code_id, searchSpace={"lr": ["choice", [0.1, 0.5]]}),
             "searchSpace.lr"),
            ("Command limits", _sweep(d, code_id, limits={"jobLimitsType": "Command"}), "jobLimitsType"),
            ("no objective", _sweep(d, code_id, objective=None), "objective"),
            ("an unknown compute", _sweep(d, code_id, computeId=ws + "/computes/nope"), "nope")):
        b = _sweep(d, code_id)
        b["properties"] = {k: v for k, v in body["properties"].items() if v is not None}
        r = d.arm("PUT", "/jobs/sweep-bad", b, token=tok)
        arm_error_is(r, 400, "UserError", what=what)
        check(needle in r.raw, "%s: the error names %s" % (what, needle), r.raw[:800])
    # Bandit's slack is a float (the REST spec), though the ARM template schema says integer
    b = _sweep(d, code_id, earlyTermination={"policyType": "Bandit", "slackFactor": 0.1, "evaluationInterval": 1,
                                             "delayEvaluation": 1})
    _put_executed(d, tok, ("sweep-ok", b), what="PUT a sweep job")
    wait_status(d, tok, "sweep-ok", "Completed", timeout=60)
    job = d.arm("GET", "/jobs/sweep-ok", token=tok).json["properties"]
    check(job["properties"].get("best_child_run_id") == "sweep-ok_1", "the best trial (lr 0.5)", job["properties"])
    check(abs(float(job["properties"]["score"]) - 0.25) < 1e-9, "its score: the last value logged", job["properties"])
    store, cont = _store(d), _ds_container(d)
    st, body = store.get_bytes("sw/sweep-ok_1/model/lr.txt", cont)
    check(st == 200 and body == b"0.5", "the trial's output under its own name", (st, body))
    t2 = d.arm("GET", "/jobs/sweep-ok_2", token=tok).json["properties"]
    check(t2["status"] == "Canceled", "bandit canceled the slow, poor trial (lr 0.9)", t2["status"])
    check(json.loads(t2["tags"]["hyperparameters"]) == {"lr": 0.9}, "a trial's values in its tags", t2["tags"])
    check("--lr 0.9 " in t2["command"], "the trial's command has its value", t2["command"])
    log = d.std_log("sweep-ok")
    check("canceled by the early-termination policy" in log, "the sweep's log says why", log)


@test
def control_api(d, tok):
    check(d.ctl("GET", "health") == "ok\n", "health")
    check(d.ctl("GET", "settings")["url"] == d.url, "settings")
    r = d.request("POST", "/_double/config", {"tenant": "x"})
    status_is(r, 400, "tenant cannot change at run time")
    r = d.request("POST", "/_double/faults", {"action": "explode"})
    status_is(r, 400, "a bad fault is refused")
    r = d.request("GET", "/_double/health", plain=True)
    status_is(r, 200, "the control API over plain HTTP")
    d.reset()
    st = d.stats()
    check(st["requests"] == 0 and st["jobs"] == {}, "reset forgets", st)
    with open(d.s["requests_log"]) as f:
        check(f.read() == "", "reset empties requests.jsonl")


def _store(d):
    """A BlobStore on the double's blob endpoint (Shared Key, Azurite's account key)."""
    from aml_blob import BlobStore
    return BlobStore(d.s["blob_endpoint"], AZURITE_KEY, d.s["blob_container"])


def _ds_container(d, name="workspaceblobstore"):
    return d.s["datastore_containers"][name].rsplit("/", 1)[-1]


def find_azurite():
    """azurite-blob: on PATH, else installed (or installed now) by tools/azurite.sh as double_lib.sh's
    azurite_start does; None (with the reason printed) when it cannot be had."""
    if shutil.which("azurite-blob"):
        return shutil.which("azurite-blob")
    root = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    try:
        r = subprocess.run([os.path.join(root, "tools", "azurite.sh")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        print("tools/azurite.sh failed (%s); the tests that need blob storage will be skipped" % e)
        return None
    path = r.stdout.decode().strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 0 or not os.access(path, os.X_OK):
        print("tools/azurite.sh could not install Azurite (exit %d: %s); the tests that need blob storage will "
              "be skipped" % (r.returncode, r.stderr.decode(errors="replace").strip()[-500:]))
        return None
    return path


def start_azurite(binary="azurite-blob"):
    """Azurite's blob service on a free port in a temporary directory: (proc, dir), endpoint."""
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="azurite.")
    proc = subprocess.Popen([binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", tmp,
                             "--silent", "--disableTelemetry", "--skipApiVersionCheck"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return (proc, tmp), "http://127.0.0.1:%d/devstoreaccount1" % port
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)
    print("azurite-blob did not start; the Azurite test will be skipped")
    return None, None


def main():
    args = sys.argv[1:]
    only = args[args.index("-k") + 1] if "-k" in args else None
    verbose = "-v" in args
    extra, azurite = [], None
    endpoint = os.environ.get("AML_DOUBLE_BLOB_ENDPOINT")
    if not endpoint and os.environ.get("AML_SELFTEST_NO_AZURITE") != "1":
        binary = find_azurite()
        if binary:
            azurite, endpoint = start_azurite(binary)
    if endpoint:
        extra = ["--blob-endpoint", endpoint]
    d = Double.start(args=extra)
    try:
        if endpoint:
            # job_body's input: azureml://datastores/workspaceblobstore/paths/data/ must hold data, or the
            # job fails while Preparing as it would in Azure ML
            why = _store(d).put_bytes("data/train.csv", b"x,y\n1,2\n", _ds_container(d))
            if why:
                raise RuntimeError("seeding the workspaceblobstore: %s" % why)
        for fn in TESTS:
            if only and only not in fn.__name__:
                continue
            t0 = time.time()
            try:
                fn(d, d.token())
                PASSED.append(fn.__name__)
                if verbose:
                    print("ok   %s (%.1f s)" % (fn.__name__, time.time() - t0))
            except Skip as e:
                SKIPPED.append(fn.__name__)
                print("skip %s: %s" % (fn.__name__, e))
            except Fail as e:
                FAILED.append(fn.__name__)
                print("FAIL %s: %s" % (fn.__name__, e))
            except Exception:
                FAILED.append(fn.__name__)
                print("FAIL %s: unexpected exception" % fn.__name__)
                traceback.print_exc(file=sys.stdout)
    finally:
        rc = d.stop()
        if azurite:
            azurite[0].terminate()
            azurite[0].wait(10)
            shutil.rmtree(azurite[1], ignore_errors=True)
    if rc != 0:
        FAILED.append("clean_shutdown")
        print("FAIL clean_shutdown: the double exited %s on SIGTERM" % rc)
    else:
        PASSED.append("clean_shutdown")
    if SKIPPED:
        print("skipped: %s" % ", ".join(SKIPPED))
    print("selftest: %d passed, %d failed" % (len(PASSED), len(FAILED)))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
