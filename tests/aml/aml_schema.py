"""aml_schema.py — request-body validation for the AML double, with messages
that name the offending field.

The schema is Microsoft's ARM-template schema for api-version 2024-10-01,
made strict (closed objects, one closed variant per discriminator value) by
shared/azureml/make_strict_schema.py; the copy beside this file is
arm-schema.2024-10-01.strict.json.  A draft-4 validator reports a wrong
discriminated union as "is not valid under any of the given schemas"; this
module instead picks the variant the discriminator names and reports what is
wrong inside it ("properties.distribution.distributionType: 'Pytorch' is not
one of ['Mpi', 'PyTorch', 'TensorFlow']").
"""
import json
import os

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_FILE = os.path.join(HERE, "arm-schema.2024-10-01.strict.json")
# readOnly in the swagger, so absent from the request schema
READ_ONLY = {"status", "parameters", "provisioningState", "latestVersion", "nextVersion", "errorMessage"}


def json_path(parts, root):
    """["properties", "inputs", "data", "uri"] -> "properties.inputs.data.uri"."""
    out = root
    for p in parts:
        if isinstance(p, int):
            out += "[%d]" % p
        else:
            out += ("." if out else "") + str(p)
    return out


class Problem:
    """One thing wrong with a body: where (a dotted path) and what."""

    def __init__(self, path, message):
        self.path = path
        self.message = message

    def __str__(self):
        return "%s: %s" % (self.path or "(body)", self.message)

    def __repr__(self):
        return "Problem(%r)" % str(self)


class StrictSchema:
    def __init__(self, path=SCHEMA_FILE):
        with open(path) as f:
            self.doc = json.load(f)
        self.defs = self.doc["definitions"]
        # The ARM template schema types Bandit's slacks as integers; the REST
        # spec (mfe.2024-10-01.definitions.excerpt.json, BanditPolicy) and the
        # service take floats (slack_factor=0.1 is the documented example).
        for bandit in [self.defs["BanditPolicy"]] + [s for s in self.defs["EarlyTerminationPolicy"]["oneOf"]
                                                     if "slackFactor" in s.get("properties", {})]:
            for k in ("slackAmount", "slackFactor"):
                bandit["properties"][k]["type"] = "number"
        self._validators = {}

    def validator(self, definition):
        v = self._validators.get(definition)
        if v is None:
            if definition not in self.defs:
                raise KeyError("no definition %r in %s" % (definition, SCHEMA_FILE))
            schema = {"$ref": "#/definitions/" + definition, "definitions": self.defs}
            v = jsonschema.Draft4Validator(schema)
            self._validators[definition] = v
        return v

    def check(self, definition, instance, root="properties"):
        """A list of Problems (empty when the instance is valid)."""
        v = self.validator(definition)
        problems = []
        for err in sorted(v.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path))):
            problems.extend(self._explain(v, err, root))
        # one line per distinct problem, in a stable order
        seen, out = set(), []
        for p in problems:
            if str(p) not in seen:
                seen.add(str(p))
                out.append(p)
        return out

    # -- turning jsonschema errors into field-level messages ---------------

    def _resolve(self, v, schema):
        while isinstance(schema, dict) and "$ref" in schema:
            _, schema = v.resolver.resolve(schema["$ref"])
        return schema

    def _discriminator(self, variants):
        """The property every variant pins to its own single enum value."""
        common = None
        for s in variants:
            props = s.get("properties", {}) if isinstance(s, dict) else {}
            keys = {k for k, p in props.items() if isinstance(p, dict) and len(p.get("enum", [])) == 1}
            common = keys if common is None else common & keys
        if not common:
            return None
        for k in sorted(common):
            values = [s["properties"][k]["enum"][0] for s in variants]
            if len(set(values)) == len(values):
                return k
        return None

    def _explain(self, v, err, root):
        path = json_path(list(err.absolute_path), root)
        kind = err.validator
        if kind in ("oneOf", "anyOf"):
            variants = [self._resolve(v, s) for s in err.validator_value]
            disc = self._discriminator(variants)
            inst = err.instance
            if disc and isinstance(inst, dict):
                allowed = [s["properties"][disc]["enum"][0] for s in variants]
                if disc not in inst:
                    return [Problem(json_path([disc], path), "required discriminator is missing (one of %s)" % allowed)]
                if inst[disc] not in allowed:
                    return [Problem(json_path([disc], path), "%s is not one of %s" % (json.dumps(inst[disc]), allowed))]
                idx = allowed.index(inst[disc])
                inner = [e for e in (err.context or []) if e.schema_path and e.schema_path[0] == idx]
                out = []
                for e in inner:
                    out.extend(self._explain(v, e, root))
                if out:
                    return out
            if not isinstance(inst, dict) and all(isinstance(s, dict) and s.get("type") == "object" for s in variants):
                return [Problem(path, "expected an object, got %s" % _type_name(inst))]
            # no discriminator: report the variant that got furthest
            best = jsonschema.exceptions.best_match(err.context or [])
            if best is not None and best is not err:
                return self._explain(v, best, root)
            return [Problem(path, err.message)]
        if kind == "additionalProperties":
            allowed = sorted(err.schema.get("properties", {}))
            extra = [k for k in err.instance if k not in err.schema.get("properties", {})]
            return [Problem(json_path([k], path), "read-only field, the service sets it; do not send it" if k in READ_ONLY
                            else "unknown field (allowed here: %s)" % ", ".join(allowed)) for k in extra]
        if kind == "required":
            missing = [k for k in err.validator_value if isinstance(err.instance, dict) and k not in err.instance]
            return [Problem(json_path([k], path), "required field is missing") for k in missing]
        if kind == "type":
            want = err.validator_value
            return [Problem(path, "expected %s, got %s %s" % (
                want if isinstance(want, str) else " or ".join(want), _type_name(err.instance),
                _short(err.instance)))]
        if kind == "enum":
            return [Problem(path, "%s is not one of %s" % (json.dumps(err.instance), err.validator_value))]
        if kind == "pattern":
            return [Problem(path, "%s does not match the pattern %s" % (json.dumps(err.instance), err.validator_value))]
        if kind in ("minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems"):
            return [Problem(path, err.message)]
        return [Problem(path, err.message)]


def _type_name(x):
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "boolean"
    if isinstance(x, int):
        return "integer"
    if isinstance(x, float):
        return "number"
    if isinstance(x, str):
        return "string"
    if isinstance(x, list):
        return "array"
    return "object"


def _short(x):
    s = json.dumps(x)
    return s if len(s) <= 60 else s[:57] + "..."


def check_pending_upload(body):
    """PendingUploadRequestDto (swagger mfe.json; not in the ARM-template schema)."""
    if not isinstance(body, dict):
        return [Problem("", "expected a JSON object, got %s" % _type_name(body))]
    out = []
    allowed = {"pendingUploadId", "pendingUploadType"}
    for k in body:
        if k not in allowed:
            out.append(Problem(k, "unknown field (allowed here: %s)" % ", ".join(sorted(allowed))))
    if "pendingUploadId" in body and body["pendingUploadId"] is not None and not isinstance(body["pendingUploadId"], str):
        out.append(Problem("pendingUploadId", "expected string, got %s" % _type_name(body["pendingUploadId"])))
    t = body.get("pendingUploadType", "TemporaryBlobReference")
    if t not in ("None", "TemporaryBlobReference"):
        out.append(Problem("pendingUploadType", "%s is not one of ['None', 'TemporaryBlobReference']" % json.dumps(t)))
    return out
