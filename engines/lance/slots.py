"""Commit-slot claims: one put-if-absent object per dataset version, written by steward's writers.

pylance's only hook at the commit point is `commit_lock(version)`, and a custom lock turns Lance's
manifest write from put-if-absent into HEAD-then-PUT (lance-table `impl CommitHandler for
CommitLock`). Two steward writers (an engine commit and a fence) racing for the same version could
then both pass the HEAD and the later PUT would overwrite the earlier manifest. So every steward
writer first claims the version here, with a real put-if-absent (O_EXCL on a file store,
`If-None-Match: *` on S3), and only the claim's holder may write that version's manifest.

The claim is `<dataset>/_steward/slots/<version:020>.json`, a small JSON object
{"invocation", "kind": "commit"|"fence", "unix_ms"}; it is never rewritten or deleted by steward.
Standard library only (the S3 client signs with AWS Signature V4 itself).
"""

import datetime
import hashlib
import hmac
import json
import os
import time
import urllib.parse


class Unreachable(Exception):
    """The store could not be asked (network, 5xx, permission): nothing is known."""


def claim_key(dataset_key, version):
    return f"{dataset_key}/_steward/slots/{version:020d}.json"


def claim_body(invocation, kind):
    return json.dumps({"invocation": invocation, "kind": kind,
                       "unix_ms": int(time.time() * 1000)}, separators=(",", ":")).encode()


class FileStore:
    """Objects are files under root; keys are relative to it."""

    def __init__(self, root):
        self.root = root

    def put_if_absent(self, key, body):
        path = os.path.join(self.root, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, fails if the name exists; readers never see half a file
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def get(self, key):
        try:
            with open(os.path.join(self.root, key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def copy(self, src, dst):
        """Gives object src the new name dst too (a hard link: no bytes move; fails if dst exists)."""
        path = os.path.join(self.root, dst)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.link(os.path.join(self.root, src), path)

    def list(self, prefix):
        """Every key under prefix (a folder ending in "/"), sorted."""
        base = os.path.join(self.root, prefix)
        out = []
        for d, _, files in os.walk(base):
            out += [os.path.relpath(os.path.join(d, f), self.root) for f in files]
        return sorted(out)

    def delete_prefix(self, prefix):
        """Deletes every object under prefix, and its folders."""
        base = os.path.join(self.root, prefix)
        for d, dirs, files in os.walk(base, topdown=False):
            for f in files:
                os.unlink(os.path.join(d, f))
            os.rmdir(d)


class S3Store:
    """Path-style S3 (MinIO) with SigV4; keys are relative to the bucket."""

    def __init__(self, endpoint, bucket, access_key="", secret_key="", region="us-east-1",
                 secure=False, timeout=5.0):
        self.endpoint, self.bucket = endpoint, bucket
        self.ak, self.sk, self.region = access_key, secret_key, region or "us-east-1"
        self.secure, self.timeout = secure, timeout

    def _request(self, method, key, body=b"", extra=None, query=None):
        path = "/" + urllib.parse.quote(f"{self.bucket}/{key}", safe="/-_.~")
        qs = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                      for k, v in sorted((query or {}).items()))
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        payload = hashlib.sha256(body).hexdigest()
        headers = {"host": self.endpoint, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
        headers.update(extra or {})
        if self.ak:
            signed = sorted(headers)
            canonical = "\n".join([method, path, qs,
                                   "".join(f"{h}:{headers[h].strip()}\n" for h in signed),
                                   ";".join(signed), payload])
            scope = f"{day}/{self.region}/s3/aws4_request"
            to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                                 hashlib.sha256(canonical.encode()).hexdigest()])
            k = ("AWS4" + self.sk).encode()
            for part in (day, self.region, "s3", "aws4_request"):
                k = hmac.new(k, part.encode(), hashlib.sha256).digest()
            sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
            headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.ak}/{scope}, "
                                        f"SignedHeaders={';'.join(signed)}, Signature={sig}")
        import http.client  # here, not at the top: 20-60 ms of imports a local store never needs

        cls = http.client.HTTPSConnection if self.secure else http.client.HTTPConnection
        try:
            conn = cls(self.endpoint, timeout=self.timeout)
            conn.request(method, path + ("?" + qs if qs else ""), body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
        except OSError as e:
            raise Unreachable(f"s3 {method}: {e}") from e
        return resp.status, data

    def put_if_absent(self, key, body):
        status, _ = self._request("PUT", key, body, {"if-none-match": "*"})
        if status == 200:
            return True
        if status in (409, 412):
            return False
        raise Unreachable(f"s3 PUT {key}: HTTP {status}")

    def get(self, key):
        status, data = self._request("GET", key)
        if status == 200:
            return data
        if status == 404:
            return None
        raise Unreachable(f"s3 GET {key}: HTTP {status}")

    def copy(self, src, dst):
        """Copies object src to dst in the bucket (CopyObject, server side)."""
        source = "/" + urllib.parse.quote(f"{self.bucket}/{src}", safe="/-_.~")
        status, data = self._request("PUT", dst, b"", {"x-amz-copy-source": source})
        # CopyObject can fail after its 200 status line: the body is then an <Error> document.
        if status != 200 or b"<Error>" in data:
            raise Unreachable(f"s3 copy {src} -> {dst}: HTTP {status} {data[:200]!r}")

    def list(self, prefix):
        """Every key under prefix (a folder ending in "/"), sorted (ListObjectsV2, all pages)."""
        import xml.etree.ElementTree as ET

        out, token = [], None
        while True:
            q = {"list-type": "2", "prefix": prefix}
            if token:
                q["continuation-token"] = token
            status, data = self._request("GET", "", query=q)
            if status != 200:
                raise Unreachable(f"s3 list {prefix}: HTTP {status}")
            root = ET.fromstring(data)
            ns = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
            out += [c.findtext(f"{ns}Key") for c in root.findall(f"{ns}Contents")]
            token = root.findtext(f"{ns}NextContinuationToken")
            if root.findtext(f"{ns}IsTruncated") != "true" or not token:
                return sorted(out)

    def delete_prefix(self, prefix):
        """Deletes every object under prefix, one DELETE each (a staging folder holds a few)."""
        for key in self.list(prefix):
            status, _ = self._request("DELETE", key)
            if status not in (200, 204, 404):
                raise Unreachable(f"s3 DELETE {key}: HTTP {status}")


def read_claim(store, dataset_key, version):
    raw = store.get(claim_key(dataset_key, version))
    return None if raw is None else json.loads(raw)
