#!/usr/bin/env python3
"""Sequential streamed requests whose answer comes all at once, each on a
new connection, and the CPU a proxy spent on them.

    tokentap sim --listen 127.0.0.1:8000 &                 # the upstream
    taskset -c 1 tokentap run -c tap.yaml &                # or nginx, on core 1
    taskset -c 0 scripts/burst-streams.py 127.0.0.1:8080 2000 PID [--gap-ms G]

Each request asks the simulator for 4 tokens with no pacing
(`x-sim: ttft-ms=0,itl-ms=0`), so head, events, `[DONE]` and the end leave
the simulator together: what a relay does with pieces that arrive
together decides its cost here. Prints the CPU (user + system, from
/proc/PID/task/*/schedstat, every thread, in nanoseconds; children not
included: for nginx give the worker's pid) per stream, and the client's
time to the first event (p50). `--gap-ms` waits that long after each
stream: the proxy goes idle between requests, as in S2 at concurrency 1,
so what a request costs from a cold cache shows (0, the default: back to
back, hot). With `tcpdump -i lo -w F.pcap` running, the capture shows the
segments per answer (scripts/ttft-timeline.py reads it).
"""

import argparse
import os
import socket
import statistics
import sys
import time

BODY = (
    b'{"model":"sim-4x0","stream":true,"max_tokens":4,'
    b'"messages":[{"role":"user","content":"benchmark"}]}'
)


def request():
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
        b"content-type: application/json\r\n"
        b"x-sim: ttft-ms=0,itl-ms=0,output-tokens=4,numbered=true\r\n"
        b"content-length: %d\r\n\r\n" % len(BODY)
    ) + BODY


def cpu_ns(pid):
    """CPU time of every thread of pid so far (schedstat's first field)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass  # a thread that ended in between
    return total


def one_stream(host, port):
    """Seconds from the request's send to the first read with an event."""
    with socket.create_connection((host, port)) as s:
        sent = time.perf_counter()
        s.sendall(request())
        seen = b""
        first = None
        # The last chunk's CRLF, then the terminator (not the head's end).
        while not (b"[DONE]" in seen and seen.endswith(b"\r\n0\r\n\r\n")):
            piece = s.recv(65536)
            if not piece:
                break
            seen += piece
            if first is None and b"data:" in seen:
                first = time.perf_counter() - sent
    if b"[DONE]" not in seen:
        sys.exit(f"an answer without [DONE]: {seen[:200]!r}")
    return first


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("addr", help="the proxy's HOST:PORT")
    ap.add_argument("n", type=int, help="streams")
    ap.add_argument("pid", type=int, help="the proxy's process (nginx: its worker)")
    ap.add_argument("--gap-ms", type=float, default=0.0,
                    help="idle time after each stream (default 0: back to back)")
    a = ap.parse_args()
    host, port = a.addr.rsplit(":", 1)
    before = cpu_ns(a.pid)
    firsts = []
    for _ in range(a.n):
        firsts.append(one_stream(host, int(port)))
        if a.gap_ms > 0:
            time.sleep(a.gap_ms / 1000)
    per_stream_us = (cpu_ns(a.pid) - before) / a.n / 1000
    first_us = statistics.median(firsts) * 1e6
    print(f"{a.n} streams, {a.gap_ms:g} ms apart: {per_stream_us:.1f} µs of CPU per stream, "
          f"first event at the client p50 {first_us:.0f} µs (pid {a.pid})")


if __name__ == "__main__":
    main()
