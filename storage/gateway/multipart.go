package gateway

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// upload is one multipart upload: its parts are files in a private directory of the sidecar's
// (never in the store, where another domain could see them); Complete streams them, in order,
// into one create-only put.
type upload struct {
	key string
	dir string

	mu    sync.Mutex
	parts map[int]part
}

type part struct {
	etag string
	size int64
}

func (g *Gateway) createUpload(w http.ResponseWriter, r *http.Request, key string) {
	if kind, e := g.writable(key); e != nil || kind != writeObject {
		if e == nil {
			e = errf(http.StatusForbidden, "AccessDenied", "a manifest is written by a single PUT")
		}
		g.refuse(w, r, e)
		return
	}
	g.mu.Lock()
	n := len(g.uploads)
	g.mu.Unlock()
	if n >= g.lim.MaxUploads {
		g.refuse(w, r, errf(http.StatusServiceUnavailable, "SlowDown", fmt.Sprintf("at most %d uploads open at once", g.lim.MaxUploads)))
		return
	}
	if e := g.admit(r.Context(), key, -1); e != nil {
		g.refuse(w, r, e)
		return
	}
	id := requestID() + requestID()
	dir := filepath.Join(g.cfg.StageDir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		g.refuse(w, r, errf(http.StatusInternalServerError, "InternalError", "staging directory unavailable"))
		return
	}
	g.mu.Lock()
	g.uploads[id] = &upload{key: key, dir: dir, parts: map[int]part{}}
	g.mu.Unlock()
	writeXML(w, http.StatusOK, initiateResult{Bucket: g.cfg.Bucket, Key: key, UploadID: id})
}

func (g *Gateway) findUpload(key, id string) (*upload, *s3Error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	u, ok := g.uploads[id]
	if !ok || u.key != key {
		return nil, errf(http.StatusNotFound, "NoSuchUpload", "no such upload for this key")
	}
	return u, nil
}

func (g *Gateway) uploadPart(w http.ResponseWriter, r *http.Request, key, id, num string) {
	u, e := g.findUpload(key, id)
	if e != nil {
		g.refuse(w, r, e)
		return
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > maxParts {
		g.refuse(w, r, errf(http.StatusBadRequest, "InvalidArgument", "partNumber must be 1-10000"))
		return
	}
	body, size, e := requestBody(r)
	if e != nil {
		g.refuse(w, r, e)
		return
	}
	p, err := u.writePart(n, g.metered(body), size)
	if err != nil {
		g.refuse(w, r, upstreamError(err))
		return
	}
	w.Header().Set("ETag", p.etag)
	w.WriteHeader(http.StatusOK)
}

// writePart stores part n (a retried part replaces the earlier one).
func (u *upload) writePart(n int, body io.Reader, size int64) (part, error) {
	path := filepath.Join(u.dir, strconv.Itoa(n))
	f, err := os.OpenFile(path+".tmp", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return part{}, err
	}
	h := md5.New() // S3 clients compare a part's ETag with its MD5
	written, err := io.Copy(io.MultiWriter(f, h), body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && size >= 0 && written != size {
		err = fmt.Errorf("part %d: %d bytes, declared %d", n, written, size)
	}
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err != nil {
		_ = os.Remove(path + ".tmp")
		return part{}, err
	}
	p := part{etag: `"` + hex.EncodeToString(h.Sum(nil)) + `"`, size: written}
	u.mu.Lock()
	u.parts[n] = p
	u.mu.Unlock()
	return p, nil
}

func (g *Gateway) completeUpload(w http.ResponseWriter, r *http.Request, key, id string) {
	u, e := g.findUpload(key, id)
	if e == nil {
		e = conditionsServed(r)
	}
	if e != nil {
		g.refuse(w, r, e)
		return
	}
	var req completeRequest
	if e := decodeXML(r, &req); e != nil {
		g.refuse(w, r, e)
		return
	}
	files, total, e := u.ordered(req)
	if e != nil {
		g.refuse(w, r, e)
		return
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	readers := make([]io.Reader, len(files))
	for i, f := range files {
		readers[i] = f
	}
	if err := g.cfg.Upstream.PutIfAbsent(r.Context(), key, io.MultiReader(readers...), total); err != nil {
		g.lost(r.Context(), key, err)
		g.refuse(w, r, upstreamError(err))
		return
	}
	g.created(key)
	g.dropUpload(id)
	writeXML(w, http.StatusOK, completeResult{Bucket: g.cfg.Bucket, Key: key, ETag: fmt.Sprintf(`"%s-%d"`, requestID(), len(files))})
}

// ordered opens the parts the request lists, in ascending order, each with the ETag it names.
func (u *upload) ordered(req completeRequest) ([]*os.File, int64, *s3Error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(req.Parts) == 0 {
		return nil, 0, errf(http.StatusBadRequest, "MalformedXML", "no parts")
	}
	var files []*os.File
	var total int64
	prev := 0
	for _, p := range req.Parts {
		have, ok := u.parts[p.PartNumber]
		if p.PartNumber <= prev || !ok || strings.Trim(have.etag, `"`) != strings.Trim(p.ETag, `"`) {
			for _, f := range files {
				f.Close()
			}
			return nil, 0, errf(http.StatusBadRequest, "InvalidPart", "a listed part is missing, out of order, or has another ETag")
		}
		f, err := os.Open(filepath.Join(u.dir, strconv.Itoa(p.PartNumber)))
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, 0, errf(http.StatusInternalServerError, "InternalError", "a staged part is unreadable")
		}
		files = append(files, f)
		total += have.size
		prev = p.PartNumber
	}
	return files, total, nil
}

func (g *Gateway) abortUpload(w http.ResponseWriter, r *http.Request, key, id string) {
	if _, e := g.findUpload(key, id); e != nil {
		g.refuse(w, r, e)
		return
	}
	g.dropUpload(id)
	w.WriteHeader(http.StatusNoContent)
}

func (g *Gateway) dropUpload(id string) {
	g.mu.Lock()
	u := g.uploads[id]
	delete(g.uploads, id)
	g.mu.Unlock()
	if u != nil {
		_ = os.RemoveAll(u.dir)
	}
}
