"""aml_exec.py — jobs that really run (config execute_jobs, flag --execute-jobs).

A Command job PUT while execute_jobs is true runs on this machine when its
clock reaches Running:
  1. a working directory DIR/jobs/<job>/wd.XXXX is made;
  2. the code snapshot (codeId -> the code version's codeUri -> the blobs under
     that prefix in blob storage) is downloaded into wd/code, keeping relative paths;
  3. each uri_file / uri_folder input (azureml://datastores/<ds>/paths/<p>,
     azureml://jobs/<job>/outputs/<o>, or an https URL on the blob endpoint) is
     downloaded into wd/inputs/<name> (uri_file: a file named after the last
     path segment; uri_folder: the blobs under <p>/); ReadOnlyMount and Download
     behave the same (a mount is a download here);
  4. each output gets wd/outputs/<name> (uri_folder: that empty directory;
     uri_file: a file path inside it, named after the uri's last segment);
  5. ${{inputs.X}} / ${{outputs.X}} in the command become those absolute paths
     (shell-quoted; a literal input becomes its value, as the service does);
  6. the command runs as `/bin/bash -c COMMAND` in wd/code, as N processes (each
     in its own process group), with the double's own environment, then the
     job's environmentVariables, then what Azure ML sets per process:
       PyTorch: N = instanceCount x processCountPerInstance, MASTER_ADDR,
                MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK,
                LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK,
                ROLE_WORLD_SIZE (as flow's local launcher, stdlib/flow/launch.lua
                pytorch_ranks, sets them);
       Mpi:     N likewise, OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE,NODE_RANK}
                and PMI_RANK/PMI_SIZE (no MPI runtime is started: the ranks are
                plain processes);
       TensorFlow: workerCount (default instanceCount) workers then
                parameterServerCount ps, each with TF_CONFIG (launch.lua
                tensorflow_ranks);
       none:    1 process;
     and AZUREML_RUN_ID=<job name> for all.  stdout and stderr go to the job's
     std_log.txt (DIR/jobs/<job>/std_log.txt, served at
     /_double/jobs/<job>/std_log.txt), each line prefixed "[rank R] " when N > 1;
  7. the job stays Running while they run.  A process exiting non-zero: the
     others are killed and the job is Failed, the message carrying the exit
     status and the last lines of that process's stderr.  All exit 0: every
     output is uploaded to its uri (uri_folder: each file as <p>/<relpath>;
     uri_file: the file as the blob <p>; an output without uri goes to
     azureml://datastores/workspaceblobstore/paths/azureml/<job>/<output>/), an
     upload failure fails the job, then Finalizing -> Completed on the clock.
Cancel, limits.timeout, a force to another status, DELETE of the job, a reset
and the double's shutdown kill the processes (SIGTERM to the group, SIGKILL 2 s
later).  The working directory is removed when the run ends unless
keep_job_dirs is true.  Every "node" is this machine: no GPUs, containers or
environment images are involved (environmentId is only checked, not used).
"""
import collections
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse

BINDING = re.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z0-9_]+)\s*\}\}")
TAIL_LINES = 20


