package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/slot"
)

// etagOf is a stable ETag for an object as the upstream describes it: objects are never
// overwritten through the gateway, so key, size and modification time name its bytes.
func etagOf(info storage.ObjectInfo) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d", info.Key, info.Size, info.ModTime.UnixNano()))
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

func (g *Gateway) getObject(w http.ResponseWriter, r *http.Request, key string) {
	ctx := r.Context()
	info, err := g.stat(ctx, key)
	if err != nil {
		g.refuse(w, r, upstreamError(err))
		return
	}
	etag := etagOf(info)
	if m := r.Header.Get("If-Match"); m != "" && m != "*" && m != etag {
		g.refuse(w, r, errf(http.StatusPreconditionFailed, "PreconditionFailed", "If-Match does not hold"))
		return
	}
	if m := r.Header.Get("If-None-Match"); m != "" && (m == "*" || m == etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Last-Modified", info.ModTime.UTC().Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Type", "application/octet-stream")
	off, n, partial, e := parseRange(r.Header.Get("Range"), info.Size)
	if e != nil {
		h.Set("Content-Range", "bytes */"+strconv.FormatInt(info.Size, 10))
		g.refuse(w, r, e)
		return
	}
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	status := http.StatusOK
	if partial {
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, info.Size))
		status = http.StatusPartialContent
	}
	if r.Method == http.MethodHead || n == 0 {
		w.WriteHeader(status)
		return
	}
	var rc io.ReadCloser
	if partial {
		rc, err = g.cfg.Upstream.GetRange(ctx, key, off, n)
	} else {
		rc, err = g.cfg.Upstream.Get(ctx, key)
	}
	if err != nil {
		h.Del("Content-Length")
		h.Del("Content-Range")
		g.refuse(w, r, upstreamError(err))
		return
	}
	defer rc.Close()
	var body io.Reader = rc
	if fb, ok := rc.(storage.FileBody); ok {
		// A local store's file: net/http hands an *io.LimitedReader over an *os.File to
		// sendfile(2), so the bytes go from the page cache to the socket without a copy
		// through the sidecar (BenchmarkGatewayScan/local).
		f, off, n := fb.FileRange()
		if _, err := f.Seek(off, io.SeekStart); err == nil {
			body = &io.LimitedReader{R: f, N: n}
		}
	}
	w.WriteHeader(status)
	// A failure mid-body cuts the response short of its Content-Length: the client sees a
	// truncated body, never a wrong one.
	_, _ = io.Copy(w, body)
}

// parseRange reads a single-range Range header against an object of size bytes: the offset
// and length to send and whether the response is partial. S3 clips a range past the end.
func parseRange(h string, size int64) (off, n int64, partial bool, e *s3Error) {
	if h == "" {
		return 0, size, false, nil
	}
	bad := errf(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "the range is not satisfiable")
	spec, ok := strings.CutPrefix(h, "bytes=")
	first, last, dash := strings.Cut(spec, "-")
	if !ok || !dash || strings.Contains(spec, ",") {
		return 0, 0, false, errf(http.StatusNotImplemented, "NotImplemented", "only one byte range per request")
	}
	if first == "" { // suffix: the last n bytes
		k, err := strconv.ParseInt(last, 10, 64)
		if err != nil || k <= 0 {
			return 0, 0, false, bad
		}
		k = min(k, size)
		return size - k, k, true, nil
	}
	a, err := strconv.ParseInt(first, 10, 64)
	if err != nil || a < 0 || a >= size {
		return 0, 0, false, bad
	}
	b := size - 1
	if last != "" {
		if b, err = strconv.ParseInt(last, 10, 64); err != nil || b < a {
			return 0, 0, false, bad
		}
		b = min(b, size-1)
	}
	return a, b - a + 1, true, nil
}

