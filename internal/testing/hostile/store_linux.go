package hostile

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// store looks for the store behind the gateway: its directory (file://), the shared staging
// folder every engine once wrote, and the real endpoint (MinIO); and hands the engine's gateway
// key to the test, which tries it at the real store.
func (r *run) store(_ context.Context) {
	r.emit(r.storeRoot())
	if root := r.p[ParamStoreRoot]; root != "" {
		r.emit(r.writeOutside("fs.write-store-root", "the store's root, outside the dataset", filepath.Join(root, "hostile-"+r.inv)))
	}
	if d := r.p[ParamOtherDir]; d != "" {
		r.emit(r.writeOutside("fs.write-other-dataset", "another dataset's directory", filepath.Join(d, "data", "hostile-"+r.inv)))
	}
	r.emit(r.storeDirect())
	r.emit(r.handoff())
	r.emit(r.requestSecrets())
}

// storeRoot: the file:// store's root and its staging folder must not exist in the domain.
func (r *run) storeRoot() Finding {
	root := r.p[ParamStoreRoot]
	f := Finding{Attack: "store.root-visible", Tried: "stat and list the file:// store's root and its shared staging folder .steward-tmp (where another domain's staged files were once hard-linked from)"}
	if root == "" {
		f.Verdict, f.Evidence = Inconclusive, "the test named no store root"
		return f
	}
	var ev []string
	visible := false
	for _, p := range []string{root, filepath.Join(root, ".steward-tmp"), filepath.Join(root, filepath.Base(r.ds))} {
		ents, err := os.ReadDir(p)
		if err != nil {
			if _, serr := os.Stat(p); serr == nil {
				visible = true
				ev = append(ev, fmt.Sprintf("%s: exists, unlistable (%s)", p, errnoOr(err)))
				continue
			}
			ev = append(ev, fmt.Sprintf("%s: %s", p, errnoOr(err)))
			if f.Errno == "" {
				f.Errno = errno(err)
			}
			continue
		}
		visible = true
		ev = append(ev, fmt.Sprintf("%s: %d entries", p, len(ents)))
	}
	f.Verdict, f.Evidence = verdict(visible), strings.Join(ev, "; ")
	return f
}

// storeDirect dials the real store's endpoint (MinIO) and, connected, asks it to list buckets
// with the engine's gateway key.
func (r *run) storeDirect() Finding {
	addr := r.p[ParamStoreAddr]
	f := Finding{Attack: "store.direct", Tried: "connect to the real store's endpoint " + addr + " (and list its buckets with the gateway key)"}
	if addr == "" {
		f.Verdict, f.Evidence = Inconclusive, "the test named no store endpoint"
		return f
	}
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return blocked(f.Attack, f.Tried, err)
	}
	c.Close()
	s := &s3raw{addr: addr, bucket: "", ak: r.req.Credentials.AccessKey}
	p := s.do("GET", "/", nil, nil)
	s.close()
	f.Verdict, f.Evidence = Succeeded, fmt.Sprintf("connected to the store; ListBuckets with the gateway key: %v", p)
	return f
}

// handoff gives the test the engine's gateway key (reversed, hex), which tries it at MinIO.
func (r *run) handoff() Finding {
	f := Finding{Attack: "store.gateway-key", Tried: "use its per-invocation gateway key at the real store (the test tries it there: the engine cannot reach it)", Verdict: Pending}
	if r.req.Credentials == nil {
		f.Verdict, f.Evidence = Inconclusive, "the request holds no key"
		return f
	}
	b := []byte(r.req.Credentials.AccessKey + "\x00" + r.req.Credentials.SecretKey)
	slices.Reverse(b)
	f.Handoff = hex.EncodeToString(b)
	f.Evidence = "handed to the test"
	return f
}

// requestSecrets names, by digest, every credential-like value the engine was given: its
// request's credentials, every environment value and every string of the request. The test
// compares them with the call's and the sidecar's secrets.
func (r *run) requestSecrets() Finding {
	f := Finding{Attack: "secrets.request", Tried: "look for the call's or the sidecar's S3 keys in its request frame and environment (digests of every string there)"}
	var strs []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			strs = append(strs, x)
		case map[string]any:
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	b, _ := json.Marshal(r.req)
	var v any
	_ = json.Unmarshal(b, &v)
	walk(v)
	for _, kv := range os.Environ() {
		_, val, _ := strings.Cut(kv, "=")
		strs = append(strs, val)
	}
	seen := map[string]bool{}
	var ds []string
	for _, s := range strs {
		if len(s) >= 8 && !seen[s] {
			seen[s] = true
			ds = append(ds, Digest(s))
		}
	}
	f.Digest = strings.Join(ds, ",")
	f.Verdict = Pending
	store := r.req.Dataset.Store
	f.Evidence = fmt.Sprintf("%d strings of 8+ bytes; the request's store: url %q endpoint %q; its credentials' access key is %d bytes", len(ds), store.URL, store.Endpoint, len(accessKeyOf(r)))
	return f
}

func accessKeyOf(r *run) string {
	if r.req.Credentials == nil {
		return ""
	}
	return r.req.Credentials.AccessKey
}