MLFLOW_DOUBLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mlflow_double")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_environments(props):
    """One dict of environment variables per process, in global rank order."""
    res = props.get("resources") or {}
    dist = props.get("distribution") or {}
    nodes = res.get("instanceCount") or 1
    dt = dist.get("distributionType")
    if dt == "PyTorch":
        # mirrors stdlib/flow/launch.lua pytorch_ranks
        ppn = dist.get("processCountPerInstance") or 1
        port = str(free_port())
        envs = []
        for node in range(nodes):
            for lr in range(ppn):
                rank = node * ppn + lr
                envs.append({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": nodes * ppn,
                             "RANK": rank, "LOCAL_RANK": lr, "NODE_RANK": node, "LOCAL_WORLD_SIZE": ppn,
                             "GROUP_RANK": node, "GROUP_WORLD_SIZE": nodes, "ROLE_RANK": rank,
                             "ROLE_WORLD_SIZE": nodes * ppn})
    elif dt == "Mpi":
        ppn = dist.get("processCountPerInstance") or 1
        envs = []
        for node in range(nodes):
            for lr in range(ppn):
                rank = node * ppn + lr
                envs.append({"OMPI_COMM_WORLD_RANK": rank, "OMPI_COMM_WORLD_SIZE": nodes * ppn,
                             "OMPI_COMM_WORLD_LOCAL_RANK": lr, "OMPI_COMM_WORLD_LOCAL_SIZE": ppn,
                             "OMPI_COMM_WORLD_NODE_RANK": node, "PMI_RANK": rank, "PMI_SIZE": nodes * ppn})
    elif dt == "TensorFlow":
        # mirrors stdlib/flow/launch.lua tensorflow_ranks
        workers = ["127.0.0.1:%d" % free_port() for _ in range(dist.get("workerCount") or nodes)]
        ps = ["127.0.0.1:%d" % free_port() for _ in range(dist.get("parameterServerCount") or 0)]
        cluster = {"worker": workers}
        if ps:
            cluster["ps"] = ps
        envs = [{"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": kind, "index": i},
                                          "environment": "cloud"})}
                for kind, n in (("worker", len(workers)), ("ps", len(ps))) for i in range(n)]
    else:
        envs = [{}]
    return [{k: str(v) for k, v in e.items()} for e in envs]


class RunError(Exception):
    pass


class _Run:
    """What a job's run is to the clock (aml_jobs.Job.advance reads done_at and
    error) and to the control API (its directory, log and processes)."""

    def __init__(self, arm, job, jobs_dir, kind):
        self.arm = arm
        self.job = job
        self.name = job.name
        self.kind = kind                  # "job" or "pipeline", for messages
        self.home = os.path.join(jobs_dir, job.name)
        os.makedirs(self.home, exist_ok=True)
        self.log_path = os.path.join(self.home, "std_log.txt")
        open(self.log_path, "w").close()
        self.wd = None
        self.error = None                 # why it failed (the job's error message)
        self.done_at = None               # when it ended (processes and uploads)
        self.procs = []
        self.killed = threading.Event()
        self._log_lock = threading.Lock()
        self.thread = threading.Thread(target=self._main, name=kind + "-" + job.name, daemon=True)

    def start(self):
        self.thread.start()

    def kill(self):
        """Ends the run (cancel, timeout, shutdown)."""
        self.killed.set()

    def _main(self):
        """The run's thread: _work, then _end; a RunError is the job's failure."""
        err = None
        try:
            err = self._work()
        except RunError as e:
            err = str(e)
        except Exception as e:          # a bug in the double: fail the job, say so
            import traceback
            traceback.print_exc()
            err = "the AML double failed to run the %s: %r" % (self.kind, e)
        finally:
            self._end(err)
            self.error = err
            self.done_at = time.time()

    def job_status(self, name):
        """The status of job `name` (a child this run made) now, or None."""
        with self.arm.lock:
            child = self.arm.jobs.get(name) if name else None
            if child is None:
                return None
            child.advance(time.time())
            return child.status

    def cancel_jobs(self, names):
        """Cancels the jobs named (children this run made) that have not ended."""
        with self.arm.lock:
            for name in names:
                child = self.arm.jobs.get(name)
                if child is not None:
                    child.cancel(time.time())

    def log(self, line):
        with self._log_lock, open(self.log_path, "ab") as f:
            f.write((line.rstrip("\n") + "\n").encode("utf-8", "replace"))

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


