package gateway

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxListKeys is S3's page bound, and the gateway's.
const maxListKeys = 1000

// listObjects is ListObjectsV2 under the dataset, with delimiter, start-after and continuation.
func (g *Gateway) listObjects(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix, delim := q.Get("prefix"), q.Get("delimiter")
	if prefix+"/" == g.base {
		prefix = g.base // the dataset itself, not its siblings that share its name as a prefix
	}
	if !strings.HasPrefix(prefix, g.base) {
		g.refuse(w, r, errf(http.StatusForbidden, "AccessDenied", "listings are served under the dataset "+g.base+" only"))
		return
	}
	limit := maxListKeys
	if s := q.Get("max-keys"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			g.refuse(w, r, errf(http.StatusBadRequest, "InvalidArgument", "max-keys is not a count"))
			return
		}
		limit = min(n, maxListKeys)
	}
	after := q.Get("start-after")
	token := q.Get("continuation-token")
	if token != "" {
		b, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil {
			g.refuse(w, r, errf(http.StatusBadRequest, "InvalidArgument", "the continuation token is not one this gateway gave"))
			return
		}
		after = string(b)
	}
	out := listResult{Name: g.cfg.Bucket, Prefix: prefix, Delimiter: delim, StartAfter: q.Get("start-after"),
		ContinuationToken: token, MaxKeys: limit}
	last := ""
	for info, err := range g.cfg.Upstream.List(r.Context(), prefix) {
		if err != nil {
			g.refuse(w, r, upstreamError(err))
			return
		}
		if info.Key <= after || (strings.HasSuffix(after, delim) && delim != "" && strings.HasPrefix(info.Key, after)) {
			continue
		}
		name, entry := info.Key, true
		if delim != "" {
			if i := strings.Index(info.Key[len(prefix):], delim); i >= 0 {
				name, entry = info.Key[:len(prefix)+i+len(delim)], false
				if name == last {
					continue // the common prefix is already listed
				}
			}
		}
		if out.KeyCount == limit {
			out.IsTruncated = true
			out.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(last))
			break
		}
		if entry {
			out.Contents = append(out.Contents, listEntry{Key: info.Key, LastModified: info.ModTime.UTC().Format(time.RFC3339Nano),
				ETag: etagOf(info), Size: info.Size, StorageClass: "STANDARD"})
		} else {
			out.CommonPrefixes = append(out.CommonPrefixes, commonPrefix{Prefix: name})
		}
		out.KeyCount++
		last = name
	}
	writeXML(w, http.StatusOK, out)
}
