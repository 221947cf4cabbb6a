"""Segment builds for steward's Lance engine (docs/ENGINE.md §4.4, §7.1): TRAIN, SEGMENT, COMMIT_SEGMENTS.

One build is one training (vector indexes), K segments over disjoint fragment sets of the pinned
version, and one commit at pinned+1 that publishes them as one index. Between invocations every
object lives in the build's custody in the sidecar; this module only writes and reads them through
the gateway:
  * TRAIN writes the IVF centroids (and the PQ codebook) as Lance files under
    <dataset>/_steward/builds/<build>/train/<train_uuid>/ and answers TRAINED with index_uuid =
    train_uuid;
  * SEGMENT runs create_index_uncommitted over its fragment_ids (with the training's models),
    which writes _indices/<uuid>/ only, then records the segment's Index metadata in
    <build area>/segments/<uuid>.lance, and answers SEGMENT_WRITTEN with index_uuid = uuid;
  * COMMIT_SEGMENTS reads each listed segment's record, checks it is the segment the request
    lists (name, fragments, pinned version), and commits them in one CreateIndex at pinned+1 (the
    engine's gated, tagged commit, as for CREATE).
Coverage of the pinned version is the sidecar's to check (it reads the manifest itself); this
module refuses only what contradicts its own records.
"""

import base64
import datetime
import json
import uuid

OPS = ("TRAIN", "SEGMENT", "COMMIT_SEGMENTS")
VECTOR_TRAINED = ("IVF_PQ", "IVF_HNSW_SQ")


class Ctx:
    """What the engine lends this module: its answers, its commit and the request's target."""

    def __init__(self, se, native, commit, target, ds, req, pinned, invocation, name, kwargs):
        self.se, self.native, self.commit = se, native, commit
        self.target, self.ds, self.req, self.pinned, self.invocation = target, ds, req, pinned, invocation
        self.name, self.kwargs = name, kwargs
        idx = req.get("index") or {}
        self.itype, self.column = idx.get("type", ""), (idx.get("columns") or [""])[0]
        self.seg = req.get("segment") or {}
        self.area = f"{target.uri}/_steward/builds/{self.seg.get('build_id', '')}/"
        self.opts = target.options or None


def run(c, ch, op):
    if op == "TRAIN":
        train(c, ch)
    elif op == "SEGMENT":
        segment(c, ch)
    else:
        commit_segments(c, ch)


