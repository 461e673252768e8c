# Sourced by the scripts that start a rendezvous master (launch_local.sh,
# nccl_launch_tests.sh, nccl_dead_rank.sh, rendezvous_demo.sh): `free_port` prints a
# loopback TCP port that nothing listens on now.
#
# It is picked below the kernel's ephemeral range (ip_local_port_range), not by binding
# port 0: a port-0 pick is an ephemeral port, and before the master binds it a moment
# later, any outgoing connection or other port-0 socket on the machine (the stand-in's
# NCCL hub, a rank dialling the master) may be given the same number, and the master
# then fails with "Address already in use". The kernel never hands out a port below
# that range by itself, so only a program asking for that very number can take it.
free_port() {
    python3 - <<'PY'
import random, socket
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    ephemeral_low = 32768
low, high = 10000, ephemeral_low - 1
for _ in range(200):
    port = random.randint(low, high) if high > low else 0
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        print(s.getsockname()[1])
        break
    except OSError:
        continue
    finally:
        s.close()
else:
    raise SystemExit("free_port: no free loopback port below the ephemeral range")
PY
}
