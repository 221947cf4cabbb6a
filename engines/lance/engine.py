"""steward's Lance engine: one index mutation (or one settle) on a real Lance dataset, per process.

Speaks steward engine protocol v1 (docs/ENGINE.md) on fd 3 / fd 4 through steward_engine.
Outcome truth on Lance (pylance 14):
  * only at pinned+1: the commit is a Transaction with read_version = pinned, one attempt
    (max_retries=0), and a commit_lock that refuses any version but pinned+1 (Lance rebases over
    compatible concurrent commits by itself and would otherwise land at pinned+2);
  * tagged: transaction_properties {"steward.invocation": id, "steward.kind": "commit"|"fence"}
    live in the transaction the manifest of that version names, so the tag and the commit are one
    write;
  * claimed: before writing the manifest, the commit_lock claims the version with put-if-absent
    (slots.py); a fence claims it the same way, so a fenced invocation can never write its slot.
It refuses everything else: multi-column indexes, unknown parameters, session tokens.
"""

import os
import sys
import traceback
import uuid
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import steward_engine as se  # noqa: E402
import slots  # noqa: E402

SCALAR = ("BTREE", "BITMAP", "LABEL_LIST", "INVERTED")
VECTOR = ("IVF_PQ", "IVF_HNSW_SQ")
# Lance refuses a caller-chosen segment uuid for these (lance index/create.rs
# ensure_index_uuid_allowed): their prefix can only be reserved after the build, before the commit.
UUID_AFTER_BUILD = ("BTREE", "LABEL_LIST")
# Index parameters accepted per type (string values from index.params, converted here).
PARAMS = {
    "IVF_PQ": {"num_partitions": int, "num_sub_vectors": int, "metric": str, "num_bits": int,
               "max_iterations": int, "sample_rate": int},
    "IVF_HNSW_SQ": {"num_partitions": int, "metric": str, "m": int, "ef_construction": int,
                    "max_iterations": int, "sample_rate": int},
    "INVERTED": {"with_position": lambda v: v == "true", "base_tokenizer": str, "lower_case": lambda v: v == "true"},
    "BTREE": {}, "BITMAP": {}, "LABEL_LIST": {},
}
ENGINE = {"name": "lance", "index_types": list(SCALAR + VECTOR), "settle": "claim-fence",
          "custody": {"prefix_before_build": [t for t in SCALAR + VECTOR if t not in UUID_AFTER_BUILD],
                      "prefix_after_build": list(UUID_AFTER_BUILD)},
          # The test faults this engine acts out (the sidecar refuses others for it).
          "faults": ["crash_before_commit", "crash_after_commit"]}
PROP_INV, PROP_KIND = "steward.invocation", "steward.kind"


class Answer(Exception):
    """Ends the mutation with one result."""

    def __init__(self, phase, code, message, **fields):
        super().__init__(message)
        self.phase, self.code, self.fields = phase, code, fields


def native(code, msg, **f):
    return Answer("NATIVE_RETURN", code, msg, **f)


def rejected(code, msg, **f):
    return Answer("PRE_INVOCATION_REJECTED", code, msg, **f)


