#!/usr/bin/env python3
"""Counts what one request costs a relay, in figures that do not move with
the machine's mood: user-space instructions (valgrind's callgrind) and
system calls (strace), per request and per streamed event.

    scripts/request-cost.py [--tokentap BIN] [--requests N] [--streams N]
                            [--systems tokentap,tokentap-off,nginx,floor,floor-timed]
                            [--floor BIN] [--split] [--keep]

For each system in front of `tokentap sim`: N non-streamed requests (the
S9/wrk request: 16 tokens at once) over four keep-alive connections, then
N/10 streamed ones (64 events, 2 ms apart: one upstream read per event),
after a warm-up of a tenth of each. Prints instructions and system calls
per request and per event, and instructions as a multiple of nginx's.

Why: CPU time on a shared VM moves by ±30 % from one run to the next
(BENCHMARKS.md), so a change of a few percent cannot be read from it;
callgrind counts the same instructions for the same binary and requests
whatever else the machine does. Instructions are not time (a cache miss
costs more than an add, and the kernel's share is not counted: the system
calls stand for it), so the bench's CPU figures stay the verdict; these
say where a change moved the work. `rep movsb` counts one instruction per
byte under valgrind, so `memcpy`/`memmove` are shown apart.

`floor` is `crates/tools/examples/relay_floor.rs`: bytes copied between
the client and an upstream connection on one tokio runtime, nothing parsed
or measured; what any relay on tokio pays at least. `floor-timed` bounds
each read by an idle timeout too (a timer per read). Build it with `cargo
build --release -p tokentap-tools --example relay_floor`.

`--split` adds, for each tokentap system, where a request's and an event's
instructions go: the inclusive cost of pingora's and tokentap's stages
(`SPLIT` below), nested as they call each other. Inclusive figures of
inlined code land in the caller, so a stage's children need not add up to
it; read them as "at least this much is spent under".

Needs valgrind, strace and nginx; `cargo build --release` first.
"""

import argparse
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY = ('{"model":"sim-16x0","stream":%s,"max_tokens":%d,'
        '"messages":[{"role":"user","content":"benchmark"}]}')
PLAIN = {"x-sim": "ttft-ms=0,itl-ms=0,output-tokens=16,numbered=true"}
STREAM = {"x-sim": "ttft-ms=0,itl-ms=2,output-tokens=64,numbered=true"}
EVENTS = 64


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"request-cost: a process exited early ({proc.args})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"request-cost: nothing listens on {port}")


def send(port, n, stream):
    """n requests over four keep-alive connections, each read whole."""
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in range(4)]
    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench",
               "x-request-id": "cost"}
    headers.update(STREAM if stream else PLAIN)
    body = BODY % ("true" if stream else "false", EVENTS if stream else 16)
    for i in range(n):
        c = conns[i % len(conns)]
        c.request("POST", "/v1/chat/completions", body, headers)
        r = c.getresponse()
        r.read()
        if r.status != 200:
            sys.exit(f"request-cost: status {r.status}")
    for c in conns:
        c.close()


def configs(tmp, upstream, bin_path, floor_path):
    """name -> (argv, listen port) for each system."""
    out = {}
    for name, extra in (("floor", []), ("floor-timed", ["60"])):
        port = free_port()
        out[name] = ([floor_path, f"127.0.0.1:{port}", f"127.0.0.1:{upstream}"] + extra, port)
    for name, measure in (("tokentap", "true"), ("tokentap-off", "false")):
        port, admin = free_port(), free_port()
        conf = os.path.join(tmp, f"{name}.yaml")
        with open(conf, "w") as f:
            f.write(f"admin:\n  listen: 127.0.0.1:{admin}\nserver:\n  threads: 1\ntaps:\n"
                    f"  - name: cost\n    boundary: engine\n    listen: 127.0.0.1:{port}\n"
                    f"    upstream: http://127.0.0.1:{upstream}\n    measure: {measure}\n")
        out[name] = ([bin_path, "run", "-c", conf, "--log", "warn"], port)
    port = free_port()
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
master_process off;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/nb; proxy_temp_path {tmp}/np;
  fastcgi_temp_path {tmp}/nf; uwsgi_temp_path {tmp}/nu; scgi_temp_path {tmp}/ns;
  upstream up {{ server 127.0.0.1:{upstream}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://up; proxy_http_version 1.1;
      proxy_set_header Connection ""; proxy_buffering off;
    }}
  }}
}}
""")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    out["nginx"] = ([nginx, "-c", conf], port)
    return out


def instructions(outfile):
    """(all, memcpy/memmove) instructions in a callgrind dump."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", outfile],
                          capture_output=True, text=True, check=True).stdout
    total = copy = 0
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(\([^)]*\)\s+)?(.*)", line)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = n
        elif re.search(r"mem(cpy|move)", m.group(3)):
            copy += n
    return total, copy


