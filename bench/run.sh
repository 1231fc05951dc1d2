#!/usr/bin/env bash
# bench/run.sh — the rows of issue 12's "Targets" table, flow beside ninja and make.
#
#   bench/run.sh            every row at full size (see bench/README.md); writes bench/RESULTS.md
#   bench/run.sh --quick    a smoke test at tiny sizes (under a minute); writes bench/work/RESULTS.md
#
# Rows: 1,000 command steps on the project's own disk and on tmpfs, 10,000 on
# the disk and their no-op rerun, 100,000 in-process Lua steps and their no-op
# rerun, `flow --version` and a one-step `flow run`, 50 Lua steps handing on
# large values (no target); then issue 13's Azure ML dispatch, flow beside
# the Azure ML SDK (bench/aml.sh).  Knobs (environment):
# BENCH_SIZES, BENCH_LUA_N, BENCH_VALUES_N, BENCH_REPS, BENCH_LARGE_REPS, BENCH_NOOP_REPS, BENCH_LONG,
# BENCH_SNAKEMAKE, BENCH_TMPFS, BENCH_SYNC, BENCH_HYPERFINE_RUNS,
# BENCH_HYPERFINE_WARMUP, BENCH_AML (and aml.sh's BENCH_AML_*), BENCH_WORK,
# BENCH_RESULTS, FLOW; see bench/README.md.
set -uo pipefail
export LC_ALL=C                       # '.' as the decimal point in $EPOCHREALTIME and printf

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
QUICK=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/run.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

say() { printf '%s\n' "bench: $*" >&2; }
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

# ---------------------------------------------------------------- knobs
if [ $QUICK -eq 1 ]; then
  D_SIZES="100 300" D_LUA_N=2000 D_VALUES_N=5 D_HF_RUNS=20 D_HF_WARMUP=3 D_SNAKEMAKE=0 D_RESULTS=$HERE/work/RESULTS.md
else
  D_SIZES="1000 10000" D_LUA_N=100000 D_VALUES_N=50 D_HF_RUNS=200 D_HF_WARMUP=10 D_SNAKEMAKE=1 D_RESULTS=$HERE/RESULTS.md
fi
FLOW=${FLOW:-$ROOT/flow}
WORK=${BENCH_WORK:-$HERE/work}
RESULTS_MD=${BENCH_RESULTS:-$D_RESULTS}
SIZES=${BENCH_SIZES:-$D_SIZES}        # "SMALL LARGE": the 1,000-step rows and the 10,000-step rows
LUA_N=${BENCH_LUA_N:-$D_LUA_N}
VALUES_N=${BENCH_VALUES_N:-$D_VALUES_N}
REPS=${BENCH_REPS:-3}                 # alternating rounds of every full run
LARGE_REPS=${BENCH_LARGE_REPS:-5}     # ... of the 10,000-step row's (on ext4 its runs vary by a fifth)
NOOP_REPS=${BENCH_NOOP_REPS:-11}      # alternating rounds of every no-op rerun (short: 11 of them cost seconds)
LONG=${BENCH_LONG:-120}               # a tool whose first run takes longer (s) is run once only
SNAKEMAKE=${BENCH_SNAKEMAKE:-$D_SNAKEMAKE}
TMPFS_WANT=${BENCH_TMPFS:-auto}
SYNC=${BENCH_SYNC:-1}
HF_RUNS=${BENCH_HYPERFINE_RUNS:-$D_HF_RUNS}
HF_WARMUP=${BENCH_HYPERFINE_WARMUP:-$D_HF_WARMUP}
AML=${BENCH_AML:-1}                   # 0: no Azure ML rows (bench/aml.sh)
JOBS=2                                # the same -j for every tool
SNAKEMAKE_LIMIT=600                   # seconds, per Snakemake run

read -r N_SMALL N_LARGE EXTRA <<<"$SIZES"
for v in "$N_SMALL" "${N_LARGE:-}" "$LUA_N" "$VALUES_N" "$REPS" "$LARGE_REPS" "$NOOP_REPS" "$LONG" "$HF_RUNS" "$HF_WARMUP"; do
  is_uint "$v" && [ "$v" -gt 0 ] || { say "BENCH_SIZES must be two positive numbers (\"1000 10000\"), the other numeric knobs positive integers"; exit 2; }