// putObject creates key: the commit manifest through the slot, anything else as a new object
// in a writable folder.
func (g *Gateway) putObject(w http.ResponseWriter, r *http.Request, key string) {
	kind, e := g.writable(key)
	if e == nil {
		e = conditionsServed(r)
	}
	if e != nil {
		g.refuse(w, r, e)
		return
	}
	body, size, e := requestBody(r)
	if e != nil {
		g.refuse(w, r, e)
		return
	}
	switch kind {
	case writeManifest:
		g.putManifest(w, r, key, body, size)
		return
	case writeHint:
		g.putHint(w, r, key, body)
		return
	}
	if e := g.admit(r.Context(), key, size); e != nil {
		g.refuse(w, r, e)
		return
	}
	if err := g.cfg.Upstream.PutIfAbsent(r.Context(), key, g.metered(body), size); err != nil {
		g.lost(r.Context(), key, err)
		g.refuse(w, r, upstreamError(err))
		return
	}
	g.created(key)
	w.Header().Set("ETag", `"`+requestID()+`"`)
	w.WriteHeader(http.StatusOK)
}

// lost gives up custody of key when its create-only upload found it taken (another writer's
// object, which must never be deleted with the invocation's); any other failure keeps custody,
// since the object may be the invocation's.
func (g *Gateway) lost(ctx context.Context, key string, err error) {
	if !errors.Is(err, storage.ErrExists) || g.cfg.Custody == nil {
		return
	}
	if rerr := g.cfg.Custody.Release(context.WithoutCancel(ctx), key); rerr != nil {
		g.log.Error("releasing custody of a key another writer holds failed: its ticket stays",
			"invocation", g.cfg.Invocation, "key", key, "error", rerr)
	}
}

// conditionsServed refuses conditions other than create-only, which every put is anyway.
func conditionsServed(r *http.Request) *s3Error {
	if m := r.Header.Get("If-None-Match"); m != "" && m != "*" {
		return errf(http.StatusNotImplemented, "NotImplemented", "only If-None-Match: * is served")
	}
	if r.Header.Get("If-Match") != "" {
		return errf(http.StatusPreconditionFailed, "PreconditionFailed", "objects are never overwritten through the gateway")
	}
	return nil
}

// putManifest is the commit (package slot's diagram): the manifest is read whole and hashed,
// the slot claimed for exactly those bytes, then the manifest created. A retry of the same
// bytes after an unanswered attempt finds its own claim, or its own manifest, and succeeds.
func (g *Gateway) putManifest(w http.ResponseWriter, r *http.Request, key string, body io.Reader, size int64) {
	ctx := r.Context()
	if size > g.lim.MaxManifest {
		g.refuse(w, r, errf(http.StatusForbidden, "QuotaExceeded", fmt.Sprintf("a manifest is held in memory: at most %d bytes", g.lim.MaxManifest)))
		return
	}
	b, err := io.ReadAll(io.LimitReader(g.metered(body), g.lim.MaxManifest+1))
	if err != nil || int64(len(b)) > g.lim.MaxManifest || (size >= 0 && int64(len(b)) != size) {
		g.refuse(w, r, errf(http.StatusBadRequest, "IncompleteBody", "the manifest body was cut short or is too large"))
		return
	}
	if e := g.slotNaming(ctx, key); e != nil {
		g.refuse(w, r, e)
		return
	}
	c := slot.Commit(g.cfg.Invocation, key, b)
	g.setSlot(key, SlotAmbiguous) // from here the claim may be in storage
	if e := g.claim(ctx, c); e != nil {
		g.refuse(w, r, e)
		return
	}
	err = g.cfg.Upstream.PutIfAbsent(ctx, key, bytes.NewReader(b), int64(len(b)))
	if errors.Is(err, storage.ErrExists) {
		if mine, herr := slot.Holds(ctx, g.cfg.Upstream, c); herr == nil && mine {
			err = nil // our own earlier attempt landed
		}
	}
	switch {
	case err == nil:
		g.setSlot(key, SlotLanded)
		w.Header().Set("ETag", `"`+c.SHA256[:32]+`"`)
		w.WriteHeader(http.StatusOK)
	case errors.Is(err, storage.ErrExists):
		g.setSlot(key, SlotRefused)
		g.refuse(w, r, errf(http.StatusPreconditionFailed, "PreconditionFailed", "another writer committed this version"))
	default:
		g.refuse(w, r, upstreamError(err))
	}
}

