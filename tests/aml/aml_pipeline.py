"""aml_pipeline.py — component versions and pipeline jobs (shared/azureml/REFERENCE.md §1.7).

Component versions (PUT/GET components/{name}/versions/{version}): the body's
properties are ComponentVersionProperties of the ARM template schema (closed:
componentSpec, description, isAnonymous, isArchived, properties, tags);
componentSpec is a command component as the az ml CLI's component YAML
(reference-yaml-component-command) describes it, as JSON: name (lowercase
letters, digits, underscores, starting with a letter; equal to the URL's),
version (equal to the URL's), type "command", command, environment
("azureml:<ARM id>", a registry URI, or azureml:AzureML-…@latest), code
("azureml:<code version ARM id>", which must exist), inputs and outputs
({type}), and every ${{inputs.X}} / ${{outputs.X}} of the command declared.
Versions are immutable: the same content again answers 200, other content 409.

Pipeline jobs (jobType Pipeline): the schema leaves `jobs` and `settings`
untyped; the double checks them as azure-ai-ml sends them (snake_case keys):
settings keys, and each child job: type "command", name equal to its key, a
componentId naming a registered component version, a computeId of the
workspace (or the pipeline's computeId), inputs and outputs named as the
component declares them ({job_input_type: literal, value: binding} or
{job_input_type: uri_file|uri_folder, uri, mode}; {job_output_type, uri,
mode}), every component input given, ${{parent.jobs.J.outputs.O}} naming a
job and an output its component has, distribution and resources as the
SDK's snake_case forms, and no cycle.

With execute_jobs a pipeline job runs its children (aml_exec.PipelineRun):
each becomes a Command job named <pipeline>-<key>, PUT into the workspace
(and run by the executor like any other) once every job it reads from has
Completed, its bindings resolved to those jobs' output URIs.
"""
import re

from aml_exec import default_output_uri
from aml_schema import Problem

COMPONENT_PROPS = {"componentSpec", "description", "isAnonymous", "isArchived", "properties", "tags"}
SPEC_KEYS = {"$schema", "name", "version", "display_name", "description", "tags", "type", "command", "code",
             "environment", "environment_variables", "distribution", "resources", "inputs", "outputs",
             "is_deterministic"}
COMPONENT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,254}$")
DATA_TYPES = {"uri_file", "uri_folder"}
INPUT_TYPES = DATA_TYPES | {"string", "integer", "number", "boolean"}
SETTINGS = {"default_compute", "default_datastore", "continue_on_step_failure", "force_rerun"}
NODE_KEYS = {"type", "name", "display_name", "description", "tags", "componentId", "computeId", "inputs", "outputs",
             "distribution", "resources", "environment_variables", "limits", "properties", "_source"}
INPUT_MODES = {"ReadOnlyMount", "ReadWriteMount", "Download", "Direct", "EvalMount", "EvalDownload"}
OUTPUT_MODES = {"ReadWriteMount", "Upload", "Direct"}
DISTRIBUTIONS = {"PyTorch": {"distribution_type", "process_count_per_instance"},
                 "Mpi": {"distribution_type", "process_count_per_instance"},
                 "TensorFlow": {"distribution_type", "worker_count", "parameter_server_count"}}
RESOURCES = {"instance_count", "instance_type", "shm_size", "properties", "docker_args"}
LIMITS = {"job_limits_type", "timeout"}
PARENT_JOB = re.compile(r"^\$\{\{\s*parent\.jobs\.([^.\s}]+)\.outputs\.([^.\s}]+)\s*\}\}$")
BINDING = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")


def binding_problems(command, field, scopes, what):
    """Problems with the ${{scope.name}} bindings of `command`: each must name an
    entry of one of `scopes` ({scope: (its entries, where they are declared)})."""
    problems = []
    for b in BINDING.findall(command):
        m = re.match(r"^(%s)\.([A-Za-z0-9_]+)$" % "|".join(map(re.escape, scopes)), b)
        if not m:
            problems.append(Problem(field, "${{%s}} is not a binding %s resolves (%s)" % (
                b, what, ", ".join("${{%s.<name>}}" % s for s in scopes))))
        elif m.group(2) not in scopes[m.group(1)][0]:
            problems.append(Problem(field, "${{%s}} names no entry of %s" % (b, scopes[m.group(1)][1])))
    return problems
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def arm_id(ref):
    """'azureml:/subscriptions/…' -> the ARM id; any other reference as it is."""
    return ref[len("azureml:"):] if ref.startswith("azureml:/subscriptions/") else ref