# (depth, label, a substring of callgrind's function name) of the stages
# `--split` prints; the first match with the largest inclusive cost wins.
SPLIT = [
    (0, "the connection's task (accept to close)", "HttpServerApp>::process_new_http::{{closure}} ["),
    (1, "read the client's request head (parse, header map)", "v1::server::HttpSession::read_request::{{closure}} ["),
    (1, "tokentap's ctx (new_ctx)", "ProxyHttp>::new_ctx ["),
    (1, "tokentap: early_request_filter", "ProxyHttp>::early_request_filter::{{closure}} ["),
    (1, "tokentap: request_body_filter (request decode)", "ProxyHttp>::request_body_filter::{{closure}} ["),
    (1, "proxy_to_upstream", "HttpProxy<SV,C>::proxy_to_upstream::{{closure}} ["),
    (2, "pooled upstream connection: get", "TransportConnector::reused_stream::{{closure}} ["),
    (2, "upstream request: clone of the client's head", "RequestHeader as core::clone::Clone>::clone ["),
    (2, "upstream request: hop-by-hop sanitising", "sanitize_h1_upstream_request ["),
    (2, "upstream request: head serialised", "defer_request_header ["),
    (2, "the direct relay (proxy_direct)", "direct_relay::{{closure}} ["),
    (3, "read the upstream's response head and body", "read_response_task::{{closure}} ["),
    (3, "tokentap: upstream_response_filter", "ProxyHttp>::upstream_response_filter::{{closure}} ["),
    (3, "the client's response head serialised", "prepare_response_header ["),
    (3, "the raw chunked relay's scan", "tokentap_core::chunked::ChunkedScan::feed ["),
    (2, "pooled upstream connection: put back", "release_http_session::{{closure}} ["),
    (1, "tokentap: logging (record, sinks)", "ProxyHttp>::logging::{{closure}} ["),
    (1, "the client's session finished (keep-alive)", "server::Session::finish::{{closure}} ["),
    (0, "the runtime's park (epoll, timers)", "current_thread::Context::park ["),
    (0, "allocator: alloc", "__rust_alloc ["),
    (0, "allocator: dealloc", "__rust_dealloc ["),
    (0, "memcpy/memmove (rep movsb: one per byte)", "__memcpy_avx_unaligned_erms ["),
]


