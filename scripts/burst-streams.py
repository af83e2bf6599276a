#!/usr/bin/env python3
"""Sequential streamed requests whose answer comes all at once, each on a
new connection, and the CPU a proxy spent on them.

    tokentap sim --listen 127.0.0.1:8000 &                 # the upstream
    taskset -c 1 tokentap run -c tap.yaml &                # or nginx, on core 1
    taskset -c 0 scripts/burst-streams.py 127.0.0.1:8080 2000 PID

Each request asks the simulator for 4 tokens with no pacing
(`x-sim: ttft-ms=0,itl-ms=0`), so head, events, `[DONE]` and the end leave
the simulator together: what a relay does with pieces that arrive
together decides its cost here. Prints the CPU (user + system, from
/proc/PID/stat, every thread; children not included: for nginx give the
worker's pid) per stream; /proc counts 10 ms ticks, so send 2,000 or more.
With `tcpdump -i lo -w F.pcap` running, the
capture shows the segments per answer (scripts/ttft-timeline.py reads it).
"""

import os
import socket
import sys

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


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime: fields 14 and 15 of stat, 12 and 13 after the comm.
    return int(fields[11]) + int(fields[12])


def one_stream(host, port):
    with socket.create_connection((host, port)) as s:
        s.sendall(request())
        seen = b""
        # The last chunk's CRLF, then the terminator (not the head's end).
        while not (b"[DONE]" in seen and seen.endswith(b"\r\n0\r\n\r\n")):
            piece = s.recv(65536)
            if not piece:
                break
            seen += piece
    if b"[DONE]" not in seen:
        sys.exit(f"an answer without [DONE]: {seen[:200]!r}")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    host, port = sys.argv[1].rsplit(":", 1)
    n, pid = int(sys.argv[2]), int(sys.argv[3])
    before = cpu_ticks(pid)
    for _ in range(n):
        one_stream(host, int(port))
    ticks = cpu_ticks(pid) - before
    per_stream_us = ticks / os.sysconf("SC_CLK_TCK") / n * 1e6
    print(f"{n} streams: {per_stream_us:.0f} µs of CPU per stream (pid {pid})")


if __name__ == "__main__":
    main()