# -- where the dataset is --------------------------------------------------------------------
class Target:
    """The dataset's URI for Lance, its storage options, its keys and the claim store.

    `key` is the dataset's key for the engine's own S3 client (bucket-relative: it includes an
    s3://bucket/prefix store's prefix); `rel` is its key relative to the store as steward opens it
    (the bucket's prefix is the store's root), which is what custody reservations name."""

    def __init__(self, req):
        ds = req.get("dataset") or {}
        store, path = ds.get("store") or {}, (ds.get("path") or "").strip("/")
        url = store.get("url", "")
        self.rel = path
        if not path or path.startswith("/") or ".." in path.split("/"):
            raise rejected(se.INVALID_REQUEST, "dataset.path must be relative and non-empty")
        creds = req.get("credentials") or {}
        if creds.get("session_token"):
            raise rejected(se.INVALID_REQUEST, "credentials.session_token is not supported")
        if url.startswith("file://"):
            root = url[len("file://"):]
            self.uri, self.options = os.path.join(root, path), {}
            self.store, self.key = slots.FileStore(root), path
        elif url.startswith("s3://"):
            bucket, _, prefix = url[len("s3://"):].partition("/")
            self.key = f"{prefix.strip('/')}/{path}" if prefix.strip("/") else path
            self.uri = f"s3://{bucket}/{self.key}"
            endpoint, secure = store.get("endpoint", ""), bool(store.get("secure"))
            if not endpoint:
                raise rejected(se.INVALID_REQUEST, "store endpoint is required for s3")
            region = store.get("region") or "us-east-1"
            self.options = {"aws_endpoint": ("https://" if secure else "http://") + endpoint,
                            "aws_region": region, "allow_http": "false" if secure else "true",
                            "aws_virtual_hosted_style_request": "false"}
            if creds.get("access_key"):
                self.options["aws_access_key_id"] = creds["access_key"]
                self.options["aws_secret_access_key"] = creds.get("secret_key", "")
            self.store = slots.S3Store(endpoint, bucket, creds.get("access_key", ""),
                                       creds.get("secret_key", ""), region, secure)
        else:
            raise rejected(se.INVALID_REQUEST, f"store url must be file:// or s3://, got {url[:64]!r}")

    def open(self, version=None):
        import lance
        return lance.dataset(self.uri, version=version, storage_options=self.options or None)

    def latest(self):
        try:
            return self.open().version
        except Exception:
            return 0

    def lists_version(self, version):
        """False only when Lance lists the dataset's versions and `version` is not among them: a
        failed open of the version (a storage outage) is no proof that it is gone."""
        try:
            return any(v["version"] == version for v in self.open().versions())
        except Exception:
            return True


# -- the commit: pinned+1 only, claimed, tagged -------------------------------------------------
class Gate:
    """commit_lock for one commit: refuses every version but `slot`, and claims `slot` first."""

    def __init__(self, target, slot, invocation, kind):
        self.target, self.slot, self.invocation, self.kind = target, slot, invocation, kind
        self.refused = None  # why the gate refused, if it did

    def __call__(self, version):
        if version != self.slot:
            self.refused = f"Lance would commit at version {version}; only {self.slot} is allowed"
            raise RuntimeError("steward: " + self.refused)
        key = slots.claim_key(self.target.key, version)
        if not self.target.store.put_if_absent(key, slots.claim_body(self.invocation, self.kind)):
            holder = slots.read_claim(self.target.store, self.target.key, version) or {}
            if holder.get("invocation") != self.invocation or holder.get("kind") != self.kind:
                self.refused = f"slot {version} is claimed by {holder.get('kind')} of {holder.get('invocation')!r}"
                raise RuntimeError("steward: " + self.refused)
        return _nothing()


@contextmanager
def _nothing():
    yield


def commit(target, pinned, ds, operation, invocation, kind, txn_uuid):
    import lance
    gate = Gate(target, pinned + 1, invocation, kind)
    tx = lance.Transaction(read_version=pinned, operation=operation, uuid=txn_uuid,
                           transaction_properties={PROP_INV: invocation, PROP_KIND: kind})
    try:
        new = lance.LanceDataset.commit(ds, tx, commit_lock=gate, max_retries=0,
                                        storage_options=target.options or None)
    except Exception as e:
        latest = target.latest()
        if gate.refused or isinstance(e, lance.commit.CommitConflictError):
            raise native(se.COMMIT_CONFLICT, f"commit conflict: {gate.refused or e} (latest observed {latest})",
                         observed_latest=latest)
        raise native(se.IO if isinstance(e, OSError) else se.INTERNAL, f"commit: {e}", observed_latest=latest)
    if new.version != pinned + 1:  # the gate makes this impossible; say so loudly if it happens
        raise native(se.INTERNAL, f"committed at {new.version}, not {pinned + 1}", observed_latest=new.version)
    return new.version


