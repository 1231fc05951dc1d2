#!/usr/bin/python3
"""Checks an Azure ML pipeline job YAML as `az ml job create -f` reads it.

    pipeline_yaml.py FILE [--dag FLOW_LIST_JSON] [--steps A,B]

Reads FILE with PyYAML (what the az ml CLI's loader is built on) and checks it
against the CLI v2 pipeline job schema as Microsoft documents it
(reference-yaml-job-pipeline, reference-yaml-job-command, the binding syntax
of reference-yaml-core-syntax; shared/azureml/REFERENCE.md §1.7): every key
one the schema has, enums, the `azureml:` reference forms, that each
${{inputs.X}} / ${{outputs.X}} in a command names one of the job's inputs or
outputs, that each ${{parent.jobs.J.outputs.O}} binding names a job and an
output it has, that the jobs form a DAG, and that local paths (code, inputs)
exist relative to FILE, as the CLI resolves them.

With --dag (the output of `flow list --format json`) it reads the YAML back
as a DAG and compares it with flow's: the same steps (display names, or those
of --steps), the same edges, the same free inputs, and each step's
distribution and node count.

Prints each problem and exits 1 if there is one; prints "ok: N jobs" if not.
"""
import json
import os
import re
import sys

import yaml

from aml_pipeline import cycle_node

SCHEMA = "https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json"
TOP = {"$schema", "type", "name", "display_name", "experiment_name", "description", "tags", "settings", "jobs",
       "inputs", "outputs", "identity"}
SETTINGS = {"default_datastore", "default_compute", "continue_on_step_failure", "force_rerun"}
JOB = {"type", "name", "display_name", "description", "tags", "command", "code", "environment",
       "environment_variables", "distribution", "compute", "resources", "limits", "inputs", "outputs", "identity",
       "services", "queue_settings"}
RESOURCES = {"instance_count", "instance_type", "shm_size", "properties", "docker_args"}
DISTRIBUTIONS = {"pytorch": {"type", "process_count_per_instance"}, "mpi": {"type", "process_count_per_instance"},
                 "tensorflow": {"type", "worker_count", "parameter_server_count"}}
DATA_TYPES = {"uri_file", "uri_folder", "mltable", "mlflow_model", "custom_model", "triton_model"}
INPUT_KEYS, INPUT_MODES = {"type", "path", "mode", "description"}, {"ro_mount", "download", "direct", "eval_mount",
                                                                      "eval_download"}
OUTPUT_KEYS, OUTPUT_MODES = {"type", "path", "mode", "description", "name", "version"}, {"rw_mount", "upload",
                                                                                       "direct"}
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# azure-ai-ml's rule for a pipeline node's name: a Python identifier in lower
# case ("Abc" and "aBc" are refused: test_pipeline_node_name_validate)
NODE = re.compile(r"^[a-z_][a-z0-9_]*$")
ENVIRONMENT = re.compile(r"^(azureml:(AzureML-[\w.-]+@latest|[A-Za-z0-9][\w-]*(:[\w.-]+|@latest)|/subscriptions/\S+)"
                         r"|azureml://registries/[\w.-]+/environments/[\w.-]+/(versions/[\w.-]+|labels/latest))$")
COMPUTE = re.compile(r"^azureml:[A-Za-z0-9][A-Za-z0-9_-]*$")
DATASTORE_REF = re.compile(r"^azureml:[A-Za-z0-9_]+$")
DATASTORE_URI = re.compile(r"^azureml://datastores/[A-Za-z0-9_]+/paths/\S+$")
JOB_BINDING = re.compile(r"^\$\{\{parent\.jobs\.([^.}]+)\.outputs\.([^.}]+)\}\}$")
EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")
FLOW_TEMPLATE = re.compile(r"\$\{(inputs|outputs|params|credentials)\.")


