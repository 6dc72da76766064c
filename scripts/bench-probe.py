#!/usr/bin/env python3
"""Measuring helpers for scripts/bench.sh (docs/benchmarks.md). Standard library only.

  bench-probe.py onset ROUNDS NAME=COMMAND...   exec → first sample on the rig's monitor, variants interleaved
  bench-probe.py latency SOCKET N [LOG]         N (≤ 1000) payments one after the other on one connection, each
                                                waited for; the daemon's own request → first-sample times (history)
                                                and, from its LOG, the journal commit's share of each
  bench-probe.py burst SOCKET CLIENTS PER       CLIENTS connections sending PER payments each at once
  bench-probe.py sustain SOCKET N [short]       N payments queued back to back; waits until all were spoken
                                                (short: whole 1–9 yuan, the shortest announcements)
  bench-probe.py request ROUNDS COMMAND         exec → the request line received, for a client COMMAND whose
                                                socket is {socket} (a stand-in server that reads one line, closes)
  bench-probe.py cpu N AMOUNT WAV NAME=SOCKET:PID...
                                                CPU per announcement, side by side: for each daemon, its whole
                                                process's CPU time (all threads, the kernel's precise per-process
                                                clock) from the request to the reply that it was heard, and its
                                                threads' wake-ups; for `aplay -D pulse WAV` the child's rusage

The onset probe needs the rig's environment (PULSE_SERVER …) and reads the null sink's monitor through parec.
Times come from time.monotonic_ns(); the parec stream gives the position of the first loud sample inside a
chunk, so a chunk's arrival time is corrected back to that sample.
"""
import json
import os
import re
import select
import socket
import statistics
import subprocess
import sys
import threading
import time

RATE = 16000
THRESHOLD = 300  # as AudioMatch.onset in the tests


def percentile(values, p):
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, int(round(p / 100 * len(ordered) + 0.5)) - 1))
    return ordered[index]