def _closed(where, obj, allowed, problems):
    if not isinstance(obj, dict):
        problems.append(Problem(where, "must be an object, got %r" % (obj,)))
        return False
    for k in obj:
        if k not in allowed:
            problems.append(Problem("%s.%s" % (where, k), "not a field here (known: %s)" % ", ".join(sorted(allowed))))
    return True


def check_component(arm, name, version, props):
    """Problems with a component version's properties (run under arm.lock)."""
    problems = []
    if not _closed("properties", props, COMPONENT_PROPS, problems):
        return problems
    for k in ("isAnonymous", "isArchived"):
        if k in props and not isinstance(props[k], bool):
            problems.append(Problem("properties." + k, "must be a boolean"))
    spec = props.get("componentSpec")
    w = "properties.componentSpec"
    if not _closed(w, spec, SPEC_KEYS, problems):
        return problems
    if spec.get("name") != name or not COMPONENT_NAME.match(str(spec.get("name"))):
        problems.append(Problem(w + ".name", "must be the URL's name '%s' and match %s" % (name,
                                                                                            COMPONENT_NAME.pattern)))
    if str(spec.get("version")) != version:
        problems.append(Problem(w + ".version", "must be the URL's version '%s', got %r" % (version,
                                                                                            spec.get("version"))))
    if spec.get("type") != "command":
        problems.append(Problem(w + ".type", "the double knows command components, got %r" % spec.get("type")))
    cmd = spec.get("command")
    if not isinstance(cmd, str) or not cmd.strip():
        problems.append(Problem(w + ".command", "required"))
        cmd = ""
    env = spec.get("environment")
    if not isinstance(env, str):
        problems.append(Problem(w + ".environment", "required: a reference to an environment"))
    else:
        problems += arm._check_environment(arm_id(env), w + ".environment")
    code = spec.get("code")
    if code is not None:
        if not isinstance(code, str) or not code.startswith("azureml:/"):
            problems.append(Problem(w + ".code", "must be azureml:<code version ARM id>, got %r" % (code,)))
        else:
            problems += arm._check_code({"codeId": code[len("azureml:"):]}, w + ".code")[0]
    declared = {}
    for io, types in (("inputs", INPUT_TYPES), ("outputs", DATA_TYPES)):
        declared[io] = spec.get(io) or {}
        for k, v in declared[io].items():
            if not IDENT.match(k):
                problems.append(Problem("%s.%s.%s" % (w, io, k), "a name must be an identifier"))
            if not isinstance(v, dict) or v.get("type") not in types:
                problems.append(Problem("%s.%s.%s.type" % (w, io, k), "one of %s" % ", ".join(sorted(types))))
    for b in BINDING.findall(cmd):
        kind, _, what = b.partition(".")
        if kind not in ("inputs", "outputs") or what not in declared[kind]:
            problems.append(Problem(w + ".command", "${{%s}} names no input or output of the component" % b))
    return problems


def _component_of(arm, cid, where, problems):
    comp, p = arm._asset_version(cid, "components", arm.components, "component", where)
    if p:
        problems.append(p)
    return comp


