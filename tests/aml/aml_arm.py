"""aml_arm.py — the Azure Resource Manager half of the double: the
Microsoft.MachineLearningServices workspace resources flow uses.

Every request: a bearer token this double issued and that has not expired
(401 AuthenticationFailed / InvalidAuthenticationToken / ExpiredAuthenticationToken
with WWW-Authenticate), then api-version equal to the configured one (400
MissingApiVersionParameter / InvalidApiVersionParameter), then the workspace
path, then the operation.  Bodies are validated against the strict schema
(aml_schema); names against the resource-name pattern; references
(computeId, codeId, environmentId) against what the workspace holds.  The
double is stricter than the service in two documented ways: unknown query
parameters and explicit nulls are rejected.

Datastores: every name in config datastores is an AzureBlob datastore (the
double has only blob storage; in a real workspace workspacefilestore and
workspaceworkingdirectory are AzureFile shares).  PUT/DELETE of a datastore
answer 404 NotImplementedInDouble.  listSecrets refuses a request body other
than none or {} (stricter: the service ignores one).  Inputs whose datastore
path holds nothing fail the job at Preparing; the double looks when the job is
PUT (the service looks when it prepares the job: data uploaded in between
would be found there, not here).
"""
import copy
import hashlib
import re
import threading
import time
import urllib.parse
import uuid

from aml_http import Reply, arm_error, iso, new_id
from aml_jobs import TERMINAL, Job, control_value, parse_duration
from aml_schema import Problem, check_pending_upload
from aml_exec import default_output_uri
import aml_pipeline
import aml_sweep

PROVIDER = "Microsoft.MachineLearningServices"
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9\-_]{0,254}$")
# names of assets in registries (curated environments have dots: acpt-pytorch-2.2-cuda12.1)
ASSET_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9\-_.]{0,254}$")
WS_RE = re.compile(r"^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.MachineLearningServices"
                   r"/workspaces/([^/]+)(/.*)?$", re.I)
OPS_RE = re.compile(r"^/subscriptions/([^/]+)/providers/Microsoft\.MachineLearningServices/locations/([^/]+)"
                    r"/mfeOperationResults/([^/]+)$", re.I)
# resource types of a real workspace the double does not model
UNMODELLED = {"data", "models", "onlineEndpoints", "batchEndpoints", "schedules",
              "connections", "featuresets", "featurestoreEntities", "marketplaceSubscriptions", "serverlessEndpoints",
              "outboundRules", "privateEndpointConnections", "privateLinkResources", "listKeys", "listSecrets"}
# fields of a job that a re-PUT may change (x-ms-mutability includes "update")
MUTABLE = ("tags", "isArchived", "notificationSetting", "description")


class Route:
    def __init__(self, pattern, methods, kind):
        self.re = re.compile("^" + pattern + "$")
        self.methods = methods        # method -> handler name
        self.kind = kind


ROUTES = [
    Route(r"", {"GET": "get_workspace"}, "workspace"),
    Route(r"/jobs", {"GET": "list_jobs"}, "jobs"),
    Route(r"/jobs/(?P<name>[^/]+)", {"GET": "get_job", "PUT": "put_job", "DELETE": "delete_job"}, "jobs"),
    Route(r"/jobs/(?P<name>[^/]+)/cancel", {"POST": "cancel_job"}, "jobs"),
    Route(r"/codes/(?P<name>[^/]+)", {"GET": "get_code_container"}, "codes"),
    Route(r"/codes/(?P<name>[^/]+)/versions", {"GET": "list_code_versions"}, "codes"),
    Route(r"/codes/(?P<name>[^/]+)/versions/(?P<version>[^/]+)",
          {"GET": "get_code_version", "PUT": "put_code_version"}, "codes"),
    Route(r"/codes/(?P<name>[^/]+)/versions/(?P<version>[^/]+)/startPendingUpload",
          {"POST": "start_pending_upload"}, "codes"),
    Route(r"/environments/(?P<name>[^/]+)", {"GET": "get_env_container"}, "environments"),
    Route(r"/environments/(?P<name>[^/]+)/versions", {"GET": "list_env_versions"}, "environments"),
    Route(r"/environments/(?P<name>[^/]+)/versions/(?P<version>[^/]+)", {"GET": "get_env_version"},
          "environments"),
    Route(r"/components/(?P<name>[^/]+)/versions/(?P<version>[^/]+)",
          {"GET": "get_component_version", "PUT": "put_component_version"}, "components"),
    Route(r"/datastores", {"GET": "list_datastores"}, "datastores"),
    Route(r"/datastores/(?P<name>[^/]+)", {"GET": "get_datastore", "PUT": "datastore_unmodelled",
                                           "DELETE": "datastore_unmodelled"}, "datastores"),
    Route(r"/datastores/(?P<name>[^/]+)/listSecrets", {"POST": "list_datastore_secrets"}, "datastores"),
    Route(r"/computes", {"GET": "list_computes"}, "computes"),
    Route(r"/computes/(?P<name>[^/]+)", {"GET": "get_compute"}, "computes"),
]

# query parameters each list operation knows (besides api-version)
LIST_PARAMS = {
    "list_jobs": {"$skipToken", "jobType", "tag", "listViewType", "properties"},
    "list_code_versions": {"$orderBy", "$top", "$skipToken", "hash", "hashVersion"},
    "list_env_versions": {"$orderBy", "$top", "$skipToken", "listViewType"},
    "list_computes": {"$skipToken"},
    "list_datastores": {"$skipToken", "count", "isDefault", "names", "searchText", "orderBy", "orderByAsc"},
}
DATASTORE_URI_RE = re.compile(r"^azureml://datastores/([^/]+)/paths/(.*)$")


def datastore_path(uri):
    """'azureml://datastores/<ds>/paths/<p>' -> (ds, p), else None."""
    m = DATASTORE_URI_RE.match(uri or "")
    return (m.group(1), m.group(2)) if m else None


def user_error(status, message, target=None, problems=None, inner=None):
    details = [{"code": "UserError", "message": str(p), "target": p.path} for p in (problems or [])]
    return arm_error(status, "UserError", message, target=target, details=details, inner=inner)


def not_found(what, name):
    return user_error(404, "%s %s not found in the workspace." % (what, name), inner="NotFoundError")


class CodeVersion:
    def __init__(self, name, version, props, now):
        self.name, self.version, self.props = name, version, props
        self.created = self.modified = now


