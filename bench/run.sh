#!/usr/bin/env bash
# bench/run.sh — flow against ninja, make and Snakemake on one generated DAG.
#
#   bench/run.sh            N = 1,000 and 10,000 command steps, 100,000 Lua steps, one-step pipeline
#   bench/run.sh --quick    the same with N = 1,000 only for the command steps
#
# `make bench` builds ./flow and runs this.  Everything is generated and run
# under bench/work/ (ignored by git); the table is printed and written, with a
# description of the machine, to bench/RESULTS.md.  See bench/README.md.
set -uo pipefail
export LC_ALL=C                       # '.' as the decimal point in $EPOCHREALTIME and printf

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
FLOW=${FLOW:-$ROOT/flow}
WORK=${BENCH_WORK:-$HERE/work}
RESULTS_MD=${BENCH_RESULTS:-$HERE/RESULTS.md}
JOBS=2                                # the same -j for every tool
SIZES=${BENCH_SIZES:-"1000 10000"}
LUA_N=${BENCH_LUA_N:-100000}
REPEAT_UNDER=30                       # a measurement under this many seconds is taken 3 times (median)
SNAKEMAKE_LIMIT=600                   # seconds

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --quick) SIZES="1000" ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/run.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

# We are often started by `make bench`: the child makes we time must not
# inherit its flags, jobserver or "Entering directory" messages.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES GNUMAKEFLAGS

say() { printf '%s\n' "bench: $*" >&2; }

# ---------------------------------------------------------------- tools
install_missing() {
  local pkgs=()
  command -v ninja >/dev/null 2>&1 || pkgs+=(ninja-build)
  command -v snakemake >/dev/null 2>&1 || pkgs+=(snakemake)
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
# Outputs of earlier runs are moved here and deleted only at the end (see clean).
TRASH=$WORK/trash
if [ -n "$(ls -A "$TRASH" 2>/dev/null)" ]; then
  say "deleting the outputs an interrupted run left in ${TRASH#$ROOT/}, then waiting 60 s (see clean)"
  rm -rf "$TRASH"; sync; sleep 60
fi
rm -rf "$TRASH" "$WORK/logs"
mkdir -p "$TRASH" "$WORK/logs"
install_missing
[ -x "$FLOW" ] || { say "no flow binary at $FLOW (run 'make' first, or 'make bench')"; exit 2; }
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

RESULTS=$WORK/results.tsv
: >"$RESULTS"
# tool  n  mode  wall_s  rss_kb  reps  note
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RESULTS"; }

# ---------------------------------------------------------------- timing
# time_once DIR CMD...: runs CMD in DIR, stdout to /dev/null, stderr to
# $T_ERR (default /dev/null).  Sets
# T_WALL (seconds, from $EPOCHREALTIME around the run), T_RSS (KB, GNU time's
# maximum resident set size: the largest single process of the tree, in
# practice the tool itself) and T_RC.
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

# Clean state for a full run of TOOL in DIR (outside the timed region).
# Earlier outputs are moved to $TRASH, not deleted: on ext4 without a journal
# (as on the machine this was written on), creating an inode skips every inode
# of its group deleted in the last 60 s (5 min while its block is dirty), one
# buffer lookup each, so a tool started right after an `rm -rf` of 10,000
# files pays for that deletion.  The trash is emptied once, at the end.
trash() {
  local p
  for p in "$@"; do
    [ -e "$p" ] || continue
    TRASH_N=$((${TRASH_N:-0} + 1))
    mv "$p" "$TRASH/$TRASH_N"
  done
}
clean() {
  local tool=$1 dir=$2
  case $tool in
    ninja) trash "$dir/out" "$dir/.ninja_log" "$dir/.ninja_deps" ;;
    make) trash "$dir/out" ;;
    snakemake) trash "$dir/out" "$dir/.snakemake" ;;
    flow*) trash "$dir/.flow" ;;
  esac
  sync                                  # dirty pages of the previous run out of the way of the next
}

outputs_of() {
  local tool=$1 dir=$2 newer=${3:-}
  local d=$dir/out
  case $tool in flow*) d=$dir/.flow/data ;; esac
  [ -d "$d" ] || { echo 0; return; }
  if [ -n "$newer" ]; then find "$d" -type f -newer "$newer" | wc -l
  else find "$d" -type f | wc -l; fi
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
max() { printf '%s\n' "$@" | sort -g | tail -n 1; }