class Monitor:
    """The rig sink's monitor as a stream of 16-bit samples with arrival times."""

    def __init__(self):
        self.process = subprocess.Popen(
            ["parec", "-d", "speaker.monitor", "--raw", "--format=s16le", f"--rate={RATE}", "--channels=1",
             "--latency-msec=5"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.fd = self.process.stdout.fileno()
        self.pending = b""

    def chunks(self, timeout):
        """Yields (arrival_ns, samples) until timeout seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                return
            data = os.read(self.fd, 65536)
            now = time.monotonic_ns()
            if not data:
                return
            data = self.pending + data
            usable = len(data) - len(data) % 2
            self.pending = data[usable:]
            samples = memoryview(data[:usable]).cast("h")
            yield now, samples

    def wait_quiet(self, quiet_ms=400, timeout=30):
        """Returns once the monitor has been silent for quiet_ms."""
        quiet_since = time.monotonic_ns()
        for now, samples in self.chunks(timeout):
            if any(abs(s) > THRESHOLD for s in samples):
                quiet_since = now
            elif now - quiet_since > quiet_ms * 1_000_000:
                return
        raise RuntimeError("the rig never went quiet")

    def onset_after(self, start_ns, timeout=10):
        """The time of the first loud sample heard after start_ns."""
        for now, samples in self.chunks(timeout):
            for index, sample in enumerate(samples):
                if abs(sample) > THRESHOLD:
                    # Sample `index` of this chunk: the chunk's last sample arrived at `now`.
                    return now - (len(samples) - 1 - index) * 1_000_000_000 // RATE
        return None

    def close(self):
        self.process.kill()
        self.process.wait()


def onset(rounds, variants):
    monitor = Monitor()
    results = {name: [] for name, _ in variants}
    failures = {name: 0 for name, _ in variants}
    try:
        monitor.wait_quiet()
        for _ in range(rounds):
            for name, command in variants:
                monitor.wait_quiet()
                started = time.monotonic_ns()
                process = subprocess.Popen(command, shell=True, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                heard = monitor.onset_after(started)
                process.wait(timeout=30)
                if heard is None or heard < started:
                    failures[name] += 1
                    continue
                results[name].append((heard - started) / 1e6)
    finally:
        monitor.close()
    report = {}
    for name, values in results.items():
        report[name] = {
            "n": len(values), "failed": failures[name], "median_ms": statistics.median(values) if values else None,
            "p10_ms": percentile(values, 10), "p90_ms": percentile(values, 90), "min_ms": min(values, default=None),
        }
    print(json.dumps(report))


class Connection:
    def __init__(self, path):
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.socket.connect(path)
        self.file = self.socket.makefile("rb")

    def send(self, request):
        self.socket.sendall((json.dumps(request) + "\n").encode())

    def reply(self):
        line = self.file.readline()
        if not line:
            raise RuntimeError("the daemon closed the connection")
        return json.loads(line)

    def request(self, request):
        self.send(request)
        reply = self.reply()
        while not reply.get("done", True):
            reply = self.reply()
        return reply


def journal_times(log):
    """job id → journal commit ms, from the daemon's "job accepted" log lines."""
    times = {}
    for line in open(log, errors="replace"):
        if "job accepted" not in line:
            continue
        job, journal = re.search(r"job\.id=(\d+)", line), re.search(r"journal_ms=([0-9.]+)", line)
        if job and journal:
            times[int(job.group(1))] = float(journal.group(1))
    return times


def latency(path, count, log=None):
    connection = Connection(path)
    first = None
    for index in range(count):
        reply = connection.request({"op": "say", "fen": 100 + index, "wait": True})
        if not reply.get("ok"):
            raise RuntimeError(f"job {index}: {reply}")
        first = first or reply["job"]["id"]
    # history answers at most 1000 jobs, newest first.
    jobs = connection.request({"op": "history", "limit": min(1000, count)})["jobs"]
    measured = [job for job in jobs if job["id"] >= first and "firstSampleMs" in job]
    times = [job["firstSampleMs"] for job in measured]
    report = {
        "n": len(times), "p50_ms": percentile(times, 50), "p95_ms": percentile(times, 95),
        "p99_ms": percentile(times, 99), "max_ms": max(times), "mean_ms": statistics.fmean(times),
    }
    if log:
        journal = journal_times(log)
        commits = [journal[job["id"]] for job in measured if job["id"] in journal]
        rest = [job["firstSampleMs"] - journal[job["id"]] for job in measured if job["id"] in journal]
        report.update({
            "journal_p50_ms": percentile(commits, 50), "journal_p99_ms": percentile(commits, 99),
            "journal_max_ms": max(commits, default=float("nan")),
            "without_journal_p50_ms": percentile(rest, 50), "without_journal_p99_ms": percentile(rest, 99),
            "without_journal_max_ms": max(rest, default=float("nan")),
        })
    print(json.dumps(report))


def burst(path, clients, per_client):
    results = [None] * clients
    barrier = threading.Barrier(clients + 1)

    def client(number):
        connection = Connection(path)
        accepted, refused = [], {}
        barrier.wait()
        for index in range(per_client):
            reply = connection.request(
                {"id": f"{number}-{index}", "op": "say", "fen": number * 1000 + index + 1,
                 "order": f"B{os.getpid()}-{number}-{index}"})
            if reply.get("ok"):
                accepted.append(reply["job"]["id"])
            else:
                code = reply.get("error", {}).get("code")
                refused[code] = refused.get(code, 0) + 1
        results[number] = (accepted, refused)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.monotonic()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    accepted = [job for result in results for job in result[0]]
    refused = {}
    for result in results:
        for code, count in result[1].items():
            refused[code] = refused.get(code, 0) + count
    in_order = all(result[0] == sorted(result[0]) for result in results)
    # Every accepted job is spoken: wait until the queue has drained, then count what the journal says.
    connection = Connection(path)
    deadline = time.monotonic() + 600
    while connection.request({"op": "status"})["status"]["queue"]["unfinished"] > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the burst never drained")
        time.sleep(0.1)
    drained = time.monotonic() - started
    jobs = connection.request({"op": "history", "limit": 1000})["jobs"]
    spoken = sum(1 for job in jobs if job["id"] in set(accepted) and job["state"] == "spoken")
    print(json.dumps({
        "clients": clients, "requests": clients * per_client, "accepted": len(accepted), "refused": refused,
        "unique_ids": len(set(accepted)), "per_client_order_kept": in_order, "spoken": spoken,
        "accept_seconds": elapsed, "accept_per_second": len(accepted) / elapsed, "drained_seconds": drained,
    }))


def sustain(path, count, short=False):
    connection = Connection(path)
    started = time.monotonic()
    ids = []
    refused_full = 0
    for index in range(count):
        fen = 100 * (1 + index % 9) if short else 100 + index % 900
        while True:
            reply = connection.request({"op": "say", "fen": fen})
            # More than the queue's bound: queue_full changes nothing, so a client waits and sends it again.
            if reply.get("ok") or reply.get("error", {}).get("code") != "queue_full":
                break
            refused_full += 1
            time.sleep(0.2)
        if not reply.get("ok"):
            raise RuntimeError(f"job {index}: {reply}")
        ids.append(reply["job"]["id"])
    while connection.request({"op": "status"})["status"]["queue"]["unfinished"] > 0:
        time.sleep(0.5)
    elapsed = time.monotonic() - started
    states = {}
    for job in connection.request({"op": "history", "limit": min(count, 1000)})["jobs"]:
        states[job["state"]] = states.get(job["state"], 0) + 1
    print(json.dumps({"n": count, "seconds": elapsed, "states_of_last_1000": states, "queue_full": refused_full}))


def request_time(rounds, command):
    """Median and p10/p90 of exec → request line received, through a listening socket of our own."""
    path = f"/tmp/ann-probe-{os.getpid()}.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    times = []
    try:
        for _ in range(rounds):
            started = time.monotonic_ns()
            process = subprocess.Popen(command.replace("{socket}", path), shell=False if " " not in command else True,
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            connection, _ = server.accept()
            data = b""
            while not data.endswith(b"\n"):
                chunk = connection.recv(65536)
                if not chunk:
                    break
                data += chunk
            received = time.monotonic_ns()
            connection.close()
            process.wait()
            if data.endswith(b"\n"):
                times.append((received - started) / 1e6)
            time.sleep(0.02)
    finally:
        server.close()
        os.unlink(path)
    print(json.dumps({"n": len(times), "median_ms": statistics.median(times), "p10_ms": percentile(times, 10),
                      "p90_ms": percentile(times, 90), "min_ms": min(times)}))


def process_cpu_ns(pid):
    """The CPU time of every thread of `pid`, living or ended (CLOCK_PROCESS_CPUTIME_ID of another process)."""
    return time.clock_gettime_ns(((~pid) << 3) | 2)


def wakeups(pid):
    """Times the threads of `pid` now alive were put on a CPU (/proc/PID/task/*/schedstat, 3rd field)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{task}/schedstat").read().split()[2])
        except (OSError, IndexError):
            pass
    return total


def cpu(rounds, amount, wav, daemons):
    results = {name: {"cpu_ms": [], "wakeups": [], "heard_ms": []} for name, _, _ in daemons}
    results["aplay"] = {"cpu_ms": [], "wakeups": [], "heard_ms": []}
    for _ in range(rounds):
        for name, path, pid in daemons:
            connection = Connection(path)
            before, woken, started = process_cpu_ns(pid), wakeups(pid), time.monotonic_ns()
            reply = connection.request({"op": "say", "amount": amount, "wait": True})
            after, woken_after, ended = process_cpu_ns(pid), wakeups(pid), time.monotonic_ns()
            if not reply.get("ok") or reply.get("job", {}).get("state") != "spoken":
                raise RuntimeError(f"{name}: {reply}")
            results[name]["cpu_ms"].append((after - before) / 1e6)
            results[name]["wakeups"].append(woken_after - woken)
            results[name]["heard_ms"].append((ended - started) / 1e6)
            connection.socket.close()
            time.sleep(0.3)
        started = time.monotonic_ns()
        process = subprocess.Popen(["aplay", "-q", "-D", "pulse", wav], stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        if status != 0:
            raise RuntimeError(f"aplay exited {status}")
        results["aplay"]["cpu_ms"].append((usage.ru_utime + usage.ru_stime) * 1e3)
        results["aplay"]["wakeups"].append(usage.ru_nvcsw + usage.ru_nivcsw)
        results["aplay"]["heard_ms"].append((time.monotonic_ns() - started) / 1e6)
        time.sleep(0.3)
    report = {}
    for name, values in results.items():
        report[name] = {key: statistics.median(v) for key, v in values.items()}
        report[name]["cpu_min_ms"] = min(values["cpu_ms"])
        report[name]["n"] = len(values["cpu_ms"])
    print(json.dumps(report))


def main():
    mode, arguments = sys.argv[1], sys.argv[2:]
    if mode == "onset":
        variants = [tuple(item.split("=", 1)) for item in arguments[1:]]
        onset(int(arguments[0]), variants)
    elif mode == "latency":
        latency(arguments[0], int(arguments[1]), arguments[2] if len(arguments) > 2 else None)
    elif mode == "burst":
        burst(arguments[0], int(arguments[1]), int(arguments[2]))
    elif mode == "request":
        request_time(int(arguments[0]), arguments[1])
    elif mode == "cpu":
        daemons = []
        for item in arguments[3:]:
            name, target = item.split("=", 1)
            path, pid = target.rsplit(":", 1)
            daemons.append((name, path, int(pid)))
        cpu(int(arguments[0]), arguments[1], arguments[2], daemons)
    elif mode == "sustain":
        sustain(arguments[0], int(arguments[1]), len(arguments) > 2 and arguments[2] == "short")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
