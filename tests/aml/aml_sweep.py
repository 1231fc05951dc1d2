"""aml_sweep.py — sweep jobs (jobType Sweep, shared/azureml/REFERENCE.md §1.8).

A Sweep job's body is checked by the schema (SweepJob, TrialComponent,
SweepJobLimits, Objective, the sampling algorithms and early-termination
policies), then here as the service checks it: the trial's compute, code and
environment as a Command job's; limits.jobLimitsType "Sweep" and ISO-8601
durations; searchSpace in the azure-ai-ml SDK's REST form (each parameter
[type, [arguments]]: ["choice", [[values]]], ["uniform", [lo, hi]],
["loguniform", [ln lo, ln hi]], ["quniform", [lo, hi, q]], ["randint",
[upper]], ["normal", [mu, sigma]] ...); a Grid sweep only of choices; every
${{search_space.X}} of the trial's command a parameter of the space and
every ${{inputs.X}} / ${{outputs.X}} a binding of the job; maxTotalTrials
required for a Random sweep.  Bayesian sampling is valid but the double
does not run it (it says so).

With execute_jobs a sweep job runs its trials (SweepRun): each a Command job
named <sweep>_<k> (k from 0, as Azure ML names them), made from the trial
component with ${{search_space.X}} replaced by the trial's value and
${{name}} in an output's path by the trial's name, at most
maxConcurrentTrials at once, maxTotalTrials in all (a grid: every
combination, at most that many).  A trial's metrics are what its processes
log through MLflow (the executor's stand-in module, tests/aml/mlflow_double,
writes them where the run collects them).  The early-termination policy is
applied at each evaluation interval to the primary metric's logged values.
When the trials are over the sweep is Completed if one Completed (Failed if
none did) and its properties say best_child_run_id, score and
best_metric_status, as HyperDrive's parent run does.
"""
import itertools
import json
import math
import os
import random
import statistics
import time

import aml_pipeline
from aml_exec import RunError, _Run
from aml_jobs import parse_duration
from aml_schema import Problem

IDENT = aml_pipeline.IDENT
BINDING = aml_pipeline.BINDING
# distribution -> how many numbers it takes
DISTRIBUTIONS = {"uniform": 2, "loguniform": 2, "quniform": 3, "qloguniform": 3, "normal": 2, "lognormal": 2,
                 "qnormal": 3, "qlognormal": 3, "randint": 1}


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_space(space, sampling, problems):
    if not isinstance(space, dict) or not space:
        problems.append(Problem("properties.searchSpace", "must map each parameter to its distribution"))
        return
    for k, v in space.items():
        w = "properties.searchSpace.%s" % k
        if not IDENT.match(k):
            problems.append(Problem(w, "a parameter's name must be an identifier"))
        if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], list)):
            problems.append(Problem(w, "must be [type, [arguments]] as the SDK sends it, e.g. "
                                       "[\"choice\", [[1, 2]]] or [\"uniform\", [0.1, 1.0]]; got %s" % json.dumps(v)))
            continue
        kind, args = v
        if kind == "choice":
            if len(args) != 1 or not isinstance(args[0], list) or not args[0]:
                problems.append(Problem(w, "a choice is [\"choice\", [[value, ...]]] with at least one value"))
        elif kind in DISTRIBUTIONS:
            if len(args) != DISTRIBUTIONS[kind] or not all(_number(a) for a in args):
                problems.append(Problem(w, "%s takes %d numbers, got %s" % (kind, DISTRIBUTIONS[kind], json.dumps(args))))
            elif kind in ("uniform", "loguniform", "quniform", "qloguniform") and args[0] >= args[1]:
                problems.append(Problem(w, "%s's low end must be below its high end" % kind))
            elif kind == "randint" and (not isinstance(args[0], int) or args[0] < 1):
                problems.append(Problem(w, "randint's upper bound must be a whole number from 1"))
        else:
            problems.append(Problem(w, "'%s' is not a distribution (choice, %s)" % (kind, ", ".join(sorted(DISTRIBUTIONS)))))
        if sampling == "Grid" and kind != "choice":
            problems.append(Problem(w, "a Grid sweep takes only choice parameters, got %s" % kind))