class JobRun(_Run):
    """One execution of a job's command."""

    def __init__(self, arm, job, jobs_dir):
        super().__init__(arm, job, jobs_dir, "job")
        self.blob = arm.blob
        self.props = job.props
        self.keep = bool(arm.cfg["keep_job_dirs"])
        self._plock = threading.Lock()

    # -- the run ---------------------------------------------------------------------

    def _work(self):
        self.wd = tempfile.mkdtemp(prefix="wd.", dir=self.home)
        self.log("[flow-aml-double] executing job %s in %s" % (self.name, self.wd))
        cmd, outputs = self._prepare()
        err = None
        if not self.killed.is_set():
            err = self._run(cmd)
        if err is None and not self.killed.is_set():
            self._upload(outputs)
        return err

    def _end(self, err):
        self._kill_all()
        if err:
            self.log("[flow-aml-double] run failed: %s" % err)
        else:
            self.log("[flow-aml-double] run %s" % ("killed" if self.killed.is_set() else "succeeded"))
        if self.wd and not self.keep:
            shutil.rmtree(self.wd, ignore_errors=True)

    # -- storage locations -------------------------------------------------------------

    def _locate(self, uri, what, depth=0):
        """(container, path) in the blob store for a data URI, or RunError."""
        dp = re.match(r"^azureml://datastores/([^/]+)/paths/(.*)$", uri or "")
        if dp:
            if dp.group(1) not in self.arm.cfg["datastores"]:
                raise RunError("%s: datastore '%s' not found" % (what, dp.group(1)))
            return self.arm.datastore_container(dp.group(1)), dp.group(2)
        jo = re.match(r"^azureml://jobs/([^/]+)/outputs/([^/]+)(?:/paths/(.*))?$", uri or "")
        if jo and depth < 4:
            with self.arm.lock:
                other = self.arm.jobs.get(jo.group(1))
                out = ((other.props.get("outputs") or {}).get(jo.group(2)) or {}) if other else None
            if out is None:
                raise RunError("%s: job '%s' does not exist" % (what, jo.group(1)))
            base = out.get("uri") or default_output_uri(jo.group(1), jo.group(2))
            c, p = self._locate(base, what, depth + 1)
            if jo.group(3):
                p = p.rstrip("/") + "/" + jo.group(3) if p else jo.group(3)
            return c, p
        ep = (self.blob.endpoint or "") + "/"
        if self.blob.endpoint and (uri or "").startswith(ep):
            rest = urllib.parse.unquote(urllib.parse.urlsplit(uri).path)[len(urllib.parse.urlsplit(ep).path):]
            c, _, p = rest.partition("/")
            return c, p
        raise RunError("%s: the double cannot fetch '%s' (it reads azureml://datastores/..., azureml://jobs/... "
                       "and URLs on its blob endpoint)" % (what, uri))

    def _download_prefix(self, container, prefix, dest, what):
        names = self.blob.list_blobs(prefix, container)
        if names is None:
            raise RunError("%s: blob storage could not be listed" % what)
        n = 0
        for name in names:
            rel = name[len(prefix):]
            if not rel or rel.endswith("/"):
                continue
            if any(seg in ("", ".", "..") for seg in rel.split("/")):
                raise RunError("%s: blob name '%s' cannot be a file path" % (what, name))
            path = os.path.join(dest, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            why = self.blob.get_to_file(name, path, container)
            if why:
                raise RunError("%s: %s" % (what, why))
            n += 1
        return n

    def _prepare(self):
        """Downloads code and inputs, makes output places; returns (command, [(output, local, container, path)])."""
        code_dir = os.path.join(self.wd, "code")
        os.makedirs(code_dir)
        code_uri = getattr(self.job, "code_uri", None)
        if code_uri:
            c, p = self._locate(code_uri, "code snapshot %s" % code_uri)
            prefix = p.strip("/") + "/" if p.strip("/") else ""
            n = self._download_prefix(c, prefix, code_dir, "code snapshot %s" % code_uri)
            self.log("[flow-aml-double] code snapshot %s: %d file(s) in %s" % (code_uri, n, code_dir))
        paths = {}
        for k, inp in (self.props.get("inputs") or {}).items():
            t = inp.get("jobInputType")
            if t == "literal":
                paths[("inputs", k)] = inp.get("value", "")
                continue
            what = "input '%s' (%s %s)" % (k, t, inp.get("uri"))
            c, p = self._locate(inp.get("uri"), what)
            dest = os.path.join(self.wd, "inputs", k)
            os.makedirs(dest)
            if t == "uri_file":
                if p.endswith("/") or not p:
                    raise RunError("%s: a uri_file input must name a file, not a folder" % what)
                local = os.path.join(dest, p.rsplit("/", 1)[-1])
                why = self.blob.get_to_file(p, local, c)
                if why:
                    raise RunError("%s: the data was not found or could not be read: %s" % (what, why))
            else:
                prefix = p.rstrip("/") + "/" if p.strip("/") else ""
                if self._download_prefix(c, prefix, dest, what) == 0:
                    raise RunError("%s: the data was not found: no blob under '%s' in container %s" % (
                        what, prefix, c))
                local = dest
            self.log("[flow-aml-double] input %s: %s -> %s" % (k, inp.get("uri"), local))
            paths[("inputs", k)] = shlex.quote(local)
        outputs = []
        for k, out in (self.props.get("outputs") or {}).items():
            t = out.get("jobOutputType")
            uri = out.get("uri") or default_output_uri(self.name, k)
            c, p = self._locate(uri, "output '%s' (%s %s)" % (k, t, uri))
            dest = os.path.join(self.wd, "outputs", k)
            os.makedirs(dest)
            if t == "uri_file":
                if not p or p.endswith("/"):
                    p = p + k
                local = os.path.join(dest, p.rsplit("/", 1)[-1])
            else:
                local = dest
            outputs.append((k, t, local, c, p, uri))
            paths[("outputs", k)] = shlex.quote(local)
        cmd = BINDING.sub(lambda m: paths.get((m.group(1), m.group(2)), m.group(0)), self.props["command"])
        self.log("[flow-aml-double] resolved command: %s" % cmd)
        return cmd, outputs

    def _run(self, cmd):
        envs = rank_environments(self.props)
        n = len(envs)
        base = dict(os.environ)
        base.update(self.props.get("environmentVariables") or {})
        base["AZUREML_RUN_ID"] = self.name
        # MLflow, as a job's environment has it tracked: the stand-in module
        # writes what the processes log where the run (a sweep) reads it
        base["PYTHONPATH"] = os.pathsep.join(p for p in (MLFLOW_DOUBLE, base.get("PYTHONPATH")) if p)
        base["FLOW_DOUBLE_MLFLOW_LOG"] = os.path.join(self.home, "mlflow.jsonl")
        tails = [collections.deque(maxlen=TAIL_LINES) for _ in envs]
        readers = []
        self.log("[flow-aml-double] starting %d process(es): /bin/bash -c <command> in %s" % (
            n, os.path.join(self.wd, "code")))
        with self._plock:
            if self.killed.is_set():
                return None
            for rank, extra in enumerate(envs):
                env = dict(base, **extra)
                p = subprocess.Popen(["/bin/bash", "-c", cmd], cwd=os.path.join(self.wd, "code"), env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
                self.procs.append(p)
                prefix = "[rank %d] " % rank if n > 1 else ""
                for stream, tail in ((p.stdout, None), (p.stderr, tails[rank])):
                    t = threading.Thread(target=self._pump, args=(stream, prefix, tail), daemon=True)
                    t.start()
                    readers.append(t)
        failed = None
        while True:
            codes = [p.poll() for p in self.procs]
            bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if bad or self.killed.is_set():
                failed = bad[0] if bad else None
                self._kill_all()
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(0.05)
        for t in readers:
            t.join(5)
        if failed is None:
            return None
        code = self.procs[failed].returncode
        status = "status code %d" % code if code >= 0 else "signal %d" % -code
        tail = "\n".join(tails[failed])
        return ("Execution failed. User process '/bin/bash' (rank %d of %d) exited with %s. Please check log file "
                "'user_logs/std_log.txt' for error details. Error: %s" % (failed, n, status, tail or "(no stderr)"))

    def _pump(self, stream, prefix, tail):
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if tail is not None:
                tail.append(line)
            self.log(prefix + line)
        stream.close()

    def _upload(self, outputs):
        for k, t, local, c, p, uri in outputs:
            if t == "uri_file":
                if not os.path.isfile(local):
                    raise RunError("output '%s' (uri_file %s): the command wrote no file at %s" % (k, uri, local))
                files = [(local, p)]
            else:
                prefix = p.rstrip("/") + "/" if p.strip("/") else ""
                files = []
                for root, _, names in os.walk(local):
                    for fn in sorted(names):
                        full = os.path.join(root, fn)
                        files.append((full, prefix + os.path.relpath(full, local).replace(os.sep, "/")))
            for full, name in files:
                why = self.blob.put_from_file(name, full, c)
                if why:
                    raise RunError("output '%s': upload to %s failed: %s" % (k, uri, why))
            self.log("[flow-aml-double] output %s: %d file(s) -> %s" % (k, len(files), uri))

    # -- stopping --------------------------------------------------------------------

    def kill(self):
        """Ends the run: SIGTERM to each process group, SIGKILL 2 s later."""
        super().kill()
        self._kill_all()

    def _kill_all(self):
        with self._plock:
            live = [p for p in self.procs if p.poll() is None]
            for p in live:
                _signal_group(p, signal.SIGTERM)
            deadline = time.time() + 2
            for p in live:
                try:
                    p.wait(max(0.0, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    pass
            for p in live:
                _signal_group(p, signal.SIGKILL)      # the leader or what it left behind
                if p.poll() is None:
                    p.wait()


class PipelineRun(_Run):
    """A pipeline job's run (aml_pipeline): its children, each a Command job the
    double makes and runs once the jobs it reads from have Completed.  Ends
    when all Completed, or when one ends otherwise (the others are canceled:
    continue_on_step_failure is false)."""

    def __init__(self, arm, job, jobs_dir):
        super().__init__(arm, job, jobs_dir, "pipeline")
        self.children = {}                # key -> child job name

    def _work(self):
        import aml_pipeline
        deps = aml_pipeline.deps_of(self.job.props)
        while not self.killed.is_set():
            for key in deps:
                if key not in self.children and all(self._status(d) == "Completed" for d in deps[key]):
                    name = aml_pipeline.child_name(self.name, key)
                    with self.arm.lock:
                        props = aml_pipeline.child_props(self.arm, self.name, key)
                    why = self.arm.create_child_job(name, props)
                    if why:
                        raise RunError("child job %s (%s) was refused: %s" % (name, key, why))
                    self.children[key] = name
                    self.log("[flow-aml-double] child job %s (%s) submitted" % (name, key))
            ended = {k: self._status(k) for k in self.children}
            bad = [k for k, st in ended.items() if st in ("Failed", "Canceled")]
            if bad:
                with self.arm.lock:
                    child = self.arm.jobs.get(self.children[bad[0]])
                    msg = (child.error or {}).get("message") if child else None
                raise RunError("child job %s (%s) %s%s" % (self.children[bad[0]], bad[0], ended[bad[0]],
                                                           ": " + msg if msg else ""))
            if len(ended) == len(deps) and all(st == "Completed" for st in ended.values()):
                return None
            time.sleep(0.05)
        return None

    def _end(self, err):
        self.cancel_jobs(self.children.values())
        self.log("[flow-aml-double] pipeline %s" % (err or ("killed" if self.killed.is_set() else "completed")))

    def _status(self, key):
        return self.job_status(self.children.get(key))


def _signal_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def default_output_uri(job, output):
    return "azureml://datastores/workspaceblobstore/paths/azureml/%s/%s/" % (job, output)


class Runner:
    """Starts a run when an executing job's clock reaches Running; kills it when the job leaves Running."""

    def __init__(self, arm, jobs_dir):
        self.arm = arm
        self.jobs_dir = jobs_dir
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="job-runner", daemon=True)

    def start(self):
        self.thread.start()

    def _loop(self):
        while not self.stop_event.wait(0.05):
            try:
                self.tick()
            except Exception:
                import traceback
                traceback.print_exc()

    def tick(self):
        try:
            jobs = list(self.arm.jobs.values())
        except RuntimeError:            # changed while copied: look again under the lock
            jobs = [None]
        if not any(j is None or j.execute for j in jobs):
            return                      # nothing to run: stay off the lock
        now = time.time()
        with self.arm.lock:
            for job in list(self.arm.jobs.values()):
                if not job.execute:
                    continue
                if job.run is None:
                    job.advance(now)
                    if job.status == "Running":
                        import aml_sweep
                        kind = {"Pipeline": PipelineRun, "Sweep": aml_sweep.SweepRun}.get(job.props["jobType"], JobRun)
                        job.run = kind(self.arm, job, self.jobs_dir)
                        job.run.start()
                elif job.run.done_at is None:
                    job.advance(now)
                    if job.status != "Running" and not job.run.killed.is_set():
                        threading.Thread(target=job.run.kill, daemon=True).start()

    def shutdown(self):
        self.stop_event.set()
        with self.arm.lock:
            runs = [j.run for j in self.arm.jobs.values() if getattr(j, "run", None) is not None]
        for r in runs:
            r.kill()
        for r in runs:
            r.thread.join(10)
