// Command testengine is a toy engine of engine protocol v1, written against the Go SDK
// (sidecar/enginesdk) as an engine outside steward would be, for the sidecar's end-to-end tests:
//
//	testengine --settle fence|claim-fence|none
//
// It builds index type TOY. Like every engine it reaches storage only through its invocation's
// gateway: it opens the request's store (an S3 endpoint) with the request's key, as an S3 client
// (minio-go), and never learns where the dataset really lives. A mutation writes one object,
// <dataset>/_indices/toy-<invocation>/part-0.toy, through the gateway and one file into its
// private TMPDIR, and answers NOT_SUPPORTED (7) with "the toy engine builds nothing: put
// <key>=<result>" in its message, where a result is "ok" or the gateway's S3 error code.
//
// Other index.params select the behaviours of the custody and credential tests, each reporting
// in its answer's message instead:
//
//   - report=credentials: what the request says about storage, "credentials=<fingerprint>
//     store=<url> endpoint=<endpoint> region=<region>", then "gateway=<result>" (a listing of
//     the dataset with the request's key) and "wrong_key=<result>" (the same listing signed with
//     another key id); with commit=yes it also writes its access key id (which names the key,
//     and is no secret) into data/toy-key-<invocation> and reports "key_object=<result>": the
//     commit keeps that object for the test to try the key elsewhere;
//   - put=a,b,… then delete=c,…: each name, relative to the dataset (a leading "/" makes it a
//     key of the whole store), is PUT, then DELETEd, through the gateway; a name holding "%" is
//     sent as written (percent-encoded separators and dots reach the gateway encoded) in a
//     request the toy signs itself. The report is "put a=<result>;…;delete c=<result>";
//   - put_many=N (and size=B, bytes per object, default 16): N new objects under data/, one
//     PUT each, until one is refused: "written=<count> refusal=<code or none>".
//
// Then, with index.params commit:
//
//   - lie: it answers COMMITTED at pinned+1 and writes no manifest;
//   - yes: it PUTs the manifest of pinned+1 (_versions/<20 digits>.manifest) and answers
//     COMMITTED at pinned+1 (NOT_SUPPORTED, "; put the manifest=<code>" added, if the gateway
//     refused it);
//   - deny: it PUTs that manifest and answers NOT_SUPPORTED all the same.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/enginesdk"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/signer"
)

type toy struct{}

// gateway is the toy's S3 view of its dataset, as its request names it.
type gateway struct {
	client *minio.Client
	spec   rpc.ParsedStore
	creds  rpc.Credentials
	region string
	base   string // the dataset's key prefix, with its trailing "/"
}

// open opens the request's store with the request's key.
func open(req *workerproto.MutateRequest) (*gateway, error) {
	p, err := req.Dataset.Store.Parse()
	if err != nil {
		return nil, err
	}
	if p.Kind != rpc.StoreS3 || req.Credentials == nil {
		return nil, fmt.Errorf("the request names no S3 endpoint with a key (store %q)", req.Dataset.Store.URL)
	}
	g := &gateway{spec: p, creds: *req.Credentials, region: req.Dataset.Store.Region,
		base: strings.Trim(p.Prefix+"/"+strings.Trim(req.Dataset.Path, "/"), "/") + "/"}
	if g.region == "" {
		g.region = "us-east-1"
	}
	g.client, err = g.clientWith(g.creds.AccessKey)
	return g, err
}

func (g *gateway) clientWith(accessKey string) (*minio.Client, error) {
	return minio.New(g.spec.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(accessKey, g.creds.SecretKey, g.creds.SessionToken),
		Secure: g.spec.Secure, Region: g.region, BucketLookup: minio.BucketLookupPath, MaxRetries: 1,
	})
}

// key is name's key in the store: relative to the dataset, or the store's own after a "/".
func (g *gateway) key(name string) string {
	if abs, ok := strings.CutPrefix(name, "/"); ok {
		return abs
	}
	return g.base + name
}

// put creates key holding body; the result is "ok" or the S3 error code.
func (g *gateway) put(ctx context.Context, key string, body []byte) string {
	_, err := g.client.PutObject(ctx, g.spec.Bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
	return result(err)
}

func (g *gateway) delete(ctx context.Context, key string) string {
	return result(g.client.RemoveObject(ctx, g.spec.Bucket, key, minio.RemoveObjectOptions{}))
}

// raw sends method on key exactly as written (no client-side encoding), signed with the
// request's key.
func (g *gateway) raw(ctx context.Context, method, key string, body []byte) string {
	scheme := "http"
	if g.spec.Secure {
		scheme = "https"
	}
	u, err := url.Parse(scheme + "://" + g.spec.Endpoint + "/" + g.spec.Bucket + "/" + key)
	if err != nil {
		return "bad-url"
	}
	r, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return "bad-request"
	}
	r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	r = signer.SignV4(*r, g.creds.AccessKey, g.creds.SecretKey, g.creds.SessionToken, g.region)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return "unreachable"
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return "ok"
	}
	var e struct{ Code string }
	if b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)); xml.Unmarshal(b, &e) != nil || e.Code == "" {
		return "HTTP" + strconv.Itoa(resp.StatusCode)
	}
	return e.Code
}

// result names an S3 call's outcome: "ok", the S3 error code, or "unreachable".
func result(err error) string {
	if err == nil {
		return "ok"
	}
	if code := minio.ToErrorResponse(err).Code; code != "" {
		return code
	}
	return "unreachable"
}

