#!/usr/bin/env python3
"""Records the bytes PyTorch's TCPStore client and server exchange, one operation at a
time, for ditto's TCPStore conformance test (crates/distributed/tests/integration/tcpstore_conformance.rs).

A small TCP relay sits between a torch TCPStore client and a torch TCPStore server and
writes down every chunk in each direction, filed under the operation the client was
doing. The output is a text file that the Rust test reads without torch:

    # torch 2.15.0+cu132; server backend libuv
    op set
    > <hex bytes the client sent>
    < <hex bytes the server answered>

Run it with the Python of a virtual environment that has torch (docs/distributed.md §5):

    /work/venvs/torch/bin/python tests/scripts/record_tcpstore_frames.py OUT_DIR
"""

import datetime
import os
import socket
import sys
import threading
import time

import torch
from torch.distributed import TCPStore

# How long the relay waits after an operation for its last bytes (loopback: microseconds).
SETTLE_S = 0.15


class Relay:
    """Accepts one connection and relays it to `upstream`, logging both directions."""

    def __init__(self, upstream_port):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        self.upstream_port = upstream_port
        self.log = []  # [op, client bytes, server bytes]
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def mark(self, op):
        with self.lock:
            self.log.append([op, bytearray(), bytearray()])

    def _append(self, side, data):
        with self.lock:
            self.log[-1][side] += data

    def _pump(self, src, dst, side):
        while True:
            data = src.recv(65536)
            if not data:
                dst.close()
                return
            self._append(side, data)
            dst.sendall(data)

    def _serve(self):
        client, _ = self.listener.accept()
        server = socket.create_connection(("127.0.0.1", self.upstream_port))
        threading.Thread(target=self._pump, args=(client, server, 1), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client, 2), daemon=True).start()


def record(use_libuv, out_dir):
    timeout = datetime.timedelta(seconds=10)
    server = TCPStore("127.0.0.1", 0, 1, True, timeout=timeout, use_libuv=use_libuv,
                      wait_for_workers=False)
    relay = Relay(server.port)
    relay.mark("connect")
    client = TCPStore("127.0.0.1", relay.port, 1, False, timeout=timeout)
    ops = [
        ("set", lambda: client.set("ditto/key", b"value-1")),
        ("get", lambda: client.get("ditto/key")),
        ("add", lambda: client.add("ditto/counter", 5)),
        ("add_negative", lambda: client.add("ditto/counter", -7)),
        ("check_present", lambda: client.check(["ditto/key"])),
        ("check_absent", lambda: client.check(["ditto/key", "ditto/absent"])),
        ("wait_present", lambda: client.wait(["ditto/key"])),
        ("wait_cancelled",
         lambda: _expect_timeout(lambda: client.wait(["ditto/absent"],
                                                     datetime.timedelta(milliseconds=300)))),
        ("compare_set_match", lambda: client.compare_set("ditto/key", b"value-1", b"value-2")),
        ("compare_set_mismatch", lambda: client.compare_set("ditto/key", b"other", b"value-3")),
        ("compare_set_absent_empty", lambda: client.compare_set("ditto/new", b"", b"first")),
        ("delete_present", lambda: client.delete_key("ditto/new")),
        ("delete_absent", lambda: client.delete_key("ditto/new")),
        ("num_keys", lambda: client.num_keys()),
        ("multi_set", lambda: client.multi_set(["ditto/a", "ditto/b"], [b"1", b"22"])),
        ("multi_get", lambda: client.multi_get(["ditto/a", "ditto/b"])),
        ("append", lambda: client.append("ditto/a", b"x")),
        ("empty_value", lambda: client.set("ditto/empty", b"")),
        ("get_empty", lambda: client.get("ditto/empty")),
    ]
    results = {}
    time.sleep(SETTLE_S)
    for name, op in ops:
        relay.mark(name)
        results[name] = op()
        time.sleep(SETTLE_S)
    backend = "libuv" if use_libuv else "classic"
    path = os.path.join(out_dir, f"tcpstore_frames_{backend}.txt")
    with open(path, "w") as f:
        f.write(f"# torch {torch.__version__}; server backend {backend}; "
                "recorded by tests/scripts/record_tcpstore_frames.py\n")
        for name, sent, answered in relay.log:
            f.write(f"op {name}\n")
            f.write(f"> {sent.hex()}\n")
            f.write(f"< {answered.hex()}\n")
            if name in results and results[name] is not None:
                f.write(f"= {results[name]!r}\n")
    print(path)


def _expect_timeout(op):
    try:
        op()
    except Exception as e:  # torch raises DistStoreError (a RuntimeError)
        return type(e).__name__
    raise SystemExit("wait on an absent key did not time out")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    record(True, out)
    record(False, out)
