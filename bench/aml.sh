#!/usr/bin/env bash
# bench/aml.sh — issue 13: N Azure ML command jobs, flow beside the Azure ML Python SDK.
#
#   bench/aml.sh            N = 10, 100, 300; writes bench/work/aml-RESULTS.md (this section alone)
#   bench/aml.sh --quick    a smoke test at N = 5, 10, 20 (about 30 s)
#
# Both tools submit N command jobs to the loopback Azure ML double
# (tests/aml/double.py, blobs in Azurite) and wait until every one is
# Completed: `flow run --env prod` on a generated project, and
# bench/aml_sdk/submit.py (MLClient.jobs.create_or_update N times, then
# ml_client.jobs.get until Completed).  Alternating rounds, median wall time,
# largest peak RSS, every round checked against the double's request log.
# bench/run.sh (`make bench`) runs it with BENCH_AML_RESULTS and
# BENCH_AML_MACHINE set: the rows and machine lines then go there, and
# run.sh's report has them.  Knobs: BENCH_AML_SIZES, BENCH_AML_REPS,
# BENCH_AML_PHASE, BENCH_AML_POLL, BENCH_AML_LIMIT, BENCH_WORK, FLOW; see bench/README.md.
set -uo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
QUICK=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/aml.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

say() { printf '%s\n' "bench: $*" >&2; }
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_num() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }

if [ $QUICK -eq 1 ]; then D_SIZES="5 10 20" D_REPS=2; else D_SIZES="10 100 300" D_REPS=3; fi
WORK=${BENCH_WORK:-$HERE/work}
FLOW=${FLOW:-$ROOT/flow}
SIZES=${BENCH_AML_SIZES:-$D_SIZES}    # the N of each row; the middle one is the target's (100)
REPS=${BENCH_AML_REPS:-$D_REPS}       # alternating rounds: flow, SDK, flow, SDK, ...
PHASE=${BENCH_AML_PHASE:-0.01}        # seconds of each of a job's 5 phases on the double (0.05 s a job)
POLL=${BENCH_AML_POLL:-0.1}           # seconds between status requests, both tools
LIMIT=${BENCH_AML_LIMIT:-600}         # seconds, per run (timeout)
NESTED=0                              # run by bench/run.sh: rows and machine lines go to its files
[ -n "${BENCH_AML_RESULTS:-}" ] && NESTED=1
AW=$WORK/aml
PY=/usr/bin/python3                   # Debian's: python3-azure, jsonschema, cryptography
SDK_DRIVER=$HERE/aml_sdk/submit.py
SDK_NAME=azure-ai-ml

read -ra NS <<<"$SIZES"
for v in "${NS[@]}" "$REPS" "$LIMIT"; do
  is_uint "$v" && [ "$v" -gt 0 ] || { say "BENCH_AML_SIZES must be positive numbers, BENCH_AML_REPS and BENCH_AML_LIMIT positive integers"; exit 2; }
