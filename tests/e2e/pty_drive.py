#!/usr/bin/python3
"""Drives a program on a pseudo-terminal, as a person at a keyboard would.

    pty_drive.py SCRIPT -- COMMAND [ARGS...]

SCRIPT is a file of steps, one per line:
    send TEXT        type TEXT (escapes: \\n Enter, \\t Tab, \\x03 Ctrl-C, \\x04 Ctrl-D, \\\\);
                     Ctrl-D only once the program reads the terminal raw (after
                     its prompt): in the line discipline's cooked mode it is
                     an end of file the program may never see
    expect REGEX     wait (10 s at most) until the screen's text since the last
                     expect matches REGEX (Python re, DOTALL)
    sleep SECONDS
    signal NAME      send the program signal SIGNAME (TERM, HUP)
    exit N           wait (10 s at most) for the program to exit with status N
Everything the program wrote is printed at the end (and on failure, with what
was expected); the exit status is 0 when every step held, 1 otherwise.
"""
import os
import pty
import re
import select
import signal
import sys
import time


def unescape(s):
    return s.encode().decode("unicode_escape").encode("latin-1")


def main(argv):
    script, cmd = argv[0], argv[argv.index("--") + 1:]
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm"
        os.environ.setdefault("COLUMNS", "100")
        # a terminal session's hang-up as a terminal gives it: run under
        # nohup, the tests' SIGHUP was ignored, and flow (rightly) kept on
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        os.execvp(cmd[0], cmd)
    seen = b""           # everything
    mark = 0             # where the next expect starts looking
    status = None

    def pump(timeout):
        """Reads what the program wrote within `timeout`; False once it closed the terminal."""
        nonlocal seen
        r, _, _ = select.select([fd], [], [], timeout)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return False
            if not data:
                return False
            seen += data
        return True

    def fail(why):
        sys.stdout.write(seen.decode("utf-8", "replace"))
        sys.stdout.write("\n--- pty_drive: %s\n" % why)
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        sys.exit(1)

    with open(script) as f:
        steps = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#")]
    for step in steps:
        verb, _, arg = step.partition(" ")
        if verb == "send":
            os.write(fd, unescape(arg))
        elif verb == "signal":
            os.kill(pid, getattr(signal, "SIG" + arg))
        elif verb == "sleep":
            end = time.time() + float(arg)
            while time.time() < end:
                pump(0.05)
        elif verb == "expect":
            rx = re.compile(arg.encode(), re.S)
            end = time.time() + 10
            while True:
                # the screen's text without the terminal's control sequences
                text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]|\r", b"", seen[mark:])
                m = rx.search(text)
                if m:
                    mark = len(seen)
                    break
                if time.time() > end:
                    fail("expected %r" % arg)
                if not pump(0.1):
                    fail("the program ended; expected %r" % arg)
        elif verb == "exit":
            end = time.time() + 10
            while status is None and time.time() < end:
                pump(0.05)
                done, st = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = os.waitstatus_to_exitcode(st)
            if status is None:
                fail("the program did not exit; expected exit status %s" % arg)
            end = time.time() + 2           # what it wrote last
            while time.time() < end and pump(0.05):
                pass
            if status != int(arg):
                fail("exit status %r, expected %s" % (status, arg))
        else:
            fail("unknown step %r" % step)
    sys.stdout.write(seen.decode("utf-8", "replace"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
