"""mlflow — the AML double's stand-in for the MLflow tracking a job's
environment has on Azure ML (azureml-mlflow: MLFLOW_TRACKING_URI set by the
service).  The executor puts this folder on a job's PYTHONPATH; what the
processes log is appended, one JSON object a line, to $FLOW_DOUBLE_MLFLOW_LOG,
where the double reads a sweep trial's primary metric.

Only the tracking calls a training script makes are here (log_metric,
log_metrics, log_param, log_params, set_tag, set_tags, start_run, end_run,
active_run); anything else fails loudly rather than pretending.
"""
import json
import math
import os
import threading
import time

__version__ = "0+flow-aml-double"
_lock = threading.Lock()
_run = None


def _write(entry):
    path = os.environ.get("FLOW_DOUBLE_MLFLOW_LOG")
    if not path:
        raise RuntimeError("mlflow (AML double): FLOW_DOUBLE_MLFLOW_LOG is not set; this module runs only in the "
                           "double's jobs")
    entry["time"] = time.time()
    with _lock, open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


def _number(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("mlflow: %s must be a number, got %r" % (what, value))
    return float(value)


def log_metric(key, value, step=None, timestamp=None, **_):
    v = _number(value, "metric '%s'" % key)
    if math.isnan(v):
        raise ValueError("mlflow: metric '%s' is NaN" % key)
    _write({"kind": "metric", "key": str(key), "value": v, "step": int(step or 0)})


def log_metrics(metrics, step=None, **_):
    for k, v in metrics.items():
        log_metric(k, v, step=step)


def log_param(key, value):
    _write({"kind": "param", "key": str(key), "value": str(value)})
    return value


def log_params(params):
    for k, v in params.items():
        log_param(k, v)


def set_tag(key, value):
    _write({"kind": "tag", "key": str(key), "value": str(value)})


def set_tags(tags):
    for k, v in tags.items():
        set_tag(k, v)


class ActiveRun:
    def __init__(self):
        self.info = type("RunInfo", (), {"run_id": os.environ.get("AZUREML_RUN_ID", "local")})()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        end_run()
        return False


def start_run(*_, **__):
    global _run
    _run = ActiveRun()
    return _run


def end_run(*_, **__):
    global _run
    _run = None


def active_run():
    return _run
