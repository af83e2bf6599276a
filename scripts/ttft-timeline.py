#!/usr/bin/env python3
"""Where a proxy's time to first token goes, from a packet capture.

Capture loopback while `tokentap bench` runs (the bench's run directory
has each system's listen port and the simulator's in its configs):

    tcpdump -i lo -nn -s 96 -w all.pcap tcp &
    tokentap bench --systems tokentap,nginx --cells s2 --rounds 1
    scripts/ttft-timeline.py all.pcap PROXY_PORT SIMULATOR_PORT

For every client connection to PROXY_PORT: the client's request segment,
the proxy's request to the simulator, the simulator's first answer
segment, and the proxy's first segment to the client carrying an event
(the first data segment, or the second when the first is a head alone,
under 250 bytes). Prints the medians of each step, in microseconds, and
the data segments per response. Reads only TCP headers (tcpdump's text
output), never payloads.
"""

import re
import statistics
import subprocess
import sys

SEGMENT = re.compile(
    r"([\d.]+) IP [\d.]+\.(\d+) > [\d.]+\.(\d+): Flags \[([^\]]*)\].* length (\d+)"
)


def segments(pcap, proxy, upstream):
    text = subprocess.run(
        ["tcpdump", "-r", pcap, "-nn", "-tt", f"port {proxy} or port {upstream}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out = []
    for line in text.splitlines():
        m = SEGMENT.match(line)
        if m:
            t, src, dst, flags, n = m.groups()
            out.append((float(t), int(src), int(dst), flags, int(n)))
    return out


def timeline(segs, proxy, upstream):
    rows = []
    clients = [s for _, s, d, f, _ in segs if d == proxy and f == "S"]
    for c in clients:
        conn = [x for x in segs if {x[1], x[2]} == {c, proxy}]
        request = next((x for x in conn if x[1] == c and x[4] > 0), None)
        answer = [x for x in conn if x[1] == proxy and x[4] > 0]
        if request is None or not answer:
            continue
        first = answer[0]
        event = first if first[4] >= 250 or len(answer) == 1 else answer[1]
        up_request = next(
            (x for x in segs if x[2] == upstream and x[4] > 0 and x[0] >= request[0]), None
        )
        if up_request is None:
            continue
        up_answer = next(
            (x for x in segs if x[1] == upstream and x[4] > 0 and x[0] >= up_request[0]), None
        )
        if up_answer is None:
            continue
        rows.append(
            {
                "request → upstream request": up_request[0] - request[0],
                "upstream request → its answer": up_answer[0] - up_request[0],
                "upstream answer → client event": event[0] - up_answer[0],
                "request → client event": event[0] - request[0],
                "segments": len(answer),
            }
        )
    return rows


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    pcap, proxy, upstream = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rows = timeline(segments(pcap, proxy, upstream), proxy, upstream)
    if not rows:
        sys.exit("no complete exchange through that port")
    print(f"port {proxy}: {len(rows)} streams (medians)")
    for key in rows[0]:
        m = statistics.median(r[key] for r in rows)
        print(f"  {key}: {m:.0f}" if key == "segments" else f"  {key}: {m * 1e6:.0f} µs")


if __name__ == "__main__":
    main()