class ArmApi:
    def __init__(self, cfg, store, schema, blob):
        self.cfg = cfg
        self.store = store
        self.schema = schema
        self.blob = blob
        self.lock = threading.RLock()
        self.reset()

    def reset(self):
        with self.lock:
            for job in getattr(self, "jobs", {}).values():
                if job.run is not None:
                    job.run.kill()
            self.jobs = {}            # name -> Job
            self.codes = {}           # (name, version) -> CodeVersion
            self.components = {}      # (name, version) -> CodeVersion (props: ComponentVersionProperties)
            self.ops = {}             # operation id -> (kind, job name)
            self.uploads = {}         # pendingUploadId -> blobUri
            self.reads = 12000
            self.writes = 1200

    # -- ids and envelopes ---------------------------------------------------

    def ws_id(self):
        c = self.cfg
        return "/subscriptions/%s/resourceGroups/%s/providers/%s/workspaces/%s" % (
            c["subscription"], c["resource_group"], PROVIDER, c["workspace"])

    def system_data(self, created, modified, by):
        return {"createdAt": iso(created), "createdBy": by, "createdByType": "Application",
                "lastModifiedAt": iso(modified), "lastModifiedBy": by, "lastModifiedByType": "Application"}

    # -- entry point -------------------------------------------------------------

    def handle(self, req):
        """Reply to an ARM request; sets reply.op (e.g. "jobs.put") for the log."""
        reply = self._handle(req)
        self._arm_headers(req, reply)
        return reply

    def _arm_headers(self, req, reply):
        with self.lock:
            if req.method in ("GET", "HEAD"):
                self.reads = max(0, self.reads - 1)
                reply.headers.append(("x-ms-ratelimit-remaining-subscription-reads", str(self.reads)))
            else:
                self.writes = max(0, self.writes - 1)
                reply.headers.append(("x-ms-ratelimit-remaining-subscription-writes", str(self.writes)))
        reply.headers.append(("x-ms-request-id", new_id()))
        reply.headers.append(("x-ms-correlation-request-id", req.header("x-ms-correlation-request-id") or new_id()))
        if req.header("x-ms-client-request-id") is not None:
            reply.headers.append(("x-ms-client-request-id", req.header("x-ms-client-request-id")))
        reply.headers.append(("Cache-Control", "no-cache"))

    def authenticate(self, req):
        auth = req.header("Authorization")
        www = 'Bearer authorization_uri="%s/%s", error="invalid_token", error_description="%%s"' % (
            req.base_url(), self.cfg["tenant"])
        if auth is None:
            return arm_error(401, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is "
                             "missing.", headers=[("WWW-Authenticate", www % "The authentication header is missing.")])
        m = re.match(r"^Bearer ([^\s]+)$", auth)
        if not m:
            return arm_error(401, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is "
                             "provided in an invalid format ('Bearer <token>' expected).",
                             headers=[("WWW-Authenticate", www % "The authentication scheme is not supported.")])
        rec = self.store.lookup(m.group(1))
        if rec is None:
            return arm_error(401, "InvalidAuthenticationToken", "The access token is invalid.",
                             headers=[("WWW-Authenticate", www % "The access token is invalid.")])
        now = time.time()
        if rec["exp"] <= now:
            fmt = "%m/%d/%Y %H:%M:%S"
            return arm_error(401, "ExpiredAuthenticationToken",
                             "The access token expiry UTC time '%s' is earlier than current UTC time '%s'." % (
                                 time.strftime(fmt, time.gmtime(rec["exp"])), time.strftime(fmt, time.gmtime(now))),
                             headers=[("WWW-Authenticate", www % "The access token has expired.")])
        req.principal = rec
        return None

    def _handle(self, req):
        bad = self.authenticate(req)
        if bad:
            bad.op = "arm.auth"
            return bad
        versions = req.query.get("api-version")
        want = self.cfg["api_version"]
        if not versions or versions == [""]:
            r = arm_error(400, "MissingApiVersionParameter",
                          "The api-version query parameter (?api-version=) is required for all requests.")
            r.op = "arm.api-version"
            return r
        if len(versions) > 1 or versions[0] != want:
            r = arm_error(400, "InvalidApiVersionParameter",
                          "The api-version '%s' is invalid. The supported versions are '%s'." % (
                              ",".join(versions), want))
            r.op = "arm.api-version"
            return r
        m = OPS_RE.match(req.path)
        if m:
            return self.operation_result(req, m)
        m = WS_RE.match(req.path)
        if not m:
            r = arm_error(404, "InvalidResourceType" if req.path.startswith("/subscriptions/") else "NotFound",
                          "The double serves Microsoft.MachineLearningServices workspace resources under %s; "
                          "'%s' is not one." % (self.ws_id(), req.path))
            r.op = "arm.unknown"
            return r
        sub, rg, ws, rest = m.group(1), m.group(2), m.group(3), m.group(4) or ""
        c = self.cfg
        if sub.lower() != c["subscription"].lower():
            r = arm_error(404, "SubscriptionNotFound", "The subscription '%s' could not be found." % sub)
        elif rg.lower() != c["resource_group"].lower():
            r = arm_error(404, "ResourceGroupNotFound", "Resource group '%s' could not be found." % rg)
        elif ws.lower() != c["workspace"].lower():
            r = arm_error(404, "ResourceNotFound", "The Resource '%s/workspaces/%s' under resource group '%s' was "
                          "not found." % (PROVIDER, ws, rg))
        else:
            r = None
        if r:
            r.op = "arm.workspace"
            return r
        for route in ROUTES:
            rm = route.re.match(rest)
            if not rm:
                continue
            handler = route.methods.get(req.method)
            if handler is None:
                r = arm_error(405, "MethodNotAllowed", "The requested resource does not support http method '%s'."
                              % req.method, headers=[("Allow", ", ".join(sorted(route.methods)))])
                r.op = route.kind + ".method"
                return r
            bad = self._check_query(req, handler)
            if bad is None:
                bad = self._check_names(rm.groupdict())
            if bad is None and req.method in ("PUT", "POST") and handler not in NO_BODY:
                bad = self._check_json(req)
            r = bad or getattr(self, handler)(req, **rm.groupdict())
            r.op = "%s.%s" % (route.kind, _OPNAME.get(handler, handler))
            return r
        rtype = rest.strip("/").split("/")[0]
        if rtype in UNMODELLED:
            r = arm_error(404, "NotImplementedInDouble", "The AML double does not model workspace '%s' resources "
                          "(it serves jobs, codes, components, environments, computes, datastores)." % rtype)
        else:
            r = arm_error(404, "InvalidResourceType", "The resource type '%s' could not be found in the namespace "
                          "'%s' for api version '%s'." % (rtype or rest, PROVIDER, want))
        r.op = "arm.unknown"
        return r

    # -- request checks shared by the operations ----------------------------------

    def _check_query(self, req, handler):
        known = {"api-version"} | LIST_PARAMS.get(handler, set())
        unknown = sorted(k for k in req.query if k not in known)
        if unknown:
            return user_error(400, "Unknown query parameter%s %s (known here: %s). The service would ignore it; the "
                              "double refuses it so a typo does not go unnoticed." % (
                                  "s" if len(unknown) > 1 else "", ", ".join(unknown), ", ".join(sorted(known))))
        return None

    def _check_names(self, groups):
        for key, value in groups.items():
            if key == "version":
                ok = bool(value) and len(value) <= 255 and "/" not in value and value.strip() == value
            else:
                ok = bool(NAME_RE.match(value))
            if not ok:
                return user_error(400, "'%s' is not a valid %s: it must match %s." % (
                    value, key, NAME_RE.pattern if key != "version" else "a non-empty string without '/'"),
                    target=key)
        return None

    def _check_json(self, req):
        ctype = (req.header("Content-Type") or "").split(";")[0].strip().lower()
        if ctype != "application/json":
            return arm_error(415, "UnsupportedMediaType", "The content media type '%s' is not supported. Only "
                             "'application/json' is supported." % (req.header("Content-Type") or ""))
        if not req.body:
            return arm_error(400, "InvalidRequestContent", "The request content was invalid and could not be "
                             "deserialized: the body is empty.")
        req.json()
        if req.json_error:
            return arm_error(400, "InvalidRequestContent", "The request content was invalid and could not be "
                             "deserialized: %s." % req.json_error)
        return None

    def _envelope(self, body):
        """The properties of a {"properties": {...}} body, or an error reply."""
        if not isinstance(body, dict):
            return None, user_error(400, "(body): expected a JSON object {\"properties\": {...}}")
        extra = [k for k in body if k != "properties"]
        if extra:
            probs = [Problem(k, "read-only or unknown field at the top level; the body is {\"properties\": {...}}")
                     for k in extra]
            return None, user_error(400, str(probs[0]), target=probs[0].path, problems=probs)
        if "properties" not in body:
            return None, user_error(400, "properties: required field is missing", target="properties")
        if not isinstance(body["properties"], dict):
            return None, user_error(400, "properties: expected an object", target="properties")
        return body["properties"], None

    def _schema_error(self, problems):
        return user_error(400, str(problems[0]) + (" (and %d more problem%s, see details)" % (
            len(problems) - 1, "s" if len(problems) > 2 else "") if len(problems) > 1 else ""),
            target=problems[0].path, problems=problems)

    # -- paging ------------------------------------------------------------------

    def _page(self, req, items, size=None):
        """Slices items by $skipToken / $top; returns (reply or None, page, nextLink)."""
        token = req.q("$skipToken")
        start = 0
        if token is not None:
            m = re.match(r"^dbl-(\d+)$", token)
            if not m:
                return user_error(400, "$skipToken '%s' is not one this service issued; follow nextLink "
                                  "verbatim." % token, target="$skipToken"), None, None
            start = int(m.group(1))
        size = size or int(self.cfg["page_size"])
        top = req.q("$top")
        if top is not None:
            if not re.match(r"^[1-9]\d*$", top):
                return user_error(400, "$top must be a positive integer, got '%s'" % top, target="$top"), None, None
            items = items[:int(top)]
        page = items[start:start + size]
        next_link = None
        if start + size < len(items):
            q = [(k, v) for k, vs in req.query.items() for v in vs if k != "$skipToken"]
            q.append(("$skipToken", "dbl-%d" % (start + size)))
            next_link = req.base_url() + req.raw_path + "?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote)
        return None, page, next_link

    def _list_reply(self, req, items, render, size=None):
        bad, page, next_link = self._page(req, items, size)
        if bad:
            return bad
        body = {"value": [render(x) for x in page]}
        if next_link:
            body["nextLink"] = next_link
        return Reply(200, body)

    def _order(self, req, items, created):
        ob = req.q("$orderBy")
        if ob is None:
            return sorted(items, key=created, reverse=True), None
        key = ob.strip().lower()
        if key not in ("createdtime desc", "createdtime asc"):
            return None, user_error(400, "$orderBy '%s' is not supported (createdtime desc, createdtime asc)." % ob,
                                    target="$orderBy")
        return sorted(items, key=created, reverse=key.endswith("desc")), None

    # -- workspace -----------------------------------------------------------------

    def get_workspace(self, req):
        c = self.cfg
        now = time.time()
        return Reply(200, {"id": self.ws_id(), "name": c["workspace"], "type": PROVIDER + "/workspaces",
                           "location": c["location"], "systemData": self.system_data(now, now, "flow-double"),
                           "properties": {"friendlyName": c["workspace"], "provisioningState": "Succeeded",
                                          "discoveryUrl": "https://%s.api.azureml.ms/discovery" % c["location"],
                                          "mlFlowTrackingUri": self._tracking_uri()}})

    def _tracking_uri(self):
        c = self.cfg
        return "azureml://%s.api.azureml.ms/mlflow/v1.0%s" % (c["location"], self.ws_id())

    # -- datastores -------------------------------------------------------------------
    # Every configured datastore is an AzureBlob datastore on the blob endpoint's
    # account (Azurite's devstoreaccount1), each with its own container.  (In a
    # real workspace workspacefilestore and workspaceworkingdirectory are
    # AzureFile shares; the double has only blob storage.)

    def datastore_container(self, name):
        """The blob container behind a configured datastore."""
        if name == "workspaceblobstore":
            return self.cfg["blob_container"]          # where startPendingUpload puts snapshots, as in AML
        guid = str(uuid.UUID(bytes=hashlib.sha256(self.ws_id().lower().encode()).digest()[:16]))
        if name == "workspaceartifactstore":
            return "azureml"
        if name == "workspacefilestore":
            return "azureml-filestore-" + guid
        if name == "workspaceworkingdirectory":
            return "code-" + guid
        return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", name.lower())).strip("-")[:63] or "datastore"

    def ensure_datastore_containers(self):
        """Creates every datastore's container (blob endpoint configured); returns the problems."""
        return [why for why in (self.blob.ensure_container(self.datastore_container(n))
                                for n in self.cfg["datastores"]) if why]

    def _datastore_resource(self, name):
        t = 1700000000
        return {"id": "%s/datastores/%s" % (self.ws_id(), name), "name": name,
                "type": PROVIDER + "/workspaces/datastores",
                "systemData": self.system_data(t, t, "flow-double"),
                "properties": {"datastoreType": "AzureBlob", "accountName": self.blob.account,
                               "containerName": self.datastore_container(name), "endpoint": "core.windows.net",
                               "protocol": "https", "credentials": {"credentialsType": "AccountKey"},
                               "isDefault": name == "workspaceblobstore", "serviceDataAccessAuthIdentity": "None",
                               "description": None, "tags": {}, "properties": {},
                               "subscriptionId": self.cfg["subscription"],
                               "resourceGroup": self.cfg["resource_group"]}}

    def get_datastore(self, req, name):
        if name not in self.cfg["datastores"]:
            return not_found("Datastore", name)
        return Reply(200, self._datastore_resource(name))

    def datastore_unmodelled(self, req, name):
        return arm_error(404, "NotImplementedInDouble", "The AML double does not create or delete datastores; it "
                         "has %s." % ", ".join(self.cfg["datastores"]))

    def list_datastores(self, req):
        names = list(self.cfg["datastores"])
        count = req.q("count")
        if count is not None and not re.match(r"^[1-9]\d*$", count):
            return user_error(400, "count must be a positive integer, got '%s'" % count, target="count")
        isdef = req.q("isDefault")
        if isdef is not None:
            if isdef.lower() not in ("true", "false"):
                return user_error(400, "isDefault must be true or false, got '%s'" % isdef, target="isDefault")
            names = [n for n in names if (n == "workspaceblobstore") == (isdef.lower() == "true")]
        if req.query.get("names"):
            want = {x for v in req.query["names"] for x in v.split(",") if x}
            names = [n for n in names if n in want]
        if req.q("searchText"):
            names = [n for n in names if req.q("searchText").lower() in n.lower()]
        asc = req.q("orderByAsc")
        if asc is not None and asc.lower() not in ("true", "false"):
            return user_error(400, "orderByAsc must be true or false, got '%s'" % asc, target="orderByAsc")
        ob = req.q("orderBy")
        if ob is not None and ob.lower() not in ("name", "createdtime"):
            return user_error(400, "orderBy '%s' is not supported here (name, createdtime)" % ob, target="orderBy")
        if ob is not None or asc is not None:
            names.sort(reverse=(asc or "false").lower() != "true")
        return self._list_reply(req, names, self._datastore_resource, int(count) if count else None)

    def list_datastore_secrets(self, req, name):
        if req.body and req.body.strip() not in (b"{}", b"null"):
            return user_error(400, "listSecrets takes no request body (the double refuses one that is not empty "
                              "or {}).")
        if name not in self.cfg["datastores"]:
            return not_found("Datastore", name)
        container = self.datastore_container(name)
        if self.cfg["datastore_secrets"] == "Sas":
            body = {"secretsType": "Sas", "sasToken": self.blob.sas_query("racwdl", container=container)}
            logged = {"secretsType": "Sas", "sasToken": "<redacted>"}
        else:
            body = {"secretsType": "AccountKey", "key": self.blob.key}
            logged = {"secretsType": "AccountKey", "key": "<redacted>"}
        if self.blob.configured:
            why = self.blob.ensure_container(container)
            if why:
                return arm_error(500, "InternalServerError", "The double could not prepare storage: %s" % why)
        r = Reply(200, body)
        r.log_response = logged
        return r

    def missing_input(self, key, inp):
        """Why an input's datastore path holds no data, or None (only asked with a blob endpoint)."""
        dp = datastore_path(inp.get("uri"))
        t = inp.get("jobInputType")
        if dp is None or t not in ("uri_file", "uri_folder") or dp[0] not in self.cfg["datastores"]:
            return None
        ds, path = dp
        container = self.datastore_container(ds)
        if t == "uri_file":
            names = self.blob.list_blobs(path, container)
            found = names is None or path in names
            what = "no blob '%s'" % path
        else:
            prefix = path.rstrip("/") + "/" if path.strip("/") else ""
            names = self.blob.list_blobs(prefix, container)
            found = names is None or bool(names)
            what = "no blob under '%s'" % prefix
        if found:
            return None
        return ("ScriptExecution.StreamAccess.NotFound: input '%s' (%s %s): the data was not found: "
                "datastore %s (container %s) has %s" % (key, t, inp["uri"], ds, container, what))

    # -- computes ---------------------------------------------------------------------

    def _compute(self, name):
        for comp in self.cfg["computes"]:
            if comp["name"] == name:
                return comp
        return None

    def _compute_resource(self, comp):
        c = self.cfg
        return {"id": "%s/computes/%s" % (self.ws_id(), comp["name"]), "name": comp["name"],
                "type": PROVIDER + "/workspaces/computes", "location": c["location"],
                "properties": {"computeType": "AmlCompute", "computeLocation": c["location"],
                               "provisioningState": "Succeeded", "isAttachedCompute": False,
                               "disableLocalAuth": True,
                               "properties": {"vmSize": comp["vmSize"], "vmPriority": "Dedicated", "osType": "Linux",
                                              "scaleSettings": {"maxNodeCount": comp["maxNodeCount"],
                                                                "minNodeCount": 0,
                                                                "nodeIdleTimeBeforeScaleDown": "PT120S"},
                                              "currentNodeCount": 0, "targetNodeCount": 0,
                                              "allocationState": "Steady"}}}

    def get_compute(self, req, name):
        comp = self._compute(name)
        if comp is None:
            return not_found("Compute", name)
        return Reply(200, self._compute_resource(comp))

    def list_computes(self, req):
        return self._list_reply(req, list(self.cfg["computes"]), self._compute_resource)

    # -- environments -----------------------------------------------------------------

    def _env_versions(self, name):
        return [(i, v) for i, v in enumerate(self.cfg["environments"].get(name, []))]

    def _env_resource(self, name, idx, v):
        created = 1700000000 + 86400 * idx       # a stable, ordered creation time per version
        return {"id": "%s/environments/%s/versions/%s" % (self.ws_id(), name, v["version"]),
                "name": v["version"], "type": PROVIDER + "/workspaces/environments/versions",
                "systemData": self.system_data(created, created, "flow-double"),
                "properties": {"image": v.get("image"), "description": v.get("description"),
                               "tags": dict(v.get("tags", {})), "properties": dict(v.get("properties", {})),
                               "isAnonymous": False, "isArchived": False, "osType": "Linux",
                               "environmentType": "UserCreated", "autoRebuild": "Disabled",
                               "provisioningState": "Succeeded"}}

    def get_env_container(self, req, name):
        vs = self._env_versions(name)
        if not vs:
            return not_found("Environment", name)
        return Reply(200, {"id": "%s/environments/%s" % (self.ws_id(), name), "name": name,
                           "type": PROVIDER + "/workspaces/environments",
                           "properties": {"latestVersion": vs[-1][1]["version"], "isArchived": False,
                                          "provisioningState": "Succeeded", "tags": {}, "properties": {}}})

    def list_env_versions(self, req, name):
        lvt = req.q("listViewType")
        if lvt is not None and lvt not in ("ActiveOnly", "ArchivedOnly", "All"):
            return user_error(400, "listViewType '%s' is not one of ActiveOnly, ArchivedOnly, All" % lvt)
        items, bad = self._order(req, self._env_versions(name), lambda iv: iv[0])
        if bad:
            return bad
        if lvt == "ArchivedOnly":
            items = []
        return self._list_reply(req, items, lambda iv: self._env_resource(name, iv[0], iv[1]))

    def get_env_version(self, req, name, version):
        for i, v in self._env_versions(name):
            if v["version"] == version:
                return Reply(200, self._env_resource(name, i, v))
        return not_found("Environment version", "%s:%s" % (name, version))

    # -- code versions ------------------------------------------------------------------

    def _code_resource(self, cv):
        p = cv.props
        props = {"description": p.get("description"), "tags": dict(p.get("tags") or {}),
                 "properties": dict(p.get("properties") or {}), "isArchived": p.get("isArchived", False),
                 "isAnonymous": p.get("isAnonymous", False), "codeUri": p.get("codeUri"),
                 "provisioningState": "Succeeded"}
        return {"id": "%s/codes/%s/versions/%s" % (self.ws_id(), cv.name, cv.version), "name": cv.version,
                "type": PROVIDER + "/workspaces/codes/versions",
                "systemData": self.system_data(cv.created, cv.modified, self.cfg["client_id"]),
                "properties": props}

    def get_code_container(self, req, name):
        with self.lock:
            vs = [cv for (n, _), cv in self.codes.items() if n == name]
        if not vs:
            return not_found("Code", name)
        latest = max(vs, key=lambda cv: cv.created)
        return Reply(200, {"id": "%s/codes/%s" % (self.ws_id(), name), "name": name,
                           "type": PROVIDER + "/workspaces/codes",
                           "properties": {"latestVersion": latest.version, "isArchived": False,
                                          "provisioningState": "Succeeded", "tags": {}, "properties": {}}})

    def list_code_versions(self, req, name):
        h, hv = req.q("hash"), req.q("hashVersion")
        if hv is not None and h is None:
            return user_error(400, "hashVersion is only meaningful with hash", target="hashVersion")
        with self.lock:
            if h is not None:
                # "return CodeVersion assets with specified content hash value, regardless of name"
                items = [cv for cv in self.codes.values()
                         if (cv.props.get("properties") or {}).get("hash_sha256") == h
                         and (hv is None or (cv.props.get("properties") or {}).get("hash_version") == hv)]
            else:
                items = [cv for (n, _), cv in self.codes.items() if n == name]
            items, bad = self._order(req, items, lambda cv: cv.created)
            if bad:
                return bad
            return self._list_reply(req, items, self._code_resource)

    def get_code_version(self, req, name, version):
        with self.lock:
            cv = self.codes.get((name, version))
            if cv is None:
                return not_found("Code version", "%s:%s" % (name, version))
            return Reply(200, self._code_resource(cv))

    def put_code_version(self, req, name, version):
        props, bad = self._envelope(req.json())
        if bad:
            return bad
        problems = self.schema.check("CodeVersionProperties", props)
        if not problems and not props.get("codeUri"):
            problems = [Problem("properties.codeUri", "required field is missing (where the snapshot was uploaded)")]
        if problems:
            return self._schema_error(problems)
        now = time.time()
        with self.lock:
            cv = self.codes.get((name, version))
            if cv is not None:
                if _comparable(cv.props, ("tags", "isArchived", "description")) != \
                        _comparable(props, ("tags", "isArchived", "description")):
                    return arm_error(409, "UserError", "Code %s version %s already exists with different "
                                     "content; asset versions are immutable (only tags, description and isArchived "
                                     "may change). Register a new version." % (name, version), inner="Conflict")
                for k in ("tags", "isArchived", "description"):
                    if k in props:
                        cv.props[k] = props[k]
                cv.modified = now
                return Reply(200, self._code_resource(cv))
            cv = CodeVersion(name, version, copy.deepcopy(props), now)
            self.codes[(name, version)] = cv
            return Reply(201, self._code_resource(cv))

    # -- component versions (aml_pipeline) ----------------------------------------------

    def _component_resource(self, cv):
        return {"id": "%s/components/%s/versions/%s" % (self.ws_id(), cv.name, cv.version), "name": cv.version,
                "type": PROVIDER + "/workspaces/components/versions",
                "systemData": self.system_data(cv.created, cv.modified, "double"),
                "properties": dict({"isAnonymous": False, "isArchived": False, "description": None, "tags": {},
                                    "properties": {}, "provisioningState": "Succeeded"}, **cv.props)}

    def get_component_version(self, req, name, version):
        with self.lock:
            cv = self.components.get((name, version))
            if cv is None:
                return not_found("Component version", "%s:%s" % (name, version))
            return Reply(200, self._component_resource(cv))

    def put_component_version(self, req, name, version):
        props, bad = self._envelope(req.json())
        if bad:
            return bad
        now = time.time()
        with self.lock:
            problems = aml_pipeline.check_component(self, name, version, props)
            if problems:
                return self._schema_error(problems)
            cv = self.components.get((name, version))
            if cv is not None:
                mutable = ("tags", "isArchived", "description")
                if _comparable(cv.props, mutable) != _comparable(props, mutable):
                    return arm_error(409, "UserError", "Component %s version %s already exists with different "
                                     "content; asset versions are immutable. Register a new version." % (
                                         name, version), inner="Conflict")
                cv.modified = now
                return Reply(200, self._component_resource(cv))
            cv = CodeVersion(name, version, copy.deepcopy(props), now)
            self.components[(name, version)] = cv
            return Reply(201, self._component_resource(cv))

    def start_pending_upload(self, req, name, version):
        body = req.json()
        problems = check_pending_upload(body)
        if problems:
            return self._schema_error(problems)
        upload_id = body.get("pendingUploadId") or new_id()
        utype = body.get("pendingUploadType", "TemporaryBlobReference")
        if utype == "None":
            return Reply(200, {"blobReferenceForConsumption": None, "pendingUploadId": upload_id,
                               "pendingUploadType": "None"})
        why = self.blob.ensure_container()
        if why:
            return arm_error(500, "InternalServerError", "The double could not prepare storage: %s" % why)
        c = self.cfg
        with self.lock:
            self.uploads[upload_id] = self.blob.container_url()
        return Reply(200, {
            "blobReferenceForConsumption": {
                "blobUri": self.blob.container_url(),
                "storageAccountArmId": "/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Storage/"
                                       "storageAccounts/%s" % (c["subscription"], c["resource_group"],
                                                               self.blob.account),
                "credential": {"credentialType": "SAS", "sasUri": self.blob.sas_uri()}},
            "pendingUploadId": upload_id, "pendingUploadType": "TemporaryBlobReference"})

    # -- jobs: references a job body makes ---------------------------------------------

    def _ws_ref(self, value, kind, field):
        """Parses '<workspace id>/<kind>/...' -> the rest after kind/, or (None, Problem)."""
        m = WS_RE.match(value or "")
        c = self.cfg
        if not m or not (m.group(4) or "").startswith("/%s/" % kind):
            return None, Problem(field, "'%s' is not an ARM resource id of the form %s/%s/..." % (
                value, self.ws_id(), kind))
        if m.group(1).lower() != c["subscription"].lower() or m.group(2).lower() != c["resource_group"].lower() \
                or m.group(3).lower() != c["workspace"].lower():
            return None, Problem(field, "'%s' names another workspace than this one (%s)" % (value, self.ws_id()))
        return m.group(4)[len(kind) + 2:], None

    def _check_compute(self, props, field="properties.computeId"):
        cid = props.get("computeId")
        if cid is None:
            return []                 # serverless compute
        rest, p = self._ws_ref(cid, "computes", field)
        if p:
            return [p]
        comp = self._compute(rest)
        if comp is None:
            return [Problem(field, "Could not find compute '%s' in workspace '%s' (it has: %s)" % (
                rest, self.cfg["workspace"], ", ".join(x["name"] for x in self.cfg["computes"])))]
        n = (props.get("resources") or {}).get("instanceCount", 1)
        if isinstance(n, int) and n > comp["maxNodeCount"]:
            return [Problem("properties.resources.instanceCount",
                            "%d nodes requested but compute '%s' scales to at most %d" % (
                                n, comp["name"], comp["maxNodeCount"]))]
        if isinstance(n, int) and n < 1:
            return [Problem("properties.resources.instanceCount", "must be at least 1, got %d" % n)]
        return []

    def _asset_version(self, ref, kind, assets, what, field):
        """'<workspace id>/<kind>/<name>/versions/<v>' -> (the registered version, None), or (None, Problem)."""
        rest, p = self._ws_ref(ref, kind, field)
        if p:
            return None, p
        m = re.match(r"^([^/]+)/versions/([^/]+)$", rest)
        if not m:
            return None, Problem(field, "'%s' must name a %s version: %s/%s/<name>/versions/<version>" % (
                ref, what, self.ws_id(), kind))
        found = assets.get((m.group(1), m.group(2)))
        if found is None:
            return None, Problem(field, "%s %s version %s does not exist in the workspace (register it with PUT "
                                 "%s/%s/versions/%s first)" % (what, m.group(1), m.group(2), kind, m.group(1),
                                                              m.group(2)))
        return found, None

    def _check_code(self, props, field="properties.codeId"):
        cid = props.get("codeId")
        if cid is None:
            return [], None
        cv, p = self._asset_version(cid, "codes", self.codes, "code", field)
        return ([p] if p else []), cv

    def _check_environment(self, env_id, field="properties.environmentId"):
        c = self.cfg
        m = re.match(r"^azureml://registries/([^/]+)/environments/([^/]+)/(versions/[^/]+|labels/latest)$", env_id)
        if m:
            if m.group(1) not in c["registries"]:
                return [Problem(field, "registry '%s' not found (known: %s)" % (m.group(1),
                                                                                  ", ".join(c["registries"])))]
            if not ASSET_NAME_RE.match(m.group(2)):
                return [Problem(field, "'%s' is not a valid environment name" % m.group(2))]
            return []
        if re.match(r"^azureml:AzureML-[a-zA-Z0-9][a-zA-Z0-9\-_.]*(@latest|:[^:@/]+)$", env_id):
            return []                 # curated short form, expanded by the service
        if env_id.startswith("/"):
            rest, p = self._ws_ref(env_id, "environments", field)
            if p:
                return [p]
            m = re.match(r"^([^/]+)/versions/([^/]+)$", rest)
            if not m:
                return [Problem(field, "'%s' must name an environment version: .../environments/<name>/versions/"
                                "<version>" % env_id)]
            if not any(v["version"] == m.group(2) for v in c["environments"].get(m.group(1), [])):
                return [Problem(field, "environment %s version %s does not exist in the workspace (it has: %s)" % (
                    m.group(1), m.group(2), ", ".join("%s:%s" % (n, v["version"])
                                                      for n, vs in c["environments"].items() for v in vs)))]
            return []
        return [Problem(field, "'%s' is not an environment reference the service resolves: use a workspace "
                        "environment's ARM id (%s/environments/<name>/versions/<v>), "
                        "azureml://registries/<registry>/environments/<name>/versions/<v> (or /labels/latest), or "
                        "the curated short form azureml:AzureML-<name>@latest" % (env_id, self.ws_id()))]

    def _check_uri(self, uri, field, runtime):
        m = re.match(r"^azureml://datastores/([^/]+)/paths/", uri)
        if m:
            if m.group(1) not in self.cfg["datastores"]:
                return [Problem(field, "datastore '%s' not found (known: %s)" % (
                    m.group(1), ", ".join(self.cfg["datastores"])))]
            return []
        m = re.match(r"^azureml://jobs/([^/]+)/outputs/([^/]+)(/paths/.*)?$", uri)
        if m:
            job = self.jobs.get(m.group(1))
            if job is None:
                runtime.append("%s: job '%s' does not exist" % (field, m.group(1)))
            elif m.group(2) not in (job.props.get("outputs") or {}):
                runtime.append("%s: job '%s' has no output '%s'" % (field, m.group(1), m.group(2)))
            return []
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://", uri) or uri.startswith("/subscriptions/") \
                or uri.startswith("azureml:"):
            return []
        return [Problem(field, "'%s' is not a URI (azureml://datastores/<ds>/paths/<p>, https://..., "
                        "azureml://jobs/<job>/outputs/<o>, ...)" % uri)]

    def _check_job_semantics(self, name, props, runtime):
        """What the service checks beyond the schema (run under self.lock)."""
        problems = []
        jt = props["jobType"]
        code = None
        if jt == "Command":
            problems += self._check_compute(props)
            p, code = self._check_code(props)
            problems += p
            problems += self._check_environment(props["environmentId"])
            lim = props.get("limits")
            if lim and lim.get("jobLimitsType") != "Command":
                problems.append(Problem("properties.limits.jobLimitsType", "must be \"Command\" for a Command job"))
            if lim and lim.get("timeout") is not None and parse_duration(lim["timeout"]) is None:
                problems.append(Problem("properties.limits.timeout", "'%s' is not an ISO-8601 duration such as "
                                        "PT30M or P1DT2H" % lim["timeout"]))
            dist = props.get("distribution") or {}
            for k in ("processCountPerInstance", "workerCount", "parameterServerCount"):
                if isinstance(dist.get(k), int) and dist[k] < (0 if k == "parameterServerCount" else 1):
                    problems.append(Problem("properties.distribution." + k, "must be positive, got %d" % dist[k]))
            problems += aml_pipeline.binding_problems(props["command"], "properties.command", {
                "inputs": (props.get("inputs") or {}, "properties.inputs"),
                "outputs": (props.get("outputs") or {}, "properties.outputs")}, "a Command job")
        elif jt == "Pipeline":
            problems += aml_pipeline.check_pipeline(self, props)
        elif jt == "Sweep":
            p, code = aml_sweep.check_sweep(self, props)
            problems += p
        else:
            problems += self._check_compute(props)
        for io in ("inputs", "outputs"):
            for k, v in (props.get(io) or {}).items():
                if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
                    problems.append(Problem("properties.%s.%s" % (io, k), "a %s name must be an identifier "
                                            "([A-Za-z_][A-Za-z0-9_]*)" % io[:-1]))
                if v.get("uri"):
                    # (a sweep's trials each write under their own name: ${{name}})
                    uri = v["uri"].replace("${{name}}", "trial") if jt == "Sweep" else v["uri"]
                    problems += self._check_uri(uri, "properties.%s.%s.uri" % (io, k), runtime)
        outcome = control_value(props, "FLOW_DOUBLE_OUTCOME")
        if outcome is not None and outcome not in ("Failed", "Completed"):
            problems.append(Problem("FLOW_DOUBLE_OUTCOME", "the double knows Failed and Completed, not %r" % outcome))
        return problems, code

    # -- jobs ---------------------------------------------------------------------------

    def _studio_url(self, name):
        c = self.cfg
        return "https://ml.azure.com/runs/%s?wsid=/subscriptions/%s/resourcegroups/%s/workspaces/%s&tid=%s" % (
            name, c["subscription"], c["resource_group"], c["workspace"], c["tenant"])

    def job_resource(self, job):
        now = time.time()
        job.advance(now)
        props = copy.deepcopy(job.props)
        props.setdefault("experimentName", "Default")
        props.setdefault("isArchived", False)
        props.setdefault("displayName", job.name)
        props.setdefault("tags", {})
        props.setdefault("description", None)
        props.setdefault("computeId", None)
        props.setdefault("identity", None)
        sysprops = {"ContentSnapshotId": job.snapshot_id}
        if props["jobType"] == "Command":
            sysprops["_azureml.ComputeTargetType"] = "amlctrain"
            props.setdefault("codeId", None)
            props.setdefault("environmentVariables", {})
            props.setdefault("inputs", {})
            props.setdefault("outputs", {})
            props.setdefault("distribution", None)
            res = props.setdefault("resources", {})
            res.setdefault("instanceCount", 1)
            res.setdefault("shmSize", "2g")
            res.setdefault("properties", None)
            props["parameters"] = {}
        props["properties"] = {**sysprops, **(props.get("properties") or {}), **job.service_properties}
        for oname, out in (props.get("outputs") or {}).items():
            out.setdefault("uri", default_output_uri(job.name, oname))
            out.setdefault("mode", "ReadWriteMount")
        services = {"Studio": {"jobServiceType": "Studio", "endpoint": self._studio_url(job.name), "port": None,
                               "status": None, "errorMessage": None, "properties": None, "nodes": None},
                    "Tracking": {"jobServiceType": "Tracking", "endpoint": self._tracking_uri(), "port": None,
                                 "status": None, "errorMessage": None, "properties": None, "nodes": None}}
        services.update(props.get("services") or {})
        props["services"] = services
        props["status"] = job.status
        return {"id": "%s/jobs/%s" % (self.ws_id(), job.name), "name": job.name,
                "type": PROVIDER + "/workspaces/jobs",
                "systemData": self.system_data(job.created, job.modified, job.created_by),
                "properties": props}

    def get_job(self, req, name):
        with self.lock:
            job = self.jobs.get(name)
            if job is None:
                return not_found("Job", name)
            return Reply(200, self.job_resource(job))

    def list_jobs(self, req):
        lvt = req.q("listViewType") or "ActiveOnly"
        if lvt not in ("ActiveOnly", "ArchivedOnly", "All"):
            return user_error(400, "listViewType '%s' is not one of ActiveOnly, ArchivedOnly, All" % lvt,
                              target="listViewType")
        jt, tag, prop = req.q("jobType"), req.q("tag"), req.q("properties")
        if jt is not None and jt not in ("AutoML", "Command", "Sweep", "Pipeline", "Spark"):
            return user_error(400, "jobType '%s' is not one of AutoML, Command, Sweep, Pipeline, Spark" % jt,
                              target="jobType")
        with self.lock:
            items = []
            for job in sorted(self.jobs.values(), key=lambda j: j.created, reverse=True):
                archived = bool(job.props.get("isArchived"))
                if (lvt == "ActiveOnly" and archived) or (lvt == "ArchivedOnly" and not archived):
                    continue
                if jt is not None and job.props["jobType"] != jt:
                    continue
                if tag is not None and tag not in (job.props.get("tags") or {}):
                    continue
                if prop is not None and not _has_properties(job.props.get("properties") or {}, prop):
                    continue
                items.append(job)
            return self._list_reply(req, items, self.job_resource)

    def put_job(self, req, name):
        props, bad = self._envelope(req.json())
        if bad:
            return bad
        problems = self.schema.check("JobBaseProperties", props)
        if problems:
            return self._schema_error(problems)
        now = time.time()
        with self.lock:
            existing = self.jobs.get(name)
            if existing is not None:
                if _comparable(existing.props, MUTABLE) != _comparable(props, MUTABLE):
                    diff = sorted(k for k in set(existing.props) | set(props)
                                  if k not in MUTABLE and existing.props.get(k) != props.get(k))
                    return user_error(400, "Job '%s' already exists and only %s can change on an existing job; "
                                      "this request also changes: %s. A new run needs a new job name." % (
                                          name, ", ".join(MUTABLE), ", ".join(diff)),
                                      target="properties." + diff[0] if diff else None, inner="Immutable")
                for k in MUTABLE:
                    if k in props:
                        existing.props[k] = copy.deepcopy(props[k])
                    elif k == "tags":
                        existing.props.pop(k, None)       # "Tags ... will replace Tags in the existing job"
                existing.modified = now
                return Reply(200, self.job_resource(existing))
            runtime = []
            problems, code = self._check_job_semantics(name, props, runtime)
            if problems:
                return self._schema_error(problems)
            code_uri = code.props.get("codeUri") if code else None
        snapshot = None
        if code_uri and self.cfg["check_snapshot"] and self.blob.configured:
            prefix = self.blob.container_url() + "/"
            if code_uri.startswith(prefix):
                rel = code_uri[len(prefix):].strip("/")
                names = self.blob.list_blobs(rel + "/" if rel else "")
                if names is not None:
                    snapshot = (code_uri, names)
                    if not names:
                        runtime.append("the code snapshot %s is empty: nothing was uploaded under %s" % (
                            props["codeId"], code_uri))
        if props["jobType"] in ("Command", "Sweep"):
            self._find_missing_inputs(props, runtime)
        with self.lock:
            if name in self.jobs:           # a concurrent PUT of the same name won
                return self.put_job(req, name)
            job = self._add_job(name, props, now, runtime, snapshot, code_uri, req.principal["client_id"])
            return Reply(201, self.job_resource(job))

    def _find_missing_inputs(self, props, runtime):
        """Inputs whose datastore path holds nothing go to runtime (they fail the job at Preparing)."""
        if not self.blob.configured:
            return
        for k, inp in (props.get("inputs") or {}).items():
            why = self.missing_input(k, inp)
            if why:
                runtime.append(why)

    def _add_job(self, name, props, now, runtime, snapshot, code_uri, created_by):
        """A new job in the workspace (run under self.lock)."""
        job = Job(name, copy.deepcopy(props), now, self.cfg, runtime, snapshot)
        job.created_by = created_by
        job.snapshot_id = new_id()
        job.code_uri = code_uri
        self.jobs[name] = job
        return job

    def create_child_job(self, name, props):
        """A job the double makes itself (a pipeline's child, a sweep's trial), run by
        the executor as its parent is: checked as a PUT is, then created.  Returns
        why it was refused, or None."""
        with self.lock:
            runtime = []
            problems, code = self._check_job_semantics(name, props, runtime)
            if problems:
                return "; ".join(str(p) for p in problems)
            code_uri = code.props.get("codeUri") if code else None
        self._find_missing_inputs(props, runtime)
        with self.lock:
            job = self._add_job(name, props, time.time(), runtime, None, code_uri, "pipeline")
            job.execute = True
        return None

    def cancel_job(self, req, name):
        with self.lock:
            job = self.jobs.get(name)
            if job is None:
                return not_found("Job", name)
            live = job.cancel(time.time())
            if self.cfg["cancel_mode"] == "sync" or not live:
                return Reply(200, None, [("Location", self._op_url(req, "jc", name))])
            return Reply(202, None, [("Location", self._op_url(req, "jc", name)),
                                     ("Retry-After", str(self.cfg["cancel_retry_after"]))])

    def delete_job(self, req, name):
        with self.lock:
            job = self.jobs.pop(name, None)
            if job is None:
                return Reply(204)
            if job.run is not None:
                threading.Thread(target=job.run.kill, daemon=True).start()
            return Reply(202, None, [("Location", self._op_url(req, "jd", name)),
                                     ("Retry-After", str(self.cfg["cancel_retry_after"]))])

    def _op_url(self, req, kind, name):
        op = "%s-%s" % (kind, new_id())
        with self.lock:
            self.ops[op] = (kind, name)
        c = self.cfg
        return "%s/subscriptions/%s/providers/%s/locations/%s/mfeOperationResults/%s?api-version=%s" % (
            req.base_url(), c["subscription"], PROVIDER, c["location"], op, c["api_version"])

    def operation_result(self, req, m):
        c = self.cfg
        r = None
        if req.method != "GET":
            r = arm_error(405, "MethodNotAllowed", "The requested resource does not support http method '%s'." %
                          req.method)
        elif m.group(1).lower() != c["subscription"].lower():
            r = arm_error(404, "SubscriptionNotFound", "The subscription '%s' could not be found." % m.group(1))
        else:
            with self.lock:
                op = self.ops.get(m.group(3))
                if op is None:
                    r = arm_error(404, "NotFound", "Operation %s not found." % m.group(3))
                elif op[0] == "jc":
                    job = self.jobs.get(op[1])
                    if job is not None:
                        job.advance(time.time())
                    if job is not None and job.status not in TERMINAL:
                        r = Reply(202, None, [("Location", req.base_url() + req.raw_path + "?" + req.raw_query),
                                              ("Retry-After", str(c["cancel_retry_after"]))])
                    else:
                        r = Reply(200)
                else:
                    r = Reply(200)
        r.op = "operations.get"
        return r

    # -- the double's own views (control API) -------------------------------------

    def job_debug(self, job):
        job.advance(time.time())
        return {"name": job.name, "status": job.status, "error": job.error, "hold": job.hold, "frozen": job.frozen,
                "history": [{"status": s, "time": iso(t), "t": t} for s, t in job.history],
                "runtime_problems": job.runtime_problems, "outcome": job.outcome and job.outcome[0],
                "execute": job.execute, "service_properties": job.service_properties,
                "run": job.run and {"dir": job.run.wd, "log": job.run.log_path, "done": job.run.done_at is not None,
                                    "error": job.run.error, "pids": [p.pid for p in job.run.procs]},
                "snapshot": job.snapshot and {"codeUri": job.snapshot[0], "blobs": job.snapshot[1]},
                "request": job.props}

    def std_log(self, job):
        """user_logs/std_log.txt as the double imagines it (real logs live on the data plane)."""
        job.advance(time.time())
        p = job.props
        lines = ["[flow-aml-double] job %s (%s) ran: %s" % (job.name, p["jobType"], p.get("command", ""))]
        if p["jobType"] == "Command":
            res = p.get("resources") or {}
            dist = p.get("distribution") or {}
            n = res.get("instanceCount", 1)
            ppn = dist.get("processCountPerInstance", 1)
            lines.append("[flow-aml-double] compute: %s, %d node(s) x %d process(es), distribution %s" % (
                (p.get("computeId") or "serverless").rsplit("/", 1)[-1], n, ppn,
                dist.get("distributionType", "none")))
            resolved = p["command"]
            for kind, items in (("inputs", p.get("inputs") or {}), ("outputs", p.get("outputs") or {})):
                for k, v in items.items():
                    val = v.get("value") if v.get("jobInputType") == "literal" else \
                        "/mnt/azureml/cr/j/%s/cap/data-capability/wd/%s_%s" % (
                            job.snapshot_id.replace("-", ""), kind[:-1].upper(), k)
                    resolved = re.sub(r"\$\{\{\s*%s\.%s\s*\}\}" % (kind, re.escape(k)), lambda _: val, resolved)
            lines.append("[flow-aml-double] resolved command: %s" % resolved)
            lines.append("[flow-aml-double] environment: %s" % p["environmentId"])
            for k in sorted(p.get("environmentVariables") or {}):
                lines.append("[flow-aml-double] env %s=%s" % (k, p["environmentVariables"][k]))
        if job.snapshot:
            lines.append("[flow-aml-double] code snapshot %s: %d file(s): %s" % (
                job.snapshot[0], len(job.snapshot[1]), ", ".join(job.snapshot[1])))
        elif getattr(job, "code_uri", None):
            lines.append("[flow-aml-double] code snapshot %s (not inspected)" % job.code_uri)
        if job.run is not None:
            lines.append(job.run.log_text().rstrip("\n"))
        if job.error:
            lines.append("[flow-aml-double] error %s: %s" % (job.error["code"], job.error["message"]))
        lines.append("[flow-aml-double] status: %s" % job.status)
        return "\n".join(lines) + "\n"


# POSTs without a request body
NO_BODY = ("cancel_job", "list_datastore_secrets")
_OPNAME = {"list_datastores": "list", "get_datastore": "get", "datastore_unmodelled": "put_or_delete",
           "list_datastore_secrets": "listSecrets",
"list_jobs": "list", "get_job": "get", "put_job": "put", "delete_job": "delete", "cancel_job": "cancel",
           "get_code_container": "get_container", "list_code_versions": "list", "get_code_version": "get",
           "put_code_version": "put", "start_pending_upload": "start_pending_upload",
           "get_env_container": "get_container", "list_env_versions": "list", "get_env_version": "get",
           "list_computes": "list", "get_compute": "get", "get_workspace": "get",
           "get_component_version": "get", "put_component_version": "put"}


def _comparable(props, mutable):
    return {k: v for k, v in props.items() if k not in mutable}


def _has_properties(have, spec):
    for item in spec.split(","):
        k, eq, v = item.strip().partition("=")
        if k not in have or (eq and have[k] != v):
            return False
    return True