def check_pipeline(arm, props):
    """Problems with a pipeline job's settings and child jobs (run under arm.lock)."""
    problems = []
    settings = props.get("settings")
    if settings is not None and _closed("properties.settings", settings, SETTINGS, problems):
        if not isinstance(settings.get("continue_on_step_failure", False), bool):
            problems.append(Problem("properties.settings.continue_on_step_failure", "must be a boolean"))
    problems += arm._check_compute(props)
    jobs = props.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        return problems + [Problem("properties.jobs", "a pipeline job needs at least one child job")]
    specs = {}
    for key, node in jobs.items():
        w = "properties.jobs.%s" % key
        if not IDENT.match(key):
            problems.append(Problem(w, "a child job's name must be an identifier"))
        if not _closed(w, node, NODE_KEYS, problems):
            continue
        if node.get("type") != "command":
            problems.append(Problem(w + ".type", "the double runs command child jobs, got %r" % node.get("type")))
        if node.get("name") != key:
            problems.append(Problem(w + ".name", "must be the job's key '%s'" % key))
        comp = _component_of(arm, node.get("componentId"), w + ".componentId", problems)
        if node.get("computeId") is not None:
            problems += arm._check_compute({"computeId": node["computeId"],
                                            "resources": {"instanceCount": (node.get("resources") or {})
                                                          .get("instance_count", 1)}}, w + ".computeId")
        elif props.get("computeId") is None:
            problems.append(Problem(w + ".computeId", "no compute: neither the job nor the pipeline names one"))
        dist = node.get("distribution")
        if dist is not None:
            dt = dist.get("distribution_type") if isinstance(dist, dict) else None
            if dt not in DISTRIBUTIONS:
                problems.append(Problem(w + ".distribution.distribution_type", "one of %s, got %r" % (
                    ", ".join(sorted(DISTRIBUTIONS)), dt)))
            else:
                _closed(w + ".distribution", dist, DISTRIBUTIONS[dt], problems)
        res = node.get("resources")
        if res is not None and _closed(w + ".resources", res, RESOURCES, problems):
            ic = res.get("instance_count", 1)
            if not isinstance(ic, int) or ic < 1:
                problems.append(Problem(w + ".resources.instance_count", "a whole number >= 1"))
        if node.get("limits") is not None:
            _closed(w + ".limits", node["limits"], LIMITS, problems)
        for k, v in (node.get("environment_variables") or {}).items():
            if not isinstance(v, str):
                problems.append(Problem(w + ".environment_variables." + k, "must be a string"))
        specs[key] = comp.props["componentSpec"] if comp else None
    deps = {k: set() for k in jobs}
    for key, node in jobs.items():
        spec = specs.get(key)
        if not isinstance(node, dict) or spec is None:
            continue
        w = "properties.jobs.%s" % key
        cins, couts = spec.get("inputs") or {}, spec.get("outputs") or {}
        inputs, outputs = node.get("inputs") or {}, node.get("outputs") or {}
        for k in cins:
            if k not in inputs and not cins[k].get("optional"):
                problems.append(Problem(w + ".inputs." + k, "the component's input '%s' is not given" % k))
        for k, v in inputs.items():
            iw = "%s.inputs.%s" % (w, k)
            if k not in cins:
                problems.append(Problem(iw, "the component has no input '%s'" % k))
            if not isinstance(v, dict):
                problems.append(Problem(iw, "must be an object with job_input_type"))
                continue
            t = v.get("job_input_type")
            if t == "literal":
                _closed(iw, v, {"job_input_type", "value", "description"}, problems)
                m = PARENT_JOB.match(str(v.get("value", "")))
                if m:
                    src, out = m.groups()
                    if src not in jobs:
                        problems.append(Problem(iw, "binds job '%s', which the pipeline does not have" % src))
                    elif specs.get(src) is not None and out not in (specs[src].get("outputs") or {}):
                        problems.append(Problem(iw, "binds output '%s' of job '%s', whose component has no such "
                                                "output" % (out, src)))
                    else:
                        deps[key].add(src)
                elif "${{" in str(v.get("value", "")):
                    problems.append(Problem(iw, "%r is not a binding the double resolves" % v.get("value")))
            elif t in DATA_TYPES:
                _closed(iw, v, {"job_input_type", "uri", "mode", "description"}, problems)
                if not v.get("uri"):
                    problems.append(Problem(iw + ".uri", "required"))
                else:
                    problems += arm._check_uri(v["uri"], iw + ".uri", [])
                if v.get("mode", "ReadOnlyMount") not in INPUT_MODES:
                    problems.append(Problem(iw + ".mode", "%r is not an InputDeliveryMode" % v.get("mode")))
            else:
                problems.append(Problem(iw + ".job_input_type", "literal, uri_file or uri_folder, got %r" % t))
        for k, v in outputs.items():
            ow = "%s.outputs.%s" % (w, k)
            if k not in couts:
                problems.append(Problem(ow, "the component has no output '%s'" % k))
            if not _closed(ow, v, {"job_output_type", "uri", "mode", "description"}, problems):
                continue
            if v.get("job_output_type") not in DATA_TYPES:
                problems.append(Problem(ow + ".job_output_type", "uri_file or uri_folder, got %r" %
                                        v.get("job_output_type")))
            if v.get("mode", "ReadWriteMount") not in OUTPUT_MODES:
                problems.append(Problem(ow + ".mode", "%r is not an OutputDeliveryMode" % v.get("mode")))
            if v.get("uri"):
                problems += arm._check_uri(v["uri"], ow + ".uri", [])
    on_cycle = cycle_node(deps)
    if on_cycle is not None:
        problems.append(Problem("properties.jobs", "the child jobs' bindings make a cycle through '%s'" % on_cycle))
    return problems


