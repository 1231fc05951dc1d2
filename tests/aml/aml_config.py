"""aml_config.py — the double's settings: defaults, DIR/config.json, command-line
flags (in that order, later wins), and the few a test may change while it runs
(POST /_double/config)."""
import copy
import json
import threading

from aml_blob import AZURITE_KEY

DEFAULTS = {
    # Entra app registration (one app: secret, certificate and federated credential)
    "tenant": "00000000-0000-0000-0000-0000000000aa",
    "client_id": "11111111-1111-1111-1111-111111111111",
    "client_secret": "s3cr3t-flow-aml-double",
    "client_certificate_password": "flow-double-cert-pass",   # of DIR/client-encrypted.pem
    "federated_token": None,           # None: generated at start, written to DIR/federated-token
    "token_lifetime": 3599,            # seconds, for every token issued
    "clock_skew": 60,                  # seconds allowed on assertion nbf/iat/exp
    "assertion_max_lifetime": 3600,    # exp may lie at most this far ahead
    # managed identity endpoints
    "msi_secret": "msi-secret-flow-double",
    "identity_header": "identity-header-flow-double",
    "msi_client_id": "33333333-3333-3333-3333-333333333333",
    # the workspace
    "subscription": "22222222-2222-2222-2222-222222222222",
    "resource_group": "flow-rg",
    "workspace": "flow-ws",
    "location": "westeurope",
    "api_version": "2024-10-01",
    # job life cycle: seconds spent in each of NotStarted, Queued, Preparing, Running, Finalizing
    "phase_seconds": 0.3,
    "phases": {},                      # per status override, e.g. {"Running": 2}
    "cancel_seconds": 0.3,             # CancelRequested -> Canceled
    "cancel_mode": "async",            # "async": 202 + Location + Retry-After; "sync": 200
    "cancel_retry_after": 1,           # the Retry-After of 202s (the service says 10..600)
    "page_size": 10,                   # items per page of list operations
    # storage behind startPendingUpload
    "blob_endpoint": None,             # e.g. http://127.0.0.1:10000/devstoreaccount1 (Azurite)
    "blob_key": AZURITE_KEY,
    "blob_account": None,              # None: from blob_endpoint
    "blob_container": "azureml-blobstore-flow-double",
    "check_snapshot": True,            # a job whose code snapshot holds no blob fails (blob_endpoint set)
    # what exists in the workspace
    "computes": [
        {"name": "cpu-cluster", "vmSize": "STANDARD_DS3_V2", "maxNodeCount": 4},
        {"name": "gpu-cluster", "vmSize": "STANDARD_NC24ADS_A100_V4", "maxNodeCount": 4},
    ],
    "environments": {
        # name -> versions, oldest first
        "flow-runtime": [
            {"version": "1", "image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest"},
            {"version": "2", "image": "flowregistry.azurecr.io/flow-runtime:2",
             "tags": {"flow_installed": "true"}, "properties": {"flow_installed": "true"}},
        ],
        "pytorch-train": [
            {"version": "3", "image": "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:40"},
        ],
    },
    "registries": ["azureml"],
    "datastores": ["workspaceblobstore", "workspaceartifactstore", "workspacefilestore",
                   "workspaceworkingdirectory"],
    # what POST datastores/{name}/listSecrets answers: "AccountKey" ({"secretsType": "AccountKey", "key": ...})
    # or "Sas" ({"secretsType": "Sas", "sasToken": <container SAS, racwdl, no leading ?>})
    "datastore_secrets": "AccountKey",
    # jobs that really run (aml_exec.py): a job PUT while this is true runs its command on this machine
    "execute_jobs": False,
    "keep_job_dirs": False,            # keep an executed job's working directory (DIR/jobs/...) when it ends
}

# the values a setting may take, where it is an enumeration
CHOICES = {"cancel_mode": ("async", "sync"), "datastore_secrets": ("AccountKey", "Sas")}

# what POST /_double/config may change while the double runs
RUNTIME = {"token_lifetime", "clock_skew", "assertion_max_lifetime", "phase_seconds", "phases", "cancel_seconds",
           "cancel_mode", "cancel_retry_after", "page_size", "check_snapshot", "datastore_secrets", "execute_jobs",
           "keep_job_dirs"}


class Config:
    def __init__(self, overrides=()):
        self._lock = threading.Lock()
        self._d = copy.deepcopy(DEFAULTS)
        for o in overrides:
            self.update(o, startup=True)

    def __getitem__(self, k):
        with self._lock:
            return self._d[k]

    def update(self, values, startup=False):
        """Returns a list of complaints (unknown or frozen keys, wrong types)."""
        bad = []
        with self._lock:
            for k, v in values.items():
                if k not in DEFAULTS:
                    bad.append("unknown setting %r" % k)
                elif not startup and k not in RUNTIME:
                    bad.append("%r can only be set at start (config.json or a flag)" % k)
                elif DEFAULTS[k] is not None and v is not None and not _same_kind(DEFAULTS[k], v):
                    bad.append("%r must be %s" % (k, type(DEFAULTS[k]).__name__))
                elif k in CHOICES and v not in CHOICES[k]:
                    bad.append("%r must be one of %s" % (k, ", ".join(CHOICES[k])))
                else:
                    self._d[k] = v
        return bad

    def snapshot(self):
        with self._lock:
            return copy.deepcopy(self._d)

    def phase_duration(self, status):
        with self._lock:
            return float(self._d["phases"].get(status, self._d["phase_seconds"]))


def _same_kind(default, v):
    if isinstance(default, bool):
        return isinstance(v, bool)
    if isinstance(default, (int, float)):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return isinstance(v, type(default))


def load_file(path):
    with open(path) as f:
        d = json.load(f)
    if not isinstance(d, dict):
        raise ValueError("%s: expected a JSON object" % path)
    return d
