"""aml_jobs.py — a job's life on the double's clock.

  NotStarted -> Queued -> Preparing -> Running -> Finalizing -> Completed
each phase lasting config phase_seconds (or phases[status]); a cancel moves a
live job to CancelRequested and, cancel_seconds later, to Canceled.  What can
change the course:
  - FLOW_DOUBLE_OUTCOME=Failed in properties.tags or environmentVariables, or
    POST /_double/jobs/{name}/outcome {"status": "Failed"}: Running -> Failed;
  - FLOW_DOUBLE_RUNNING_SECONDS=N (tags or environmentVariables): Running lasts N s;
  - POST /_double/jobs/{name}/hold: the job stays Running until .../release;
  - POST /_double/jobs/{name}/force {"status": S}: S now, and the clock stops
    (until another force; a terminal S ends the job);
  - problems only a real run would find (an empty code snapshot, an input that
    names a job output that does not exist): Preparing -> Failed;
  - limits.timeout: Running longer than that -> Canceled;
  - execute_jobs (aml_exec.py): the job's command really runs; Running lasts
    until its processes end (and outputs are uploaded), then Finalizing, or
    Failed with the run's error.
Transitions are applied lazily, each at the time it was due, so history
timestamps are exact whenever the job is looked at.
"""
import math
import re

PHASES = ["NotStarted", "Queued", "Preparing", "Running", "Finalizing"]
TERMINAL = {"Completed", "Failed", "Canceled"}
ALL_STATUSES = ["NotStarted", "Starting", "Provisioning", "Preparing", "Queued", "Running", "Finalizing",
                "CancelRequested", "Completed", "Failed", "Canceled", "NotResponding", "Paused", "Unknown"]

_DURATION = re.compile(r"^P(?!$)(?:(\d+)D)?(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def parse_duration(s):
    """ISO-8601 duration as the service takes it (days, hours, minutes, seconds) -> seconds, or None."""
    m = _DURATION.match(s or "")
    if not m:
        return None
    d, h, mi, sec = m.groups()
    return int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60 + float(sec or 0)


def control_value(props, name):
    """A FLOW_DOUBLE_* knob from tags or environmentVariables."""
    for where in ("tags", "environmentVariables"):
        v = (props.get(where) or {}).get(name)
        if v is not None:
            return v
    return None


class Job:
    def __init__(self, name, props, now, cfg, runtime_problems=(), snapshot=None):
        self.name = name
        self.props = props                  # the request's properties, as sent (tags/isArchived updated)
        self.created = now
        self.modified = now
        self.cfg = cfg
        self.status = "NotStarted"
        self.since = now
        self.history = [("NotStarted", now)]
        self.hold = False
        self.released_at = None
        self.frozen = False
        self.cancel_done_at = None
        self.error = None
        self.runtime_problems = list(runtime_problems)
        self.snapshot = snapshot            # (codeUri, [blob names]) when known
        self.outcome = None
        if control_value(props, "FLOW_DOUBLE_OUTCOME") == "Failed":
            self.outcome = ("Failed", "FLOW_DOUBLE_OUTCOME=Failed asked for a failure")
        rs = control_value(props, "FLOW_DOUBLE_RUNNING_SECONDS")
        self.running_seconds = float(rs) if rs and re.match(r"^\d+(\.\d+)?$", rs) else None
        lim = props.get("limits") or {}
        self.timeout = parse_duration(lim.get("timeout")) if lim.get("timeout") else None
        # a run of the command (aml_exec.JobRun), for jobs PUT while execute_jobs is on
        self.execute = bool(cfg["execute_jobs"]) and props.get("jobType") in ("Command", "Pipeline", "Sweep")
        self.run = None
        # what the service adds to properties.properties as the job runs (a sweep's best trial)
        self.service_properties = {}

    # -- the clock ---------------------------------------------------------

    def _set(self, status, t):
        self.status = status
        self.since = t
        self.history.append((status, t))

    def _duration(self, status):
        if status == "Running" and self.running_seconds is not None:
            return self.running_seconds
        return self.cfg.phase_duration(status)

    def advance(self, now):
        while not self.frozen and self.status not in TERMINAL:
            if self.status == "CancelRequested":
                if now < self.cancel_done_at:
                    return
                self._set("Canceled", self.cancel_done_at)
                continue
            if self.status not in PHASES:
                return
            end = self.since + self._duration(self.status)
            if self.status == "Running":
                if self.execute:
                    end = self.since
                if self.hold:
                    end = math.inf
                elif self.released_at is not None:
                    end = max(self.since, self.released_at)
                if self.execute:          # Running lasts as long as the processes (and uploads)
                    done = self.run.done_at if self.run is not None else None
                    end = max(end, done) if done is not None else math.inf
                if self.timeout is not None and self.since + self.timeout < end:
                    t = self.since + self.timeout
                    if now < t:
                        return
                    self.error = {"code": "JobTimeout",
                                  "message": "The job ran longer than its limits.timeout (%s) and was canceled."
                                             % self.props["limits"]["timeout"]}
                    self._set("Canceled", t)
                    return
            if now < end:
                return
            if self.status == "Preparing" and self.runtime_problems:
                self.error = {"code": "UserError", "message": "; ".join(self.runtime_problems)}
                self._set("Failed", end)
            elif self.status == "Running" and self.execute and self.run.error:
                self.error = {"code": "UserError", "message": self.run.error}
                self._set("Failed", end)
            elif self.status == "Running" and self.outcome and self.outcome[0] == "Failed":
                self.error = {"code": "UserError", "message": self.outcome[1]}
                self._set("Failed", end)
            elif self.status == "Finalizing":
                self._set("Completed", end)
            else:
                self._set(PHASES[PHASES.index(self.status) + 1], end)

    # -- what tests and clients do to it --------------------------------------

    def cancel(self, now):
        """False if the job had already ended."""
        self.advance(now)
        if self.status in TERMINAL:
            return False
        if self.status != "CancelRequested":
            self.frozen = False
            self._set("CancelRequested", now)
            self.cancel_done_at = now + float(self.cfg["cancel_seconds"])
        return True

    def force(self, status, now):
        self.advance(now)
        self.frozen = status not in TERMINAL
        self._set(status, now)
        if status == "Failed" and not self.error:
            self.error = {"code": "UserError", "message": "forced to Failed by /_double/jobs/%s/force" % self.name}

    def set_outcome(self, status, message, now):
        self.advance(now)
        if self.status in TERMINAL:
            return False
        self.outcome = (status, message or "failure asked for by /_double/jobs/%s/outcome" % self.name)
        return True

    def set_hold(self, hold, now):
        self.advance(now)
        if self.status in TERMINAL:
            return False
        self.hold = hold
        if not hold:
            self.released_at = now
        return True