// slotNaming refuses a manifest of pinned+1 named otherwise than the dataset names its versions:
// the naming under which the pinned version's manifest is in the store. A manifest under
// another name would commit nothing any reader sees.
func (g *Gateway) slotNaming(ctx context.Context, key string) *s3Error {
	pinned, next := slot.ManifestNames(g.cfg.Pinned), slot.ManifestNames(g.cfg.Pinned+1)
	for i, name := range pinned {
		_, err := g.cfg.Upstream.Stat(ctx, g.base+"_versions/"+name)
		switch {
		case err == nil && key == g.base+"_versions/"+next[i]:
			return nil
		case err == nil:
			return errf(http.StatusForbidden, "AccessDenied", "the dataset names version "+strconv.FormatInt(g.cfg.Pinned+1, 10)+"'s manifest "+next[i])
		case !errors.Is(err, storage.ErrNotFound):
			return upstreamError(err)
		}
	}
	return errf(http.StatusPreconditionFailed, "PreconditionFailed", "the pinned version's manifest is not in the store")
}

// putHint rewrites Lance's version hint, which is shared and overwritten by every commit: only
// once this invocation's commit landed, and only with the version it committed, so that an
// engine can neither point readers elsewhere nor touch the hint without a commit.
func (g *Gateway) putHint(w http.ResponseWriter, r *http.Request, key string, body io.Reader) {
	b, err := io.ReadAll(io.LimitReader(g.metered(body), 257))
	var hint struct {
		Version int64 `json:"version"`
	}
	g.mu.Lock()
	landed := g.rec.Slot == SlotLanded
	g.mu.Unlock()
	switch {
	case err != nil || len(b) > 256 || json.Unmarshal(b, &hint) != nil:
		g.refuse(w, r, errf(http.StatusBadRequest, "InvalidArgument", "the version hint is not {\"version\": N}"))
		return
	case !landed || hint.Version != g.cfg.Pinned+1:
		g.refuse(w, r, errf(http.StatusForbidden, "AccessDenied", "the version hint may name only the version this invocation committed, after its commit"))
		return
	}
	if err := g.cfg.Upstream.Put(r.Context(), key, bytes.NewReader(b), int64(len(b))); err != nil {
		g.refuse(w, r, upstreamError(err))
		return
	}
	w.Header().Set("ETag", `"`+requestID()+`"`)
	w.WriteHeader(http.StatusOK)
}

// claim writes the commit claim, or finds its own identical one (a retried PUT).
func (g *Gateway) claim(ctx context.Context, c slot.Claim) *s3Error {
	err := slot.Put(ctx, g.cfg.Upstream, g.cfg.Dataset, g.cfg.Pinned+1, c)
	if errors.Is(err, storage.ErrExists) {
		held, rerr := slot.Read(ctx, g.cfg.Upstream, g.cfg.Dataset, g.cfg.Pinned+1, c.Invocation)
		if rerr == nil && held.Kind == slot.KindCommit && held.SHA256 == c.SHA256 && held.Key == c.Key {
			return nil
		}
		if rerr == nil || errors.Is(rerr, slot.ErrCorrupt) {
			g.setSlot(c.Key, SlotRefused)
			return errf(http.StatusPreconditionFailed, "PreconditionFailed", "the invocation is fenced, or already committed other bytes")
		}
		err = rerr
	}
	if err != nil {
		return upstreamError(err)
	}
	return nil
}

func (g *Gateway) setSlot(key string, s SlotState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rec.Slot == SlotLanded {
		return // a later refused retry does not undo a landed commit
	}
	g.rec.Slot, g.rec.SlotKey = s, key
}

