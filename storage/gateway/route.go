package gateway

import (
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cba1309c/steward/storage/slot"
)

// serveHTTP authenticates, rate-limits and routes one request (path-style addressing only:
// /<bucket>[/<key>]).
func (g *Gateway) serveHTTP(w http.ResponseWriter, r *http.Request) {
	ok, sealed := g.enter()
	if !ok {
		writeError(w, r, errf(http.StatusServiceUnavailable, "ServiceUnavailable", "the invocation is over"))
		return
	}
	defer g.inflight.Done()
	if sealed && r.Method != http.MethodGet && r.Method != http.MethodHead {
		g.refuse(w, r, errf(http.StatusForbidden, "AccessDenied", "the invocation has answered: it writes nothing more"))
		return
	}
	if ak := accessKeyOf(r); ak != g.cfg.AccessKey {
		g.refuse(w, r, errf(http.StatusForbidden, "InvalidAccessKeyId", "the request is not signed with this invocation's key"))
		return
	}
	if !g.bucket.take() {
		g.refuse(w, r, errf(http.StatusServiceUnavailable, "SlowDown", "request rate above the invocation's bound"))
		return
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if bucket != g.cfg.Bucket {
		g.refuse(w, r, errf(http.StatusNotFound, "NoSuchBucket", "this gateway serves bucket "+g.cfg.Bucket+" only"))
		return
	}
	q := r.URL.Query()
	if key == "" {
		g.routeBucket(w, r, q.Has("delete"), q.Has("location"))
		return
	}
	if e := g.readable(key); e != nil {
		g.refuse(w, r, e)
		return
	}
	switch {
	case r.Method == http.MethodGet && len(q) == 0, r.Method == http.MethodHead && len(q) == 0:
		g.getObject(w, r, key)
	case r.Method == http.MethodPut && q.Has("uploadId"):
		g.uploadPart(w, r, key, q.Get("uploadId"), q.Get("partNumber"))
	case r.Method == http.MethodPut && len(q) == 0 && r.Header.Get("X-Amz-Copy-Source") != "":
		g.copyObject(w, r, key)
	case r.Method == http.MethodPut && len(q) == 0:
		g.putObject(w, r, key)
	case r.Method == http.MethodPost && q.Has("uploads"):
		g.createUpload(w, r, key)
	case r.Method == http.MethodPost && q.Has("uploadId"):
		g.completeUpload(w, r, key, q.Get("uploadId"))
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		g.abortUpload(w, r, key, q.Get("uploadId"))
	case r.Method == http.MethodDelete && len(q) == 0:
		g.deleteObject(w, r, key)
	default:
		g.refuse(w, r, errf(http.StatusNotImplemented, "NotImplemented", "operation not served by the storage gateway"))
	}
}

func (g *Gateway) routeBucket(w http.ResponseWriter, r *http.Request, del, location bool) {
	switch {
	case r.Method == http.MethodHead && len(r.URL.RawQuery) == 0:
		w.WriteHeader(http.StatusOK) // BucketExists
	case r.Method == http.MethodGet && location:
		writeXML(w, http.StatusOK, locationConstraint{})
	case r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2":
		g.listObjects(w, r)
	case r.Method == http.MethodPost && del:
		g.deleteObjects(w, r)
	default:
		g.refuse(w, r, errf(http.StatusForbidden, "AccessDenied", "bucket operations other than HEAD, location, ListObjectsV2 and DeleteObjects are not served"))
	}
}

// accessKeyOf returns the access key id a request was signed with (SigV4 header or query).
func accessKeyOf(r *http.Request) string {
	if c := r.URL.Query().Get("X-Amz-Credential"); c != "" {
		ak, _, _ := strings.Cut(c, "/")
		return ak
	}
	auth := r.Header.Get("Authorization")
	_, cred, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return ""
	}
	ak, _, _ := strings.Cut(cred, "/")
	return ak
}

// cleanKey reports whether key is a plain relative key: no empty, "." or ".." segment, no
// backslash, no control character, valid UTF-8, at most 1024 bytes (S3's own bound).
func cleanKey(key string) bool {
	if key == "" || len(key) > 1024 || !utf8.ValidString(key) || strings.ContainsRune(key, '\\') {
		return false
	}
	for _, c := range key {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// readable refuses a key outside the dataset.
func (g *Gateway) readable(key string) *s3Error {
	if !cleanKey(key) || !strings.HasPrefix(key, g.base) {
		return errf(http.StatusForbidden, "AccessDenied", "key is not a clean key under the dataset "+g.base)
	}
	return nil
}

// writeKind is what a PUT of key would be.
type writeKind int

const (
	writeRefused  writeKind = iota
	writeObject             // a new object in a writable folder
	writeManifest           // the manifest of pinned+1
	writeHint               // Lance's version hint, naming the version this invocation committed
)

// versionHint is Lance's `_versions/latest_version_hint.json`: a shared file every commit
// rewrites, which readers start their search for the latest version from.
const versionHint = "latest_version_hint.json"

// writable says whether key may be created by this invocation, and as what.
func (g *Gateway) writable(key string) (writeKind, *s3Error) {
	rest := strings.TrimPrefix(key, g.base)
	folder, name, nested := strings.Cut(rest, "/")
	switch {
	case g.cfg.BuildArea != "" && strings.HasPrefix(rest, g.cfg.BuildArea) && len(rest) > len(g.cfg.BuildArea):
		return writeObject, nil
	case g.cfg.NoCommit && folder == "_versions":
		return writeRefused, errf(http.StatusForbidden, "AccessDenied", "this invocation builds a segment: it commits no version")
	case folder == "_versions" && name == versionHint:
		return writeHint, nil
	case folder == "_versions" && !strings.Contains(name, "/"):
		v, ok := slot.ManifestVersion(name)
		if !ok {
			return writeRefused, errf(http.StatusForbidden, "AccessDenied", "_versions/"+name+" is shared: only the manifest of the commit slot may be written")
		}
		if v != g.cfg.Pinned+1 {
			return writeRefused, errf(http.StatusPreconditionFailed, "PreconditionFailed", "this invocation may commit only the version after its pinned one")
		}
		return writeManifest, nil
	case !nested || !slices.Contains(WritableFolders, folder):
		return writeRefused, errf(http.StatusForbidden, "AccessDenied", "new objects go only inside the dataset's folders "+strings.Join(WritableFolders, ", "))
	}
	return writeObject, nil
}