def holder_of(target, version):
    """Who holds `version`: ("commit"|"fence"|"foreign", invocation) or None if it does not exist."""
    try:
        ds = target.open(version)
    except Exception:
        ds = None
    if ds is not None:
        tx = ds.read_transaction(version)
        props = (tx.transaction_properties if tx else None) or {}
        if PROP_INV in props:
            return props.get(PROP_KIND, "commit"), props[PROP_INV]
        return "foreign", ""
    return None


# -- mutate ----------------------------------------------------------------------------------
def arrow_type_name(t):
    import pyarrow as pa
    if pa.types.is_int64(t):
        return "int64"
    if pa.types.is_float64(t):
        return "float64"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_string(t.value_type):
        return "list<string>"
    if pa.types.is_fixed_size_list(t) and pa.types.is_float32(t.value_type):
        return f"vector<float32,{t.list_size}>"
    return str(t)


def index_objects(ds, name):
    """The stored segments of the index called `name` (exact spelling), as lance Index objects."""
    from lance.dataset import Index
    fields = {f.name(): f.id() for f in ds.lance_schema.fields()}
    out = []
    for info in ds.list_indices():
        if info["name"] != name:
            continue
        out.append(Index(uuid=info["uuid"], name=info["name"],
                                       fields=[fields.get(c, i) for i, c in enumerate(info["fields"])],
                                       dataset_version=info["version"], fragment_ids=info["fragment_ids"],
                                       index_version=0))
    return out


def build(ch, target, ds, req, pinned, invocation):
    import lance
    idx = req.get("index") or {}
    itype, cols, name = idx.get("type", ""), idx.get("columns") or [], idx["name"]
    if itype not in PARAMS:
        raise native(se.NOT_SUPPORTED, f"index type {itype!r} is not built by the lance engine")
    if len(cols) != 1:
        raise native(se.NOT_SUPPORTED, "exactly one column is supported")
    if cols[0] not in ds.schema.names:
        raise native(se.INVALID_ARGUMENT, f"column {cols[0]!r} is not in the dataset")
    kwargs = {}
    for k, v in (idx.get("params") or {}).items():
        conv = PARAMS[itype].get(k)
        if conv is None:
            raise native(se.INVALID_ARGUMENT, f"parameter {k!r} is not accepted for {itype}")
        try:
            kwargs[k] = conv(v)
        except ValueError:
            raise native(se.INVALID_ARGUMENT, f"parameter {k}={v!r} is not valid")
    frags = [f.fragment_id for f in ds.get_fragments()]
    seg_uuid = None
    if itype not in UUID_AFTER_BUILD:
        seg_uuid = str(uuid.uuid4())
        reserve(ch, prefixes=[f"{target.rel}/_indices/{seg_uuid}/"])
        kwargs["index_uuid"] = seg_uuid
    ch.progress("build", 0, 1, last=True)
    try:
        seg = ds.create_index_uncommitted(cols[0], itype, name=name, fragment_ids=frags, replace=True, **kwargs)
    except Exception as e:
        raise native(se.INDEX if not isinstance(e, ValueError) else se.INVALID_ARGUMENT, f"build: {e}",
                     index_uuid=seg_uuid)
    if itype == "INVERTED":
        # A distributed FTS build leaves staging/ partitions; merging the one segment finalises it
        # in place (same uuid, same reserved prefix).
        try:
            seg = ds.merge_existing_index_segments([seg])
        except Exception as e:
            raise native(se.INDEX, f"finalise: {e}", index_uuid=seg_uuid)
    ch.progress("build", 1, 1, last=True)
    if seg_uuid is None:
        reserve(ch, prefixes=[f"{target.rel}/_indices/{seg.uuid}/"])
    elif seg.uuid != seg_uuid:
        raise native(se.INTERNAL, f"Lance wrote segment {seg.uuid}, not the reserved {seg_uuid}", index_uuid=seg.uuid)
    return seg