def inclusive(outfile):
    """function name -> inclusive instructions in a callgrind dump."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", outfile],
                          capture_output=True, text=True, check=True).stdout
    cost = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)", line)
        if m:
            cost.setdefault(m.group(2), int(m.group(1).replace(",", "")))
    return cost


def split_rows(dump, n):
    """(depth, label, instructions per unit) for each SPLIT stage found."""
    cost = inclusive(dump)
    rows = []
    for depth, label, pattern in SPLIT:
        found = [v for k, v in cost.items() if pattern in k]
        if found:
            rows.append((depth, label, max(found) / n))
    return rows


def counted(argv, port, tmp, name, requests, streams, splits=None):
    """Instructions per request and per event under callgrind; with
    `splits` (a list), the SPLIT rows of both dumps are appended to it."""
    out = os.path.join(tmp, f"{name}.callgrind")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + argv,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        wait_port(port, p)
        figures = []
        for n, stream in ((requests, False), (streams, True)):
            send(port, max(n // 10, 1), stream)
            subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True, check=True)
            send(port, n, stream)
            subprocess.run(["callgrind_control", "-d", str(p.pid)], capture_output=True, check=True)
            dumps = sorted((f for f in os.listdir(tmp) if f.startswith(f"{name}.callgrind.")),
                           key=lambda f: os.path.getmtime(os.path.join(tmp, f)))
            total, copy = instructions(os.path.join(tmp, dumps[-1]))
            figures.append((total / n, copy / n))
            if splits is not None:
                splits.append(split_rows(os.path.join(tmp, dumps[-1]), n * (EVENTS if stream else 1)))
        return figures
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def syscalls(argv, port, tmp, name, requests, streams):
    """System calls per request and per stream under strace -c."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        wait_port(port, p)
        figures = []
        for n, stream in ((requests, False), (streams, True)):
            send(port, max(n // 10, 1), stream)
            out = os.path.join(tmp, f"{name}.strace.{int(stream)}")
            s = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(p.pid)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
            send(port, n, stream)
            s.send_signal(signal.SIGINT)
            s.wait()
            calls = {}
            with open(out) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                        calls[parts[-1]] = int(parts[3])
            figures.append({k: v / n for k, v in calls.items()})
        return figures
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokentap", default=os.path.join(ROOT, "target/release/tokentap"))
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--systems", default="tokentap,tokentap-off,nginx")
    ap.add_argument("--floor", default=os.path.join(ROOT, "target/release/examples/relay_floor"))
    ap.add_argument("--split", action="store_true",
                    help="also print where a tokentap request's and event's instructions go")
    ap.add_argument("--keep", action="store_true",
                    help="keep the callgrind dumps (for callgrind_annotate) and say where")
    a = ap.parse_args()
    for tool in ("valgrind", "callgrind_annotate", "strace"):
        if not shutil.which(tool):
            sys.exit(f"request-cost: {tool} is not installed")
    tmp = tempfile.mkdtemp(prefix="request-cost-")
    upstream = free_port()
    sim = subprocess.Popen([a.tokentap, "sim", "--listen", f"127.0.0.1:{upstream}", "--log", "warn"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        wait_port(upstream, sim)
        systems = configs(tmp, upstream, a.tokentap, a.floor)
        rows = {}
        splits = {}
        for name in a.systems.split(","):
            argv, port = systems[name]
            split = [] if a.split and name.startswith("tokentap") else None
            rows[name] = (counted(argv, port, tmp, name, a.requests, a.streams, split),
                          syscalls(argv, port, tmp, name, a.requests, a.streams))
            if split:
                splits[name] = split
    finally:
        os.killpg(sim.pid, signal.SIGKILL)
        sim.wait()
    print(f"`scripts/request-cost.py --requests {a.requests} --streams {a.streams}`"
          f" ({os.path.basename(a.tokentap)}; {a.requests} non-streamed requests, {a.streams}"
          f" streams of {EVENTS} events)\n")
    print("| system | instructions / request | of which memcpy | × nginx | system calls / request"
          " | instructions / event | × nginx | system calls / event |")
    print("|---|---|---|---|---|---|---|---|")
    base = rows.get("nginx")
    for name, ((req, ev), (sreq, sev)) in rows.items():
        ratio = lambda mine, theirs: f"{mine / theirs:.2f}" if theirs else "—"
        per_event = (ev[0] / EVENTS, ev[1] / EVENTS)
        nginx_ev = base[0][1][0] / EVENTS if base else 0
        calls = lambda d, div=1: f"{sum(d.values()) / div:.2f} (" + ", ".join(
            f"{k} {v / div:.2f}" for k, v in sorted(d.items(), key=lambda kv: -kv[1]) if v / div >= 0.05) + ")"
        print(f"| {name} | {req[0]:,.0f} | {req[1]:,.0f} | {ratio(req[0], base[0][0][0] if base else 0)}"
              f" | {calls(sreq)} | {per_event[0]:,.0f} | {ratio(per_event[0], nginx_ev)}"
              f" | {calls(sev, EVENTS)} |")
    for name, (per_request, per_event) in splits.items():
        print(f"\nWhere {name}'s instructions go (inclusive; nested stages are part of the one above):\n")
        print("| stage | per non-streamed request | per streamed event |")
        print("|---|---|---|")
        requests = {label: v for _, label, v in per_request}
        events = {label: v for _, label, v in per_event}
        cell = lambda v: "—" if v is None else f"{v:,.0f}"
        for depth, label, _ in SPLIT:
            r, e = requests.get(label), events.get(label)
            if r is not None or e is not None:
                print(f"| {'&nbsp;' * 4 * depth}{label} | {cell(r)} | {cell(e)} |")
    if a.keep:
        print(f"\ncallgrind dumps and configs: {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