done
[ -z "${EXTRA:-}" ] || { say "BENCH_SIZES takes two numbers, the N of the 1,000-step rows and of the 10,000-step rows: got '$SIZES'"; exit 2; }

# We are often started by `make bench`: the child makes we time must not
# inherit its flags, jobserver or "Entering directory" messages.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES GNUMAKEFLAGS

# ---------------------------------------------------------------- tools
install_missing() {
  local pkgs=()
  command -v ninja >/dev/null 2>&1 || pkgs+=(ninja-build)
  [ "$SNAKEMAKE" = 1 ] && ! command -v snakemake >/dev/null 2>&1 && pkgs+=(snakemake)
  command -v hyperfine >/dev/null 2>&1 || pkgs+=(hyperfine)
  [ -x /usr/bin/time ] || pkgs+=(time)
  command -v python3 >/dev/null 2>&1 || pkgs+=(python3)
  [ ${#pkgs[@]} -eq 0 ] && return 0
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
      say "missing ${pkgs[*]} and not root (no sudo): those tools are skipped"; return 0
    fi
  fi
  say "installing ${pkgs[*]}"
  local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
  "${apt[@]}" install -y --no-install-recommends "${pkgs[@]}" >"$WORK/apt.log" 2>&1 ||
    { "${apt[@]}" update >>"$WORK/apt.log" 2>&1 &&
      "${apt[@]}" install -y --no-install-recommends "${pkgs[@]}" >>"$WORK/apt.log" 2>&1; } ||
    say "apt-get failed (see $WORK/apt.log): missing tools are skipped"
}

mkdir -p "$WORK"
exec 9>"$WORK/.lock"
flock -n 9 || { say "another bench/run.sh is using ${WORK#$ROOT/}: wait for it to finish"; exit 2; }
# The trees of an interrupted run: delete them, and (full runs) give ext4 a
# minute so that the first timed run does not pay for this deletion (see
# clean_state and README.md, "Reading the numbers").
mountpoint -q "$WORK/tmpfs" 2>/dev/null && umount "$WORK/tmpfs"
left=()
for p in "$WORK"/disk "$WORK"/trash "$WORK"/tmpfs "$WORK"/[0-9]*; do [ -e "$p" ] && left+=("$p"); done
if [ ${#left[@]} -gt 0 ]; then
  say "deleting the trees an earlier run left in ${WORK#$ROOT/}"
  rm -rf "${left[@]}"; sync -f "$WORK"
  [ $QUICK -eq 1 ] || { say "waiting 60 s after that deletion"; sleep 60; }
fi
rm -rf "$WORK/logs"
mkdir -p "$WORK/logs"
install_missing
[ -x "$FLOW" ] || { say "no flow binary at $FLOW (run 'make flow' first, or 'make bench')"; exit 2; }
if ldd "$FLOW" 2>/dev/null | grep -q -e libasan -e libubsan; then
  say "$FLOW is a sanitizer build (libasan): rebuild the normal one ('make') before benchmarking"; exit 2
fi
# Time one binary from start to end, even if ./flow is rebuilt meanwhile.
mkdir -p "$WORK/bin"
cp "$FLOW" "$WORK/bin/flow.tmp" && mv -f "$WORK/bin/flow.tmp" "$WORK/bin/flow" || exit 2
FLOW_SRC=$FLOW
FLOW=$WORK/bin/flow
[ -x /usr/bin/time ] || { say "GNU time (/usr/bin/time) is needed for peak RSS"; exit 2; }
command -v python3 >/dev/null 2>&1 || { say "python3 is needed to generate the DAGs"; exit 2; }
have() { command -v "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------- tmpfs
# The tmpfs rows run in a directory of their own on a tmpfs: BENCH_TMPFS=DIR
# (a tmpfs), else /dev/shm, else a tmpfs mounted on bench/work/tmpfs (root
# only); BENCH_TMPFS=none skips them.  Removed (unmounted) at exit.
TMPFS_DIR="" TMPFS_NOTE="" TMPFS_MOUNT=""
fstype() { df -T "$1" 2>/dev/null | awk 'NR==2{print $2}'; }
cleanup() {
  [ -n "$TMPFS_DIR" ] && rm -rf "$TMPFS_DIR"
  [ -n "$TMPFS_MOUNT" ] && { umount "$TMPFS_MOUNT" 2>/dev/null; rmdir "$TMPFS_MOUNT" 2>/dev/null; }
  rm -rf "$WORK/disk"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
case $TMPFS_WANT in
  none|off|0) TMPFS_NOTE="not run (BENCH_TMPFS=$TMPFS_WANT)" ;;
  auto)
    if [ "$(fstype /dev/shm)" = tmpfs ] && [ -w /dev/shm ]; then
      TMPFS_DIR=$(mktemp -d /dev/shm/flow-bench.XXXXXX)
    elif [ "$(id -u)" -eq 0 ] && mkdir -p "$WORK/tmpfs" && mount -t tmpfs -o size=4g,mode=0755 tmpfs "$WORK/tmpfs" 2>/dev/null; then
      TMPFS_MOUNT=$WORK/tmpfs; TMPFS_DIR=$(mktemp -d "$WORK/tmpfs/flow-bench.XXXXXX")
    else
      TMPFS_NOTE="not run: /dev/shm is not a writable tmpfs and mounting one on bench/work/tmpfs needs root"
    fi ;;
  *)
    if [ "$(fstype "$TMPFS_WANT")" = tmpfs ] && [ -w "$TMPFS_WANT" ]; then
      TMPFS_DIR=$(mktemp -d "$TMPFS_WANT/flow-bench.XXXXXX")
    else
      TMPFS_NOTE="not run: BENCH_TMPFS=$TMPFS_WANT is not a writable tmpfs ($(fstype "$TMPFS_WANT" || echo missing))"
    fi ;;
esac
[ -n "$TMPFS_NOTE" ] && say "tmpfs rows: $TMPFS_NOTE"

RESULTS=$WORK/results.tsv
: >"$RESULTS"
# section  tool  n  wall_s (median)  rss_kb (max)  runs  walls (every run, in order)  note
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RESULTS"; }

# ---------------------------------------------------------------- timing
# time_once DIR CMD...: runs CMD in DIR, stdout to /dev/null, stderr to
# $T_ERR (default /dev/null).  Sets T_WALL (seconds, from $EPOCHREALTIME
# around the run), T_RSS (KB, GNU time's maximum resident set size: the
# largest single process of the tree, in practice the tool itself) and T_RC.
time_once() {
  local dir=$1; shift
  local tf=$WORK/.time t0 t1
  cd "$dir" || return 2
  t0=${EPOCHREALTIME/./}
  /usr/bin/time -f '%M' -o "$tf" "$@" >/dev/null 2>"${T_ERR:-/dev/null}"
  T_RC=$?
  t1=${EPOCHREALTIME/./}
  cd "$ROOT" || return 2
  T_WALL=$(printf '%d.%06d' $(((t1 - t0) / 1000000)) $(((t1 - t0) % 1000000)))
  T_RSS=$(tail -n 1 "$tf")
  [[ $T_RSS =~ ^[0-9]+$ ]] || T_RSS=0
}

# Clean state for a full run of TOOL in DIR, outside the timed region, as a
# user would: `rm -rf` of the outputs and of the tool's own state.  On ext4
# this has a cost for whoever creates files next (inodes deleted in the last
# 60 s are skipped when allocating, see README.md): that cost is part of what
# the disk rows measure, and the tmpfs rows show the same work without it.
# Then `sync -f` of that file system (BENCH_SYNC=0: not), so that the
# writeback of this deletion and of the previous run does not land in the
# next timing.
clean_state() {
  local tool=$1 dir=$2
  case $tool in
    ninja) rm -rf "$dir/out" "$dir/.ninja_log" "$dir/.ninja_deps" ;;
    make) rm -rf "$dir/out" ;;
    snakemake) rm -rf "$dir/out" "$dir/.snakemake" ;;
    flow|flow-lua|flow-values) rm -rf "$dir/.flow" "$dir/out" ;;
  esac
  [ "$SYNC" = 1 ] && sync -f "$dir"
}