# measure TOOL N MODE DIR TIMEOUT CMD...
# MODE "full": clean before every repetition, then check that N outputs exist.
# MODE "rerun": run on top of the previous full run, and check that nothing
# was rebuilt (no output newer than a marker made before the rerun).
# Records a row; returns non-zero when the tool failed or did not do the work.
measure() {
  local tool=$1 n=$2 mode=$3 dir=$4 limit=$5; shift 5
  local walls=() rsss=() rep=0 reps=3 note="" marker=$WORK/.marker
  local cmd=("$@") errlog=$WORK/logs/$tool-$n-$mode.stderr
  [ "$limit" -gt 0 ] && cmd=(timeout "$limit" "$@")
  # flow's stderr (a progress line per step) stays off the timing path; the
  # peers write little there (Snakemake a line per scheduling round), kept for errors
  local T_ERR=$errlog
  case $tool in flow*) T_ERR=/dev/null ;; esac
  while [ $rep -lt $reps ]; do
    if [ "$mode" = full ]; then clean "$tool" "$dir"; else touch "$marker"; sleep 0.01; sync; fi
    time_once "$dir" "${cmd[@]}"
    if [ "$T_RC" -ne 0 ]; then
      if [ "$T_RC" -eq 124 ] && [ "$limit" -gt 0 ]; then
        say "$tool N=$n $mode: still running after $limit s, stopped"
        record "$tool" "$n" "$mode" "" "$T_RSS" 1 "> $limit s (stopped by timeout)"
      else
        local log=$errlog
        if [ "$T_ERR" = /dev/null ]; then
          log=$WORK/logs/$tool-$n-$mode.log
          (cd "$dir" && "${cmd[@]}") >"$log" 2>&1
        fi
        say "$tool N=$n $mode: failed (exit $T_RC); its stderr is in ${log#$ROOT/}; last lines:"
        grep -v '^Select jobs to execute' "$log" | tail -n 15 | sed 's/^/    /' >&2
        record "$tool" "$n" "$mode" "" "" 1 "failed (exit $T_RC), stderr in ${log#$ROOT/}"
      fi
      return 1
    fi
    local made
    made=$(outputs_of "$tool" "$dir")
    if [ "$made" -ne "$n" ]; then
      say "$tool N=$n $mode: exit 0 but $made of $n outputs exist"
      record "$tool" "$n" "$mode" "" "" 1 "did not do the work: $made of $n outputs"
      return 1
    fi
    if [ "$mode" = rerun ]; then
      local rebuilt
      rebuilt=$(outputs_of "$tool" "$dir" "$marker")
      [ "$rebuilt" -eq 0 ] || note="not a no-op: $rebuilt outputs rebuilt"
    fi
    walls+=("$T_WALL"); rsss+=("$T_RSS")
    rep=$((rep + 1))
    # long measurements are taken once
    if [ $rep -eq 1 ] && awk -v w="$T_WALL" -v l="$REPEAT_UNDER" 'BEGIN{exit !(w >= l)}'; then reps=1; fi
  done
  local w r
  w=$(median "${walls[@]}"); r=$(max "${rsss[@]}")
  say "$(printf '%-10s N=%-6s %-6s %9.3f s %8.1f MB  (%d run%s: %s)' "$tool" "$n" "$mode" "$w" \
        "$(awk -v k="$r" 'BEGIN{print k/1024}')" "$reps" "$([ "$reps" -gt 1 ] && echo s)" "${walls[*]}")"
  record "$tool" "$n" "$mode" "$w" "$r" "$reps" "$note"
  LAST_WALL=$w
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
  printf 'filesystem\t%s\n' "$(df -T "$WORK" 2>/dev/null | awk 'NR==2{print $2 " (" $1 ")"}')"
  printf 'flow\t%s\n' "$("$FLOW" --version 2>&1 | head -n 1), ${FLOW_SRC#$ROOT/} of $(date -u -r "$FLOW_SRC" '+%H:%M UTC'), sha256 $(sha256sum "$FLOW" | cut -c1-12), git HEAD $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') (the build may include uncommitted changes)"
  printf 'ninja\t%s\n' "$(have ninja && ninja --version || echo 'not installed')"
  printf 'make\t%s\n' "$(make --version 2>/dev/null | head -n 1)"
  printf 'snakemake\t%s\n' "$(have snakemake && snakemake --version 2>/dev/null | tail -n 1 || echo 'not installed')"
  printf 'hyperfine\t%s\n' "$(have hyperfine && hyperfine --version || echo 'not installed (loop of 200 runs)')"
  printf 'GNU time\t%s\n' "$(dpkg-query -W -f '${Version}' time 2>/dev/null || /usr/bin/time --version 2>&1 | head -n 1)"
  printf 'python3\t%s\n' "$(python3 --version 2>&1)"
  printf 'sh\t%s\n' "$(readlink -f /bin/sh)"
} >"$MACHINE"
say "machine: $(nproc) CPUs, $(awk -F'\t' '$1=="cpu"{print $2}' "$MACHINE"), $(awk -F'\t' '$1=="memory"{print $2}' "$MACHINE")"

