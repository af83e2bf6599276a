#!/usr/bin/env python3
"""A relay's own delay for every streamed event, from a loopback capture.

    tcpdump -i lo -nn -s 0 -w all.pcap tcp &
    tokentap bench --systems tokentap --cells s5 --s5-max 256 --rounds 1
    scripts/relay-delay.py all.pcap PROXY_PORT UPSTREAM_PORT

Pairs each client connection to PROXY_PORT with its upstream exchange by
the request's `x-request-id` (the bench sets one per stream; a pooled
upstream connection's segments are split at each request it carries),
then matches every segment the upstream sent to the client segment that
carries its last byte (a transparent relay forwards the same bytes, so
offsets agree). Prints the delay's distribution and, in 10 ms bins from
the first event, when the events over 1 ms were: a stall shows as a
cluster. Needs full payloads (`-s 0`): it reads the request ids. Reads a
classic pcap of Ethernet frames (tcpdump's default on `lo`).
"""

import collections
import re
import struct
import sys

RID = re.compile(rb"x-request-id: *([^\r\n]+)", re.I)


def segments(path):
    with open(path, "rb") as f:
        head = f.read(24)
        nanos = struct.unpack("<I", head[:4])[0] == 0xA1B23C4D
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            sec, frac, incl, _ = struct.unpack("<IIII", rec)
            frame = f.read(incl)
            ip = frame[14:]
            tcp = ip[(ip[0] & 15) * 4:]
            sport, dport = struct.unpack(">HH", tcp[:4])
            payload = tcp[(tcp[12] >> 4) * 4:]
            if payload:
                yield sec + frac / (1e9 if nanos else 1e6), sport, dport, payload


def delays(path, proxy, upstream):
    down, up = collections.defaultdict(list), collections.defaultdict(list)
    client_id, up_requests = {}, collections.defaultdict(list)
    for t, sport, dport, payload in segments(path):
        m = RID.search(payload)
        if dport == proxy and m:
            client_id[sport] = m.group(1)
        elif sport == proxy:
            down[dport].append((t, len(payload)))
        elif dport == upstream and m:
            up_requests[sport].append((t, m.group(1)))
        elif sport == upstream:
            up[dport].append((t, len(payload)))
    by_id = {}
    for port, reqs in up_requests.items():
        for i, (t0, rid) in enumerate(reqs):
            t1 = reqs[i + 1][0] if i + 1 < len(reqs) else float("inf")
            by_id[rid] = [s for s in up[port] if t0 <= s[0] < t1]
    out = []
    for port, rid in client_id.items():
        sent, got = by_id.get(rid), down.get(port)
        if not sent or not got:
            continue
        reached, total = [], 0
        for t, n in got:
            total += n
            reached.append((total, t))
        offset, j = 0, 0
        for t, n in sent:
            offset += n
            while j < len(reached) and reached[j][0] < offset:
                j += 1
            if j < len(reached):
                out.append((t, reached[j][1] - t))
    return sorted(out)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    rows = delays(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    if not rows:
        sys.exit("no event matched: check the ports and that the capture has payloads (-s 0)")
    d = sorted(x for _, x in rows)
    q = lambda p: d[min(len(d) - 1, int(p * len(d)))] * 1e6
    print(f"{len(d)} events: p50 {q(.5):.0f} µs, p90 {q(.9):.0f}, p99 {q(.99):.0f}, "
          f"p99.9 {q(.999):.0f}, max {d[-1] * 1e6:.0f}")
    start = rows[0][0]
    late = collections.defaultdict(list)
    for t, x in rows:
        if x > 0.001:
            late[int((t - start) * 100)].append(x)
    for b in sorted(late):
        print(f"  t = {b / 100:.2f} s: {len(late[b])} events over 1 ms, the worst {max(late[b]) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