outputs_of() {   # outputs_of TOOL DIR [NEWER]: files in the tool's output directory (newer than NEWER)
  local tool=$1 dir=$2 newer=${3:-}
  local d=$dir/out
  case $tool in flow*) d=$dir/.flow/data ;; esac
  [ -d "$d" ] || { echo 0; return; }
  if [ -n "$newer" ]; then find "$d" -type f -newer "$newer" | wc -l
  else find "$d" -type f | wc -l; fi
}

# flow_states DIR: "DONE UP_TO_DATE ELAPSED" from the latest run's run.json
# (steps by state, the run phase's seconds), "? ? ?" when it cannot be read.
flow_states() {
  python3 - "$1/.flow/runs/latest/run.json" <<'EOF' 2>/dev/null || echo "? ? ?"
import json, re, sys
text = open(sys.argv[1]).read()
try:
    d = json.loads(text)
    states = [s.get("state") for s in d.get("steps", [])]
    el = d.get("elapsed")
except ValueError:          # not one JSON document (streamed?): count the fields
    states = re.findall(r'"state"\s*:\s*"([^"]*)"', text)
    m = re.search(r'"elapsed"\s*:\s*([0-9.eE+-]+)', text)
    el = float(m.group(1)) if m else None
print(states.count("done"), states.count("up to date"), "?" if el is None else "%.3f" % el)
EOF
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{if (NR%2) print a[(NR+1)/2]; else printf "%.6f\n", (a[NR/2]+a[NR/2+1])/2}'; }
max() { printf '%s\n' "$@" | sort -g | tail -n 1; }
mb() { awk -v k="$1" 'BEGIN{printf "%.1f", k/1024}'; }

tool_cmd() {     # tool_cmd TOOL: the command in CMD
  case $1 in
    flow|flow-lua) CMD=("$FLOW" run -j "$JOBS") ;;
    ninja) CMD=(ninja -j "$JOBS") ;;
    make) CMD=(make -j "$JOBS") ;;
    snakemake) CMD=(timeout "$SNAKEMAKE_LIMIT" snakemake -j "$JOBS" --quiet) ;;
  esac
}