def reserve(ch, keys=(), prefixes=()):
    try:
        ch.reserve(keys, prefixes)
    except se.Refused as e:
        raise native(se.IO, f"custody refused: {e}")


def mutate(ch, req):
    import lance
    invocation, pinned, op = req.get("invocation_id", ""), int(req.get("pinned_version") or 0), req.get("op")
    if not invocation or pinned < 1 or op not in ("CREATE", "REPLACE", "DROP"):
        raise rejected(se.INVALID_REQUEST, "invocation_id, pinned_version >= 1 and op are required")
    if req.get("temp_dir"):
        # Lance's IVF shuffle files go to std::env::temp_dir() (lance#8992): keep them in the domain's dir.
        os.environ["TMPDIR"] = req["temp_dir"]
    target = Target(req)
    try:
        ds = target.open(pinned)
    except Exception as e:
        latest = target.latest()
        if latest > pinned and not target.lists_version(pinned):
            raise rejected(se.STALE_ADMISSION, f"pinned version {pinned} is gone; latest is {latest}",
                           observed_latest=latest)
        raise rejected(se.DATASET_UNAVAILABLE, f"open {pinned}: {e}", observed_latest=latest)
    for want in req.get("schema") or []:
        if want.get("name") not in ds.schema.names:
            raise rejected(se.SCHEMA_MISMATCH, f"field {want.get('name')!r} is not in the dataset")
        have = arrow_type_name(ds.schema.field(want["name"]).type)
        if have != want.get("type"):
            raise rejected(se.SCHEMA_MISMATCH, f"field {want['name']!r} is {have}, want {want.get('type')}")
    name = (req.get("index") or {}).get("name") or ""
    if not name:
        raise rejected(se.INVALID_REQUEST, "index.name is required")
    stored = sorted({i["name"] for i in ds.list_indices() if i["name"].lower() == name.lower()})
    if len(stored) > 1:
        raise rejected(se.AMBIGUOUS_NAME, f"{name!r} matches {stored}")
    existing = index_objects(ds, stored[0]) if stored else []
    if op == "CREATE" and existing:
        if req.get("if_not_exists"):
            raise native(se.OK, "", completion_reason="IF_NOT_EXISTS_NOOP", index_uuid=existing[0].uuid,
                         observed_latest=target.latest())
        raise native(se.ALREADY_EXISTS, f"index already exists: {name!r} (stored as {stored[0]!r})")
    if op == "DROP" and not existing:
        if req.get("if_exists"):
            raise native(se.OK, "", completion_reason="IF_EXISTS_NOOP", observed_latest=target.latest())
        raise native(se.NOT_FOUND, f"index not found: {name!r}")
    if op == "DROP":
        new, uuid_out = [], ""
    else:
        req = dict(req, index=dict(req["index"], name=stored[0] if stored else name))
        new = [build(ch, target, ds, req, pinned, invocation)]
        uuid_out = new[0].uuid
    txn_uuid = str(uuid.uuid4())
    # The transaction file is the last object this commit names itself; reserving it is also the
    # engine's last word before the commit point.
    reserve(ch, keys=[f"{target.rel}/_transactions/{pinned}-{txn_uuid}.txn"])
    if req.get("fault") == "crash_before_commit":
        se.kill_self()
    try:
        v = commit(target, pinned, ds, lance.LanceOperation.CreateIndex(new_indices=new, removed_indices=existing),
                   invocation, "commit", txn_uuid)
    except Answer as a:
        a.fields.setdefault("index_uuid", uuid_out)
        raise
    if req.get("fault") == "crash_after_commit":
        se.kill_self()
    raise native(se.OK, "", completion_reason="COMMITTED", committed_version=v, observed_latest=v,
                 index_uuid=uuid_out, created=[])