def check_sweep(arm, props):
    """Problems with a sweep job beyond the schema (run under arm.lock)."""
    problems = arm._check_compute(props)
    trial = props["trial"]
    p, code = arm._check_code(trial, "properties.trial.codeId")
    problems += p
    problems += arm._check_environment(trial["environmentId"], "properties.trial.environmentId")
    sampling = props["samplingAlgorithm"].get("samplingAlgorithmType")
    check_space(props["searchSpace"], sampling, problems)
    lim = props.get("limits") or {}
    if lim.get("jobLimitsType", "Sweep") != "Sweep":
        problems.append(Problem("properties.limits.jobLimitsType", "must be \"Sweep\" for a Sweep job"))
    for k in ("timeout", "trialTimeout"):
        if lim.get(k) is not None and parse_duration(lim[k]) is None:
            problems.append(Problem("properties.limits." + k, "'%s' is not an ISO-8601 duration" % lim[k]))
    for k in ("maxTotalTrials", "maxConcurrentTrials"):
        if lim.get(k) is not None and lim[k] < 1:
            problems.append(Problem("properties.limits." + k, "must be at least 1, got %d" % lim[k]))
    if sampling != "Grid" and not lim.get("maxTotalTrials"):
        problems.append(Problem("properties.limits.maxTotalTrials", "a %s sweep needs maxTotalTrials" % sampling))
    et = props.get("earlyTermination")
    if et:
        for k in ("evaluationInterval", "delayEvaluation"):
            if et.get(k) is not None and et[k] < 0:
                problems.append(Problem("properties.earlyTermination." + k, "must not be negative"))
        if et.get("policyType") == "Bandit" and et.get("slackFactor") and et.get("slackAmount"):
            problems.append(Problem("properties.earlyTermination", "give slackFactor or slackAmount, not both"))
    space = props["searchSpace"] if isinstance(props["searchSpace"], dict) else {}
    problems += aml_pipeline.binding_problems(trial["command"], "properties.trial.command", {
        "inputs": (props.get("inputs") or {}, "properties.inputs"),
        "outputs": (props.get("outputs") or {}, "properties.outputs"),
        "search_space": (space, "properties.searchSpace")}, "a sweep's trial")
    return problems, code


# -- the trials ------------------------------------------------------------------------------


def _draw(kind, args, rng):
    """One value of a search-space expression: choice, randint, or [q][log]uniform / [q][log]normal
    (the draw, exp() of it for log, rounded to a multiple of args[2] for q)."""
    if kind == "choice":
        return rng.choice(args[0])
    shape = kind[1:] if kind.startswith("q") else kind
    if shape not in ("uniform", "loguniform", "normal", "lognormal"):
        return rng.randrange(args[0])                  # randint: 0 .. upper - 1
    x = rng.gauss(args[0], args[1]) if shape.endswith("normal") else rng.uniform(args[0], args[1])
    if shape.startswith("log"):
        x = math.exp(x)
    return round(x / args[2]) * args[2] if kind != shape else x


def trials_of(props):
    """The trials' values, [{name: value}], in the order they are started."""
    space = props["searchSpace"]
    keys = sorted(space)
    total = (props.get("limits") or {}).get("maxTotalTrials")
    algo = props["samplingAlgorithm"]
    if algo["samplingAlgorithmType"] == "Grid":
        combos = [dict(zip(keys, c)) for c in itertools.product(*(space[k][1][0] for k in keys))]
        return combos[:total] if total else combos
    rng = random.Random(algo.get("seed"))
    return [{k: _draw(space[k][0], space[k][1], rng) for k in keys} for _ in range(total)]


def value_text(v):
    """A value as ${{search_space.X}} puts it in the command."""
    if isinstance(v, str):
        return v
    return json.dumps(v) if isinstance(v, (list, dict)) else repr(v)


def trial_name(sweep, k):
    return "%s_%d" % (sweep, k)


def trial_props(props, name, values):
    """The Command job body (properties) trial `name` runs as."""
    trial = props["trial"]
    command = BINDING.sub(lambda m: value_text(values[m.group(1)[len("search_space."):]])
                          if m.group(1).startswith("search_space.") else m.group(0), trial["command"])
    out = {"jobType": "Command", "command": command, "environmentId": trial["environmentId"],
           "displayName": name, "experimentName": props.get("experimentName", "Default"),
           "tags": dict(props.get("tags") or {}, **{"azureml.sweep": name.rsplit("_", 1)[0],
                                                   "hyperparameters": json.dumps(values, sort_keys=True)})}
    for k in ("codeId", "environmentVariables", "distribution", "resources"):
        if trial.get(k) is not None:
            out[k] = trial[k]
    if props.get("computeId"):
        out["computeId"] = props["computeId"]
    tt = (props.get("limits") or {}).get("trialTimeout")
    if tt:
        out["limits"] = {"jobLimitsType": "Command", "timeout": tt}
    if props.get("inputs"):
        out["inputs"] = props["inputs"]
    outputs = {}
    for k, v in (props.get("outputs") or {}).items():
        v = dict(v)
        if v.get("uri"):
            v["uri"] = v["uri"].replace("${{name}}", name)
        outputs[k] = v
    if outputs:
        out["outputs"] = outputs
    return out


def read_metric(path, metric):
    """The values trial's processes logged for `metric`, in order (by step)."""
    series = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("kind") == "metric" and e.get("key") == metric and _number(e.get("value")):
                    series.append((e.get("step") or 0, e["value"]))
    except OSError:
        return []
    series.sort(key=lambda s: s[0])
    return [v for _, v in series]


