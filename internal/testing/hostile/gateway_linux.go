package hostile

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// try is one request an attack sends, expecting a refusal.
type try struct {
	method, target string
	hdr            map[string]string
	body           []byte
	// literal: the target decodes to a clean key inside the dataset's data folder (a key
	// holding "%2E" literally, say), which the gateway may accept as that key; the test's look
	// at the store says whether anything landed outside.
	literal bool
}

func put(target string, body string) try {
	return try{method: "PUT", target: target, body: []byte(body)}
}

// gatewayReady checks that the gateway serves the engine at all (a new object in its own data
// folder: PUT, GET, DELETE): without that, a refusal proves nothing and every gateway attack is
// Inconclusive.
func (r *run) gatewayReady() (string, bool) {
	if r.gw == nil {
		return errNoGateway.Error(), false
	}
	key := r.ds + "/data/hostile-control-" + r.inv + ".bin"
	p1 := r.gw.do("PUT", r.gw.obj(key), nil, []byte("control"))
	p2 := r.gw.do("GET", r.gw.obj(key), nil, nil)
	p3 := r.gw.do("DELETE", r.gw.obj(key), nil, nil)
	ok := p1.ok() && p2.ok() && string(p2.body) == "control" && p3.ok()
	return fmt.Sprintf("control (its own new key): PUT %v, GET %v, DELETE %v", p1, p2, p3), ok
}

// refusals sends every try and is Blocked only if each one was refused; keys are store keys the
// test checks from outside (created, changed or deleted means the attack succeeded).
func (r *run) refusals(attack, tried string, keys []string, tries ...try) Finding {
	f := Finding{Attack: attack, Tried: tried}
	for _, k := range keys {
		f.Left = append(f.Left, "key:"+k)
	}
	if !r.gwOK {
		f.Verdict, f.Evidence = Inconclusive, "the gateway does not serve the engine: "+r.gwControl
		return f
	}
	var acc, lit, ref []string
	for _, t := range tries {
		p := r.gw.do(t.method, t.target, t.hdr, t.body)
		line := fmt.Sprintf("%s %s: %v", t.method, shorten(t.target, 120), p)
		switch {
		case p.ok() && t.literal:
			lit = append(lit, line)
		case p.ok():
			acc = append(acc, line)
		default:
			ref = append(ref, line)
		}
	}
	f.Verdict = verdict(len(acc) > 0)
	// Accepted ones first: the evidence is cut at 1,500 bytes.
	f.Evidence = fmt.Sprintf("%d of %d accepted: %v; accepted as literal keys inside the dataset: %v; refused: %s",
		len(acc), len(tries), acc, lit, strings.Join(ref, "; "))
	return f
}