# -- settle ----------------------------------------------------------------------------------
def settle(req):
    """(outcome, version, fenced, reason, holder) for the invocation's slot pinned+1; may fence it."""
    import lance
    invocation, pinned = req.get("invocation_id", ""), int(req.get("pinned_version") or 0)
    target = Target(req)
    slot = pinned + 1
    for _ in range(3):
        held = holder_of(target, slot)
        if held is not None:
            kind, who = held
            h = {"kind": kind, "invocation": who}
            if kind == "commit" and who == invocation:
                return "COMMITTED", slot, False, "the slot holds this invocation's commit", h
            if kind == "fence":
                return "NOT_COMMITTED", slot, who == invocation, f"slot {slot} holds the fence of {who!r}", h
            return "NOT_COMMITTED", slot, False, f"slot {slot} holds a {kind} by {who!r}", h
        claim = slots.read_claim(target.store, target.key, slot)
        if claim and claim.get("kind") == "commit":
            h = {"kind": "claim", "invocation": claim.get("invocation")}
            if claim.get("invocation") != invocation:
                return "NOT_COMMITTED", slot, False, f"slot {slot} is claimed by {claim.get('invocation')!r}", h
            if not req.get("domain_reaped"):
                return "UNKNOWN", slot, False, "this invocation claimed the slot and has not written it yet", h
            # Its domain is dead: it will never write. Close the slot with a fence over its claim.
        try:
            ds = target.open(pinned)
        except Exception as e:
            raise native(se.NOT_FOUND, f"open pinned {pinned}: {e}")
        fence_of = claim.get("invocation") if claim and claim.get("kind") == "fence" else invocation
        gate_kind = "fence"
        if claim and claim.get("kind") == "commit":
            gate_kind = "commit"  # the dead invocation's own claim lets this write through
        try:
            gate = Gate(target, slot, fence_of if gate_kind == "fence" else invocation, gate_kind)
            tx = lance.Transaction(read_version=pinned,
                                   operation=lance.LanceOperation.CreateIndex(new_indices=[], removed_indices=[]),
                                   transaction_properties={PROP_INV: fence_of, PROP_KIND: "fence"})
            lance.LanceDataset.commit(ds, tx, commit_lock=gate, max_retries=0,
                                      storage_options=target.options or None)
        except Exception:
            pass  # someone else filled or claimed the slot: look again
    return "UNKNOWN", slot, False, "the slot kept changing", {}


# -- main ------------------------------------------------------------------------------------
def main():
    ch = se.Channel()
    ch.hello(ENGINE)
    # Lance is loaded after hello (a probe or a spare is seen at once) and before the request is
    # read (an engine started ahead of its request has the import, most of its start, behind it).
    try:
        import lance  # noqa: F401
    except Exception:
        pass  # the same import fails again where the request needs Lance, and is answered there
    kind, req = ch.request()
    if kind == "settle":
        try:
            outcome, version, fenced, reason, holder = settle(req)
        except slots.Unreachable as e:
            outcome, version, fenced, reason, holder = "UNKNOWN", int(req.get("pinned_version") or 0) + 1, False, f"storage unreachable: {e}", {}
        except Answer as a:
            outcome, version, fenced, reason, holder = "UNKNOWN", int(req.get("pinned_version") or 0) + 1, False, str(a), {}
        ch.settled(outcome, version, fenced, reason, holder)
        return 0
    try:
        mutate(ch, req)
        raise native(se.INTERNAL, "the engine returned without an answer")
    except Answer as a:
        ch.result(a.phase, a.code, str(a), **a.fields)
    except slots.Unreachable as e:
        ch.result("NATIVE_RETURN", se.IO, f"storage unreachable: {e}")
    except se.ProtocolError:
        raise
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        ch.result("NATIVE_RETURN", se.INTERNAL, f"{type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    code = main()
    # The answer is written (unbuffered) and every write it reports has completed: leave without
    # the interpreter's and Lance's teardown (0.1-0.3 s after a 1M-row build, more under load),
    # which the sidecar would wait for before it reaps the domain and answers.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
