"""Lance datasets for steward's tests and demo, read with Lance's own library (outside steward).

  lancectl.py create URI --rows N [--seed S] [--fragments F] [--dim D (0: no vec column)]
      columns: id int64, price float64, category string (50 values), labels list<string>,
      text string (three words of eight), vec fixed_size_list<float32,128>
  lancectl.py append URI --rows N     append N rows (new fragments) after the last id; JSON: version, fragments
  lancectl.py describe URI            JSON: version, rows, schema, indices
  lancectl.py coverage URI NAME       JSON: Lance's index statistics of NAME (indexed and unindexed rows and
      fragments) and the fragments its segments cover next to the dataset's own
  lancectl.py versions URI            JSON: every version with its steward transaction tag
  lancectl.py chain URI               JSON: the whole version chain as Lance reads it, for a checker:
      every version (read version, operation, steward tag, the indices present) and every file a
      manifest of some version references (Lance's own tracked_files: manifests, data files,
      deletion files, transaction files, index files)
  lancectl.py check URI NAME COLUMN TYPE
      JSON: the index is listed, the query plan uses it, and its answer equals a full scan
  lancectl.py segments URI NAME
      JSON: the index's segments as Lance describes them (describe_indices' num_segments, each
      segment's uuid and fragment bitmap), the version's fragments and the rows it leaves unindexed
  lancectl.py recall URI COLUMN [--queries Q] [--nprobes P]
      JSON: mean recall@10 of the vector index on COLUMN over Q queries (rows of the dataset chosen
      with a fixed seed), each against an exact scan
  lancectl.py index URI COLUMN TYPE NAME [k=v ...]
      build and commit an index the plain pylance way (a concurrent writer, and the bare baseline)
S3 URIs take STEWARD_S3_ENDPOINT, STEWARD_S3_ACCESS_KEY, STEWARD_S3_SECRET_KEY from the environment.
"""

import time

_STARTED = time.time()  # python's own start-up is behind this line

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import lance  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

_IMPORTED = time.time()

DIM = 128


def options(uri):
    if not uri.startswith("s3://"):
        return None
    return {"aws_endpoint": "http://" + os.environ["STEWARD_S3_ENDPOINT"], "allow_http": "true",
            "aws_region": "us-east-1", "aws_virtual_hosted_style_request": "false",
            "aws_access_key_id": os.environ.get("STEWARD_S3_ACCESS_KEY", ""),
            "aws_secret_access_key": os.environ.get("STEWARD_S3_SECRET_KEY", "")}


def table(rows, seed, start=0, dim=DIM):
    rng = np.random.default_rng(seed + start)
    words = np.array(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"])
    pick = rng.integers(0, len(words), size=(rows, 3))
    cols = {
        "id": pa.array(np.arange(start, start + rows, dtype=np.int64)),
        "price": pa.array(rng.random(rows) * 100),
        "category": pa.array([f"c{v}" for v in rng.integers(0, 50, rows)]),
        "labels": pa.array([[f"l{a % 10}", f"l{b % 10}"] for a, b in rng.integers(0, 100, (rows, 2))],
                           pa.list_(pa.string())),
        "text": pa.array([" ".join(w) for w in words[pick]]),
    }
    if dim:
        cols["vec"] = pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(rows * dim, dtype=np.float32)), dim)
    return pa.table(cols)