# ---------------------------------------------------------------- command steps
declare -A FULL_WALL
for n in $SIZES; do
  gen=$WORK/$n
  trash "$gen"
  python3 "$HERE/gen.py" "$n" "$gen" || { say "generation failed for N=$n"; exit 2; }
  say "N=$n: $(ls "$gen" | tr '\n' ' ')in ${gen#$ROOT/}"
  for tool in ninja make snakemake flow flow-q; do
    dir=$gen/$tool
    case $tool in
      ninja) have ninja || { record ninja "$n" full "" "" 0 "not installed"; continue; }
             cmd=(ninja -j "$JOBS") ;;
      make) cmd=(make -j "$JOBS") ;;
      snakemake)
        have snakemake || { record snakemake "$n" full "" "" 0 "not installed"; continue; }
        cmd=(snakemake -j "$JOBS" --quiet) ;;
      flow) cmd=("$FLOW" run -j "$JOBS") ;;
      flow-q) dir=$gen/flow; cmd=("$FLOW" run -q -j "$JOBS") ;;
    esac
    limit=0
    if [ "$tool" = snakemake ]; then
      limit=$SNAKEMAKE_LIMIT
      if [ -n "${SNAKEMAKE_FAILED_AT:-}" ]; then
        record snakemake "$n" full "" "" 0 "not run: failed or > $SNAKEMAKE_LIMIT s at N=$SNAKEMAKE_FAILED_AT"
        continue
      fi
      prev=${FULL_WALL[snakemake]:-}
      if [ -n "$prev" ]; then
        # Snakemake's DAG work grows at least linearly: extrapolate from the previous N.
        est=$(awk -v w="$prev" -v a="$PREV_N" -v b="$n" 'BEGIN{printf "%.0f", w*b/a}')
        if [ "$est" -gt "$SNAKEMAKE_LIMIT" ]; then
          say "snakemake N=$n skipped: ${prev} s at N=$PREV_N extrapolates to ≥ $est s"
          record snakemake "$n" full "" "" 0 "> $SNAKEMAKE_LIMIT s: not run (≥ $est s extrapolated linearly from N=$PREV_N)"
          record snakemake "$n" rerun "" "" 0 "not run (no full run)"
          continue
        fi
      fi
    fi
    LAST_WALL=""
    if ! measure "$tool" "$n" full "$dir" "$limit" "${cmd[@]}"; then
      [ "$tool" = snakemake ] && SNAKEMAKE_FAILED_AT=$n
      continue
    fi
    FULL_WALL[$tool]=$LAST_WALL
    measure "$tool" "$n" rerun "$dir" "$limit" "${cmd[@]}"
  done
  PREV_N=$n
  # the generated outputs are not needed any more: keep bench/work small
  for t in ninja make snakemake flow; do clean "$t" "$gen/$t" >/dev/null 2>&1; done
done

