#!/usr/bin/python3
"""submit.py — the Azure ML SDK's side of bench/aml.sh: N command jobs with
MLClient.jobs.create_or_update, then ml_client.jobs.get in a loop until every
one is Completed.

    /usr/bin/python3 bench/aml_sdk/submit.py --jobs N --arm-endpoint URL --ca-file CA \
        --subscription S --resource-group RG --workspace WS --code-id ARM_ID \
        [--experiment flow-bench] [--compute gpu-cluster] [--environment ENV] [--poll-interval 0.2]

Credentials as flow takes them: AZURE_TENANT_ID, AZURE_CLIENT_ID,
AZURE_CLIENT_SECRET (ClientSecretCredential), AZURE_AUTHORITY_HOST.  Prints
one JSON line on stdout (the phases' seconds, the jobs' names and statuses,
the api-versions rewritten); exits 0 when all N jobs are Completed.

Debian's python3-azure is azure-ai-ml 1.4.0 (with azure-identity 1.13.0b2,
azure-core 1.26.3, msal 1.21.0).  Against tests/aml/double.py it needs:

* pydash, which Debian lacks: bench/aml_sdk/pydash is a stand-in with the three
  functions azure-ai-ml calls (get, omit, objects.set_), on sys.path here only.
* The ARM endpoint: AZUREML_DEV_URL_MFE, azure-ai-ml's own override of the
  cloud's resource manager URL (1.4.0 knows three clouds and no custom one).
* Trust in the double's CA: connection_verify=CA for MLClient (every ARM
  client's RequestsTransport) and for the credential (MSAL's transport).
* Entra ID at the double: ClientSecretCredential(authority=AZURE_AUTHORITY_HOST,
  instance_discovery=False).  MSAL then asks the authority for its OpenID
  configuration (GET /{tenant}/v2.0/.well-known/openid-configuration), which
  the double does not serve (flow does not use it): the document Entra ID
  would return (its authorization and token endpoints, on the double) is
  answered here, in-process, by wrapping msal.authority.tenant_discovery.
  The token itself comes from the double's token endpoint.
* api-version: azure-ai-ml 1.4.0 sends jobs PUT/GET with
  api-version=2022-10-01-preview; the double serves only 2024-10-01 (Azure ML
  serves many versions) and answers 400 InvalidApiVersionParameter.  A
  per-call pipeline policy rewrites the api-version of every ARM request to
  2024-10-01; the bodies are left as the SDK makes them, and pass the
  double's validation against the 2024-10-01 schema.
* The code snapshot: 1.4.0 uploads a local `code=` directory through the
  workspace's default datastore (datastores, listSecrets), which the double
  does not model.  The jobs name the snapshot flow registered for the same
  project instead (--code-id, an ARM id: no upload, no request), as flow's
  own rounds after the first find it registered (one GET by content hash).
"""
import argparse
import json
import os
import sys
import time
import urllib.parse

T0 = time.monotonic()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # the pydash stand-in

API_VERSION = "2024-10-01"
TERMINAL = ("Completed", "Failed", "Canceled", "NotResponding", "Paused")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--arm-endpoint", required=True)
    p.add_argument("--ca-file", required=True)
    p.add_argument("--subscription", required=True)
    p.add_argument("--resource-group", required=True)
    p.add_argument("--workspace", required=True)
    p.add_argument("--code-id", required=True, help="ARM id of a registered code version")
    p.add_argument("--experiment", default="flow-bench")
    p.add_argument("--compute", default="gpu-cluster")
    p.add_argument("--environment", default="azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest")
    p.add_argument("--poll-interval", type=float, default=0.2)
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the jobs, in all")
    p.add_argument("--keep-api-version", action="store_true",
                   help="send the SDK's own api-versions (the double refuses them: 400 InvalidApiVersionParameter)")
    return p.parse_args()


