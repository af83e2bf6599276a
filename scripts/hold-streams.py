#!/usr/bin/env python3
"""Hold N streams open through a proxy and report what the proxy spent.

    scripts/hold-streams.py HOST:PORT N SECONDS PID

Opens N streaming chat requests (1 ms apart) to HOST:PORT, which must lead
to `tokentap sim` (the simulator paces every stream at 20 ms per event and
keeps it going for SECONDS), reads them all until SECONDS have passed, then
prints, for the process PID (the proxy: tokentap, nginx's worker, ...):

- its RSS (VmRSS) idle and with every stream open (sampled 70 % in);
- its CPU (the sum of its threads' `schedstat` run time) per event
  received, over the whole run.

The rig behind vendor/README.md's memory and clock-thread figures: pin the
proxy to one core and run this (and the simulator) on the other, e.g.
`taskset -c 0 scripts/hold-streams.py 127.0.0.1:8081 1000 6 $(pgrep -f 'tokentap run')`
for 1,000 open streams, `... 1 8 ...` for one stream at a time.
"""

import os
import selectors
import socket
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_ns(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended between listing and reading
    return total


def request(events, i):
    body = (
        '{"model":"sim-%dx20","stream":true,"max_tokens":%d,'
        '"messages":[{"role":"user","content":"benchmark"}]}' % (events, events)
    ).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\n"
        "content-type: application/json\r\nauthorization: Bearer sk-bench\r\n"
        "content-length: %d\r\n"
        "x-sim: ttft-ms=0,itl-ms=20,output-tokens=%d,numbered=true\r\n"
        "x-request-id: hold-%d\r\n\r\n" % (len(body), events, i)
    ).encode()
    return head + body


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    host, port = sys.argv[1].rsplit(":", 1)
    n, secs, pid = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    events = int(secs * 50) + 50  # outlasts the hold
    idle = rss_kib(pid)
    cpu0 = cpu_ns(pid)
    sel = selectors.DefaultSelector()
    socks = []
    for i in range(n):
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(request(events, i))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        socks.append(s)
        time.sleep(0.001)
    start = time.time()
    end = start + secs
    received = 0
    held = None
    while time.time() < end:
        if held is None and time.time() > start + 0.7 * secs:
            held = rss_kib(pid)
        for key, _ in sel.select(0.05):
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            received += data.count(b"data: {")
    cpu1 = cpu_ns(pid)
    for s in socks:
        s.close()
    per_event = (cpu1 - cpu0) / 1e3 / max(received, 1)
    print(
        f"{n} streams for {secs:g} s: RSS idle {idle} KiB, open {held} KiB "
        f"({(held or 0) / 1024:.1f} MiB); {received} events, "
        f"{per_event:.1f} µs of the proxy's CPU per event"
    )


if __name__ == "__main__":
    main()