class SweepRun(_Run):
    """A sweep job's run: its trials, each a Command job the double makes and runs."""

    def __init__(self, arm, job, jobs_dir):
        super().__init__(arm, job, jobs_dir, "sweep")
        self.jobs_dir = jobs_dir
        self.children = []                # [(name, values)]
        self.stopped = set()              # trials the policy ended

    def _work(self):
        props = self.job.props
        algo = props["samplingAlgorithm"]["samplingAlgorithmType"]
        if algo == "Bayesian":
            raise RunError("the AML double does not run Bayesian sampling (Grid and Random only)")
        todo = trials_of(props)
        at_once = (props.get("limits") or {}).get("maxConcurrentTrials") or len(todo)
        goal, metric = props["objective"]["goal"], props["objective"]["primaryMetric"]
        self.log("[flow-aml-double] sweep: %d trial(s), %d at once, %s %s" % (len(todo), at_once, goal, metric))
        while not self.killed.is_set():
            running = [c for c, _ in self.children if self.job_status(c) not in ("Completed", "Failed", "Canceled")]
            while todo and len(running) < at_once:
                values = todo.pop(0)
                name = trial_name(self.name, len(self.children))
                why = self.arm.create_child_job(name, trial_props(props, name, values))
                if why:
                    raise RunError("trial %s was refused: %s" % (name, why))
                self.children.append((name, values))
                running.append(name)
                self.log("[flow-aml-double] trial %s: %s" % (name, json.dumps(values, sort_keys=True)))
            self._terminate_early(props, running, goal, metric)
            if not todo and not running:
                return self._finish(goal, metric)
            time.sleep(0.05)
        return None

    def _series(self, name, metric):
        return read_metric(os.path.join(self.jobs_dir, name, "mlflow.jsonl"), metric)

    def _terminate_early(self, props, running, goal, metric):
        """The policy, at each evaluation interval, over the primary metric's logged values."""
        et = props.get("earlyTermination")
        if not et:
            return
        interval, delay = et.get("evaluationInterval") or 1, et.get("delayEvaluation") or 0
        better = min if goal == "Minimize" else max
        series = {c: self._series(c, metric) for c, _ in self.children}     # each trial's file read once a look
        for name in running:
            if name in self.stopped:
                continue
            mine = series[name]
            k = len(mine)
            if k == 0 or k < delay or k % interval != 0:       # every multiple of the interval from the delay on
                continue
            others = [s for c, s in series.items() if c != name and len(s) >= k]
            if not others:
                continue
            why = None
            if et["policyType"] == "Bandit":
                best = better(s[k - 1] for s in others)
                if et.get("slackAmount"):
                    limit = best + et["slackAmount"] if goal == "Minimize" else best - et["slackAmount"]
                else:
                    f = et.get("slackFactor") or 0
                    limit = best * (1 + f) if goal == "Minimize" else best / (1 + f)
                if (mine[-1] > limit) if goal == "Minimize" else (mine[-1] < limit):
                    why = "bandit: %g at interval %d is outside the slack of the best, %g" % (mine[-1], k, best)
            elif et["policyType"] == "MedianStopping":
                med = statistics.median(sum(s[:k]) / k for s in others)
                if (better(mine) > med) if goal == "Minimize" else (better(mine) < med):
                    why = "median stopping: best %g is worse than the median %g at interval %d" % (better(mine), med, k)
            else:                                       # TruncationSelection
                pct = et.get("truncationPercentage") or 0
                pool = sorted([s[k - 1] for s in others] + [mine[-1]], reverse=goal == "Minimize")
                cut = int(len(pool) * pct / 100)
                if cut and mine[-1] in pool[:cut]:
                    why = "truncation selection: in the worst %d%% at interval %d" % (pct, k)
            if why:
                self.stopped.add(name)
                self.log("[flow-aml-double] trial %s canceled by the early-termination policy: %s" % (name, why))
                self.cancel_jobs([name])

    def _finish(self, goal, metric):
        best = None
        completed = [name for name, _ in self.children if self.job_status(name) == "Completed"]
        for name in completed:
            s = self._series(name, metric)
            if s and (best is None or (s[-1] < best[1] if goal == "Minimize" else s[-1] > best[1])):
                best = (name, s[-1])
        if not completed:
            raise RunError("no trial completed (%d failed or canceled)" % len(self.children))
        if best:
            self.job.service_properties.update({"best_child_run_id": best[0], "score": repr(best[1]),
                                                "best_metric_status": "Succeeded"})
        self.log("[flow-aml-double] sweep completed; best trial: %s" % (best[0] if best else "none reported " + metric))
        return None

    def _end(self, err):
        self.cancel_jobs(name for name, _ in self.children)
        self.log("[flow-aml-double] sweep %s" % (err or ("killed" if self.killed.is_set() else "completed")))