def cycle_node(deps):
    """A node on a cycle of deps ({node: {nodes it depends on}}), or None."""
    state = {}

    def visit(n):
        if state.get(n) == 1:
            return n
        if state.get(n) == 2:
            return None
        state[n] = 1
        for d in deps.get(n, ()):
            found = visit(d)
            if found is not None:
                return found
        state[n] = 2
        return None
    for n in deps:
        found = visit(n)
        if found is not None:
            return found
    return None


def deps_of(props):
    """{child key: {keys it reads from}}"""
    out = {}
    for key, node in props["jobs"].items():
        out[key] = set()
        for v in (node.get("inputs") or {}).values():
            m = PARENT_JOB.match(str(v.get("value", ""))) if v.get("job_input_type") == "literal" else None
            if m:
                out[key].add(m.group(1))
    return out


def child_name(pipeline, key):
    name = re.sub(r"[^A-Za-z0-9_-]", "-", "%s-%s" % (pipeline, key))
    return name[:255]


def output_uri(arm, pipeline, key, output):
    """Where child `key`'s output lands: its uri, or the service's default path."""
    out = (arm.jobs[pipeline].props["jobs"][key].get("outputs") or {}).get(output) or {}
    return out.get("uri") or default_output_uri(child_name(pipeline, key), output)


def child_props(arm, pipeline, key):
    """The Command job body (properties) child `key` of pipeline job `pipeline` runs as."""
    p = arm.jobs[pipeline].props
    node = p["jobs"][key]
    comp, _ = arm._asset_version(node["componentId"], "components", arm.components, "component", "componentId")
    spec = comp.props["componentSpec"]
    env = spec["environment"]
    props = {"jobType": "Command", "command": spec["command"], "displayName": node.get("display_name") or key,
             "environmentId": arm_id(env),
             "computeId": node.get("computeId") or p.get("computeId"),
             "tags": dict(node.get("tags") or {}, **{"azureml.pipeline": pipeline}),
             "experimentName": p.get("experimentName", "Default")}
    if spec.get("code"):
        props["codeId"] = spec["code"][len("azureml:"):]
    if node.get("environment_variables"):
        props["environmentVariables"] = dict(node["environment_variables"])
    res = node.get("resources") or {}
    props["resources"] = {k2: res[k] for k, k2 in (("instance_count", "instanceCount"),
                                                   ("instance_type", "instanceType"), ("shm_size", "shmSize"))
                          if res.get(k) is not None}
    dist = node.get("distribution")
    if dist:
        props["distribution"] = {"distributionType": dist["distribution_type"]}
        for k, k2 in (("process_count_per_instance", "processCountPerInstance"), ("worker_count", "workerCount"),
                      ("parameter_server_count", "parameterServerCount")):
            if dist.get(k) is not None:
                props["distribution"][k2] = dist[k]
    lim = node.get("limits")
    if lim and lim.get("timeout"):
        props["limits"] = {"jobLimitsType": "Command", "timeout": lim["timeout"]}
    inputs, outputs = {}, {}
    for k, v in (node.get("inputs") or {}).items():
        m2 = PARENT_JOB.match(str(v.get("value", ""))) if v["job_input_type"] == "literal" else None
        if m2:
            src, out = m2.groups()
            t = ((arm.jobs[pipeline].props["jobs"][src].get("outputs") or {}).get(out) or {}).get(
                "job_output_type", "uri_folder")
            inputs[k] = {"jobInputType": t, "uri": output_uri(arm, pipeline, src, out), "mode": "ReadOnlyMount"}
        elif v["job_input_type"] == "literal":
            inputs[k] = {"jobInputType": "literal", "value": str(v.get("value", ""))}
        else:
            inputs[k] = {"jobInputType": v["job_input_type"], "uri": v["uri"], "mode": v.get("mode", "ReadOnlyMount")}
    for k, v in (node.get("outputs") or {}).items():
        outputs[k] = {"jobOutputType": v["job_output_type"], "uri": output_uri(arm, pipeline, key, k),
                      "mode": v.get("mode", "ReadWriteMount")}
    for k, v in (spec.get("outputs") or {}).items():       # declared, not bound: the default path
        outputs.setdefault(k, {"jobOutputType": v["type"], "uri": output_uri(arm, pipeline, key, k),
                               "mode": "ReadWriteMount"})
    if inputs:
        props["inputs"] = inputs
    if outputs:
        props["outputs"] = outputs
    return props