# run_one MODE N TOOL DIR LABEL SECTION: one timed run (MODE full: from clean; rerun:
# on the previous run's outputs), then its checks.  Sets T_WALL, T_RSS;
# RUN_NOTE says what was wrong.  Returns 1 when the run does not count.
run_one() {
  local mode=$1 n=$2 tool=$3 dir=$4 label=$5 section=$6
  local marker=$WORK/.marker errlog=$WORK/logs/$section-$tool.stderr
  RUN_NOTE=""
  tool_cmd "$tool"
  # flow's stderr (a progress line per step) stays off the timing path; the
  # peers write little there (Snakemake a line per scheduling round), kept for errors
  local T_ERR=$errlog
  case $tool in flow*) T_ERR=/dev/null ;; esac
  if [ "$mode" = full ]; then clean_state "$tool" "$dir"
  else touch "$marker"; sleep 0.01; [ "$SYNC" = 1 ] && sync -f "$dir"; fi
  time_once "$dir" "${CMD[@]}"
  if [ "$T_RC" -ne 0 ]; then
    if [ "$tool" = snakemake ] && [ "$T_RC" -eq 124 ]; then
      say "$label $tool: still running after $SNAKEMAKE_LIMIT s, stopped"
      RUN_NOTE="> $SNAKEMAKE_LIMIT s (stopped by timeout)"; return 1
    fi
    local log=$errlog
    if [ "$T_ERR" = /dev/null ]; then
      log=$WORK/logs/$section-$tool.log
      (cd "$dir" && "${CMD[@]}") >"$log" 2>&1
    fi
    say "$label $tool: failed (exit $T_RC); its stderr is in ${log#$ROOT/}; last lines:"
    grep -v '^Select jobs to execute' "$log" | tail -n 15 | sed 's/^/    /' >&2
    RUN_NOTE="failed (exit $T_RC), stderr in ${log#$ROOT/}"; return 1
  fi
  # the checks, outside the timing
  if [ "$tool" != flow-lua ]; then
    local made
    made=$(outputs_of "$tool" "$dir")
    if [ "$made" -ne "$n" ]; then
      say "$label $tool: exit 0 but $made of $n outputs exist"
      RUN_NOTE="did not do the work: $made of $n outputs"; return 1
    fi
    if [ "$mode" = rerun ]; then
      local rebuilt
      rebuilt=$(outputs_of "$tool" "$dir" "$marker")
      if [ "$rebuilt" -ne 0 ]; then
        say "$label $tool: not a no-op, $rebuilt outputs rewritten"
        RUN_NOTE="not a no-op: $rebuilt outputs rewritten"; return 1
      fi
    fi
  fi
  case $tool in
    flow|flow-lua)
      local done_n utd el want
      read -r done_n utd el <<<"$(flow_states "$dir")"
      if [ "$mode" = full ]; then want=$done_n; else want=$utd; fi
      if [ "$want" = "?" ]; then
        RUN_NOTE="steps not counted: run.json unreadable"
      elif [ "$want" != "$n" ]; then
        say "$label $tool: run.json says $done_n done, $utd up to date (expected $n $([ "$mode" = full ] && echo 'done' || echo 'up to date'))"
        RUN_NOTE="did not do the work: run.json says $done_n done, $utd up to date"; return 1
      fi
      [ "$el" != "?" ] && RUN_PHASE=$el ;;
  esac
  return 0
}

