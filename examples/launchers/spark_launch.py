"""Launch a ditto data parallel job from PySpark, through TorchDistributor.

    python examples/launchers/spark_launch.py --nproc 2 [--barrier] \
        -- target/release/examples/ddp_train --backend nccl --seed 7 --steps 100 --invariant --out run.csv

TorchDistributor runs torchrun, and torchrun runs a Python file: this file is that file
too. Started as `spark_launch.py --rank STATUS_DIR BINARY ARGS...` (torchrun's variables
already set), it runs the binary, which forms the job under torchrun's agent as under a
plain torchrun (docs/distributed.md §5), and writes the rank's exit status to
STATUS_DIR/rank-RANK.

Why the status files: PySpark's wrapper around torchrun (pyspark 4.3.0,
pyspark.ml.torch.torch_run_process_wrapper) drops torchrun's exit status, so
TorchDistributor.run() returns normally even when ranks failed. The driver reads the
files instead, reports each rank, and exits non-zero unless every rank exited 0.

Default: local mode, torchrun on the driver starting --nproc ranks. With --barrier the
ranks run in Spark barrier tasks, one torchrun per task, on the executors
(TorchDistributor(local_mode=False)): the binary must then be at the same path on every
executor, and --status-dir, --out and checkpoint folders on a file system they all mount.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile


def rank_main(status_dir, command):
    """One rank, under torchrun: run the binary (in this process group, so torchrun's
    stop signal reaches it too) and record how it ended."""
    code = subprocess.call(command)
    with open(os.path.join(status_dir, f"rank-{os.environ['RANK']}"), "w") as f:
        f.write(f"{code}\n")
    sys.exit(code if code >= 0 else 128 - code)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nproc", type=int, required=True, help="number of ranks")
    p.add_argument("--barrier", action="store_true", help="run the ranks in Spark barrier tasks")
    p.add_argument("--use-gpu", action="store_true", help="TorchDistributor's use_gpu (Spark's GPU scheduling)")
    p.add_argument("--master", help="Spark master (default local[NPROC]; '' leaves it to spark-submit)")
    p.add_argument("--status-dir", help="where the ranks record their exit status (default: a temporary folder)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- BINARY [ARGS...]")
    args = p.parse_args()
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.command or args.nproc < 1:
        p.error("expected --nproc N (N >= 1) and -- BINARY [ARGS...]")
    args.command[0] = os.path.abspath(args.command[0]) if os.sep in args.command[0] else args.command[0]
    status_dir = os.path.abspath(args.status_dir or tempfile.mkdtemp(prefix="spark-launch-"))
    os.makedirs(status_dir, exist_ok=True)
    for name in os.listdir(status_dir):
        if name.startswith("rank-"):
            os.remove(os.path.join(status_dir, name))

    # Imported here, not at the top: the ranks' shim (rank_main) needs neither.
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("ditto-spark-launch")
    master = f"local[{args.nproc}]" if args.master is None else args.master
    spark = (builder.master(master) if master else builder).getOrCreate()
    try:
        distributor = TorchDistributor(num_processes=args.nproc, local_mode=not args.barrier,
                                       use_gpu=args.use_gpu)
        distributor.run(os.path.abspath(__file__), "--rank", status_dir, *args.command)
    finally:
        spark.stop()

    status = {}
    for rank in range(args.nproc):
        try:
            with open(os.path.join(status_dir, f"rank-{rank}")) as f:
                status[rank] = int(f.read())
        except (OSError, ValueError):
            status[rank] = None  # stopped by torchrun after another rank failed, or never started
        print(f"spark_launch: rank {rank} " + ("left no status (stopped, or never started)"
              if status[rank] is None else f"exited {status[rank]}"), flush=True)
    if not args.status_dir:
        shutil.rmtree(status_dir)
    if any(code != 0 for code in status.values()):
        print(f"spark_launch: the job failed; exit status by rank: {list(status.values())}", flush=True)
        return 1
    print(f"spark_launch: every rank of {args.nproc} exited 0", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        rank_main(sys.argv[2], sys.argv[3:])
    sys.exit(main())