def problems_of(path):
    out = []

    def bad(where, fmt, *a):
        out.append("%s: %s" % (where, fmt % a))

    def keys(where, obj, allowed):
        if not isinstance(obj, dict):
            bad(where, "expected a mapping, got %r", obj)
            return False
        for k in obj:
            if k not in allowed:
                bad(where, "'%s' is not a key of the schema here (it has: %s)", k, ", ".join(sorted(allowed)))
        return True

    base = os.path.dirname(os.path.abspath(path))
    with open(path) as f:
        doc = yaml.safe_load(f)
    if not keys("top level", doc, TOP):
        return out, doc
    if doc.get("$schema") != SCHEMA:
        bad("$schema", "%r", doc.get("$schema"))
    if doc.get("type") != "pipeline":
        bad("type", "must be pipeline, got %r", doc.get("type"))
    for k, v in (doc.get("tags") or {}).items():
        if not isinstance(v, str):
            bad("tags.%s" % k, "a tag's value is a string, got %r", v)
    settings = doc.get("settings") or {}
    if keys("settings", settings, SETTINGS):
        if "default_compute" in settings and not COMPUTE.match(str(settings["default_compute"])):
            bad("settings.default_compute", "not azureml:<compute>: %r", settings["default_compute"])
        if "default_datastore" in settings and not DATASTORE_REF.match(str(settings["default_datastore"])):
            bad("settings.default_datastore", "not azureml:<datastore>: %r", settings["default_datastore"])
        if not isinstance(settings.get("continue_on_step_failure", False), bool):
            bad("settings.continue_on_step_failure", "not a boolean")
    jobs = doc.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        bad("jobs", "required: a mapping of at least one job")
        return out, doc
    for name, job in jobs.items():
        w = "jobs.%s" % name
        if not NODE.match(name):
            bad(w, "a job's key must be an identifier in lower case")
        if not keys(w, job, JOB):
            continue
        if job.get("type") != "command":
            bad(w + ".type", "must be command, got %r", job.get("type"))
        cmd = job.get("command")
        if not isinstance(cmd, str) or not cmd.strip():
            bad(w + ".command", "required, a non-empty string")
            cmd = ""
        if not ENVIRONMENT.match(str(job.get("environment", ""))):
            bad(w + ".environment", "not an azureml: environment reference: %r", job.get("environment"))
        if "compute" in job and not COMPUTE.match(str(job["compute"])):
            bad(w + ".compute", "not azureml:<compute>: %r", job["compute"])
        if "code" in job and not os.path.isdir(os.path.join(base, str(job["code"]))):
            bad(w + ".code", "%r is not a directory relative to the YAML file", job["code"])
        for k, v in (job.get("environment_variables") or {}).items():
            if not isinstance(v, str):
                bad(w + ".environment_variables." + k, "must be a string, got %r", v)
        res = job.get("resources") or {}
        if keys(w + ".resources", res, RESOURCES):
            ic = res.get("instance_count", 1)
            if not isinstance(ic, int) or isinstance(ic, bool) or ic < 1:
                bad(w + ".resources.instance_count", "a whole number >= 1, got %r", ic)
        dist = job.get("distribution")
        if dist is not None:
            t = dist.get("type") if isinstance(dist, dict) else None
            if t not in DISTRIBUTIONS:
                bad(w + ".distribution.type", "one of %s, got %r", ", ".join(sorted(DISTRIBUTIONS)), t)
            else:
                keys(w + ".distribution", dist, DISTRIBUTIONS[t])
                for k in DISTRIBUTIONS[t] - {"type"}:
                    if k in dist and (not isinstance(dist[k], int) or dist[k] < 0):
                        bad(w + ".distribution." + k, "a whole number, got %r", dist[k])
        limits = job.get("limits")
        if limits is not None and keys(w + ".limits", limits, {"timeout"}):
            if not isinstance(limits.get("timeout"), int) or limits["timeout"] < 1:
                bad(w + ".limits.timeout", "seconds, a whole number, got %r", limits.get("timeout"))
        inputs, outputs = job.get("inputs") or {}, job.get("outputs") or {}
        for k, v in inputs.items():
            iw = "%s.inputs.%s" % (w, k)
            if not IDENT.match(k):
                bad(iw, "an input's name must be an identifier")
            if isinstance(v, (bool, int, float)):
                continue
            if isinstance(v, str):
                m = JOB_BINDING.match(v)
                if m:
                    src, o = m.groups()
                    if src not in jobs:
                        bad(iw, "binds job '%s', which the pipeline does not have", src)
                    elif o not in (jobs[src].get("outputs") or {}):
                        bad(iw, "binds output '%s' of job '%s', which it does not have", o, src)
                elif "${{" in v:
                    bad(iw, "not a binding the schema knows: %r", v)
                continue
            if keys(iw, v, INPUT_KEYS):
                if v.get("type", "uri_folder") not in DATA_TYPES:
                    bad(iw + ".type", "%r", v.get("type"))
                if v.get("mode", "ro_mount") not in INPUT_MODES:
                    bad(iw + ".mode", "%r is not an input mode", v.get("mode"))
                p = v.get("path")
                if not isinstance(p, str):
                    bad(iw + ".path", "required")
                elif p.startswith("azureml://"):
                    if not DATASTORE_URI.match(p) or "${{" in p:
                        bad(iw + ".path", "not azureml://datastores/<ds>/paths/<p>: %r", p)
                elif not os.path.exists(os.path.join(base, p)):
                    bad(iw + ".path", "the local path %r does not exist relative to the YAML file", p)
                elif (v.get("type") == "uri_folder") != os.path.isdir(os.path.join(base, p)):
                    bad(iw + ".type", "%r does not match the local path %r", v.get("type"), p)
        for k, v in outputs.items():
            ow = "%s.outputs.%s" % (w, k)
            if not IDENT.match(k):
                bad(ow, "an output's name must be an identifier")
            if keys(ow, v or {}, OUTPUT_KEYS):
                v = v or {}
                if v.get("type", "uri_folder") not in DATA_TYPES:
                    bad(ow + ".type", "%r", v.get("type"))
                if v.get("mode", "rw_mount") not in OUTPUT_MODES:
                    bad(ow + ".mode", "%r is not an output mode", v.get("mode"))
                if v.get("type") == "uri_file" and not v.get("path"):
                    bad(ow + ".path", "a uri_file output needs the file's path")
                if "path" in v and not DATASTORE_URI.match(re.sub(r"\$\{\{name\}\}", "x", v["path"])):
                    bad(ow + ".path", "not azureml://datastores/<ds>/paths/<p>: %r", v["path"])
        for e in EXPRESSION.findall(cmd):
            kind, _, what = e.partition(".")
            if kind not in ("inputs", "outputs") or what not in (inputs if kind == "inputs" else outputs):
                bad(w + ".command", "${{%s}} names no input or output of the job", e)
        if FLOW_TEMPLATE.search(cmd):
            bad(w + ".command", "a flow template is left in it: %r", cmd)
    # a DAG
    deps = {n: set() for n in jobs}
    for n, job in jobs.items():
        for v in ((job or {}).get("inputs") or {}).values():
            m = JOB_BINDING.match(v) if isinstance(v, str) else None
            if m and m.group(1) in jobs:
                deps[n].add(m.group(1))
    on_cycle = cycle_node(deps)
    if on_cycle is not None:
        bad("jobs", "a cycle through '%s'", on_cycle)
    return out, doc