# alternate SECTION MODE N ROUNDS BASE LABEL TOOL...: ROUNDS rounds, each
# running every TOOL once in order (flow, ninja, make, flow, ninja, make, ...),
# TOOL in BASE/TOOL.  A tool whose first run takes more than $LONG s is run
# once only.  Records a row per tool (median wall, max RSS, every wall);
# sets OK_TOOLS to the tools that succeeded.
alternate() {
  local section=$1 mode=$2 n=$3 rounds=$4 base=$5 label=$6; shift 6
  local tools=("$@") tool rep
  local -A walls rsss dead once note phases
  for ((rep = 1; rep <= rounds; rep++)); do
    for tool in "${tools[@]}"; do
      [ -n "${dead[$tool]:-}${once[$tool]:-}" ] && continue
      RUN_PHASE=""
      if ! run_one "$mode" "$n" "$tool" "$base/$tool" "$label" "$section"; then
        dead[$tool]=1; note[$tool]=$RUN_NOTE; continue
      fi
      [ -n "$RUN_NOTE" ] && note[$tool]=$RUN_NOTE
      walls[$tool]+="$T_WALL "; rsss[$tool]+="$T_RSS "
      [ -n "$RUN_PHASE" ] && phases[$tool]+="$RUN_PHASE "
      if [ "$rep" -eq 1 ] && [ "$rounds" -gt 1 ] && awk -v w="$T_WALL" -v l="$LONG" 'BEGIN{exit !(w > l)}'; then
        once[$tool]=1; note[$tool]="run once: its first run took over $LONG s"
      fi
    done
  done
  OK_TOOLS=()
  local w r k ws
  for tool in "${tools[@]}"; do
    if [ -n "${dead[$tool]:-}" ]; then
      record "$section" "$tool" "$n" "" "" 0 "" "${note[$tool]}"; continue
    fi
    read -ra ws <<<"${walls[$tool]}"
    w=$(median "${ws[@]}"); r=$(max ${rsss[$tool]})
    k=${note[$tool]:-}
    if [ -n "${phases[$tool]:-}" ]; then
      local ph; read -ra ph <<<"${phases[$tool]}"
      k="${k:+$k; }run phase (run.json elapsed) median $(median "${ph[@]}") s"
    fi
    say "$(printf '%-22s %-9s %9.3f s %8s MB  (%d run%s: %s)' "$label" "$tool" "$w" "$(mb "$r")" \
          "${#ws[@]}" "$([ "${#ws[@]}" -gt 1 ] && echo s)" "${ws[*]}")"
    record "$section" "$tool" "$n" "$w" "$r" "${#ws[@]}" "${ws[*]}" "$k"
    OK_TOOLS+=("$tool")
  done
}

# ---------------------------------------------------------------- machine
MACHINE=$WORK/machine.tsv
{
  printf 'date\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
  printf 'nproc\t%s\n' "$(nproc)"
  printf 'cpu\t%s\n' "$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
  printf 'memory\t%s\n' "$(awk '/^MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  printf 'kernel\t%s\n' "$(uname -srm)"
  printf 'os\t%s\n' "$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || echo unknown)"
  printf 'load average at start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
  printf 'disk rows\t%s\n' "\`${WORK#$ROOT/}/disk\` on $(df -T "$WORK" 2>/dev/null | awk 'NR==2{print $2 " (" $1 ")"}')"
  printf 'tmpfs rows\t%s\n' "${TMPFS_DIR:+\`$TMPFS_DIR\` on tmpfs}${TMPFS_NOTE}"
  printf 'flow\t%s\n' "$("$FLOW" --version 2>&1 | head -n 1), ${FLOW_SRC#$ROOT/} of $(date -u -r "$FLOW_SRC" '+%H:%M UTC'), sha256 $(sha256sum "$FLOW" | cut -c1-12), git HEAD $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- . ':!bench' 2>/dev/null || echo ' with uncommitted changes')"
  printf 'ninja\t%s\n' "$(have ninja && ninja --version || echo 'not installed')"
  printf 'make\t%s\n' "$(make --version 2>/dev/null | head -n 1)"
  printf 'snakemake\t%s\n' "$(if [ "$SNAKEMAKE" != 1 ]; then echo 'not run (BENCH_SNAKEMAKE=0)'; elif have snakemake; then snakemake --version 2>/dev/null | tail -n 1; else echo 'not installed'; fi)"
  printf 'hyperfine\t%s\n' "$(have hyperfine && hyperfine --version || echo "not installed (loop of $HF_RUNS runs)")"
  printf 'GNU time\t%s\n' "$(dpkg-query -W -f '${Version}' time 2>/dev/null || /usr/bin/time --version 2>&1 | head -n 1)"
  printf 'python3\t%s\n' "$(python3 --version 2>&1)"
  printf 'sh\t%s\n' "$(readlink -f /bin/sh)"
  printf 'settings\t%s\n' "N = $N_SMALL and $N_LARGE command steps, $LUA_N Lua steps, $VALUES_N steps handing on large values; $REPS alternating rounds per full run ($LARGE_REPS at N = $N_LARGE), $NOOP_REPS per no-op rerun (a tool over $LONG s: once); hyperfine $HF_RUNS runs after $HF_WARMUP warm-up; sync after cleaning: $([ "$SYNC" = 1 ] && echo yes || echo no)$([ $QUICK -eq 1 ] && echo '; --quick (smoke test)')"
} >"$MACHINE"
say "machine: $(nproc) CPUs, $(awk -F'\t' '$1=="cpu"{print $2}' "$MACHINE"), $(awk -F'\t' '$1=="memory"{print $2}' "$MACHINE"), load $(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------- command steps
# gen N BASE: the four build files of N steps in BASE/{ninja,make,snakemake,flow}
gen() { rm -rf "$2"; python3 "$HERE/gen.py" "$1" "$2" || { say "generation failed for N=$1"; exit 2; }; }
peers() {        # peers N: the tools of a command-step row, flow first
  TOOLS=(flow)
  if have ninja; then TOOLS+=(ninja); else record "$SECTION" ninja "$1" "" "" 0 "" "not installed"; fi
  TOOLS+=(make)
  if [ "$1" = "$N_SMALL" ] && [ "$SNAKEMAKE" = 1 ]; then
    if have snakemake; then TOOLS+=(snakemake); else record "$SECTION" snakemake "$1" "" "" 0 "" "not installed"; fi
  fi
}

DISK=$WORK/disk
# ---------------------------------------------------------------- start-up
# First, before the rows that delete hundreds of thousands of files: for a
# minute after a deletion ext4 skips the freed inodes when it allocates one
# (recently_deleted() in fs/ext4/ialloc.c), and an allocation in such a
# block group took 0.9 ms instead of 0.05 ms here.  A run makes three inodes
# (its run directory, journal and run.json), so measured after the Lua rows
# this row was 6-7 ms of which 3 ms were that wait.
SECTION=startup
rm -rf "$DISK/one"
python3 "$HERE/gen.py" 1 "$DISK/one" --one || { say "generation failed for the one-step pipeline"; exit 2; }
dir=$DISK/one/flow-one
one_step() {    # one_step LABEL ARGS... -> record a row: median wall over many runs (as every other row)
  local label=$1; shift
  local args=("$@") json=$WORK/hyperfine-$label.json
  time_once "$dir" "$FLOW" "${args[@]}"   # the peak RSS of one run, and does it work at all?
  local rss=$T_RSS
  if [ "$T_RC" -ne 0 ]; then
    local log=$WORK/logs/startup-$label.log
    (cd "$dir" && "$FLOW" "${args[@]}") >"$log" 2>&1
    say "$label: failed (exit $T_RC); its output is in ${log#$ROOT/}"
    record startup "$label" 1 "" "" 0 "" "failed (exit $T_RC), output in ${log#$ROOT/}"
    return
  fi
  if have hyperfine; then
    (cd "$dir" && { hyperfine -N --warmup "$HF_WARMUP" --runs "$HF_RUNS" --export-json "$json" "$FLOW $*" >/dev/null 2>&1 ||
      hyperfine --warmup "$HF_WARMUP" --runs "$HF_RUNS" --export-json "$json" "$FLOW $*" >/dev/null 2>&1; })
    local stats
    stats=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%.6f %.6f %.6f %d" % (r["mean"], r["stddev"] or 0, r["median"], len(r["times"])))' "$json" 2>/dev/null)
    if [ -n "$stats" ]; then
      set -- $stats
      say "$(printf '%-22s %9.2f ms median, %.2f ms mean %8s MB' "$label" "$(awk -v s="$3" 'BEGIN{print s*1000}')" "$(awk -v s="$1" 'BEGIN{print s*1000}')" "$(mb "$rss")")"
      record startup "$label" 1 "$3" "$rss" "$4" "" "hyperfine -N: median of $4 runs; mean $(awk -v s="$1" 'BEGIN{printf "%.2f", s*1000}') ± $(awk -v s="$2" 'BEGIN{printf "%.2f", s*1000}') ms"
      return
    fi
  fi
  local t0 t1 i
  cd "$dir" || return
  for ((i = 0; i < HF_WARMUP; i++)); do "$FLOW" "${args[@]}" >/dev/null 2>&1; done
  t0=${EPOCHREALTIME/./}
  for ((i = 0; i < HF_RUNS; i++)); do "$FLOW" "${args[@]}" >/dev/null 2>&1; done
  t1=${EPOCHREALTIME/./}
  cd "$ROOT" || return
  record startup "$label" 1 "$(awk -v d=$((t1 - t0)) -v r="$HF_RUNS" 'BEGIN{printf "%.6f", d/r/1e6}')" "$rss" "$HF_RUNS" "" "mean of a loop of $HF_RUNS runs, not a median (hyperfine $(have hyperfine && echo failed || echo 'not installed'))"
}
say "start-up: hyperfine, $HF_RUNS runs after $HF_WARMUP warm-up"
one_step flow-version --version
one_step flow-one run -j "$JOBS" pipeline.lua
[ "$(outputs_of flow "$dir")" -eq 1 ] || say "one-step pipeline: no output in $dir/.flow/data"
read -r _ utd _ <<<"$(flow_states "$dir")"
[ "$utd" = 1 ] || say "one-step pipeline: the last run was not a no-op rerun (run.json: $utd up to date)"

SECTION=disk-small
gen "$N_SMALL" "$DISK/$N_SMALL"
peers "$N_SMALL"
say "N=$N_SMALL on $(fstype "$WORK"): ${TOOLS[*]}, $REPS rounds"
alternate "$SECTION" full "$N_SMALL" "$REPS" "$DISK/$N_SMALL" "N=$N_SMALL $(fstype "$WORK") full" "${TOOLS[@]}"

SECTION=tmpfs-small
if [ -n "$TMPFS_DIR" ]; then
  gen "$N_SMALL" "$TMPFS_DIR/$N_SMALL"
  peers "$N_SMALL"
  say "N=$N_SMALL on tmpfs ($TMPFS_DIR): ${TOOLS[*]}, $REPS rounds"
  alternate "$SECTION" full "$N_SMALL" "$REPS" "$TMPFS_DIR/$N_SMALL" "N=$N_SMALL tmpfs full" "${TOOLS[@]}"
  rm -rf "${TMPFS_DIR:?}/$N_SMALL"
else
  record "$SECTION" flow "$N_SMALL" "" "" 0 "" "$TMPFS_NOTE"
fi

SECTION=disk-large
gen "$N_LARGE" "$DISK/$N_LARGE"
peers "$N_LARGE"
say "N=$N_LARGE on $(fstype "$WORK"): ${TOOLS[*]}, $LARGE_REPS rounds, then $NOOP_REPS rounds of no-op reruns"
alternate "$SECTION" full "$N_LARGE" "$LARGE_REPS" "$DISK/$N_LARGE" "N=$N_LARGE $(fstype "$WORK") full" "${TOOLS[@]}"
SECTION=noop-large
if [ ${#OK_TOOLS[@]} -gt 0 ]; then
  alternate "$SECTION" rerun "$N_LARGE" "$NOOP_REPS" "$DISK/$N_LARGE" "N=$N_LARGE no-op rerun" "${OK_TOOLS[@]}"
fi

# ---------------------------------------------------------------- in-process Lua steps
SECTION=lua
rm -rf "$DISK/lua-$LUA_N"
python3 "$HERE/gen.py" "$LUA_N" "$DISK/lua-$LUA_N" --lua || { say "generation failed for the Lua steps"; exit 2; }
say "$LUA_N Lua steps: $REPS runs from clean, then $NOOP_REPS no-op reruns"
alternate lua full "$LUA_N" "$REPS" "$DISK/lua-$LUA_N" "$LUA_N Lua steps" flow-lua
if [ ${#OK_TOOLS[@]} -gt 0 ]; then
  alternate lua-noop rerun "$LUA_N" "$NOOP_REPS" "$DISK/lua-$LUA_N" "$LUA_N Lua no-op rerun" flow-lua
fi

# ---------------------------------------------------------------- large memory values
# A chain of VALUES_N Lua steps handing on ~200 KB tables (gen.py --values):
# from clean, the run (and what it leaves in .flow/), then the same with
# parameter k changed, which reruns only the last step, alternating.  flow
# keeps nothing of such values (docs/data.md, "Memory values between runs"):
# the changed reader has the chain's functions called again.
values_rows() {
  local dir=$DISK/values/flow-values i done_n utd
  local walls="" rss=0 sizes="" ewalls="" erss=0 note=""
  for ((i = 1; i <= REPS; i++)); do
    clean_state flow-values "$dir"
    time_once "$dir" "$FLOW" run -j "$JOBS"
    if [ "$T_RC" -ne 0 ]; then note="failed (exit $T_RC)"; break; fi
    walls+="$T_WALL "; [ "$T_RSS" -gt "$rss" ] && rss=$T_RSS
    sizes+="$(du -sk "$dir/.flow" | cut -f1) "
    time_once "$dir" "$FLOW" run -j "$JOBS" --params "k=$i"
    if [ "$T_RC" -ne 0 ]; then note="the rerun failed (exit $T_RC)"; break; fi
    read -r done_n utd _ <<<"$(flow_states "$dir")"
    if [ "$done_n" != 1 ] || [ "$utd" != "$VALUES_N" ]; then
      note="the rerun did other work: run.json says $done_n done, $utd up to date"; break
    fi
    ewalls+="$T_WALL "; [ "$T_RSS" -gt "$erss" ] && erss=$T_RSS
  done
  if [ -n "$note" ]; then
    say "$VALUES_N steps handing on large values: $note"
    record values flow-values "$VALUES_N" "" "" 0 "" "$note"
    return
  fi
  local ws es zs
  read -ra ws <<<"$walls"; read -ra es <<<"$ewalls"; read -ra zs <<<"$sizes"
  say "$(printf '%-22s %9.3f s %8s MB, .flow %s KB; reader changed %.3f s' "values N=$VALUES_N" \
        "$(median "${ws[@]}")" "$(mb "$rss")" "$(median "${zs[@]}")" "$(median "${es[@]}")")"
  record values flow-values "$VALUES_N" "$(median "${ws[@]}")" "$rss" "${#ws[@]}" "${ws[*]}" \
         ".flow/ after the run: median $(median "${zs[@]}") KB"
  record values-edit flow-values "$VALUES_N" "$(median "${es[@]}")" "$erss" "${#es[@]}" "${es[*]}" ""
}
SECTION=values
rm -rf "$DISK/values"
python3 "$HERE/gen.py" "$VALUES_N" "$DISK/values" --values || { say "generation failed for the large values"; exit 2; }
say "$VALUES_N steps handing on large values: $REPS rounds of a run from clean and a rerun of the last step"
values_rows

rm -rf "$DISK"

# ---------------------------------------------------------------- Azure ML dispatch (issue 13)
# bench/aml.sh: its rows and machine lines go into this run's files.
if [ "$AML" = 1 ]; then
  aml_args=()
  [ $QUICK -eq 1 ] && aml_args=(--quick)
  BENCH_AML_RESULTS=$RESULTS BENCH_AML_MACHINE=$MACHINE BENCH_WORK=$WORK FLOW=$FLOW \
    "$HERE/aml.sh" "${aml_args[@]}" || { rc=$?; say "bench/aml.sh failed (exit $rc)"; record aml flow 100 "" "" 0 "" "bench/aml.sh failed (exit $rc)"; }
else
  record aml flow 100 "" "" 0 "" "not run (BENCH_AML=$AML)"
fi

# ---------------------------------------------------------------- report
python3 "$HERE/report.py" "$RESULTS" "$MACHINE" "$RESULTS_MD" || exit 2
say "written to ${RESULTS_MD#$ROOT/}"
