"""The segment campaign's reader (internal/testing/campaign/segments.go), Lance's own library only.

  python -c <this> URI   JSON: the latest version, its fragment ids, and every index with its
                         segments as describe_indices() gives them (uuid, fragment bitmap).
S3 URIs take STEWARD_S3_ENDPOINT, STEWARD_S3_ACCESS_KEY, STEWARD_S3_SECRET_KEY from the environment.
"""
import json
import os
import sys

import lance

uri = sys.argv[1]
opts = None
if uri.startswith("s3://"):
    opts = {"aws_endpoint": "http://" + os.environ["STEWARD_S3_ENDPOINT"], "allow_http": "true",
            "aws_region": "us-east-1", "aws_virtual_hosted_style_request": "false",
            "aws_access_key_id": os.environ.get("STEWARD_S3_ACCESS_KEY", ""),
            "aws_secret_access_key": os.environ.get("STEWARD_S3_SECRET_KEY", "")}
os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")
ds = lance.dataset(uri, storage_options=opts)
json.dump({"version": ds.version, "fragments": sorted(f.fragment_id for f in ds.get_fragments()),
           "indices": [{"name": d.name, "type": d.index_type,
                        "segments": [{"uuid": s.uuid, "fragment_ids": sorted(int(f) for f in s.fragment_ids)}
                                     for s in d.segments]}
                       for d in ds.describe_indices()]}, sys.stdout)