// copyObject is CopyObject within the dataset: a new object whose bytes the sidecar reads from
// an existing one (Lance moves a staged index segment into place this way).
func (g *Gateway) copyObject(w http.ResponseWriter, r *http.Request, key string) {
	if kind, e := g.writable(key); e != nil || kind != writeObject {
		if e == nil {
			e = errf(http.StatusForbidden, "AccessDenied", "a manifest is not written by copy")
		}
		g.refuse(w, r, e)
		return
	}
	if e := conditionsServed(r); e != nil {
		g.refuse(w, r, e)
		return
	}
	src, e := g.copySource(r.Header.Get("X-Amz-Copy-Source"))
	if e != nil {
		g.refuse(w, r, e)
		return
	}
	ctx := r.Context()
	info, err := g.stat(ctx, src)
	if err != nil {
		g.refuse(w, r, upstreamError(err))
		return
	}
	if e := g.admit(ctx, key, info.Size); e != nil {
		g.refuse(w, r, e)
		return
	}
	rc, err := g.cfg.Upstream.Get(ctx, src)
	if err != nil {
		g.refuse(w, r, upstreamError(err))
		return
	}
	defer rc.Close()
	if err := g.cfg.Upstream.PutIfAbsent(ctx, key, g.metered(rc), info.Size); err != nil {
		g.lost(ctx, key, err)
		g.refuse(w, r, upstreamError(err))
		return
	}
	g.created(key)
	writeXML(w, http.StatusOK, copyResult{LastModified: time.Now().UTC().Format(time.RFC3339), ETag: `"` + requestID() + `"`})
}

func (g *Gateway) copySource(h string) (string, *s3Error) {
	h, _, _ = strings.Cut(h, "?") // a versionId: objects here have one version
	src, err := url.PathUnescape(strings.TrimPrefix(h, "/"))
	bucket, key, _ := strings.Cut(src, "/")
	if err != nil || bucket != g.cfg.Bucket {
		return "", errf(http.StatusForbidden, "AccessDenied", "copy source outside the dataset")
	}
	return key, g.readable(key)
}

// deleteObject deletes an object this invocation created; nothing else.
func (g *Gateway) deleteObject(w http.ResponseWriter, r *http.Request, key string) {
	if !g.wroteKey(key) {
		g.refuse(w, r, errf(http.StatusForbidden, "AccessDenied", "only objects this invocation wrote may be deleted"))
		return
	}
	if res := g.cfg.Upstream.DeleteBatch(r.Context(), []string{key}); res[0].Err != nil {
		g.refuse(w, r, upstreamError(res[0].Err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *Gateway) deleteObjects(w http.ResponseWriter, r *http.Request) {
	var req deleteRequest
	if e := decodeXML(r, &req); e != nil {
		g.refuse(w, r, e)
		return
	}
	if len(req.Objects) > storage.MaxDeleteBatch {
		g.refuse(w, r, errf(http.StatusBadRequest, "MalformedXML", "at most 1000 keys per request"))
		return
	}
	var out deleteResult
	var keys []string
	for _, o := range req.Objects {
		if g.readable(o.Key) != nil || !g.wroteKey(o.Key) {
			out.Errors = append(out.Errors, deleteError{Key: o.Key, Code: "AccessDenied", Message: "only objects this invocation wrote may be deleted"})
			continue
		}
		keys = append(keys, o.Key)
	}
	for _, res := range g.cfg.Upstream.DeleteBatch(r.Context(), keys) {
		if res.Err != nil {
			e := upstreamError(res.Err)
			out.Errors = append(out.Errors, deleteError{Key: res.Key, Code: e.Code, Message: e.Message})
		} else if !req.Quiet {
			out.Deleted = append(out.Deleted, struct {
				Key string `xml:"Key"`
			}{res.Key})
		}
	}
	if len(out.Errors) > 0 {
		g.note(r, errf(http.StatusForbidden, "AccessDenied", fmt.Sprintf("%d of %d keys not deleted", len(out.Errors), len(req.Objects))))
	}
	writeXML(w, http.StatusOK, out) // S3 answers a partial multi-delete with 200 and its errors
}