done
is_num "$PHASE" && is_num "$POLL" || { say "BENCH_AML_PHASE and BENCH_AML_POLL must be numbers of seconds"; exit 2; }
[ ${#NS[@]} -gt 0 ] || { say "BENCH_AML_SIZES is empty"; exit 2; }

mkdir -p "$WORK"
if [ $NESTED -eq 0 ]; then
  exec 9>"$WORK/.lock"
  flock -n 9 || { say "another benchmark is using ${WORK#$ROOT/}: wait for it to finish"; exit 2; }
fi
RESULTS=${BENCH_AML_RESULTS:-$AW/results.tsv}
MACHINE=${BENCH_AML_MACHINE:-$AW/machine.tsv}
REPORT=${BENCH_AML_REPORT:-$WORK/aml-RESULTS.md}
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES GNUMAKEFLAGS

# The files of an earlier (interrupted) run go; this run's go at exit, with
# the double and Azurite.
rm -rf "${AW:?}"
mkdir -p "$AW/logs" "$AW/bin"
[ $NESTED -eq 1 ] || : >"$RESULTS"
# section  tool  n  wall_s (median)  rss_kb (max)  runs  walls (every run, in order)  note
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RESULTS"; }
machine() { printf '%s\t%s\n' "$1" "$2" >>"$MACHINE"; }
not_run() {      # not_run WHY: rows saying so, then the report (standalone) and exit 0
  say "Azure ML rows: $1"
  for n in "${NS[@]}"; do record aml flow "$n" "" "" 0 "" "$1"; done
  finish; exit 0
}
finish() {
  [ $NESTED -eq 1 ] && return
  "$PY" "$HERE/report.py" "$RESULTS" "$MACHINE" "$REPORT" >/dev/null && say "written to ${REPORT#$ROOT/}"
}

if [ $NESTED -eq 0 ]; then
  : >"$MACHINE"
  machine date "$(date -u '+%Y-%m-%d %H:%M UTC')"
  machine nproc "$(nproc)"
  machine cpu "$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
  machine memory "$(awk '/^MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  machine kernel "$(uname -srm)"
  machine os "$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || echo unknown)"
  machine "load average at start" "$(cut -d' ' -f1-3 /proc/loadavg)"
fi

# ---------------------------------------------------------------- flow, the SDK, the double
[ -x "$FLOW" ] || { say "no flow binary at $FLOW (run 'make flow' first, or 'make bench')"; exit 2; }
if ldd "$FLOW" 2>/dev/null | grep -q -e libasan -e libubsan; then
  say "$FLOW is a sanitizer build (libasan): rebuild the normal one ('make') before benchmarking"; exit 2
fi
FLOW_SRC=$FLOW
if [ $NESTED -eq 0 ]; then     # time one binary, even if ./flow is rebuilt meanwhile (run.sh made its copy)
  cp "$FLOW" "$AW/bin/flow" || exit 2
  FLOW=$AW/bin/flow
  machine flow "$("$FLOW" --version 2>&1 | head -n 1), ${FLOW_SRC#$ROOT/}, sha256 $(sha256sum "$FLOW" | cut -c1-12), git HEAD $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- . ':!bench' 2>/dev/null || echo ' with uncommitted changes')"
fi
[ -x /usr/bin/time ] || { say "GNU time (/usr/bin/time) is needed for peak RSS"; exit 2; }

# shellcheck source=../tests/aml/double_lib.sh
source "$ROOT/tests/aml/double_lib.sh"
aml_double_available || not_run "not run: the Azure ML double needs $PY with python3-jsonschema and python3-cryptography, openssl and curl (make test-deps)"
SDK_OK=1 SDK_NOTE=""
if ! "$PY" -I -B -c "import sys; sys.path.insert(0, '$HERE/aml_sdk'); import azure.ai.ml, azure.identity" >"$AW/logs/sdk-import.txt" 2>&1; then
  SDK_OK=0 SDK_NOTE="not installed: $PY cannot import azure.ai.ml (python3-azure; make deps): $(tail -n 1 "$AW/logs/sdk-import.txt")"
  say "$SDK_NOTE"
fi
SDK_VERSION=$("$PY" -I -B -c "import sys; sys.path.insert(0, '$HERE/aml_sdk'); import azure.ai.ml as m, azure.identity as i, azure.core as c, msal; print('azure-ai-ml %s, azure-identity %s, azure-core %s, msal %s' % (m.__version__, i.__version__, c.__version__, msal.__version__))" 2>/dev/null || echo "not installed")
machine "$SDK_NAME" "$SDK_VERSION (Debian python3-azure $(dpkg-query -W -f '${Version}' python3-azure 2>/dev/null || echo '?')), $("$PY" --version 2>&1) ($PY); pydash: the stand-in bench/aml_sdk/pydash"

# waited CMD...: CMD under `timeout $LIMIT`, in the background and waited for,
# so that a signal to this script is acted on at once (GNU time ignores SIGINT,
# and timeout runs in a process group of its own): the trap stops the child
# (timeout passes the TERM to its whole group).  Sets RC.
CHILD=""
waited() {
  timeout "$LIMIT" "$@" &
  CHILD=$!
  wait "$CHILD"
  RC=$?
  CHILD=""
}

cleanup() {      # the processes, and the trees; the request log stays in logs/ (bench/work is ignored)
  if [ -n "$CHILD" ]; then kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null; CHILD=""; fi
  aml_double_stop
  azurite_stop
  [ -f "$AW/double/requests.jsonl" ] && mv -f "$AW/double/requests.jsonl" "$AW/logs/double-requests.jsonl"
  rm -rf "${AW:?}/proj" "${AW:?}/azurite" "${AW:?}/double" "${AW:?}/bin" "${AW:?}/.time"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "Azure ML: starting Azurite and the double (phases of $PHASE s)"
azurite_start "$AW/azurite" >"$AW/logs/azurite-start.txt" 2>&1 ||
  not_run "not run: Azurite did not start (tools/azurite.sh; $(tail -n 1 "$AW/logs/azurite-start.txt"))"
aml_double_start "$AW/double" --phase-seconds "$PHASE" --blob-endpoint "$AZURITE_BLOB_ENDPOINT" >"$AW/logs/double-start.txt" 2>&1 ||
  not_run "not run: the double did not start ($(tail -n 1 "$AW/logs/double-start.txt"))"
trap cleanup EXIT            # aml_double_start set its own
AZURITE_VERSION=$("$("$ROOT/tools/azurite.sh" 2>/dev/null)" --version 2>/dev/null || echo '?')
machine "Azure ML double" "tests/aml/double.py (strict: every body against the 2024-10-01 schema), HTTPS on loopback, jobs NotStarted → Queued → Preparing → Running → Finalizing → Completed, $PHASE s each; blobs in Azurite $AZURITE_VERSION"
machine "Azure ML settings" "N = ${NS[*]} jobs; $REPS alternating rounds each; status polled every $POLL s by both tools; $LIMIT s limit per run$([ $QUICK -eq 1 ] && echo '; --quick (smoke test)')"
machine "Azure ML job clock" "5 phases × $PHASE s on the double, status polled every $POLL s"

# ---------------------------------------------------------------- the project
# One project for every N (the number of jobs comes from FLOW_BENCH_JOBS), so
# its code snapshot is the same all along: registered once by the warm-up,
# found by its content hash in every timed round.
P=$AW/proj
mkdir -p "$P/conf/prod"
cat >"$P/pipeline.lua" <<'L'
-- bench/aml.sh: FLOW_BENCH_JOBS command steps, each an Azure ML command job on gpu-cluster
local n = tonumber(os.getenv("FLOW_BENCH_JOBS") or "1")
local nodes = {}
for i = 1, n do
  nodes[#nodes + 1] = node{ command = { "python", "train.py", "--seed", tostring(i) }, name = "job" .. i, tags = { "gpu" } }
end
return pipeline(nodes)
L
echo 'import sys; print("seed", sys.argv[-1])' >"$P/train.py"
ENVIRONMENT=azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest
EXPERIMENT=flow-bench
cat >"$P/conf/prod/azureml.yml" <<Y
subscription_id: $AML_DOUBLE_SUBSCRIPTION
resource_group: $AML_DOUBLE_RESOURCE_GROUP
workspace: $AML_DOUBLE_WORKSPACE
experiment_name: $EXPERIMENT
arm_endpoint: $AML_DOUBLE_URL
dispatch: tagged
compute:
  __default__: cpu-cluster
  gpu: gpu-cluster
environment: $ENVIRONMENT
poll_interval: $POLL
Y
# The project is no git work tree (bench/work lies in flow's): inside one the
# SDK runs five git commands for every job it creates (mlflow.source.git.*
# properties, about 8 ms a job here); outside, one that fails.  The SDK's
# cheaper case; flow runs no git.
export GIT_CEILING_DIRECTORIES=$AW
# the same credential for both: a client secret, Entra ID and ARM at the double, its CA trusted
export FLOW_CA_BUNDLE=$AML_DOUBLE_CA_FILE AZURE_AUTHORITY_HOST=$AML_DOUBLE_URL
export AZURE_TENANT_ID=$AML_DOUBLE_TENANT AZURE_CLIENT_ID=$AML_DOUBLE_CLIENT_ID AZURE_CLIENT_SECRET=$AML_DOUBLE_CLIENT_SECRET
LOG=$AML_DOUBLE_REQUESTS_LOG

# reqs FROM N TOOL: the request log's lines after line FROM, checked for one
# round of TOOL that made N jobs.  Prints "OK SUMMARY" or "BAD WHAT".
reqs() {
  "$PY" - "$LOG" "$1" "$2" "$3" <<'EOF'
import collections, itertools, json, sys
log, skip, n, tool = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ops, bad = collections.Counter(), []
puts = lookups = 0
for line in itertools.islice(open(log), skip, None):
    r = json.loads(line)
    op, st = r.get("op") or "unknown", r.get("status")
    key = op
    if op == "jobs.get" and st == 404:
        key = "jobs.get 404 (lookup)"
        lookups += 1
    ops[key] += 1
    if op == "jobs.put" and st == 201:
        puts += 1
    elif st is None or st >= 400:
        bad.append("%s %s -> %s %s" % (r["method"], op, st, r.get("error_code") or ""))
why = []
if puts != n or ops["jobs.put"] != n:
    why.append("%d jobs created (%d PUTs), not %d" % (puts, ops["jobs.put"], n))
if bad:
    c = collections.Counter(bad)
    why.append("refused: " + ", ".join("%s ×%d" % kv for kv in c.most_common(5)))
if tool == "flow" and lookups:
    why.append("%d lookups before submitting (a job of this run is PUT at once)" % lookups)
if ops["codes.start_pending_upload"] or ops["codes.put"]:
    why.append("the code snapshot was uploaded again")
summary = ", ".join("%s %d" % kv for kv in sorted(ops.items()))
print(("BAD " + "; ".join(why)) if why else ("OK " + summary))
EOF
}

# flow_done DIR: steps done in the latest run.json, and its elapsed
flow_done() {
  "$PY" - "$1/.flow/runs/latest/run.json" <<'EOF' 2>/dev/null || echo "? ?"
import json, sys
d = json.load(open(sys.argv[1]))
s = [x.get("state") for x in d.get("steps", [])]
print(s.count("done"), "%.3f" % d["elapsed"] if isinstance(d.get("elapsed"), (int, float)) else "?")
EOF
}

# the double's CPU seconds so far (all its threads: user + system)
double_cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$AML_DOUBLE_PID/stat" 2>/dev/null || echo 0; }

# timed OUT ERR CMD...: runs CMD in $P; T_WALL, T_RSS (KB), T_CPU (the
# tool's user + system seconds), T_DCPU (the double's, meanwhile), T_RC
timed() {
  local out=$1 err=$2; shift 2
  local tf=$AW/.time t0 t1 d0 d1
  cd "$P" || return 2
  d0=$(double_cpu)
  t0=${EPOCHREALTIME/./}
  waited /usr/bin/time -f '%M %U %S' -o "$tf" "$@" >"$out" 2>"$err"
  T_RC=$RC
  t1=${EPOCHREALTIME/./}
  d1=$(double_cpu)
  cd "$ROOT" || return 2
  T_WALL=$(printf '%d.%06d' $(((t1 - t0) / 1000000)) $(((t1 - t0) % 1000000)))
  local u sy
  read -r T_RSS u sy <<<"$(tail -n 1 "$tf")"
  [[ ${T_RSS:-} =~ ^[0-9]+$ ]] || T_RSS=0
  T_CPU=$(awk -v u="${u:-0}" -v s="${sy:-0}" 'BEGIN{printf "%.2f", u + s}')
  T_DCPU=$(awk -v a="$d0" -v b="$d1" 'BEGIN{printf "%.2f", b - a}')
}

CODE_ID=""
sdk_cmd() {      # sdk_cmd N: the SDK driver's command line in CMD
  CMD=("$PY" -I -B "$SDK_DRIVER" --jobs "$1" --arm-endpoint "$AML_DOUBLE_URL" --ca-file "$AML_DOUBLE_CA_FILE"
       --subscription "$AML_DOUBLE_SUBSCRIPTION" --resource-group "$AML_DOUBLE_RESOURCE_GROUP"
       --workspace "$AML_DOUBLE_WORKSPACE" --code-id "$CODE_ID" --experiment "$EXPERIMENT"
       --compute gpu-cluster --environment "$ENVIRONMENT" --poll-interval "$POLL" --timeout "$LIMIT")
}

# run_tool TOOL N LABEL: one timed round, then its checks.  Sets T_WALL,
# T_RSS, RUN_EXTRA (what the note keeps); RUN_NOTE and return 1 when it does
# not count.
run_tool() {
  local tool=$1 n=$2 label=$3 from out err
  RUN_NOTE="" RUN_EXTRA=""
  out=$AW/logs/$tool-$n.$label.out err=$AW/logs/$tool-$n.$label.err
  from=$(wc -l <"$LOG")
  if [ "$tool" = flow ]; then
    rm -rf "$P/.flow"
    timed "$out" "$err" env FLOW_BENCH_JOBS="$n" "$FLOW" run --env prod
  else
    sdk_cmd "$n"
    timed "$out" "$err" "${CMD[@]}"
  fi
  sleep 0.2                                   # the double logs a request after answering it
  local chk
  chk=$(reqs "$from" "$n" "$tool")
  if [ "$T_RC" -ne 0 ]; then
    say "N=$n $tool: failed (exit $T_RC$([ "$T_RC" -eq 124 ] && echo ", over $LIMIT s")); ${err#$ROOT/}, last lines:"
    tail -n 8 "$err" | sed 's/^/    /' >&2
    RUN_NOTE="failed (exit $T_RC), stderr in ${err#$ROOT/}; double: ${chk#* }"; return 1
  fi
  if [ "${chk%% *}" != OK ]; then
    say "N=$n $tool: the double's request log: ${chk#* }"
    RUN_NOTE="did not do the work: ${chk#* }"; return 1
  fi
  RUN_EXTRA="requests: ${chk#OK }"
  if [ "$tool" = flow ]; then
    local d el
    read -r d el <<<"$(flow_done "$P")"
    if [ "$d" != "$n" ]; then
      say "N=$n flow: run.json says $d steps done, not $n"
      RUN_NOTE="did not do the work: run.json says $d done"; return 1
    fi
    RUN_PHASE=$el
  else
    local s
    s=$("$PY" -c 'import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
t = d["seconds"]
print(d["statuses"].get("Completed", 0), d["unique_names"], t["import"], t["submit"], t["wait"], d["gets"],
      ", ".join("%s ×%d" % kv for kv in sorted(d["api_versions_rewritten"].items())) or "none")' "$out" 2>/dev/null)
    local completed uniq imp sub wt rew
    read -r completed uniq imp sub wt _ rew <<<"${s:-? ? ? ? ? ? ?}"
    if [ "$completed" != "$n" ] || [ "$uniq" != "$n" ]; then
      say "N=$n SDK: $completed of $n jobs Completed ($uniq names)"
      RUN_NOTE="did not do the work: $completed of $n Completed"; return 1
    fi
    SDK_PHASES="$imp $sub $wt"
    SDK_REWRITTEN=$rew
  fi
  return 0
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{if (NR%2) print a[(NR+1)/2]; else printf "%.6f\n", (a[NR/2]+a[NR/2+1])/2}'; }
med3() { [ $# -gt 0 ] && printf '%.3f' "$(median "$@")" || printf '?'; }
max() { printf '%s\n' "$@" | sort -g | tail -n 1; }
mb() { awk -v k="$1" 'BEGIN{printf "%.1f", k/1024}'; }

# ---------------------------------------------------------------- warm-up
# Untimed: flow registers the project's code snapshot (pending upload through
# Azurite, codes PUT) with one job; the SDK's jobs name that code version.
# One SDK job too, so that both start timed rounds with warm caches.
say "Azure ML: warm-up (one job each; flow registers the code snapshot)"
from=$(wc -l <"$LOG")
rm -rf "$P/.flow"
cd "$P" || exit 2
waited env FLOW_BENCH_JOBS=1 "$FLOW" run --env prod >"$AW/logs/warmup-flow.txt" 2>&1
cd "$ROOT" || exit 2
if [ "$RC" -ne 0 ]; then
  tail -n 8 "$AW/logs/warmup-flow.txt" | sed 's/^/    /' >&2
  not_run "flow's warm-up run failed: $(tail -n 1 "$AW/logs/warmup-flow.txt")"
fi
CODE_ID=$(tail -n +"$((from + 1))" "$LOG" | "$PY" -c 'import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if r.get("op") == "jobs.put" and r.get("status") == 201:
        print(r["body"]["properties"]["codeId"]); break')
[ -n "$CODE_ID" ] || not_run "flow's warm-up made no job (no codeId in the request log)"
if [ $SDK_OK -eq 1 ]; then
  sdk_cmd 1
  cd "$P" || exit 2
  waited "${CMD[@]}" >"$AW/logs/warmup-sdk.txt" 2>&1
  cd "$ROOT" || exit 2
  if [ "$RC" -ne 0 ]; then
    SDK_OK=0 SDK_NOTE="the SDK driver's warm-up failed: $(grep -v '^\s*$' "$AW/logs/warmup-sdk.txt" | tail -n 1)"
    say "$SDK_NOTE"; tail -n 8 "$AW/logs/warmup-sdk.txt" | sed 's/^/    /' >&2
  fi
fi

# ---------------------------------------------------------------- the rounds
TOOLS=(flow)
[ $SDK_OK -eq 1 ] && TOOLS+=("$SDK_NAME")
for n in "${NS[@]}"; do
  say "Azure ML: N=$n jobs, $REPS rounds: ${TOOLS[*]}"
  declare -A walls=() rsss=() dead=() note=() extra=() cpus=() dcpus=()
  phases="" sdk_imp="" sdk_sub="" sdk_wait="" SDK_REWRITTEN=""
  for ((rep = 1; rep <= REPS; rep++)); do
    for tool in "${TOOLS[@]}"; do
      [ -n "${dead[$tool]:-}" ] && continue
      RUN_PHASE="" SDK_PHASES=""
      if ! run_tool "$([ "$tool" = flow ] && echo flow || echo sdk)" "$n" "r$rep"; then
        dead[$tool]=1; note[$tool]=$RUN_NOTE; continue
      fi
      walls[$tool]+="$T_WALL "; rsss[$tool]+="$T_RSS "; extra[$tool]=$RUN_EXTRA
      cpus[$tool]+="$T_CPU "; dcpus[$tool]+="$T_DCPU "
      [ -n "$RUN_PHASE" ] && [ "$RUN_PHASE" != "?" ] && phases+="$RUN_PHASE "
      if [ -n "$SDK_PHASES" ]; then
        read -r a b c <<<"$SDK_PHASES"; sdk_imp+="$a " sdk_sub+="$b " sdk_wait+="$c "
      fi
    done
  done
  for tool in flow "$SDK_NAME"; do
    if [ "$tool" != flow ] && [ $SDK_OK -eq 0 ]; then
      record aml "$tool" "$n" "" "" 0 "" "$SDK_NOTE"; continue
    fi
    if [ -n "${dead[$tool]:-}" ]; then
      record aml "$tool" "$n" "" "" 0 "" "${note[$tool]}"; continue
    fi
    read -ra ws <<<"${walls[$tool]}"
    w=$(median "${ws[@]}"); r=$(max ${rsss[$tool]})
    # shellcheck disable=SC2086
    cpu="CPU seconds, medians: $([ "$tool" = flow ] && echo flow || echo 'the SDK') $(med3 ${cpus[$tool]}), the double meanwhile $(med3 ${dcpus[$tool]})"
    if [ "$tool" = flow ]; then
      # shellcheck disable=SC2086
      k="run phase (run.json elapsed) median $(med3 $phases) s; $cpu; ${extra[$tool]} (last round)"
    else
      read -ra sub <<<"$sdk_sub"
      # shellcheck disable=SC2086
      k="in the process, medians: import $(med3 $sdk_imp) s, create_or_update ×$n $(med3 "${sub[@]}") s ($(awk -v s="$(median "${sub[@]}")" -v n="$n" 'BEGIN{printf "%.1f", s*1000/n}') ms a job), jobs.get until Completed $(med3 $sdk_wait) s; $cpu; api-version rewritten: $SDK_REWRITTEN; ${extra[$tool]} (last round)"
    fi
    say "$(printf 'N=%-5s %-12s %8.3f s %8s MB  (%d runs: %s)' "$n" "$tool" "$w" "$(mb "$r")" "${#ws[@]}" "${ws[*]}")"
    record aml "$tool" "$n" "$w" "$r" "${#ws[@]}" "${ws[*]}" "$k"
  done
  unset walls rsss dead note extra cpus dcpus
done

finish
