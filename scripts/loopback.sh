# Sourced by the scripts that start servers on loopback (idle-gap.sh,
# pgo.sh): a free port, and waiting until something listens on one.

# A port nothing listens on now (the kernel's pick).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits up to 10 s for a listener on 127.0.0.1:$1; exits the script if none.
wait_port() {
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.1; done
  echo "$(basename "$0"): nothing listens on $1" >&2; exit 1
}
