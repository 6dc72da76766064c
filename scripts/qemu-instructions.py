#!/usr/bin/env python3
"""Instructions an arm64 program executes under qemu-user: time means nothing there, a count does.

    scripts/qemu-instructions.py SYSROOT PROGRAM [ARGS...]

Runs PROGRAM with `qemu-aarch64-static -L SYSROOT -d in_asm,exec,nochain` (qemu 7.2 has no TCG plugins, and
valgrind has no arm64 build here) and counts from qemu's own log: each translation block is logged once as it is
translated (`IN:` and its instructions) and each time it runs (`Trace`, chaining off so that every run is logged);
the count is the sum, over the runs, of the block's instructions. The log goes through a FIFO, never to disk.
Prints the count on standard output when the program ends; on SIGUSR1 prints the count so far on standard error
(`mark N`), so that a caller can count what lies between two moments of a long-running program (the daemon:
mark, N announcements, mark); SIGTERM stops the program (the count of what ran is still printed). PROGRAM's own
output goes to standard error; its exit status is this script's.

A block left early (a fault, a syscall that does not return) counts whole: a few instructions per such event.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile

if len(sys.argv) < 3:
    sys.exit(__doc__)
sysroot, command = sys.argv[1], sys.argv[2:]

directory = tempfile.mkdtemp(prefix="qemu-count-")
fifo = os.path.join(directory, "log")
os.mkfifo(fifo)
total = 0


def mark(*_):  # a signal handler: Python runs it in this (the only) thread, between two lines of the loop
    print(f"mark {total}", file=sys.stderr, flush=True)


signal.signal(signal.SIGUSR1, mark)
process = subprocess.Popen(
    ["qemu-aarch64-static", "-L", sysroot, "-d", "in_asm,exec,nochain", "-D", fifo] + command,
    stdout=sys.stderr)
signal.signal(signal.SIGTERM, lambda *_: process.terminate())
signal.signal(signal.SIGINT, lambda *_: process.terminate())

instruction = re.compile(rb"^0x([0-9a-f]+):")
trace = re.compile(rb"^Trace \d+: \S+ \[[0-9a-f]+/([0-9a-f]+)/")
sizes = {}  # block start (guest address) → instructions in it
block_start, block_size = None, 0
with open(fifo, "rb") as log:
    for line in log:
        if line.startswith(b"Trace"):
            found = trace.match(line)
            if found:
                total += sizes.get(int(found.group(1), 16), 0)
            continue
        found = instruction.match(line)
        if found:
            if block_start is None:
                block_start = int(found.group(1), 16)
            block_size += 1
        elif block_start is not None:  # the blank line after a block's instructions
            sizes[block_start] = block_size
            block_start, block_size = None, 0
status = process.wait()
os.unlink(fifo)
os.rmdir(directory)
print(total)
sys.exit(status)
