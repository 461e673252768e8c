"""Launch a ditto data parallel job (one process per rank) on a Ray cluster.

    python examples/launchers/ray_launch.py --nproc 2 [--max-restarts 2] [--address auto] \
        -- target/release/examples/ddp_train --backend nccl --seed 7 --steps 100 --invariant \
           --checkpoint-dir ck --save-every 10 --resume-latest --out run.csv

Each rank is a Ray actor that runs the binary with torchrun's variables (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR = rank 0's node IP, MASTER_PORT = a
free port there). Without --address, ray.init() joins the cluster named by RAY_ADDRESS or
running here, else starts one. The ranks run in this folder (or --chdir): on several
machines, a shared file system.

When a rank fails, the others are stopped (SIGTERM, then SIGKILL after --grace-s) and,
up to --max-restarts times, the whole group is started again with the same command line,
as torchrun's agent does; with --resume-latest the job goes on from its newest checkpoint.
Exit status: 0 when every rank of the last attempt exited 0, else 1.
"""
import argparse
import collections
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


def free_port(host):
    """A port nothing listens on now, below the kernel's ephemeral range (a port-0 pick
    could go to another socket before rank 0 binds it: scripts/free_port.sh) and above
    Ray's worker ports (10002 to 19999 by default), which Ray hands out by itself."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral = int(f.read().split()[0])
    for port in random.sample(range(20000, ephemeral), 200):
        with socket.socket() as s:
            try:
                s.bind((host, port))
                return port
            except OSError:
                pass
    raise RuntimeError(f"no free port on {host}")


@ray.remote
class Rank:
    """Hosts one rank's process; max_concurrency=2 lets stop() end what run() waits on."""

    def __init__(self):
        self.proc, self.stopped, self.lock = None, False, threading.Lock()

    def where(self):
        return ray.util.get_node_ip_address(), [str(g) for g in ray.get_gpu_ids()]

    def free_port(self, host):
        return free_port(host)

    def run(self, cmd, env, cwd, rank):
        with self.lock:  # a stop() that came first means: never start
            if self.stopped:
                return -signal.SIGTERM, None, []
            # Its own session: stop() signals the rank and anything it started, and a
            # Ctrl-C meant for the driver does not reach it behind the launcher's back.
            self.proc = subprocess.Popen(cmd, env={**os.environ, **env}, cwd=cwd, text=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        tail = collections.deque(maxlen=20)
        # Ray forwards an actor's stdout to the driver, so printing streams the output;
        # but it forwards asynchronously and drops what is still in flight when the
        # driver exits. So every line also goes to rank-N.log in the ranks' folder
        # (appended to by each attempt): the whole record, whatever Ray shows.
        with open(os.path.join(cwd, f"rank-{rank}.log"), "a", encoding="utf-8") as record:
            for line in self.proc.stdout:
                print(f"[rank {rank}] {line}", end="", flush=True)
                record.write(line)
                record.flush()
                tail.append(line)
        return self.proc.wait(), self.proc.pid, list(tail)

    def stop(self, grace_s):
        with self.lock:
            self.stopped, p = True, self.proc
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if p is None or p.poll() is not None:
                return
            with contextlib.suppress(ProcessLookupError):  # it may end meanwhile
                os.killpg(p.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(grace_s)


def contract(places, port, extra):
    """torchrun's variables and `extra` for each rank (places: each actor's node IP and
    GPUs). Ranks on one node get consecutive numbers; rank 0's node hosts the rendezvous."""
    order = sorted(range(len(places)), key=lambda i: places[i][0])
    nodes = sorted({ip for ip, _ in places})
    envs = [None] * len(places)
    for rank, i in enumerate(order):
        ip = places[i][0]
        mates = [j for j in order if places[j][0] == ip]
        env = {"RANK": rank, "WORLD_SIZE": len(places), "LOCAL_RANK": mates.index(i),
               "LOCAL_WORLD_SIZE": len(mates), "GROUP_RANK": nodes.index(ip),
               "MASTER_ADDR": places[order[0]][0], "MASTER_PORT": port, **extra}
        if places[i][1]:
            # Ray shows each actor only its own GPU; a rank sees all of its node's ranks'
            # GPUs instead (as under torchrun), so LOCAL_RANK names its device and NCCL can
            # link the GPUs peer to peer.
            env["CUDA_VISIBLE_DEVICES"] = ",".join(places[j][1][0] for j in mates)
        envs[i] = {k: str(v) for k, v in env.items()}
    return envs


def attempt(group, args, restart_count):
    """Runs the job once on fresh actors (a lost node's cannot be reused); returns each
    rank's exit status in rank order (None: its actor was lost)."""
    ray.get(group.ready(), timeout=args.placement_timeout_s)
    actors = [Rank.options(num_cpus=args.cpus_per_rank, num_gpus=args.gpus_per_rank, max_concurrency=2,
                           scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote()
              for i in range(args.nproc)]
    try:
        places = ray.get([a.where.remote() for a in actors])
        first = min(range(len(places)), key=lambda i: places[i][0])
        # A fresh port per attempt: ditto's store lives in rank 0 and dies with the
        # attempt, and the job token is derived from MASTER_ADDR:MASTER_PORT, so no
        # process of an earlier attempt can join this one.
        extra = {"TORCHELASTIC_RESTART_COUNT": restart_count, "TORCHELASTIC_MAX_RESTARTS": args.max_restarts,
                 **{name: os.environ[name] for name in args.env}}
        envs = contract(places, ray.get(actors[first].free_port.remote(places[first][0])), extra)
        runs = {a.run.remote(args.command, envs[i], args.chdir, envs[i]["RANK"]): i
                for i, a in enumerate(actors)}
        status, pending, stopping = [None] * len(actors), list(runs), []
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            i = runs[done[0]]
            rank = int(envs[i]["RANK"])
            try:
                code, pid, tail = ray.get(done[0])
                what = f"killed by signal {-code}" if code < 0 else f"exited {code}"
            except ray.exceptions.RayError as e:
                code, pid, tail, what = None, "?", [], f"was lost ({type(e).__name__})"
            status[rank] = code
            print(f"ray_launch: rank {rank} (pid {pid} on {places[i][0]}) {what}", flush=True)
            if code != 0 and not stopping:
                sys.stdout.write("".join(f"  rank {rank}| {line}" for line in tail))
                print("ray_launch: stopping the other ranks", flush=True)
                stopping = [a.stop.remote(args.grace_s) for a in actors]  # the calls in flight
        return status
    finally:
        # Also on an exception (SIGTERM, a lost actor): no rank outlives its attempt.
        ray.wait([a.stop.remote(args.grace_s) for a in actors], num_returns=len(actors),
                 timeout=args.grace_s + 30)
        for a in actors:
            ray.kill(a)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nproc", type=int, required=True, help="number of ranks")
    p.add_argument("--address", help="Ray cluster address (default: ray.init()'s choice)")
    p.add_argument("--max-restarts", type=int, default=0)
    p.add_argument("--cpus-per-rank", type=float, default=1)
    p.add_argument("--gpus-per-rank", type=int, default=0, choices=[0, 1])
    p.add_argument("--grace-s", type=float, default=10, help="SIGTERM to SIGKILL, when stopping ranks")
    p.add_argument("--placement-timeout-s", type=float, default=120)
    p.add_argument("--chdir", default=os.getcwd(), help="the ranks' working folder")
    p.add_argument("--env", action="append", default=[], metavar="NAME", help="give every rank this value")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- BINARY [ARGS...]")
    args = p.parse_args()
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.command or args.nproc < 1 or args.max_restarts < 0:
        p.error("expected --nproc N (N >= 1) and -- BINARY [ARGS...]")
    if [name for name in args.env if name not in os.environ]:
        p.error(f"--env names an unset variable: {args.env}")
    args.command[0] = os.path.abspath(args.command[0]) if os.sep in args.command[0] else args.command[0]

    ray.init(address=args.address)
    # `timeout` and schedulers end a launcher with SIGTERM: unwind, so the ranks are
    # stopped (set after ray.init(), whose own handler would just end the process).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bundle = {k: v for k, v in {"CPU": args.cpus_per_rank, "GPU": args.gpus_per_rank}.items() if v}
    # All ranks or none: a job with some ranks placed and the rest queued would only
    # time out in its rendezvous.
    group = placement_group([bundle] * args.nproc, strategy="PACK")
    try:
        for restart in range(args.max_restarts + 1):
            print(f"ray_launch: attempt {restart} of {args.max_restarts + 1}: {args.nproc} ranks", flush=True)
            status = attempt(group, args, restart)
            if all(code == 0 for code in status):
                print(f"ray_launch: every rank exited 0 (attempt {restart})", flush=True)
                return 0
        print(f"ray_launch: failed after {args.max_restarts} restarts; exit status by rank: {status}")
    except ray.exceptions.GetTimeoutError:
        print(f"ray_launch: the cluster did not offer {args.nproc} x {bundle} in {args.placement_timeout_s:g} s")
    finally:
        ray.shutdown()
    return 1


if __name__ == "__main__":
    sys.exit(main())