# ---------------------------------------------------------------- in-process Lua steps
gen=$WORK/$LUA_N
trash "$gen"
python3 "$HERE/gen.py" "$LUA_N" "$gen" --lua
dir=$gen/flow-lua
for tool in flow-lua flow-lua-q; do
  if [ $tool = flow-lua ]; then cmd=("$FLOW" run -j "$JOBS"); else cmd=("$FLOW" run -q -j "$JOBS"); fi
  walls=(); rsss=(); ok=1
  for rep in 1 2 3; do
    clean flow "$dir"
    time_once "$dir" "${cmd[@]}"
    [ "$T_RC" -eq 0 ] || { ok=0; break; }
    walls+=("$T_WALL"); rsss+=("$T_RSS")
  done
  if [ $ok -eq 0 ]; then
    record "$tool" "$LUA_N" "build+run" "" "" 1 "failed (exit $T_RC)"
    continue
  fi
  w=$(median "${walls[@]}"); r=$(max "${rsss[@]}")
  say "$(printf '%-10s N=%-6s build+run %7.3f s %8.1f MB  (3 runs: %s)' "$tool" "$LUA_N" "$w" \
        "$(awk -v k="$r" 'BEGIN{print k/1024}')" "${walls[*]}")"
  record "$tool" "$LUA_N" "build+run" "$w" "$r" 3 ""
done
# Check the work, once, outside the timings: flow's summary line counts the
# steps done, and gives the time of the run phase (the rest is the DAG build).
clean flow "$dir"
summary=$(cd "$dir" && "$FLOW" run -j "$JOBS" 2>&1 >/dev/null | tail -n 1)
done_n=$(sed -n 's/^flow: \([0-9]*\) done in \([0-9.]*\)s.*/\1/p' <<<"$summary")
run_s=$(sed -n 's/^flow: \([0-9]*\) done in \([0-9.]*\)s.*/\2/p' <<<"$summary")
if [ "$done_n" = "$LUA_N" ]; then
  record flow-lua-check "$LUA_N" check "$run_s" "" 1 "$summary"
else
  say "flow Lua steps: expected '$LUA_N done', got: $summary"
  record flow-lua-check "$LUA_N" check "" "" 1 "did not do the work: $summary"
fi
clean flow "$dir"

# ---------------------------------------------------------------- one-step pipeline
gen=$WORK/1
trash "$gen"
python3 "$HERE/gen.py" 1 "$gen" --one
dir=$gen/flow-one
one_step() {    # one_step LABEL ARGS... -> record a row: mean wall over many runs
  local label=$1; shift
  local args=("$@") json=$WORK/hyperfine-$label.json
  if have hyperfine; then
    (cd "$dir" && hyperfine -N --warmup 10 --runs 200 --export-json "$json" "$FLOW $*" >/dev/null 2>&1 ||
      hyperfine --warmup 10 --runs 200 --export-json "$json" "$FLOW $*" >/dev/null 2>&1)
    local stats
    stats=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%.6f %.6f %.6f %d" % (r["mean"], r["stddev"] or 0, r["median"], len(r["times"])))' "$json" 2>/dev/null)
    if [ -n "$stats" ]; then
      set -- $stats
      time_once "$dir" "$FLOW" "${args[@]}"   # peak RSS of one run
      record "$label" 1 "one step" "$1" "$T_RSS" "$4" "hyperfine: mean of $4 runs, ± $(printf '%.2f' "$(awk -v s="$2" 'BEGIN{print s*1000}')") ms, median $(printf '%.2f' "$(awk -v s="$3" 'BEGIN{print s*1000}')") ms"
      return
    fi
  fi
  local t0 t1 i
  cd "$dir" || return
  for i in 1 2 3 4 5; do "$FLOW" "$@" >/dev/null 2>&1; done
  t0=${EPOCHREALTIME/./}
  for i in $(seq 200); do "$FLOW" "$@" >/dev/null 2>&1; done
  t1=${EPOCHREALTIME/./}
  cd "$ROOT" || return
  time_once "$dir" "$FLOW" "$@"
  record "$label" 1 "one step" "$(awk -v d=$((t1 - t0)) 'BEGIN{printf "%.6f", d/200/1e6}')" "$T_RSS" 200 "loop of 200 runs (no hyperfine)"
}
one_step flow-one run -j "$JOBS" pipeline.lua
one_step flow-one-q run -q -j "$JOBS" pipeline.lua
one_step flow-version --version
[ "$(outputs_of flow "$dir")" -eq 1 ] || say "one-step pipeline: no output in $dir/.flow/data"
trash "$dir/.flow"

rm -rf "$TRASH"

# ---------------------------------------------------------------- report
python3 "$HERE/report.py" "$RESULTS" "$MACHINE" "$RESULTS_MD" || exit 2
say "written to ${RESULTS_MD#$ROOT/}"
