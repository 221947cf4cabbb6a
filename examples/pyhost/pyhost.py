#!/usr/bin/env python3
"""pyhost: a minimal steward host in Python (standard library only).

It spawns `steward serve`, speaks JSON-RPC 2.0 over the sidecar's stdin/stdout with
Content-Length framing, and prints the hello result. With --store and --dataset it runs one real
index.mutate and prints the classified answer. This is all a host in any language needs: spawn,
frame, call, read the answer, classify from typed fields, close stdin to let the sidecar exit.

    python3 examples/pyhost/pyhost.py --steward ./bin/steward
    python3 examples/pyhost/pyhost.py --steward ./bin/steward --store /tmp/lake --dataset sales
"""
import argparse
import json
import os
import subprocess
import sys
import time
import uuid


class StewardClient:
    """JSON-RPC 2.0 over a child's stdio, Content-Length framed (the sidecar's default)."""

    MAX_FRAME = 4 << 20

    def __init__(self, argv):
        # stderr is the sidecar's JSON log stream: pass it through so people can read it.
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.next_id = 1

    def _send(self, message):
        body = json.dumps(message, separators=(",", ":")).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def _recv(self):
        length = None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise EOFError("sidecar closed its stdout")
            line = line.rstrip(b"\r\n")
            if not line:
                if length is None:
                    continue
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if length > self.MAX_FRAME:
            raise ValueError("frame of %d bytes exceeds the limit" % length)
        return json.loads(self.proc.stdout.read(length))

    def call(self, method, params=None, on_notify=None):
        call_id = self.next_id
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": call_id, "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)
        while True:
            reply = self._recv()
            if "method" in reply and "id" not in reply:  # a notification such as $/progress
                if on_notify:
                    on_notify(reply["method"], reply.get("params"))
                continue
            if reply.get("id") != call_id:
                raise RuntimeError("answer for id %r while waiting for %r" % (reply.get("id"), call_id))
            if "error" in reply:
                raise RpcError(reply["error"]["code"], reply["error"]["message"])
            return reply["result"]

    def close(self):
        self.proc.stdin.close()  # EOF: the sidecar answers what it has and exits 0
        return self.proc.wait(timeout=30)


class RpcError(Exception):
    def __init__(self, code, message):
        super().__init__("%d: %s" % (code, message))
        self.code = code


def classify(op, result):
    """Map an index.mutate answer to what the database may record, from typed fields only."""
    phase, code = result["phase"], result["code"]
    if phase == "PRE_INVOCATION_REJECTED":
        return "NOT_COMMITTED"  # the engine was never called
    if phase == "NATIVE_RETURN":
        if code == 0:
            return "COMMITTED"  # committed, or an authoritative IF [NOT] EXISTS no-op
        if code == 8 or (code == 3 and op == "DROP"):
            return "NOT_COMMITTED"  # commit conflict; nothing to drop
        return "UNKNOWN"
    return "UNKNOWN"  # indeterminate: settle it with index.resolve


def mutate(client, hello, args):
    invocation = "py-" + uuid.uuid4().hex
    params = {
        "invocation_id": invocation,
        "deadline_unix_ms": int(time.time() * 1000) + 5 * 60 * 1000,
        "dataset": {"store": {"url": "file://" + os.path.abspath(args.store)}, "path": args.dataset},
        "pinned_version": args.version,
        "op": "CREATE",
        "if_not_exists": True,
        "index": {"name": "py_" + args.column, "columns": [args.column], "type": args.type},
    }

    def progress(method, p):
        if method == "$/progress" and p["total"]:
            print("  progress %s: %d/%d" % (p["stage"], p["done"], p["total"]))

    result = client.call("index.mutate", params, on_notify=progress)
    if result["invocation_id"] != invocation or result["epoch"] != hello["epoch"]:
        print("identity mismatch: the outcome is UNKNOWN", file=sys.stderr)
        return "UNKNOWN"
    print(json.dumps({"mutate": result}, indent=2, sort_keys=True))
    outcome = classify(params["op"], result)
    print("classified: %s" % outcome)
    return outcome


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steward", default="steward", help="path of the steward binary")
    parser.add_argument("--store", help="local store directory holding the dataset")
    parser.add_argument("--dataset", help="dataset path inside the store")
    parser.add_argument("--version", type=int, default=1, help="pinned dataset version")
    parser.add_argument("--column", default="category", help="column to index")
    parser.add_argument("--type", default="BITMAP", help="BTREE or BITMAP")
    args = parser.parse_args()

    client = StewardClient([args.steward, "serve"])
    try:
        hello = client.call("steward.hello", {"protocol_version": 1, "client": "pyhost"})
        print(json.dumps({"hello": hello}, indent=2, sort_keys=True))
        try:
            client.call("no.such.method")
        except RpcError as err:
            print("unknown method answered with code %d (method not found)" % err.code)
        if args.store and args.dataset:
            mutate(client, hello, args)
    finally:
        code = client.close()
    if code != 0:
        print("sidecar exited with %d" % code, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
