#!/usr/bin/env python3
"""report.py RESULTS_TSV MACHINE_TSV OUT_MD — bench/RESULTS.md from bench/run.sh's measurements.

Prints the summary and the tables to stdout too.  Rows of RESULTS_TSV:
section, tool, n, wall_s (median; "" when not measured), rss_kb (max over the
runs), runs, walls (every run's wall time, in order, space-separated), note.

Sections: disk-small, tmpfs-small, disk-large (full runs from clean),
noop-large (no-op reruns), lua, lua-noop (in-process Lua steps), startup
(hyperfine): the targets of issue 12's "Targets" table (TARGETS); aml (tools
flow and azure-ai-ml, one row per N): issue 13's Azure ML dispatch (AML_TARGET),
from bench/aml.sh.  Parts with no rows are left out (bench/aml.sh alone
writes only its own).
"""
import math
import re
import sys

NAMES = {
    "flow": "flow", "ninja": "ninja", "make": "make", "snakemake": "snakemake",
    "flow-lua": "flow", "flow-version": "`flow --version`", "flow-one": "`flow run` (one step)",
    "flow-values": "flow",
}
COMMANDS = {
    "flow": "`flow run -j 2 2>/dev/null`", "ninja": "`ninja -j 2`", "make": "`make -j 2`",
    "snakemake": "`snakemake -j 2 --quiet`",
}
AML_PEER = "azure-ai-ml"
PEER_ORDER = ("flow", "ninja", "make", "snakemake")

# Issue 12, "Targets": the rows, their limits, and the numbers the issue was written with.
TARGETS = [
    dict(key="disk-small", n=1000, work="1,000 command steps, project on ext4, `rm -rf` before each run",
         ratio=0.9, issue="ninja 0.96 s, flow 2.04 s (2.1×)"),
    dict(key="tmpfs-small", n=1000, work="same, on tmpfs", ratio=0.8, issue="ninja 0.87 s, flow 0.79 s (0.91×)"),
    dict(key="disk-large", n=10000, work="10,000 command steps, ext4", ratio=0.9, issue="ninja 10.3 s, flow 14.9 s (1.34×)"),
    dict(key="noop-large", n=10000, work="no-op rerun, 10,000 command steps", wall=0.1, rss_mb=30,
         issue="ninja 0.036 s; flow 0.57 s, 79 MB"),
    dict(key="lua", n=100000, work="100,000 in-process Lua steps, build + run", wall=1.0, rss_mb=200,
         issue="14.4 s, 743 MB"),
    dict(key="lua-noop", n=100000, work="no-op rerun of those", wall=0.5, issue="6.0 s, 653 MB"),
    dict(key="startup", n=1, work="`flow --version` / one-step `flow run`", issue="7 ms / 11 ms",
         parts=[("flow-version", "`flow --version`", 0.003), ("flow-one", "one-step `flow run`", 0.006)]),
]


# Issue 13: `make bench` submits 100 command jobs to the loopback double, flow against the SDK
# (MLClient.jobs.create_or_update): flow at least 20x faster end to end, its memory flat in the number
# of jobs.  "Flat" is read here as: flow's peak RSS at the largest N at most rss_growth times that at
# the smallest N (10 -> 300 jobs by default).
AML_TARGET = dict(key="aml", n=100, ratio=20.0, rss_growth=1.2, rss_ns=(10, 300),
                  work="100 Azure ML command jobs, submitted and waited for until Completed",
                  issue="")


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            parts += [""] * (8 - len(parts))
            section, tool, n, wall, rss, reps, walls, note = parts[:8]
            rows.append(dict(section=section, tool=tool, n=int(n), wall=float(wall) if wall else None,
                             rss=int(rss) if rss and rss != "0" else None, reps=int(reps or 0),
                             walls=[float(x) for x in walls.split()], note=note))
    return rows


def machine(path):
    m = []
    with open(path) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("\t")
            m.append((k, v))
    return m


def fmt_s(w):
    if w is None:
        return "—"
    if w < 0.1:
        return "%.4f" % w
    return "%.3f" % w if w < 100 else "%.1f" % w