def create(uri, rows, seed=42, fragments=1, dim=DIM):
    per, mode, start, ds = max(1, rows // fragments), "create", 0, None
    while start < rows:
        n = min(per, rows - start)
        ds = lance.write_dataset(table(n, seed, start, dim), uri, mode=mode, storage_options=options(uri),
                                 max_rows_per_file=n)
        mode, start = "append", start + n
    return ds


def append(uri, rows, seed=43):
    ds = lance.dataset(uri, storage_options=options(uri))
    vec = ds.schema.field("vec").type.list_size if "vec" in ds.schema.names else 0
    ds = lance.write_dataset(table(rows, seed, ds.count_rows(), vec), uri, mode="append",
                             storage_options=options(uri), max_rows_per_file=rows)
    return {"version": ds.version, "fragments": [f.fragment_id for f in ds.get_fragments()]}


def coverage(uri, name):
    ds = lance.dataset(uri, storage_options=options(uri))
    st = ds.stats.index_stats(name)
    covered = set()
    segs = [i for i in ds.list_indices() if i["name"] == name]
    for i in segs:
        covered |= set(i["fragment_ids"])
    return {"version": ds.version, "segments": len(segs),
            "indexed_rows": st["num_indexed_rows"], "unindexed_rows": st["num_unindexed_rows"],
            "indexed_fragments": st["num_indexed_fragments"], "unindexed_fragments": st["num_unindexed_fragments"],
            "fragments": sorted(f.fragment_id for f in ds.get_fragments()), "covered": sorted(covered)}


def describe(uri):
    ds = lance.dataset(uri, storage_options=options(uri))
    return {"version": ds.version, "rows": ds.count_rows(),
            "schema": {f.name: str(f.type) for f in ds.schema},
            "indices": [{"name": i["name"], "type": i["type"], "uuid": i["uuid"], "fields": i["fields"]}
                        for i in ds.list_indices()]}


def versions(uri):
    ds = lance.dataset(uri, storage_options=options(uri))
    out = []
    for v in ds.versions():
        tx = ds.read_transaction(v["version"])
        props = (tx.transaction_properties if tx else None) or {}
        out.append({"version": v["version"], "operation": type(tx.operation).__name__ if tx else "",
                    "invocation": props.get("steward.invocation", ""),
                    "kind": props.get("steward.kind", "")})
    return out


def chain(uri):
    """Every version of the dataset as Lance's library reads it, and every file its manifests name."""
    ds = lance.dataset(uri, storage_options=options(uri))
    out = {"latest": ds.latest_version, "versions": [], "files": []}
    for v in sorted(x["version"] for x in ds.versions()):
        at = lance.dataset(uri, version=v, storage_options=options(uri))
        tx = at.read_transaction(v)
        props = (tx.transaction_properties if tx else None) or {}
        out["versions"].append({
            "version": v, "read_version": tx.read_version if tx else -1,
            "operation": type(tx.operation).__name__ if tx else "",
            "txn_uuid": tx.uuid if tx else "",
            "invocation": props.get("steward.invocation", ""), "kind": props.get("steward.kind", ""),
            "indices": [{"name": i["name"], "uuid": i["uuid"], "type": i["type"]} for i in at.list_indices()]})
    files = ds.tracked_files().read_all()
    for v, path, kind in zip(files.column("version").to_pylist(), files.column("path").to_pylist(),
                             files.column("type").to_pylist()):
        out["files"].append({"version": v, "path": path, "type": kind})
    return out


def _ids(t):
    return sorted(t.column("id").to_pylist())


def check(uri, name, column, itype):
    """Lance's own reader: listed, the plan uses the index, and the indexed answer == a full scan."""
    ds = lance.dataset(uri, storage_options=options(uri))
    listed = [i for i in ds.list_indices() if i["name"] == name]
    out = {"listed": bool(listed), "type": listed[0]["type"] if listed else "", "last": versions(uri)[-1]}
    if itype in ("BTREE", "BITMAP", "LABEL_LIST"):
        flt = {"BTREE": f"{column} >= 100 AND {column} < 140",
               "BITMAP": f"{column} = 'c7'",
               "LABEL_LIST": f"array_has_any({column}, ['l3'])"}[itype]
        out["plan"] = ds.scanner(filter=flt, columns=["id"]).explain_plan(True)
        got = _ids(ds.to_table(filter=flt, columns=["id"]))
        want = _ids(ds.to_table(filter=flt, columns=["id"], use_scalar_index=False))
        out["uses_index"] = "ScalarIndexQuery" in out["plan"] or "MaterializeIndex" in out["plan"]
        out["rows"], out["equal"] = len(got), got == want and len(got) > 0
    elif itype == "INVERTED":
        out["plan"] = ds.scanner(full_text_query="delta", columns=["id"]).explain_plan(True)
        got = _ids(ds.to_table(full_text_query="delta", columns=["id"]))
        scan = ds.to_table(columns=["id", column])
        want = sorted(i for i, t in zip(scan.column("id").to_pylist(), scan.column(column).to_pylist())
                      if "delta" in t.split())
        out["uses_index"] = "MatchQuery" in out["plan"]
        out["rows"], out["equal"] = len(got), got == want and len(got) > 0
    else:
        q = np.array(ds.take([7], columns=[column]).column(column).to_pylist()[0], dtype=np.float32)
        near = {"column": column, "q": q, "k": 10, "nprobes": 64, "refine_factor": 50}
        out["plan"] = ds.scanner(nearest=near, columns=["id"]).explain_plan(True)
        t0 = time.perf_counter()
        got = ds.to_table(nearest=near, columns=["id"]).column("id").to_pylist()
        out["index_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        t0 = time.perf_counter()
        want = ds.to_table(nearest=dict(near, use_index=False), columns=["id"]).column("id").to_pylist()
        out["scan_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        out["uses_index"] = "ANN" in out["plan"]
        out["recall"] = len(set(got) & set(want)) / 10
        # The query is a row of the dataset: its exact nearest neighbour is itself (distance 0).
        out["self_hit"] = bool(want) and want[0] in got
        out["rows"], out["equal"] = len(got), sorted(got) == sorted(want)
    return out


def segments(uri, name):
    os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")
    ds = lance.dataset(uri, storage_options=options(uri))
    desc = [d for d in ds.describe_indices() if d.name == name]
    stats = ds.stats.index_stats(name) if desc else {}
    return {"num_segments": len(desc[0].segments) if desc else 0,
            "segments": [{"uuid": i["uuid"], "fragment_ids": sorted(i["fragment_ids"])}
                         for i in ds.list_indices() if i["name"] == name],
            "fragments": sorted(f.fragment_id for f in ds.get_fragments()),
            "unindexed_rows": stats.get("num_unindexed_rows", -1), "indexed_rows": stats.get("num_indexed_rows", -1)}


def recall(uri, column, queries=50, nprobes=16, k=10):
    ds = lance.dataset(uri, storage_options=options(uri))
    ids = np.random.default_rng(7).choice(ds.count_rows(), queries, replace=False)
    total = 0.0
    for q in ds.take(sorted(int(i) for i in ids), columns=[column]).column(column).to_pylist():
        q = np.array(q, dtype=np.float32)
        near = {"column": column, "q": q, "k": k, "nprobes": nprobes}
        got = ds.to_table(nearest=near, columns=["id"]).column("id").to_pylist()
        want = ds.to_table(nearest=dict(near, use_index=False), columns=["id"]).column("id").to_pylist()
        total += len(set(got) & set(want)) / k
    return {"recall": total / queries, "queries": queries, "nprobes": nprobes}


def index(uri, column, itype, name, params):
    """The build, and where its process's time went (timing: Unix times of its start, the end of
    its imports, open, build with Lance's own commit, and the reopen that reads the version)."""
    ds = lance.dataset(uri, storage_options=options(uri))
    opened = time.time()
    conv = {k: int(v) if v.isdigit() else v for k, v in params.items()}
    t0 = time.perf_counter()
    if itype in ("IVF_PQ", "IVF_HNSW_SQ"):
        ds.create_index(column, itype, name=name, **conv)
    else:
        ds.create_scalar_index(column, itype, name=name)
    ms = (time.perf_counter() - t0) * 1000
    built = time.time()
    version = lance.dataset(uri, storage_options=options(uri)).version
    return {"version": version, "ms": round(ms, 1),
            "timing": {"started": _STARTED, "imported": _IMPORTED, "opened": opened, "built": built, "reopened": time.time()}}


def main(argv):
    cmd, uri = argv[1], argv[2]
    if cmd == "create":
        rows = int(argv[argv.index("--rows") + 1])
        seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 42
        frags = int(argv[argv.index("--fragments") + 1]) if "--fragments" in argv else 1
        dim = int(argv[argv.index("--dim") + 1]) if "--dim" in argv else DIM
        out = {"version": create(uri, rows, seed, frags, dim).version}
    elif cmd == "append":
        out = append(uri, int(argv[argv.index("--rows") + 1]))
    elif cmd == "coverage":
        out = coverage(uri, argv[3])
    elif cmd == "describe":
        out = describe(uri)
    elif cmd == "versions":
        out = versions(uri)
    elif cmd == "chain":
        out = chain(uri)
    elif cmd == "check":
        out = check(uri, argv[3], argv[4], argv[5])
    elif cmd == "segments":
        out = segments(uri, argv[3])
    elif cmd == "recall":
        q = int(argv[argv.index("--queries") + 1]) if "--queries" in argv else 50
        p = int(argv[argv.index("--nprobes") + 1]) if "--nprobes" in argv else 16
        out = recall(uri, argv[3], q, p)
    elif cmd == "index":
        out = index(uri, argv[3], argv[4], argv[5], dict(a.split("=", 1) for a in argv[6:]))
    else:
        raise SystemExit(__doc__)
    json.dump(out, sys.stdout)
    print()


def run():
    """The console entry point (steward-lancectl)."""
    main(sys.argv)


if __name__ == "__main__":
    run()