# -- TRAIN --------------------------------------------------------------------------------------
def train(c, ch):
    from lance.indices import IndicesBuilder
    se = c.se
    if c.itype not in VECTOR_TRAINED:
        raise c.native(se.INVALID_ARGUMENT, f"TRAIN applies to {', '.join(VECTOR_TRAINED)}; build {c.itype} segments without it")
    k = c.kwargs
    iters, nbits = k.get("max_iterations", 50), k.get("num_bits", 8)
    ch.progress("train", 0, 2, last=True)
    try:
        b = IndicesBuilder(c.ds, c.column)
        rows = c.ds.count_rows()
        parts = k.get("num_partitions") or max(1, int(rows ** 0.5))
        # Without an explicit sample_rate, sample what the dataset has (as create_index does): the
        # builder refuses a sample larger than the rows.
        ivf_sample = k.get("sample_rate") or max(1, min(256, rows // parts))
        pq_sample = k.get("sample_rate") or max(1, min(256, rows // (1 << nbits)))
        ivf = b.train_ivf(parts, distance_type=k.get("metric", "l2"), sample_rate=ivf_sample, max_iters=iters)
        pq = None
        if c.itype == "IVF_PQ":
            pq = b.train_pq(ivf, k.get("num_sub_vectors"), sample_rate=pq_sample, max_iters=iters, num_bits=nbits)
    except ValueError as e:
        raise c.native(se.INVALID_ARGUMENT, f"train: {e}")
    except Exception as e:
        raise c.native(se.INDEX, f"train: {e}")
    tuuid = str(uuid.uuid4())
    where = f"{c.area}train/{tuuid}/"
    try:
        ivf.save(where + "ivf.lance", storage_options=c.opts)
        if pq is not None:
            pq.save(where + "pq.lance", storage_options=c.opts)
    except Exception as e:
        raise c.native(se.IO, f"write the training: {e}", index_uuid=tuuid)
    if c.req.get("fault") == "crash_after_build":
        se.kill_self()
    ch.progress("train", 2, 2, last=True)
    raise c.native(se.OK, "", completion_reason="TRAINED", index_uuid=tuuid)


def load_training(c, tuuid):
    from lance.indices import IvfModel, PqModel
    where = f"{c.area}train/{tuuid}/"
    try:
        ivf = IvfModel.load(where + "ivf.lance", storage_options=c.opts)
        pq = PqModel.load(where + "pq.lance", storage_options=c.opts) if c.itype == "IVF_PQ" else None
    except Exception as e:
        raise c.native(c.se.NOT_FOUND, f"training {tuuid} of build {c.seg.get('build_id')} could not be read: {e}")
    return ivf, pq


# -- SEGMENT ------------------------------------------------------------------------------------
def segment(c, ch):
    se = c.se
    frags = [int(f) for f in c.seg.get("fragment_ids") or []]
    have = {f.fragment_id for f in c.ds.get_fragments()}
    missing = [f for f in frags if f not in have]
    if missing:
        raise c.native(se.INVALID_ARGUMENT, f"fragments {missing[:8]} are not in version {c.pinned}")
    kwargs = dict(c.kwargs)
    if c.itype in VECTOR_TRAINED:
        tuuid = c.seg.get("train_uuid") or ""
        if not tuuid:
            raise c.native(se.INVALID_ARGUMENT, f"a {c.itype} segment needs segment.train_uuid (a TRAIN of its build)")
        ivf, pq = load_training(c, tuuid)
        kwargs.update(ivf_centroids=ivf.centroids, num_partitions=ivf.num_partitions, metric=ivf.distance_type)
        if pq is not None:
            kwargs.update(pq_codebook=pq.codebook, num_sub_vectors=pq.num_subvectors)
        for k in ("sample_rate", "max_iterations", "num_bits"):
            kwargs.pop(k, None)
    seg_uuid = None
    if c.itype not in ("BTREE", "LABEL_LIST"):  # Lance names these segments itself
        seg_uuid = kwargs["index_uuid"] = str(uuid.uuid4())
    ch.progress("segment", 0, 1, last=True)
    if c.req.get("fault") == "crash_before_commit":  # a segment's write is its commit into the build
        se.kill_self()
    try:
        s = c.ds.create_index_uncommitted(c.column, c.itype, name=c.name, fragment_ids=frags, replace=True, **kwargs)
        if c.itype == "INVERTED":
            s = c.ds.merge_existing_index_segments([s])
    except ValueError as e:
        raise c.native(se.INVALID_ARGUMENT, f"segment: {e}", index_uuid=seg_uuid)
    except Exception as e:
        raise c.native(se.INDEX, f"segment: {e}", index_uuid=seg_uuid)
    if c.req.get("fault") == "crash_after_build":
        se.kill_self()
    if sorted(s.fragment_ids) != sorted(frags) or (seg_uuid and s.uuid != seg_uuid):
        raise c.native(se.INTERNAL, f"Lance wrote segment {s.uuid} over {sorted(s.fragment_ids)}, not the requested one",
                       index_uuid=s.uuid)
    try:
        write_record(c, s)
    except Exception as e:
        raise c.native(se.IO, f"record the segment: {e}", index_uuid=s.uuid)
    if c.req.get("fault") == "crash_after_commit":
        se.kill_self()
    ch.progress("segment", 1, 1, last=True)
    raise c.native(se.OK, "", completion_reason="SEGMENT_WRITTEN", index_uuid=s.uuid)


def encode(s):
    return json.dumps({
        "uuid": s.uuid, "name": s.name, "fields": list(s.fields), "dataset_version": s.dataset_version,
        "fragment_ids": sorted(int(f) for f in s.fragment_ids), "index_version": s.index_version,
        "created_at": s.created_at.isoformat() if s.created_at else None, "base_id": s.base_id,
        "files": [[f.path, f.size_bytes] for f in (s.files or [])],
        "index_details": [s.index_details[0], base64.b64encode(s.index_details[1]).decode()] if s.index_details else None,
        "covering_fields": list(s.covering_fields or [])})


def decode(text):
    from lance.dataset import Index, IndexFile
    d = json.loads(text)
    return Index(uuid=d["uuid"], name=d["name"], fields=d["fields"], dataset_version=d["dataset_version"],
                 fragment_ids=set(d["fragment_ids"]), index_version=d["index_version"],
                 created_at=datetime.datetime.fromisoformat(d["created_at"]) if d["created_at"] else None,
                 base_id=d["base_id"],
                 files=[IndexFile(path=p, size_bytes=n) for p, n in d["files"]] if d["files"] else None,
                 index_details=(d["index_details"][0], base64.b64decode(d["index_details"][1])) if d["index_details"] else None,
                 covering_fields=d["covering_fields"])


def write_record(c, s):
    import pyarrow as pa
    from lance.file import LanceFileWriter
    schema = pa.schema([pa.field("index", pa.string())])
    with LanceFileWriter(f"{c.area}segments/{s.uuid}.lance", schema, storage_options=c.opts) as w:
        w.write_batch(pa.table({"index": [encode(s)]}, schema=schema))


def read_record(c, seg_uuid):
    from lance.file import LanceFileReader
    t = LanceFileReader(f"{c.area}segments/{seg_uuid}.lance", storage_options=c.opts).read_all().to_table()
    return decode(t.column("index")[0].as_py())


# -- COMMIT_SEGMENTS ----------------------------------------------------------------------------
def commit_segments(c, ch):
    import lance
    se = c.se
    segs = []
    for ref in c.seg.get("segments") or []:
        try:
            s = read_record(c, ref["uuid"])
        except Exception as e:
            raise c.native(se.NOT_FOUND, f"segment {ref['uuid']} of build {c.seg.get('build_id')} has no record: {e}")
        want = sorted(int(f) for f in ref.get("fragment_ids") or [])
        if s.uuid != ref["uuid"] or s.name != c.name or sorted(s.fragment_ids) != want or s.dataset_version != c.pinned:
            raise c.native(se.INVALID_ARGUMENT,
                           f"segment {ref['uuid']} was built as {s.name!r} over {sorted(s.fragment_ids)} at version "
                           f"{s.dataset_version}; the commit lists {c.name!r} over {want} at {c.pinned}")
        segs.append(s)
    if c.req.get("fault") == "crash_before_commit":
        se.kill_self()
    op = lance.LanceOperation.CreateIndex(new_indices=segs, removed_indices=[])
    try:
        v = c.commit(ch, c.target, c.pinned, c.ds, op, c.invocation, "commit", str(uuid.uuid4()))
    except Exception as a:
        if hasattr(a, "fields"):
            a.fields.setdefault("index_uuid", segs[0].uuid)
        raise
    if c.req.get("fault") == "crash_after_commit":
        se.kill_self()
    raise c.native(se.OK, "", completion_reason="COMMITTED", committed_version=v, observed_latest=v,
                   index_uuid=segs[0].uuid, created=[])