def fmt_ms(w):
    return "—" if w is None else "%.2f ms" % (w * 1000)


def fmt_mb(kb):
    return "—" if kb is None else "%.1f" % (kb / 1024)


def fmt_ratio(r):
    if r is None:
        return "—"
    return "%.3f" % r if r < 0.1 else "%.2f" % r


def n_str(n):
    return "{:,}".format(n)


def main():
    rows = load(sys.argv[1])
    mach = machine(sys.argv[2])
    out_path = sys.argv[3]
    md = dict(mach)
    out = []
    w = out.append

    def sec(key):
        return [r for r in rows if r["section"] == key]

    def get(key, tool):
        return next((r for r in rows if r["section"] == key and r["tool"] == tool), None)

    def wall(key, tool):
        r = get(key, tool)
        return r["wall"] if r else None

    def ratio(a, b):
        return a / b if a is not None and b else None

    m = re.search(r" on (\S+)", md.get("disk rows", ""))
    disk_fs = m.group(1) if m else "?"

    # ---------------------------------------------------------------- verdicts
    verdicts = {}          # key -> (result, sentence, summary cells)
    targets12 = [t for t in TARGETS if sec(t["key"])]
    has13 = bool(sec("aml"))

    def no_data(t, what):
        return ("not measured", what.rstrip(".") + ".", ["—"] * 4)

    def size_note(t, n):
        return "" if n == t["n"] else " (at N = %s, not the target's %s: a smoke-test size, no verdict on the target)" % (
            n_str(n), n_str(t["n"]))

    for t in targets12:
        key = t["key"]
        if "ratio" in t:
            f, nj, mk, sm = (get(key, x) for x in ("flow", "ninja", "make", "snakemake"))
            if not f or f["wall"] is None:
                verdicts[key] = no_data(t, "flow: %s" % (f["note"] if f else "no data (no successful full run to start from, or not run)"))
                continue
            if not nj or nj["wall"] is None:
                verdicts[key] = no_data(t, "ninja: %s" % (nj["note"] if nj else "no data"))
                continue
            r = f["wall"] / nj["wall"]
            ok = r <= t["ratio"]
            rounds = [a / b for a, b in zip(f["walls"], nj["walls"]) if b] if f["reps"] == nj["reps"] else []
            s = "N = %s: flow %.3f s, ninja %.3f s, flow/ninja = **%.2f** (target ≤ %.1f)%s%s%s; flow's peak RSS %s MB" % (
                n_str(f["n"]), f["wall"], nj["wall"], r, t["ratio"],
                "; per round: " + ", ".join("%.2f" % x for x in rounds) if len(rounds) > 1 else "",
                "; make %.3f s (flow/make %.2f)" % (mk["wall"], f["wall"] / mk["wall"]) if mk and mk["wall"] else "",
                "; Snakemake %.3f s" % sm["wall"] if sm and sm["wall"] else "",
                fmt_mb(f["rss"]))
            verdicts[key] = ("met" if ok else "missed", s + size_note(t, f["n"]) + ".",
                             [fmt_s(nj["wall"]), fmt_s(mk and mk["wall"]), fmt_s(f["wall"]), "%.2f×" % r])
        elif "parts" in t:
            oks, bits, cells = [], [], []
            for tool, label, lim in t["parts"]:
                r = get(key, tool)
                if not r or r["wall"] is None:
                    bits.append("%s: not measured" % label)
                    oks.append(None)
                    cells.append("—")
                    continue
                ok = r["wall"] < lim
                oks.append(ok)
                bits.append("%s %s median (target < %g ms): %s; peak RSS %s MB" % (
                    label, fmt_ms(r["wall"]), lim * 1000, "met" if ok else "missed", fmt_mb(r["rss"])))
                cells.append(fmt_ms(r["wall"]))
            res = "missed" if False in oks else "not measured" if None in oks else "met"
            verdicts[key] = (res, "; ".join(bits) + ". The one-step `flow run` is timed by hyperfine after warm-up "
                             "runs, so every timed run finds its step up to date (a no-op rerun of one step).",
                             ["", "", " / ".join(cells), ""])
        else:
            f = get(key, "flow-lua") or get(key, "flow")
            if not f or f["wall"] is None:
                verdicts[key] = no_data(t, "flow: %s" % (f["note"] if f else "no data (no successful full run to start from, or not run)"))
                continue
            okw = f["wall"] < t["wall"]
            okr = f["rss"] is not None and f["rss"] < t["rss_mb"] * 1024 if "rss_mb" in t else True
            nj = get(key, "ninja")
            mk = get(key, "make")
            s = "N = %s: flow %.3f s (target < %g s: %s), peak RSS %s MB%s%s%s" % (
                n_str(f["n"]), f["wall"], t["wall"], "met" if okw else "missed", fmt_mb(f["rss"]),
                " (target < %d MB: %s)" % (t["rss_mb"], "met" if okr else "missed") if "rss_mb" in t else "",
                "; ninja %.4f s, flow/ninja %.1f" % (nj["wall"], f["wall"] / nj["wall"]) if nj and nj["wall"] else "",
                "; make %.4f s" % mk["wall"] if mk and mk["wall"] else "")
            s += size_note(t, f["n"]) + "."
            if f["note"]:
                s += " " + f["note"][0].upper() + f["note"][1:] + "."
            verdicts[key] = ("met" if okw and okr else "missed", s,
                             [fmt_s(nj and nj["wall"]), fmt_s(mk and mk["wall"]),
                              "%s s, %s MB" % (fmt_s(f["wall"]), fmt_mb(f["rss"])), ""])

    # ---------------------------------------------------------------- verdicts, issue 13
    aml = sec("aml")
    aml_ns = sorted(set(r["n"] for r in aml))

    def aml_get(tool, n):
        return next((r for r in aml if r["tool"] == tool and r["n"] == n), None)

    v13 = {}               # "speed" / "memory" -> (result, sentence, cells)
    if has13:
        t = AML_TARGET
        n0 = t["n"] if t["n"] in aml_ns else aml_ns[len(aml_ns) // 2]
        f, p = aml_get("flow", n0), aml_get(AML_PEER, n0)
        size = "" if n0 == t["n"] else "At N = %s, not the target's %s (no verdict on the target): " % (
            n_str(n0), n_str(t["n"]))
        if not f or f["wall"] is None:
            v13["speed"] = ("not measured", "flow: %s." % (f["note"] if f else "no data"), ["—"] * 3)
        elif not p or p["wall"] is None:
            v13["speed"] = ("not measured", "the SDK: %s." % (p["note"] if p else "no data"),
                            ["—", fmt_s(f["wall"]), "—"])
        else:
            r = p["wall"] / f["wall"]
            rounds = [b / a for a, b in zip(f["walls"], p["walls"]) if a] if f["reps"] == p["reps"] else []
            sentence = ("N = %s: flow %.3f s, the SDK %.3f s, SDK/flow = **%.1f×** (target ≥ %g×)%s; "
                        "peak RSS: flow %s MB, the SDK %s MB%s" % (
                            n_str(n0), f["wall"], p["wall"], r, t["ratio"],
                            "; per round: " + ", ".join("%.1f×" % x for x in rounds) if len(rounds) > 1 else "",
                            fmt_mb(f["rss"]), fmt_mb(p["rss"]),
                            "".join("; N = %s: flow %.3f s, the SDK %.3f s (%.1f×)" % (
                                n_str(n), aml_get("flow", n)["wall"], aml_get(AML_PEER, n)["wall"],
                                aml_get(AML_PEER, n)["wall"] / aml_get("flow", n)["wall"])
                                for n in aml_ns if n != n0 and aml_get("flow", n) and aml_get(AML_PEER, n)
                                and aml_get("flow", n)["wall"] and aml_get(AML_PEER, n)["wall"])))
            m = re.search(r"(\d+) phases × ([0-9.]+) s.* every ([0-9.]+) s", md.get("Azure ML job clock", ""))
            if m:
                life = int(m.group(1)) * float(m.group(2))
                poll = float(m.group(3))
                # a job is Completed `life` s after its PUT; a poller every `poll` s sees it at the first
                # poll at or after that (a job Completed at once is seen in the PUT's answer)
                seen = math.ceil(life / poll - 1e-9) * poll if poll > 0 else life
                if seen > 0:
                    sentence += (". Each job lives %.2f s on the double's clock and, polled every %g s, is seen "
                                 "Completed %.2f s after its PUT at the earliest, whichever tool polls: a floor "
                                 "under flow's time%s (the SDK's %.3f s ÷ %g = %.3f s)" % (
                                     life, poll, seen,
                                     " above what the target allows" if seen >= p["wall"] / t["ratio"] else "",
                                     p["wall"], t["ratio"], p["wall"] / t["ratio"]))
            v13["speed"] = ("met" if r >= t["ratio"] and not size else "missed" if not size else "not measured",
                            size + sentence + ".", [fmt_s(p["wall"]), fmt_s(f["wall"]), "%.1f×" % r])
        lo, hi = aml_ns[0], aml_ns[-1]
        flo, fhi = aml_get("flow", lo), aml_get("flow", hi)
        plo, phi = aml_get(AML_PEER, lo), aml_get(AML_PEER, hi)
        if lo == hi or not flo or not fhi or flo["rss"] is None or fhi["rss"] is None:
            v13["memory"] = ("not measured", "flow's peak RSS needs two sizes measured.", ["—"] * 3)
        else:
            g = fhi["rss"] / flo["rss"]
            per = (fhi["rss"] - flo["rss"]) / float(hi - lo)
            sentence = ("flow's peak RSS: %s MB (%s) → ×%.2f from N = %s to %s, %.1f KB more a job "
                        "(target: at most ×%g)" % (
                            " / ".join(fmt_mb(aml_get("flow", n)["rss"]) if aml_get("flow", n) else "—" for n in aml_ns),
                            " / ".join("N = " + n_str(n) for n in aml_ns), g, n_str(lo), n_str(hi), per,
                            t["rss_growth"]))
            cells = ["—", "%s → %s MB" % (fmt_mb(flo["rss"]), fmt_mb(fhi["rss"])), "×%.2f" % g]
            if plo and phi and plo["rss"] and phi["rss"]:
                sentence += "; the SDK's: %s MB → %s MB (×%.2f, %.1f KB a job)" % (
                    fmt_mb(plo["rss"]), fmt_mb(phi["rss"]), phi["rss"] / plo["rss"],
                    (phi["rss"] - plo["rss"]) / float(hi - lo))
                cells[0] = "%s → %s MB" % (fmt_mb(plo["rss"]), fmt_mb(phi["rss"]))
            if (lo, hi) != t["rss_ns"]:
                v13["memory"] = ("not measured", "At N = %s → %s, not the target's %s → %s (no verdict on the target): "
                                 % (n_str(lo), n_str(hi), n_str(t["rss_ns"][0]), n_str(t["rss_ns"][1])) + sentence + ".",
                                 cells)
            else:
                v13["memory"] = ("met" if g <= t["rss_growth"] else "missed", sentence + ".", cells)

    # ---------------------------------------------------------------- header
    quick = "--quick" in md.get("settings", "")
    w("# flow benchmark results")
    w("")
    w("Generated by %s on %s. Every number below comes from this one run, "
      "on the machine described at the end; see [README.md](README.md) for what is measured and how." % (
          "`bench/run.sh` (`make bench`)" if targets12 or not has13 else "`bench/aml.sh` (the Azure ML rows alone)",
          md.get("date", "?")))
    w("")
    if quick or any(verdicts[t["key"]][1].find("smoke-test size") >= 0 for t in targets12) or (
            has13 and AML_TARGET["n"] not in aml_ns):
        w("**A smoke test at reduced sizes (%s): the verdicts below say nothing about the targets.**" % (
            md.get("settings") or md.get("Azure ML settings", "?")))
        w("")
    if targets12:
        w("Each row of issue 12's *Targets* table, measured the way it asks: one layered DAG of `touch` "
      "steps, `-j 2` for every tool; for each row the tools run **alternating** (flow, ninja, make[, "
      "Snakemake], flow, ninja, make, …), every full run from a state cleaned with `rm -rf` of the "
      "outputs and the tool's own state (`.flow/`, `.ninja_log`/`.ninja_deps`, `.snakemake/`), as a user "
      "would; wall time is the **median** of the runs, peak RSS (GNU time's maximum resident set size) "
      "the largest of them. Settings: %s." % md.get("settings", "?"))
        w("")
    if has13:
        w("Issue 13 (section %s): N Azure ML command jobs submitted to the loopback Azure ML double and waited "
          "for until Completed, flow against the Azure ML Python SDK, alternating rounds; settings: %s."
          % ("8" if targets12 else "below", md.get("Azure ML settings", "?")))
        w("")

    # ---------------------------------------------------------------- summary
    if targets12:
        w("## Targets (issue 12)")
        w("")
        w("| work | ninja | make | flow | flow/ninja | target | issue 12 (then) | result |")
        w("|---|--:|--:|--:|--:|---|---|---|")
    for t in targets12:
        res, _, cells = verdicts[t["key"]]
        if "ratio" in t:
            tgt = "≤ %.1f× ninja" % t["ratio"]
        elif "parts" in t:
            tgt = " / ".join("< %g ms" % (lim * 1000) for _, _, lim in t["parts"])
        else:
            tgt = "< %g s" % t["wall"] + (", < %d MB" % t["rss_mb"] if "rss_mb" in t else "")
        w("| %s | %s | %s | %s | %s | %s | %s | **%s** |" % (t["work"], cells[0], cells[1], cells[2], cells[3],
                                                          tgt, t["issue"], res))
    if targets12:
        w("")
        w("Times in seconds unless marked; *flow/ninja* is the ratio of the medians.")
        w("")
    if has13:
        t = AML_TARGET
        w("## Targets (issue 13)")
        w("")
        w("| work | azure-ai-ml SDK | flow | SDK/flow | target | result |")
        w("|---|--:|--:|--:|---|---|")
        res, _, c = v13["speed"]
        w("| %s | %s | %s | %s | ≥ %g× | **%s** |" % (t["work"], c[0], c[1], c[2], t["ratio"], res))
        res, _, c = v13["memory"]
        w("| flow's memory flat in the number of jobs: peak RSS, N = %s → %s | %s | %s | %s | flow ≤ ×%g | **%s** |" % (
            n_str(aml_ns[0]), n_str(aml_ns[-1]), c[0], c[1], c[2], t["rss_growth"], res))
        w("")
        w("Times in seconds (medians); *SDK/flow* is the ratio of the medians, ×N the growth of the peak RSS.")
        w("")

    # ---------------------------------------------------------------- command-step tables
    def cmd_table(key, title, intro):
        rs = sec(key)
        if not rs:
            return
        w("## " + title)
        w("")
        if intro:
            w(intro)
            w("")
        rs = sorted(rs, key=lambda r: PEER_ORDER.index(r["tool"]) if r["tool"] in PEER_ORDER else 9)
        nj = wall(key, "ninja")
        w("| tool | N | wall, median (s) | ÷ ninja | peak RSS (MB) | runs | every run (s), in order | note |")
        w("|---|--:|--:|--:|--:|--:|---|---|")
        for r in rs:
            w("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                NAMES.get(r["tool"], r["tool"]), n_str(r["n"]), fmt_s(r["wall"]), fmt_ratio(ratio(r["wall"], nj)),
                fmt_mb(r["rss"]), r["reps"], " ".join(fmt_s(x) for x in r["walls"]) or "—", r["note"]))
        w("")

    tmpfs_where = md.get("tmpfs rows", "")
    cmd_table("disk-small", "1. Command steps on the project's disk (%s), `rm -rf` before each run" % disk_fs,
              "A layered DAG of N `touch` steps (layer width N/100, so 100 layers; each step depends on two of "
              "the previous layer), in %s. Commands: %s. Before every run, outside the timing: `rm -rf` of "
              "the outputs and the tool's state, then `sync -f` of the file system (unless `BENCH_SYNC=0`). "
              "Every run is checked: N outputs exist (flow: in `.flow/data/`, and `run.json` says N done)."
              % (md.get("disk rows", "`bench/work/disk`"),
                 ", ".join(c for t, c in COMMANDS.items() if any(r["tool"] == t and r["walls"] for r in rows))))
    cmd_table("tmpfs-small", "2. The same on tmpfs",
              "The same DAG and commands in %s: no disk, no inode-allocation cost after deletions." % tmpfs_where)
    cmd_table("disk-large", "3. 10,000-step row: command steps on the project's disk (%s)" % disk_fs, "")
    cmd_table("noop-large", "4. No-op rerun of the 10,000-step row",
              "The same command again on the finished outputs of section 3, alternating; nothing may be "
              "rebuilt (checked: no output newer than a marker made before the run; flow's `run.json` says "
              "every step up to date). ninja and make compare timestamps; flow recomputes each step's "
              "fingerprint and compares it with the step's last successful run.")

    # ---------------------------------------------------------------- Lua tables
    def lua_table(key, title, intro, tw):
        rs = sec(key)
        if not rs:
            return
        w("## " + title)
        w("")
        w(intro)
        w("")
        w("| tool | N | wall, median (s) | ÷ target (%g s) | peak RSS (MB) | runs | every run (s), in order | note |" % tw)
        w("|---|--:|--:|--:|--:|--:|---|---|")
        for r in rs:
            w("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                NAMES.get(r["tool"], r["tool"]), n_str(r["n"]), fmt_s(r["wall"]), fmt_ratio(ratio(r["wall"], tw)),
                fmt_mb(r["rss"]), r["reps"], " ".join(fmt_s(x) for x in r["walls"]) or "—", r["note"]))
        w("")

    lua_table("lua", "5. In-process Lua steps: DAG build + run",
              "The same layered shape, each step `func = function(a, b) return 1 end` on its two inputs "
              "(layer 0 takes none), built by a loop in `pipeline.lua`; wall time of the whole "
              "`flow run -j 2` process (start, script, DAG build, run, exit) from `rm -rf .flow`. Every run "
              "is checked (`run.json`: N steps done); *run phase* is `run.json`'s `elapsed`, the scheduler's "
              "part of the wall time.", 1.0)
    lua_table("lua-noop", "6. No-op rerun of the Lua steps",
              "`flow run -j 2` again on the state of section 5's last run; checked: `run.json` says every "
              "step up to date.", 0.5)

    # ---------------------------------------------------------------- start-up
    one = sec("startup")
    if one:
        w("## 7. Start-up: `flow --version` and a one-step `flow run`")
        w("")
        w("hyperfine -N (no shell), after warm-up runs; the pipeline is one `touch` command step, so "
          "after the first warm-up run every timed `flow run` finds it up to date. Peak RSS from one more run.")
        w("")
        w("| command | median | target | ÷ target | peak RSS (MB) | runs | how |")
        w("|---|--:|--:|--:|--:|--:|---|")
        lims = dict((tool, lim) for tool, _, lim in TARGETS[-1]["parts"])
        for r in one:
            lim = lims.get(r["tool"])
            w("| %s | %s | %s | %s | %s | %s | %s |" % (
                NAMES.get(r["tool"], r["tool"]), fmt_ms(r["wall"]), "< %g ms" % (lim * 1000) if lim else "",
                fmt_ratio(ratio(r["wall"], lim)), fmt_mb(r["rss"]), r["reps"], r["note"]))
        w("")

    # ---------------------------------------------------------------- Azure ML
    if has13:
        w("## %sAzure ML dispatch: N command jobs against the loopback double" % ("8. " if targets12 else ""))
        w("")
        w("Both tools submit N command jobs (`python train.py --seed i` on `gpu-cluster`, environment "
          "`azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest`, the project's code snapshot) to "
          "`tests/aml/double.py` over HTTPS on loopback, and wait until every job is Completed (%s). "
          "**flow**: `flow run --env prod` of a pipeline of N steps tagged `gpu` (`dispatch: tagged`), "
          "from `rm -rf .flow`; it PUTs each job and polls it, all on its event loop. "
          "**The SDK**: `bench/aml_sdk/submit.py`, `MLClient.jobs.create_or_update` N times in a row, then "
          "`ml_client.jobs.get` on every job not yet Completed, a sweep every poll interval. Wall time of the "
          "whole process (start, imports, credential, submission, waiting, exit), peak RSS from GNU time. "
          "Every round is checked in the double's request log: exactly N jobs created (PUT 201), no request "
          "refused, the code snapshot not uploaded again; flow's `run.json` says N done, the SDK's driver "
          "that N jobs are Completed. See [README.md](README.md) for what each side needed." % (
              md.get("Azure ML settings", "")))
        w("")
        w("| tool | N | wall, median (s) | ÷ flow | peak RSS (MB) | runs | every run (s), in order | note |")
        w("|---|--:|--:|--:|--:|--:|---|---|")
        for n in aml_ns:
            f = aml_get("flow", n)
            for tool in ("flow", AML_PEER):
                r = aml_get(tool, n)
                if not r:
                    continue
                w("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    "azure-ai-ml SDK" if tool == AML_PEER else tool, n_str(n), fmt_s(r["wall"]),
                    fmt_ratio(ratio(r["wall"], f and f["wall"])), fmt_mb(r["rss"]), r["reps"],
                    " ".join(fmt_s(x) for x in r["walls"]) or "—", r["note"].replace("|", "\\|")))
        w("")

    # ---------------------------------------------------------------- large memory values
    vals, edit = get("values", "flow-values"), get("values-edit", "flow-values")
    if vals:
        num = (9 if has13 else 8) if targets12 else 0
        w("## %sLarge memory values (no target)" % ("%d. " % num if num else ""))
        w("")
        w("A chain of N Lua steps, each handing the next a table of 20,000 numbers (about 200 KB "
          "serialised), and a last step reading the chain's end and parameter `k` (`bench/gen.py --values`). "
          "Such values are not kept between runs ([docs/data.md](../docs/data.md#memory-values-between-runs)): "
          "the run from `rm -rf .flow` writes nothing of them, and the rerun with `--params k=…` (only the last "
          "step runs; checked in `run.json`) has every function of the chain called again for it. Alternating: "
          "a run from clean, then the rerun, each round.")
        w("")
        w("| run | N | wall, median (s) | peak RSS (MB) | runs | every run (s), in order | note |")
        w("|---|--:|--:|--:|--:|---|---|")
        for label, r in (("from clean", vals), ("the last step's parameter changed", edit)):
            if r:
                w("| %s | %s | %s | %s | %s | %s | %s |" % (
                    label, n_str(r["n"]), fmt_s(r["wall"]), fmt_mb(r["rss"]), r["reps"],
                    " ".join(fmt_s(x) for x in r["walls"]) or "—", r["note"]))
        w("")

    # ---------------------------------------------------------------- analysis
    w("## Analysis against the targets")
    w("")
    if targets12:
        w("One paragraph per row of issue 12's table: met or missed, with the numbers of this run. "
          "A missed target has a profile paragraph (where the time or memory goes) to fill in.")
        w("")
    for t in targets12:
        res, s, _ = verdicts[t["key"]]
        w("**%s: %s.** %s" % (t["work"][0].upper() + t["work"][1:], res, s))
        w("")
        if res == "missed":
            w("Profile: (to be filled)")
            w("")
    if has13:
        for key, title in (("speed", "Issue 13, %s" % AML_TARGET["work"]),
                           ("memory", "Issue 13, flow's memory flat in the number of jobs")):
            res, s, _ = v13[key]
            w("**%s: %s.** %s" % (title, res, s))
            w("")
            if res == "missed":
                w("Profile: (to be filled)")
                w("")
    w("The machine has 2 CPUs and is not isolated: other work during the run shows in the numbers "
      "(±20 % between repetitions is common). The runs alternate, so such noise falls on flow and the "
      "peers alike, and the ratios are more robust than the absolute times.")
    w("")

    w("## Machine")
    w("")
    w("| | |")
    w("|---|---|")
    for k, v in mach:
        w("| %s | %s |" % (k, v.replace("|", "\\|")))
    w("")

    text = "\n".join(out) + "\n"
    with open(out_path, "w") as f:
        f.write(text)
    for line in out:
        if line.startswith("|") or line.startswith("## ") or line.startswith("**") or line.startswith("Profile:"):
            print(line)


if __name__ == "__main__":
    main()