func (toy) Mutate(ctx context.Context, c *enginesdk.Conn, req *workerproto.MutateRequest) *workerproto.Result {
	g, err := open(req)
	if err != nil {
		return notSupported("no gateway: " + err.Error())
	}
	params := req.Index.Params
	var report string
	switch {
	case params["report"] == "credentials":
		report = g.reportCredentials(ctx, req)
		if params["commit"] == "yes" {
			report += " key_object=" + g.put(ctx, g.base+"data/toy-key-"+req.InvocationID, []byte(g.creds.AccessKey))
		}
	case params["put"] != "" || params["delete"] != "":
		report = g.putAndDelete(ctx, req, split(params["put"]), split(params["delete"]))
	case params["put_many"] != "":
		report = g.putMany(ctx, req, params["put_many"], params["size"])
	default:
		key := g.base + "_indices/toy-" + req.InvocationID + "/part-0.toy"
		report = "the toy engine builds nothing: put " + strings.TrimPrefix(key, g.base) + "=" + g.put(ctx, key, []byte("toy"))
		_ = os.WriteFile(filepath.Join(os.Getenv("TMPDIR"), "shuffle.tmp"), []byte("left behind"), 0o644)
		c.Progress("build", 1, 1)
	}
	committed := &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, CompletionReason: rpc.CompletionCommitted,
		CommittedVersion: req.PinnedVersion + 1, ObservedLatest: req.PinnedVersion + 1, Message: report}
	switch params["commit"] {
	case "lie":
		return committed
	case "yes", "deny":
		manifest := fmt.Sprintf("%s_versions/%020d.manifest", g.base, req.PinnedVersion+1)
		res := g.put(ctx, manifest, fmt.Appendf(nil, `{"toy":%q}`, req.InvocationID))
		if res == "ok" && params["commit"] == "yes" {
			return committed
		}
		report += "; put the manifest=" + res
	}
	return notSupported(report)
}

func notSupported(msg string) *workerproto.Result {
	return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeNotSupported, Message: msg}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// fingerprint names a key without revealing it: "none", or the first 8 bytes of its SHA-256 in
// hex.
func fingerprint(key string) string {
	if key == "" {
		return "none"
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// reportCredentials says what the request gave the engine and whether its key opens the
// gateway (never the key itself: the sidecar and the SDK redact it from every answer).
func (g *gateway) reportCredentials(ctx context.Context, req *workerproto.MutateRequest) string {
	list := func(cl *minio.Client) string {
		ctx, cancel := context.WithCancel(ctx) // stops the lister at the first object
		defer cancel()
		for o := range cl.ListObjects(ctx, g.spec.Bucket, minio.ListObjectsOptions{Prefix: g.base, Recursive: true, MaxKeys: 1}) {
			return result(o.Err)
		}
		return "ok"
	}
	wrong := "unreachable"
	if cl, err := g.clientWith(g.creds.AccessKey + "X"); err == nil {
		wrong = list(cl)
	}
	s := req.Dataset.Store
	return fmt.Sprintf("credentials=%s store=%s endpoint=%s region=%s gateway=%s wrong_key=%s",
		fingerprint(g.creds.AccessKey), s.URL, s.Endpoint, s.Region, list(g.client), wrong)
}

// putAndDelete PUTs each of puts, then DELETEs each of deletes, and reports each result.
func (g *gateway) putAndDelete(ctx context.Context, req *workerproto.MutateRequest, puts, deletes []string) string {
	body := fmt.Appendf(nil, `{"toy":%q}`, req.InvocationID)
	var out []string
	for _, n := range puts {
		res := ""
		if strings.Contains(n, "%") {
			res = g.raw(ctx, http.MethodPut, g.key(n), body)
		} else {
			res = g.put(ctx, g.key(n), body)
		}
		out = append(out, "put "+n+"="+res)
	}
	for _, n := range deletes {
		res := ""
		if strings.Contains(n, "%") {
			res = g.raw(ctx, http.MethodDelete, g.key(n), nil)
		} else {
			res = g.delete(ctx, g.key(n))
		}
		out = append(out, "delete "+n+"="+res)
	}
	return strings.Join(out, ";")
}

// putMany PUTs n new objects of size bytes under data/, one at a time, until one is refused.
func (g *gateway) putMany(ctx context.Context, req *workerproto.MutateRequest, n, size string) string {
	total, err := strconv.Atoi(n)
	if err != nil {
		return "bad put_many"
	}
	bytesEach := 16
	if size != "" {
		if bytesEach, err = strconv.Atoi(size); err != nil || bytesEach < 0 {
			return "bad size"
		}
	}
	body := bytes.Repeat([]byte("t"), bytesEach)
	for i := range total {
		if res := g.put(ctx, fmt.Sprintf("%sdata/many-%s-%d", g.base, req.InvocationID, i), body); res != "ok" {
			return fmt.Sprintf("written=%d refusal=%s", i, res)
		}
	}
	return fmt.Sprintf("written=%d refusal=none", total)
}

func main() {
	settle := flag.String("settle", workerproto.SettleFence, "the settle guarantee to declare")
	flag.Parse()
	c, err := enginesdk.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testengine:", err)
		os.Exit(2)
	}
	os.Exit(enginesdk.Serve(context.Background(), c,
		workerproto.Engine{Name: "toy", IndexTypes: []string{"TOY"}, Settle: *settle}, toy{}))
}