func shorten(s string, n int) string {
	s = strconv.QuoteToASCII(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// existing returns the key the test named for name ("" if none).
func (r *run) existing(name string) string {
	for _, kv := range strings.Split(r.p[ParamExisting], ";") {
		if n, k, ok := strings.Cut(kv, "="); ok && n == name {
			return k
		}
	}
	return ""
}

// manifestName is the built-in engine's (and the test datasets') name of version v's manifest.
func manifestName(v int64) string { return fmt.Sprintf("%020d.manifest", v) }

// gateway attacks the storage gateway: writes outside what the invocation may write, reads and
// listings outside its dataset, traversal, deletes and copies, a forged claim, the byte quota
// and a request flood. The order keeps each attack's precondition: path attacks while quota is
// left, the byte quota next, the request flood last (the object quota is area "objects").
func (r *run) gateway(ctx context.Context) {
	r.gwControl, r.gwOK = r.gatewayReady()
	next := r.pinned + 1
	other := r.existingDataset()
	ownManifest, ownData := r.existing("own-manifest"), r.existing("own-data")
	foreignManifest, foreignData := r.existing("foreign-manifest"), r.existing("foreign-data")
	g := r.gw
	name := "hostile-" + r.inv + ".bin"

	r.emit(r.refusals("gateway.put-foreign-data", "PUT a new object into another dataset's data folder",
		[]string{other + "/data/" + name}, put(g.obj(other+"/data/"+name), "pwned")))
	r.emit(r.refusals("gateway.put-foreign-manifest", "PUT another dataset's next manifest, and overwrite its existing one",
		[]string{other + "/_versions/" + manifestName(2), foreignManifest},
		put(g.obj(other+"/_versions/"+manifestName(2)), "pwned"), put(g.obj(foreignManifest), "pwned")))
	r.emit(r.refusals("gateway.put-own-manifest-other-version",
		fmt.Sprintf("PUT its own dataset's manifest of versions other than pinned+1 (%d): the pinned one (overwrite), pinned+2 in V1 and V2 naming, version 0", next),
		[]string{ownManifest, r.ds + "/_versions/" + manifestName(next+1), r.ds + "/_versions/" + strconv.FormatInt(next+1, 10) + ".manifest"},
		put(g.obj(ownManifest), "pwned"), put(g.obj(r.ds+"/_versions/"+manifestName(next+1)), "pwned"),
		put(g.obj(r.ds+"/_versions/"+strconv.FormatInt(next+1, 10)+".manifest"), "pwned"),
		put(g.obj(r.ds+"/_versions/"+strconv.FormatUint(^uint64(0)-uint64(next+1), 10)+".manifest"), "pwned"),
		put(g.obj(r.ds+"/_versions/"+manifestName(0)), "pwned")))
	r.emit(r.forgeClaim(next, ownManifest, other))
	r.emit(r.refusals("gateway.version-hint", "PUT _versions/latest_version_hint.json naming version 7, and naming pinned+1 without a commit",
		[]string{r.ds + "/_versions/latest_version_hint.json", other + "/_versions/latest_version_hint.json"},
		put(g.obj(r.ds+"/_versions/latest_version_hint.json"), `{"version":7}`),
		put(g.obj(r.ds+"/_versions/latest_version_hint.json"), fmt.Sprintf(`{"version":%d}`, next)),
		put(g.obj(other+"/_versions/latest_version_hint.json"), fmt.Sprintf(`{"version":%d}`, next))))
	r.emit(r.traversal(other))
	r.emit(r.readForeign(other, foreignData, foreignManifest))
	r.emit(r.refusals("gateway.overwrite", "overwrite an existing object of its own dataset: plain PUT, If-None-Match: *, If-Match: *, and a multipart upload onto it",
		[]string{ownData},
		put(g.obj(ownData), "pwned"),
		try{method: "PUT", target: g.obj(ownData), hdr: map[string]string{"If-None-Match": "*"}, body: []byte("pwned")},
		try{method: "PUT", target: g.obj(ownData), hdr: map[string]string{"If-Match": "*"}, body: []byte("pwned")},
		r.multipartOnto(ownData)))
	r.emit(r.refusals("gateway.delete-foreign", "DELETE objects it did not write: its dataset's data and manifest, another dataset's data, a traversal to it",
		[]string{ownData, ownManifest, foreignData},
		try{method: "DELETE", target: g.obj(ownData)}, try{method: "DELETE", target: g.obj(ownManifest)},
		try{method: "DELETE", target: g.obj(foreignData)},
		try{method: "DELETE", target: g.obj(r.ds + "/data/%2E%2E/%2E%2E/" + foreignData)}))
	r.emit(r.deleteObjects([]string{ownData, ownManifest, foreignData, foreignManifest, r.ds + "/data/../../" + foreignData}))
	r.emit(r.copyOutside(other, foreignData, ownData, next))
	r.emit(r.listOutside(other))
	r.emit(r.listHuge())
	r.emit(r.secondConnection(ownManifest))
	r.emit(r.bytesQuota())
	r.emit(r.flood())
	r.emit(r.connectionFlood())
}

// existingDataset is the other dataset's path, from the key the test named.
func (r *run) existingDataset() string {
	if k := r.existing("foreign-data"); k != "" {
		return strings.Split(k, "/")[0]
	}
	return "other"
}

// multipartOnto starts a multipart upload onto key and completes it; the returned try is the
// completion (an upload refused at its start completes nothing: its upload id is invalid).
func (r *run) multipartOnto(key string) try {
	id := "none"
	if p := r.gw.do("POST", r.gw.obj(key)+"?uploads", nil, nil); p.ok() {
		if m := uploadIDRE.FindSubmatch(p.body); m != nil {
			id = string(m[1])
		}
		r.gw.do("PUT", r.gw.obj(key)+"?partNumber=1&uploadId="+url.QueryEscape(id), nil, []byte("pwned"))
	}
	body := `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>`
	return try{method: "POST", target: r.gw.obj(key) + "?uploadId=" + url.QueryEscape(id), body: []byte(body)}
}

var uploadIDRE = regexp.MustCompile(`<UploadId>([^<]*)</UploadId>`)

// forgeClaim writes the sidecar's commit claim of pinned+1 for this invocation, naming the
// dataset's existing manifest with its true digest: had it landed, storage would "confirm" a
// commit nobody made. Then the same by copy, by multipart and into the other dataset.
func (r *run) forgeClaim(next int64, ownManifest, other string) Finding {
	const attack = "gateway.forge-claim"
	tried := fmt.Sprintf("PUT _steward/claims/%020d/<its invocation>.json: a commit claim naming the existing manifest with its true sha256 (so that storage would confirm a commit it never made); by PUT, copy, multipart, and into another dataset", next)
	claimKey := fmt.Sprintf("%s/_steward/claims/%020d/%s.json", r.ds, next, r.inv)
	otherKey := fmt.Sprintf("%s/_steward/claims/%020d/%s.json", other, 2, r.inv)
	if !r.gwOK {
		return r.refusals(attack, tried, nil)
	}
	m := r.gw.do("GET", r.gw.obj(ownManifest), nil, nil)
	sum := sha256.Sum256(m.body)
	claim := fmt.Sprintf(`{"invocation":%q,"kind":"commit","key":%q,"sha256":%q,"size":%d,"unix_ms":%d}`,
		r.inv, ownManifest, hex.EncodeToString(sum[:]), len(m.body), time.Now().UnixMilli())
	f := r.refusals(attack, tried, nil,
		put(r.gw.obj(claimKey), claim),
		put(r.gw.obj(r.ds+"/data/../_steward/claims/"+fmt.Sprintf("%020d/%s.json", next, r.inv)), claim),
		try{method: "PUT", target: r.gw.obj(claimKey), hdr: map[string]string{"X-Amz-Copy-Source": "/" + r.gw.bucket + "/" + ownManifest}},
		r.multipartOnto(claimKey),
		put(r.gw.obj(otherKey), claim))
	f.Left = []string{"claim:" + claimKey, "claim:" + otherKey}
	f.Evidence = fmt.Sprintf("read the manifest (%v, %d bytes); ", m, len(m.body)) + f.Evidence
	return f
}

// traversal climbs out of the dataset in every spelling the gateway might decode differently
// from how it checks: dot segments, percent-encoded dots and separators, backslashes, control
// characters, empty segments, and an absolute-form request-target.
func (r *run) traversal(other string) Finding {
	target := other + "/data/hostile-trav-" + r.inv + ".bin"
	b := "/" + r.gw.bucket + "/"
	up := "../../" + target
	var tries []try
	// A key spelled with %252E is the literal key ".../%2E%2E/..." after one decoding: inside
	// its data folder, unless something decodes it twice.
	tries = append(tries, try{method: "PUT", target: b + r.ds + "/data/%252E%252E/%252E%252E/" + target, body: []byte("pwned"), literal: true})
	for _, t := range []string{
		b + r.ds + "/data/" + up,
		b + r.ds + "/data/%2E%2E/%2E%2E/" + target,
		b + r.ds + "/data/%2e%2e%2f%2e%2e%2f" + strings.ReplaceAll(target, "/", "%2f"),
		b + strings.ReplaceAll(r.ds+"/data/"+up, "/", "%2F"),
		b + r.ds + "/data/" + strings.ReplaceAll(up, "/", "\\"),
		b + r.ds + "/data/" + strings.ReplaceAll(up, "/", "%5C"),
		b + r.ds + "/data/..%2F..%2F" + target,
		b + r.ds + "/./data/../../" + target,
		b + r.ds + "//../" + target,
		"/" + r.gw.bucket + "//" + target,
		"/" + r.gw.bucket + "/./" + target,
		b + r.ds + "/data/hostile-ctl-%00-" + r.inv + ".bin",
		b + r.ds + "/data/hostile-ctl-%0A%7B%22forged%22%3A1%7D-" + r.inv + ".bin",
		b + r.ds + "/data/hostile-ctl-%0D%0A-" + r.inv + ".bin",
		b + r.ds + "/data/hostile-ctl-%1B%5B2J-" + r.inv + ".bin",
		b + r.ds + "/data/hostile-ctl-%7F-" + r.inv + ".bin",
		b + r.ds + "/data/hostile-bad-utf8-%FF%FE-" + r.inv + ".bin",
		"http://" + r.gw.addr + b + target,
		b + target,
		"/" + r.gw.bucket + "%2F" + target,
		"/" + r.gw.bucket + "/" + r.ds + "%2F..%2F" + target,
	} {
		tries = append(tries, put(t, "pwned"))
	}
	tries = append(tries, try{method: "GET", target: b + r.ds + "/data/%2E%2E/%2E%2E/" + r.existing("foreign-manifest")},
		try{method: "GET", target: b + r.ds + "%2F..%2F" + strings.ReplaceAll(r.existing("foreign-manifest"), "/", "%2F")})
	return r.refusals("gateway.traversal", "PUT (and GET) keys that climb out of the dataset: .., %2E%2E, encoded %2F and %5C separators, backslashes, double encoding, empty and dot segments, control characters (NUL, LF, CR, ESC, DEL), invalid UTF-8, an absolute-form target",
		[]string{target}, tries...)
}

// readForeign reads another dataset's objects and a sibling dataset's (whose name starts with
// this one's).
func (r *run) readForeign(other, foreignData, foreignManifest string) Finding {
	tries := []try{{method: "GET", target: r.gw.obj(foreignManifest)}, {method: "HEAD", target: r.gw.obj(foreignData)},
		{method: "GET", target: r.gw.obj(foreignData), hdr: map[string]string{"Range": "bytes=0-15"}}}
	if s := r.p[ParamSibling]; s != "" {
		tries = append(tries, try{method: "GET", target: r.gw.obj(s)})
	}
	return r.refusals("gateway.read-foreign", "GET, HEAD and ranged GET of another dataset's objects, and GET of a sibling dataset's ("+r.p[ParamSibling]+")", nil, tries...)
}

// deleteObjects sends one DeleteObjects of keys it did not write.
func (r *run) deleteObjects(keys []string) Finding {
	const attack = "gateway.delete-objects"
	tried := "DeleteObjects (POST ?delete) of keys it did not write: its dataset's data and manifest, another dataset's, a traversal"
	f := Finding{Attack: attack, Tried: tried}
	for _, k := range keys[:4] {
		f.Left = append(f.Left, "key:"+k)
	}
	if !r.canTry(&f, true, "") {
		return f
	}
	var b strings.Builder
	b.WriteString("<Delete>")
	for _, k := range keys {
		fmt.Fprintf(&b, "<Object><Key>%s</Key></Object>", xmlEscape(k))
	}
	b.WriteString("</Delete>")
	p := r.gw.do("POST", "/"+r.gw.bucket+"?delete", map[string]string{"Content-Type": "application/xml"}, []byte(b.String()))
	deleted := strings.Count(string(p.body), "<Deleted>")
	f.Verdict = verdict(p.ok() && deleted > 0)
	f.Evidence = fmt.Sprintf("answer %v; %d <Deleted>, %d <Error> of %d keys", p, deleted, strings.Count(string(p.body), "<Error>"), len(keys))
	return f
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// copyOutside copies objects from outside the dataset into it, and its own objects into the
// folders it may not write (manifest, claim, hint).
func (r *run) copyOutside(other, foreignData, ownData string, next int64) Finding {
	var tries []try
	var keys []string
	for i, src := range []string{
		"/" + r.gw.bucket + "/" + foreignData,
		r.gw.bucket + "/" + foreignData,
		"/" + r.gw.bucket + "/" + r.ds + "/../" + foreignData,
		"/" + r.gw.bucket + "/" + strings.ReplaceAll(r.ds+"/../"+foreignData, "/", "%2F"),
		url.PathEscape("/" + r.gw.bucket + "/" + foreignData),
		"/hostile-real-bucket/" + foreignData,
		"/" + r.gw.bucket + "/" + r.p[ParamSibling],
		"/" + r.gw.bucket + "/" + foreignData + "?versionId=x/../../x",
	} {
		dst := fmt.Sprintf("%s/data/hostile-copy-%d-%s.bin", r.ds, i, r.inv)
		keys = append(keys, dst)
		tries = append(tries, try{method: "PUT", target: r.gw.obj(dst), hdr: map[string]string{"X-Amz-Copy-Source": src}})
	}
	own := "/" + r.gw.bucket + "/" + ownData
	for _, dst := range []string{r.ds + "/_versions/" + manifestName(next), fmt.Sprintf("%s/_steward/claims/%020d/%s.json", r.ds, next, r.inv),
		r.ds + "/_versions/latest_version_hint.json", other + "/data/hostile-copy-" + r.inv + ".bin"} {
		keys = append(keys, dst)
		tries = append(tries, try{method: "PUT", target: r.gw.obj(dst), hdr: map[string]string{"X-Amz-Copy-Source": own}})
	}
	return r.refusals("gateway.copy-outside", "CopyObject from another dataset (plain, without the leading slash, through .., with %2F, all escaped, another bucket, a sibling dataset, a crafted versionId), and of its own data into its manifest slot, its claim, the version hint and another dataset",
		keys, tries...)
}

var keyRE = regexp.MustCompile(`<Key>([^<]*)</Key>`)

// listOutside lists with prefixes outside the dataset: none, another dataset, a shorter
// prefix, the dataset's name without its slash (a sibling shares it), and traversals.
func (r *run) listOutside(other string) Finding {
	const attack = "gateway.list-outside"
	f := Finding{Attack: attack, Tried: "ListObjectsV2 with prefix '', '" + other + "/', '" + r.ds[:1] + "', '" + r.ds + "' (a sibling dataset shares it), '" + r.ds + "/../" + other + "/', encoded; ListObjects v1; ListBuckets"}
	if !r.canTry(&f, true, "") {
		return f
	}
	var ev []string
	outside := 0
	for _, prefix := range []string{"", other + "/", r.ds[:1], r.ds, r.ds + "/../" + other + "/", r.ds + "%2F..%2F" + other + "%2F", r.ds + "/data/../../"} {
		q := "/" + r.gw.bucket + "?list-type=2&prefix=" + url.QueryEscape(prefix)
		if strings.Contains(prefix, "%") {
			q = "/" + r.gw.bucket + "?list-type=2&prefix=" + prefix
		}
		p := r.gw.do("GET", q, nil, nil)
		n, bad := 0, 0
		for _, m := range keyRE.FindAllSubmatch(p.body, -1) {
			n++
			if !strings.HasPrefix(string(m[1]), r.ds+"/") {
				bad++
			}
		}
		if p.ok() {
			outside += bad
		}
		ev = append(ev, fmt.Sprintf("prefix %q: %v, %d keys, %d outside", prefix, p, n, bad))
	}
	for _, t := range []string{"/" + r.gw.bucket, "/", "/" + r.gw.bucket + "?list-type=2&prefix=" + url.QueryEscape(r.ds+"/") + "&start-after=" + url.QueryEscape(other)} {
		p := r.gw.do("GET", t, nil, nil)
		bad := 0
		for _, m := range keyRE.FindAllSubmatch(p.body, -1) {
			if !strings.HasPrefix(string(m[1]), r.ds+"/") {
				bad++
			}
		}
		if p.ok() {
			outside += bad
		}
		ev = append(ev, fmt.Sprintf("GET %s: %v, %d keys outside", t, p, bad))
	}
	f.Verdict = verdict(outside > 0)
	f.Evidence = fmt.Sprintf("%d keys outside the dataset listed; %s", outside, strings.Join(ev, "; "))
	return f
}

// listHuge asks for more keys in one page than S3 serves, walks the pages of a listing longer
// than one (the test plants more than 1,000 keys under the dataset) and sends forged
// continuation tokens.
func (r *run) listHuge() Finding {
	const attack = "gateway.list-huge"
	f := Finding{Attack: attack, Tried: "ListObjectsV2 of a dataset of more than 1,000 keys with max-keys 2147483647 and 99999999999, every page of it, max-keys -1, and forged continuation tokens"}
	if !r.canTry(&f, true, "") {
		return f
	}
	var ev []string
	bad := 0
	base := "/" + r.gw.bucket + "?list-type=2&prefix=" + url.QueryEscape(r.ds+"/")
	for _, q := range []string{"&max-keys=2147483647", "&max-keys=99999999999", "&max-keys=-1", "&continuation-token=" + url.QueryEscape("Li4vLi4v"), "&continuation-token=%00%00"} {
		p := r.gw.do("GET", base+q, nil, nil)
		n := len(keyRE.FindAllSubmatch(p.body, -1))
		if n > 1000 {
			bad++
		}
		ev = append(ev, fmt.Sprintf("%s: %v, %d keys", q, p, n))
	}
	seen := map[string]int{}
	pages, token := 0, ""
	for pages < 5 {
		q := base + "&max-keys=2147483647"
		if token != "" {
			q += "&continuation-token=" + url.QueryEscape(token)
		}
		p := r.gw.do("GET", q, nil, nil)
		pages++
		keys := keyRE.FindAllSubmatch(p.body, -1)
		if !p.ok() || len(keys) > 1000 {
			bad++
		}
		for _, m := range keys {
			seen[string(m[1])]++
		}
		next := nextTokenRE.FindSubmatch(p.body)
		if next == nil {
			break
		}
		token = string(next[1])
	}
	dup, outside := 0, 0
	for k, n := range seen {
		dup += n - 1
		if !strings.HasPrefix(k, r.ds+"/") {
			outside++
		}
	}
	bad += dup + outside
	ev = append(ev, fmt.Sprintf("the whole listing: %d pages, %d keys, %d listed twice, %d outside", pages, len(seen), dup, outside))
	f.Verdict, f.Evidence = verdict(bad > 0), strings.Join(ev, "; ")
	if len(seen) <= 1000 {
		f.Verdict, f.Evidence = Inconclusive, "the dataset holds no more than one page of keys: "+f.Evidence
	}
	return f
}

var nextTokenRE = regexp.MustCompile(`<NextContinuationToken>([^<]*)</NextContinuationToken>`)

// secondConnection opens more connections: with another key, unsigned, and with its own.
func (r *run) secondConnection(ownManifest string) Finding {
	const attack = "gateway.second-connection"
	f := Finding{Attack: attack, Tried: "a second and third connection to the gateway: requests signed with another invocation-shaped key and unsigned (HEAD bucket, GET its manifest, PUT a new key); then its own key on a fresh connection"}
	if !r.canTry(&f, true, "") {
		return f
	}
	var ev []string
	accepted := 0
	for _, ak := range []string{"STEWARD" + strings.ToUpper(randHex(8)), ""} {
		c := &s3raw{addr: r.gw.addr, bucket: r.gw.bucket, ak: ak}
		for _, t := range []try{{method: "HEAD", target: "/" + c.bucket}, {method: "GET", target: c.obj(ownManifest)},
			put(c.obj(r.ds+"/data/hostile-second-"+r.inv+".bin"), "x")} {
			p := c.do(t.method, t.target, nil, t.body)
			if p.ok() {
				accepted++
			}
			ev = append(ev, fmt.Sprintf("key %q %s: %v", ak, t.method, p))
		}
		c.close()
	}
	own := &s3raw{addr: r.gw.addr, bucket: r.gw.bucket, ak: r.gw.ak}
	ev = append(ev, fmt.Sprintf("its own key on a new connection, HEAD bucket: %v", own.do("HEAD", "/"+own.bucket, nil, nil)))
	own.close()
	f.Verdict = verdict(accepted > 0)
	f.Evidence = strings.Join(ev, "; ")
	f.Left = []string{"key:" + r.ds + "/data/hostile-second-" + r.inv + ".bin"}
	return f
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// bytesQuota writes more than --worker-disk: objects of known size until refused, one streamed
// without a length, and multipart parts.
func (r *run) bytesQuota() Finding {
	const attack = "gateway.bytes-quota"
	bound := int64(r.intParam(ParamWorkerDisk))
	f := Finding{Attack: attack, Tried: fmt.Sprintf("write more than --worker-disk (%d bytes) through the gateway: PUTs of bound/3+1 bytes, a chunked PUT of the bound with no length, multipart parts of bound/2", bound)}
	if !r.canTry(&f, bound > 0, "--worker-disk") {
		return f
	}
	var accepted int64
	var ev []string
	chunk := bound/3 + 1
	for i := 0; i < 4; i++ {
		key := fmt.Sprintf("%s/data/hostile-bytes-%d-%s.bin", r.ds, i, r.inv)
		p := r.gw.send("PUT", r.gw.obj(key), nil, zeros(chunk), chunk)
		if p.ok() {
			accepted += chunk
		}
		ev = append(ev, fmt.Sprintf("PUT %d bytes: %v", chunk, p))
	}
	key := r.ds + "/data/hostile-bytes-stream-" + r.inv + ".bin"
	p := r.gw.send("PUT", r.gw.obj(key), nil, zeros(bound), -1)
	if p.ok() {
		accepted += bound
	}
	ev = append(ev, fmt.Sprintf("chunked PUT of %d bytes: %v", bound, p))
	key = r.ds + "/data/hostile-bytes-multipart-" + r.inv + ".bin"
	if c := r.gw.do("POST", r.gw.obj(key)+"?uploads", nil, nil); c.ok() {
		id := ""
		if m := uploadIDRE.FindSubmatch(c.body); m != nil {
			id = string(m[1])
		}
		for n := 1; n <= 3; n++ {
			p := r.gw.send("PUT", fmt.Sprintf("%s?partNumber=%d&uploadId=%s", r.gw.obj(key), n, url.QueryEscape(id)), nil, zeros(bound/2), bound/2)
			if p.ok() {
				accepted += bound / 2
			}
			ev = append(ev, fmt.Sprintf("part %d of %d bytes: %v", n, bound/2, p))
		}
		r.gw.do("DELETE", r.gw.obj(key)+"?uploadId="+url.QueryEscape(id), nil, nil)
	} else {
		ev = append(ev, fmt.Sprintf("multipart start: %v", c))
	}
	f.Verdict = verdict(accepted > bound)
	f.Evidence = fmt.Sprintf("%d bytes accepted (bound %d); %s", accepted, bound, strings.Join(ev, "; "))
	if accepted == 0 {
		f.Verdict, f.Evidence = Inconclusive, "nothing accepted, so no refusal shows a quota: "+f.Evidence
	}
	return f
}

// canTry makes f Inconclusive when the test named no bound (named false) or the gateway does
// not serve the engine.
func (r *run) canTry(f *Finding, named bool, what string) bool {
	switch {
	case !named:
		f.Verdict, f.Evidence = Inconclusive, "the test named no "+what
	case !r.gwOK:
		f.Verdict, f.Evidence = Inconclusive, r.gwControl
	default:
		return true
	}
	return false
}

// objects is an area of its own, run in an invocation of its own: the byte quota spent, every
// new object would be refused for its bytes, not for its count.
func (r *run) objects(_ context.Context) {
	r.gwControl, r.gwOK = r.gatewayReady()
	r.emit(r.objectsQuota())
}

// objectsQuota creates more new objects than the invocation may.
func (r *run) objectsQuota() Finding {
	const attack = "gateway.objects-quota"
	quota := r.intParam(ParamObjectQuota)
	f := Finding{Attack: attack, Tried: fmt.Sprintf("PUT quota+40 new one-byte objects (quota %d objects per invocation)", quota)}
	if !r.canTry(&f, quota > 0, "object quota") {
		return f
	}
	accepted := 0
	codes := map[string]int{}
	for i := 0; i < quota+40; i++ {
		p := r.gw.do("PUT", r.gw.obj(fmt.Sprintf("%s/data/hostile-obj-%05d-%s.bin", r.ds, i, r.inv)), nil, []byte{'x'})
		if p.ok() {
			accepted++
		} else {
			codes[p.String()]++
		}
	}
	f.Verdict = verdict(accepted > quota)
	f.Evidence = fmt.Sprintf("%d of %d accepted (quota %d); refusals %v", accepted, quota+40, quota, codes)
	if accepted == 0 {
		f.Verdict, f.Evidence = Inconclusive, "nothing accepted, so no refusal shows a quota: "+f.Evidence
	}
	return f
}

// flood sends HEAD requests from 8 connections as fast as they go for up to 1.5 s.
func (r *run) flood() Finding {
	const attack = "gateway.flood"
	rate, burst := r.intParam(ParamRate), r.intParam(ParamBurst)
	f := Finding{Attack: attack, Tried: fmt.Sprintf("flood the gateway with HEAD requests from 8 connections until it slows them down (bound %d/s, burst %d)", rate, burst)}
	if !r.canTry(&f, rate > 0 && burst > 0, "rate bound") {
		return f
	}
	// Until the bound shows (a SlowDown, after a second at least), for 5 s at most: a slow
	// machine may need longer to send more than the burst.
	var ok, slow, other atomic.Int64
	start := time.Now()
	stop := start.Add(5 * time.Second)
	going := func() bool {
		return time.Now().Before(stop) && (slow.Load() == 0 || time.Since(start) < time.Second) && ok.Load()+slow.Load() < int64(3*burst+5*rate)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &s3raw{addr: r.gw.addr, bucket: r.gw.bucket, ak: r.gw.ak}
			defer c.close()
			for going() {
				p := c.do("HEAD", "/"+c.bucket, nil, nil)
				switch {
				case p.ok():
					ok.Add(1)
				case p.status == 503:
					slow.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	allowed := float64(burst) + float64(rate)*el.Seconds()*1.1 + 50
	f.Verdict = verdict(float64(ok.Load()) > allowed)
	f.Evidence = fmt.Sprintf("in %v: %d served, %d SlowDown (503), %d other; at most %.0f may be served", el.Round(time.Millisecond), ok.Load(), slow.Load(), other.Load(), allowed)
	if slow.Load() == 0 && f.Verdict == Blocked {
		f.Verdict, f.Evidence = Inconclusive, "no request was slowed down, and the flood never passed the bound: "+f.Evidence
	}
	// The bucket refills before anything else of this invocation asks the gateway.
	time.Sleep(200 * time.Millisecond)
	return f
}

// slowLoris trickles a request header to the gateway one byte every 500 ms and measures when
// the gateway drops the connection (ReadHeaderTimeout); meanwhile another connection must be
// served.
func (r *run) slowLoris() Finding {
	const attack = "gateway.slowloris"
	const bound = 13 * time.Second
	f := Finding{Attack: attack, Tried: fmt.Sprintf("open a connection and trickle a request header one byte every 500 ms; the gateway must drop it within %v, and serve another connection meanwhile", bound)}
	if r.gw == nil {
		f.Verdict, f.Evidence = Inconclusive, errNoGateway.Error()
		return f
	}
	conn, err := net.DialTimeout("tcp", r.gw.addr, 5*time.Second)
	if err != nil {
		f.Verdict, f.Evidence = Inconclusive, "cannot connect: "+err.Error()
		return f
	}
	defer conn.Close()
	start := time.Now()
	header := "GET /" + r.gw.bucket + " HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 200)
	var dropped time.Duration
	sent := 0
	served := reply{err: fmt.Errorf("not tried")}
	for time.Since(start) < bound {
		if _, err := conn.Write([]byte{header[sent%len(header)]}); err != nil {
			dropped = time.Since(start)
			break
		}
		sent++
		_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		var b [1]byte
		n, err := conn.Read(b[:])
		var ne net.Error
		if n > 0 || err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			dropped = time.Since(start) // closed, or answered (an error status) before closing
			break
		}
		if sent == 4 {
			// A 503 is the gateway shaping the rate (SlowDown: an earlier attack's flood may have
			// spent its burst), not a connection left unserved: ask again, a few times.
			c := &s3raw{addr: r.gw.addr, bucket: r.gw.bucket, ak: r.gw.ak}
			for try := 0; try < 10; try++ {
				if served = c.do("HEAD", "/"+c.bucket, nil, nil); served.ok() || served.status != 503 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			c.close()
		}
	}
	f.Verdict = verdict(dropped == 0 || dropped > bound)
	f.Evidence = fmt.Sprintf("sent %d header bytes; dropped after %v (0: not within %v); another connection meanwhile: %v", sent, dropped.Round(100*time.Millisecond), bound, served)
	if !served.ok() && f.Verdict == Blocked {
		f.Verdict = Succeeded
		f.Evidence += " (the gateway did not serve the other connection)"
	}
	return f
}

// connsPerChild is how many gateway connections each helper of connectionFlood holds: under
// the domain's own RLIMIT_NOFILE (1024), which is why several processes are needed.
const connsPerChild = 800

// connectionFlood holds connections to the gateway from several processes at once, each one
// answered (a connection the server reads from holds a descriptor and a goroutine of the
// sidecar's): a domain bounded to 1,024 descriptors per process must not make the sidecar hold
// more than that for it, or with its pids limit it holds the sidecar's whole descriptor table.
// The test judges it with its count of the sidecar's descriptors: more than 1,024 answered is
// the attack's success, connections the gateway holds off (connected, never answered) with no
// more answered are a bound, and anything else says nothing.
func (r *run) connectionFlood() Finding {
	const attack = "gateway.connection-flood"
	const children = 2
	f := Finding{Attack: attack, Tried: fmt.Sprintf("hold %d connections to the gateway at once from %d processes (%d each, under its RLIMIT_NOFILE of 1,024), each with a request answered", children*connsPerChild, children, connsPerChild)}
	if !r.canTry(&f, true, "") {
		return f
	}
	type child struct {
		cmd  *exec.Cmd
		in   io.WriteCloser
		out  io.Reader
		line string
	}
	var cs []*child
	for i := 0; i < children; i++ {
		cmd := helper("conns", r.gw.addr, r.gw.bucket, r.gw.ak, strconv.Itoa(connsPerChild))
		in, err := cmd.StdinPipe()
		if err != nil {
			break
		}
		out, err := cmd.StdoutPipe()
		if err != nil || cmd.Start() != nil {
			break
		}
		cs = append(cs, &child{cmd: cmd, in: in, out: out})
	}
	for _, c := range cs { // all of them connect at once; each says when it holds its share
		c.line, _ = bufio.NewReader(c.out).ReadString('\n')
	}
	answered, unanswered := 0, 0
	var ev []string
	for _, c := range cs {
		var a, u int
		fmt.Sscan(c.line, &a, &u)
		answered, unanswered = answered+a, unanswered+u
		ev = append(ev, strings.TrimSpace(c.line))
	}
	f.AtUnixMs = time.Now().UnixMilli()
	time.Sleep(500 * time.Millisecond) // held while the test counts the sidecar's descriptors
	for _, c := range cs {
		c.in.Close()
		_ = c.cmd.Wait()
	}
	f.Verdict = Pending
	f.Evidence = fmt.Sprintf("%d connections answered and held at once, %d connected and never answered (per process, answered and not: %v)", answered, unanswered, ev)
	switch {
	case answered > 1024:
		f.Verdict = Succeeded
	case unanswered > 0:
		f.Verdict = Blocked
		f.Evidence += "; the gateway held the rest off"
	default:
		f.Verdict = Inconclusive
		f.Evidence += "; too few connections made to tell (a slow machine?)"
	}
	return f
}

// connsMain is the helper "conns ADDR BUCKET AK N": it opens N connections to the gateway
// (for 8 s at most, a failed connect tried again), sends a HEAD on each and counts the answers
// (any status) and the connections left unanswered, prints both, and holds the connections
// until its stdin closes.
func connsMain(args []string) int {
	if len(args) != 4 {
		return 2
	}
	n, _ := strconv.Atoi(args[3])
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	req := fmt.Sprintf("HEAD /%s HTTP/1.1\r\nHost: %s\r\nAuthorization: AWS4-HMAC-SHA256 Credential=%s/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0\r\n\r\n", args[1], args[0], args[2])
	// Bounded in time: a gateway that caps its connections leaves the rest in the kernel's
	// backlog, and past it a connect waits for its timeout.
	dialUntil := time.Now().Add(8 * time.Second)
	for len(conns) < n && time.Now().Before(dialUntil) {
		c, err := net.DialTimeout("tcp", args[0], 2*time.Second)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		conns = append(conns, c)
		_, _ = io.WriteString(c, req)
	}
	answered := 0
	deadline := time.Now().Add(3 * time.Second)
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		if resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "HEAD"}); err == nil {
			resp.Body.Close()
			answered++
		}
	}
	fmt.Println(answered, len(conns)-answered)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}
