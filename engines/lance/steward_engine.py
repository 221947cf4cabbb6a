"""steward engine protocol v1 for Python engines (docs/ENGINE.md): frames on fd 3 / fd 4.

This module owns the wire: framing, the frame bounds, hello, progress (rate-limited), custody
reservations (one outstanding at a time) and the single final answer. It knows nothing about
Lance. Standard library only, so that it can be copied into any engine.
"""

import json
import os
import struct
import threading
import time

PROTOCOL = 1
MAX_IN = 1 << 20  # sidecar -> engine
MAX_OUT = 64 << 10  # engine -> sidecar
IN_FD, OUT_FD = 3, 4

# Native codes (lance-c's table), passed through verbatim by the sidecar.
OK, INVALID_ARGUMENT, IO, NOT_FOUND, ALREADY_EXISTS, INDEX, INTERNAL, NOT_SUPPORTED, COMMIT_CONFLICT = range(9)
# Pre-invocation codes an engine may answer (PRE_INVOCATION_REJECTED, the engine call never ran).
STALE_ADMISSION, SCHEMA_MISMATCH, AMBIGUOUS_NAME, DATASET_UNAVAILABLE, INVALID_REQUEST = -3, -4, -5, -6, -8


def kill_self():
    """End this process with SIGKILL, as a crash would (test faults). A contained engine is the
    init of its own PID namespace, where the kernel drops kill(getpid(), SIGKILL); a SIGKILL that
    a thread queues to itself with si_code SI_KERNEL (rt_tgsigqueueinfo) is not dropped."""
    import ctypes
    import signal
    import threading
    info = ctypes.create_string_buffer(128)  # siginfo_t: si_signo, si_errno, si_code
    struct.pack_into("iii", info, 0, signal.SIGKILL, 0, 0x80)  # SI_KERNEL
    nr = {"x86_64": 297, "aarch64": 240}.get(os.uname().machine)
    if nr is not None:
        ctypes.CDLL(None, use_errno=True).syscall(nr, os.getpid(), threading.get_native_id(), signal.SIGKILL, info)
    os.kill(os.getpid(), signal.SIGKILL)  # not contained: the plain way works as well
    while True:
        time.sleep(1)


class ProtocolError(Exception):
    """The sidecar broke the protocol (or closed the pipe): the engine must exit."""


class Refused(Exception):
    """A reservation was refused by the sidecar's ledger: the upload must not happen."""


class Channel:
    """One engine's two pipes. Frames are written whole under a lock (a library may report
    progress from its own thread); one thread reads."""

    def __init__(self, rfd=IN_FD, wfd=OUT_FD):
        # A contained engine is the init of its PID namespace: the kernel delivers it no signal
        # it leaves at the default action, so the sidecar's SIGTERM (its deadline's first step)
        # would be lost and the full grace waited out. Exit at once, as SIGTERM's default would.
        import signal
        signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))
        self._r = os.fdopen(rfd, "rb", buffering=0)
        self._w = os.fdopen(wfd, "wb", buffering=0)
        self._seq = 0
        self._last_progress = 0.0
        self._last_report = (None, 0, 0)  # (stage, done, total) of the last report sent
        self._lock = threading.Lock()
        self._answered = False

    # -- framing -------------------------------------------------------------------------------
    def send(self, frame):
        body = json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode()
        if len(body) > MAX_OUT:
            raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_OUT}")
        with self._lock:
            self._w.write(struct.pack(">I", len(body)) + body)

    def _read_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self._r.read(n - len(buf))
            if not chunk:
                raise ProtocolError("the sidecar closed the request pipe")
            buf += chunk
        return buf

    def recv(self):
        (n,) = struct.unpack(">I", self._read_exact(4))
        if n == 0 or n > MAX_IN:
            raise ProtocolError(f"bad frame length {n}")
        frame = json.loads(self._read_exact(n))
        if not isinstance(frame, dict) or not isinstance(frame.get("t"), str):
            raise ProtocolError("frame is not an object with a string \"t\"")
        return frame

    # -- the exchange --------------------------------------------------------------------------
    def hello(self, engine):
        """First frame: pid and the engine's declaration (name, protocol, index_types, settle)."""
        self.send({"t": "hello", "pid": os.getpid(), "engine": dict(engine, protocol=PROTOCOL)})

    def request(self):
        """The one request frame: (its kind, params); the sidecar sends kind "mutate" only."""
        f = self.recv()
        if f["t"] != "request" or not isinstance(f.get("request"), dict):
            raise ProtocolError(f"want a request frame, got {f['t']!r}")
        return f.get("kind") or "mutate", f["request"]

    def progress(self, stage, done, total, last=False):
        """At most ten a second within a stage; a stage's first report and a `last` one (the
        end of a step) are always sent, unless they repeat the report sent before. total 0
        means unknown."""
        report = (stage, max(0, int(done)), max(0, int(total)))
        with self._lock:
            now = time.monotonic()
            if report == self._last_report or (
                    not last and stage == self._last_report[0] and now - self._last_progress < 0.1):
                return
            self._last_progress, self._last_report = now, report
        self.send({"t": "progress", "stage": report[0], "done": report[1], "total": report[2]})

    def reserve(self, keys=(), prefixes=()):
        """Custody before writing: blocks for the sidecar's answer; raises Refused."""
        keys, prefixes = list(keys), list(prefixes)
        if not keys and not prefixes:
            return
        self._seq += 1
        self.send({"t": "reserve", "seq": self._seq, "keys": keys, "prefixes": prefixes})
        f = self.recv()
        if f["t"] != "reserved" or f.get("seq") != self._seq:
            raise ProtocolError(f"want reserved {self._seq}, got {f}")
        if f.get("error"):
            raise Refused(f["error"])

    def result(self, phase, code, message="", **fields):
        if self._answered:
            raise ProtocolError("second result")
        self._answered = True
        res = {"phase": phase, "code": code, "message": message[:1024]}
        res.update({k: v for k, v in fields.items() if v not in (None, "")})
        self.send({"t": "result", "result": res})