def compare(doc, rows, only):
    """Problems where the YAML's DAG differs from flow's (flow list --format json)."""
    out = []
    jobs = doc["jobs"]
    by_display = {j["display_name"]: (k, j) for k, j in jobs.items()}
    rows = [r for r in rows if only is None or r["name"] in only]
    names = {r["name"] for r in rows}
    if set(by_display) != names:
        out.append("steps: the YAML has %s, flow has %s" % (sorted(by_display), sorted(names)))
        return out
    producer = {}
    for r in rows:
        for d in r["outputs"]:
            producer[d] = r["name"]
    flow_edges, flow_free = set(), {}
    for r in rows:
        for d in r["inputs"]:
            if d.startswith("params:") or d == "parameters":
                continue
            if d in producer:
                flow_edges.add((producer[d], r["name"]))
            else:
                flow_free[r["name"]] = flow_free.get(r["name"], 0) + 1
    yaml_edges, yaml_free = set(), {}
    key_to_display = {k: j["display_name"] for k, j in jobs.items()}
    for k, j in jobs.items():
        for v in (j.get("inputs") or {}).values():
            m = JOB_BINDING.match(v) if isinstance(v, str) else None
            if m:
                yaml_edges.add((key_to_display[m.group(1)], j["display_name"]))
            elif isinstance(v, dict):
                yaml_free[j["display_name"]] = yaml_free.get(j["display_name"], 0) + 1
    if flow_edges != yaml_edges:
        out.append("edges: only in flow %s; only in the YAML %s" % (sorted(flow_edges - yaml_edges),
                                                                   sorted(yaml_edges - flow_edges)))
    if flow_free != yaml_free:
        out.append("free inputs per step: flow %s, the YAML %s" % (flow_free, yaml_free))
    for r in rows:
        j = by_display[r["name"]][1]
        dist, res = j.get("distribution"), j.get("resources") or {}
        want = r.get("dist")
        if want:
            if not dist or dist["type"] != want["framework"]:
                out.append("%s: distribution %r, flow says %s" % (r["name"], dist, want["framework"]))
            elif res.get("instance_count") != want["num_nodes"]:
                out.append("%s: instance_count %r, flow says %s" % (r["name"], res.get("instance_count"),
                                                                    want["num_nodes"]))
            elif want["framework"] != "tensorflow" and \
                    dist.get("process_count_per_instance") != want["processes_per_node"]:
                out.append("%s: process_count_per_instance %r, flow says %s" % (
                    r["name"], dist.get("process_count_per_instance"), want["processes_per_node"]))
        elif dist:
            out.append("%s: distribution %r, flow has none" % (r["name"], dist))
    return out


def main(argv):
    path, dag, only = argv[0], None, None
    i = 1
    while i < len(argv):
        if argv[i] == "--dag":
            with open(argv[i + 1]) as f:
                dag = json.load(f)
            i += 2
        elif argv[i] == "--steps":
            only = set(argv[i + 1].split(","))
            i += 2
        else:
            sys.exit("pipeline_yaml.py: unknown argument %s" % argv[i])
    problems, doc = problems_of(path)
    if not problems and dag is not None:
        problems = compare(doc, dag, only)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("ok: %d jobs" % len(doc["jobs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