def main():
    a = parse_args()
    env = os.environ
    for k in ("AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_AUTHORITY_HOST"):
        if not env.get(k):
            sys.exit("submit.py: %s is not set" % k)
    os.environ["AZUREML_DEV_URL_MFE"] = a.arm_endpoint.rstrip("/")

    from azure.ai.ml import MLClient, command
    from azure.core.pipeline.policies import SansIOHTTPPolicy
    from azure.identity import ClientSecretCredential
    import msal.authority
    t_import = time.monotonic()

    authority = env["AZURE_AUTHORITY_HOST"].rstrip("/")
    tenant = env["AZURE_TENANT_ID"]
    discovery = "%s/%s/v2.0/.well-known/openid-configuration" % (authority, tenant)
    real_tenant_discovery = msal.authority.tenant_discovery
    discovered = []

    def tenant_discovery(endpoint, http_client, **kwargs):
        if endpoint == discovery:
            discovered.append(endpoint)
            base = "%s/%s" % (authority, tenant)
            return {"issuer": "%s/v2.0" % base, "authorization_endpoint": base + "/oauth2/v2.0/authorize",
                    "token_endpoint": base + "/oauth2/v2.0/token"}
        return real_tenant_discovery(endpoint, http_client, **kwargs)

    msal.authority.tenant_discovery = tenant_discovery

    arm_netloc = urllib.parse.urlsplit(a.arm_endpoint).netloc
    rewritten = {}

    class ApiVersion(SansIOHTTPPolicy):
        """api-version=2024-10-01 on every ARM request (see the module's docstring)."""

        def on_request(self, request):
            r = request.http_request
            u = urllib.parse.urlsplit(r.url)
            if u.netloc != arm_netloc or a.keep_api_version:
                return
            q = urllib.parse.parse_qsl(u.query, keep_blank_values=True)
            out = []
            for k, v in q:
                if k == "api-version" and v != API_VERSION:
                    key = "%s %s" % (r.method, v)
                    rewritten[key] = rewritten.get(key, 0) + 1
                    v = API_VERSION
                out.append((k, v))
            r.url = urllib.parse.urlunsplit(u._replace(query=urllib.parse.urlencode(out)))

    cred = ClientSecretCredential(tenant, env["AZURE_CLIENT_ID"], env["AZURE_CLIENT_SECRET"],
                                  authority=authority, instance_discovery=False, connection_verify=a.ca_file)
    ml = MLClient(credential=cred, subscription_id=a.subscription, resource_group_name=a.resource_group,
                  workspace_name=a.workspace, per_call_policies=ApiVersion(), connection_verify=a.ca_file)
    t_client = time.monotonic()

    names = []
    for i in range(1, a.jobs + 1):
        job = command(command="python train.py --seed %d" % i, code=a.code_id, environment=a.environment,
                      compute=a.compute, instance_count=1, experiment_name=a.experiment,
                      display_name="job%d" % i, tags={"bench.step": "job%d" % i})
        created = ml.jobs.create_or_update(job)
        names.append(created.name)
    t_submit = time.monotonic()

    status = dict((n, None) for n in names)
    pending = list(names)
    gets = sweeps = 0
    deadline = time.monotonic() + a.timeout
    while pending:
        sweeps += 1
        still = []
        for n in pending:
            s = ml.jobs.get(n).status
            gets += 1
            status[n] = s
            if s not in TERMINAL:
                still.append(n)
        pending = still
        if pending:
            if time.monotonic() > deadline:
                break
            time.sleep(a.poll_interval)
    t_wait = time.monotonic()

    counts = {}
    for s in status.values():
        counts[s] = counts.get(s, 0) + 1
    print(json.dumps({
        "jobs": a.jobs, "created": len(names), "unique_names": len(set(names)), "statuses": counts,
        "gets": gets, "sweeps": sweeps, "api_versions_rewritten": rewritten,
        "oidc_discovery_answered_in_process": len(discovered),
        "seconds": {"import": round(t_import - T0, 3), "client": round(t_client - t_import, 3),
                    "submit": round(t_submit - t_client, 3), "wait": round(t_wait - t_submit, 3),
                    "in_process": round(t_wait - T0, 3)},
        "names": names,
    }))
    return 0 if counts.get("Completed", 0) == a.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
