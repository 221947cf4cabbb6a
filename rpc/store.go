package rpc

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// StoreSpec names the object store holding a dataset, as a host sends it. Parse is the one reader
// of it: validation, the worker, the ledger, the CLI and the campaign all go through Parse, and
// the ledger names the store by ParsedStore.Name. docs/PROTOCOL.md §3.1.1 has the grammar.
type StoreSpec struct {
	// URL is "file:///abs/dir" for a local-directory store or "s3://bucket[/prefix]".
	URL string `json:"url"`
	// Endpoint is host[:port] of the S3 service (s3 only, required).
	Endpoint string `json:"endpoint,omitempty"`
	// Secure selects https (s3 only).
	Secure bool `json:"secure,omitempty"`
	// Region of the bucket (s3 only, optional).
	Region string `json:"region,omitempty"`
}

// Validate checks the spec against the grammar: it is Parse without the result.
func (s StoreSpec) Validate() error {
	_, err := s.Parse()
	return err
}

// StoreKind says which backend a store URL names.
type StoreKind string

// Kinds of store.
const (
	StoreFile StoreKind = "file" // a local directory: file:///absolute/dir
	StoreS3   StoreKind = "s3"   // an S3 bucket, optionally below a key prefix: s3://bucket[/prefix]
)

// MaxStoreName bounds a canonical store name in bytes. The ledger keys its tickets by the name and
// holds names of at most 255 bytes, so Parse refuses a spec whose name would be longer.
const MaxStoreName = 255

// ParsedStore is a store spec after Parse: decoded exactly once, checked, and canonical, so two
// spellings of one store parse to equal values. URL, Spec and Name render its canonical forms.
// It never holds a credential.
type ParsedStore struct {
	// Kind is StoreFile or StoreS3.
	Kind StoreKind
	// Root is a file store's directory: absolute, percent-decoded, without a trailing slash
	// (except the root directory "/" itself).
	Root string
	// Bucket is an S3 store's bucket.
	Bucket string
	// Prefix is the key prefix inside the bucket, percent-decoded, without leading or trailing
	// slash; "" for the whole bucket.
	Prefix string
	// Endpoint is the S3 service's host[:port]: host in lower case, IPv6 in brackets, no default
	// port (80 without Secure, 443 with it).
	Endpoint string
	// Secure selects https to Endpoint.
	Secure bool
	// Region of the bucket; "" for the service's default.
	Region string
}

// Parse reads the spec: the URL through ParseStoreURL, then the connection fields, which belong
// to s3 stores only. Errors wrap ErrInvalidStore and never quote the URL, which may hold a
// credential the host put there by mistake.
func (s StoreSpec) Parse() (ParsedStore, error) {
	p, err := ParseStoreURL(s.URL)
	if err != nil {
		return ParsedStore{}, err
	}
	switch p.Kind {
	case StoreFile:
		if s.Endpoint != "" || s.Secure || s.Region != "" {
			return ParsedStore{}, storeErr("endpoint, secure and region apply to s3 stores only")
		}
	case StoreS3:
		if p.Endpoint, err = canonicalEndpoint(s.Endpoint, s.Secure); err != nil {
			return ParsedStore{}, err
		}
		if !validRegion(s.Region) {
			return ParsedStore{}, storeErr("region must be at most 64 characters of [A-Za-z0-9_-]")
		}
		p.Secure, p.Region = s.Secure, s.Region
	}
	if n := len(p.Name()); n > MaxStoreName {
		return ParsedStore{}, storeErr(fmt.Sprintf("the store's canonical name is %d bytes, more than %d", n, MaxStoreName))
	}
	return p, nil
}

// ParseStoreURL reads a store URL alone: its kind and where it points (a file store's root, an
// s3 store's bucket and prefix). Userinfo, a query, a fragment, a host on file://, a relative
// path, and empty, "." or ".." path segments are refused; a single trailing slash is dropped, and
// percent-escapes are decoded exactly once. Errors wrap ErrInvalidStore and never quote the URL.
func ParseStoreURL(raw string) (ParsedStore, error) {
	switch {
	case raw == "":
		return ParsedStore{}, storeErr("url is required")
	case len(raw) > 4*MaxStoreName:
		return ParsedStore{}, storeErr("url is too long")
	case strings.Contains(raw, "?"):
		return ParsedStore{}, storeErr("url must not have a query (?)")
	case strings.Contains(raw, "#"):
		return ParsedStore{}, storeErr("url must not have a fragment (#)")
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		// url.Error quotes its input, and even its inner error may quote a part of it (a
		// "port" that is really a secret): say only what kind of thing is wrong.
		return ParsedStore{}, storeErr("url does not parse: " + urlFault(err))
	case u.User != nil:
		return ParsedStore{}, storeErr("url must not carry userinfo (user@): credentials travel in the credentials field only")
	case u.Opaque != "":
		return ParsedStore{}, storeErr("url must be file:///absolute/dir or s3://bucket[/prefix]")
	}
	switch u.Scheme {
	case "file":
		return parseFileURL(u)
	case "s3":
		return parseS3URL(u)
	}
	return ParsedStore{}, storeErr("url scheme must be file or s3")
}

func parseFileURL(u *url.URL) (ParsedStore, error) {
	if u.Host != "" {
		return ParsedStore{}, storeErr("file url must have an empty host: file:///absolute/dir")
	}
	if !strings.HasPrefix(u.Path, "/") {
		return ParsedStore{}, storeErr("file url must name an absolute directory: file:///absolute/dir")
	}
	rest, err := cleanPath(u.Path)
	if err != nil {
		return ParsedStore{}, err
	}
	return ParsedStore{Kind: StoreFile, Root: "/" + rest}, nil
}

func parseS3URL(u *url.URL) (ParsedStore, error) {
	if !validBucket(u.Host) {
		return ParsedStore{}, storeErr("s3 url must name a bucket of 3-63 characters of [A-Za-z0-9._-], starting and ending with a letter or digit, without '..': s3://bucket[/prefix]")
	}
	prefix, err := cleanPath(u.Path)
	if err != nil {
		return ParsedStore{}, err
	}
	return ParsedStore{Kind: StoreS3, Bucket: u.Host, Prefix: prefix}, nil
}

// cleanPath checks a decoded URL path ("" or starting with "/") and returns it without its leading
// slash and one trailing slash. Each segment must be non-empty, not "." or "..", valid UTF-8 and
// free of control characters: those are either ambiguous (is "a//b" the key prefix "a//b" or the
// directory "a/b"?) or cannot round-trip through a JSON name.
func cleanPath(p string) (string, error) {
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return "", nil
	}
	p = strings.TrimSuffix(p, "/")
	for _, seg := range strings.Split(p, "/") {
		switch {
		case seg == "":
			return "", storeErr("url path must not have empty segments (//)")
		case seg == "." || seg == "..":
			return "", storeErr("url path must not have '.' or '..' segments")
		case !utf8.ValidString(seg):
			return "", storeErr("url path must decode to valid UTF-8")
		case strings.ContainsFunc(seg, isControl):
			return "", storeErr("url path must not hold control characters")
		}
	}
	return p, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// validBucket accepts what minio-go accepts of a bucket that a URL host can carry.
func validBucket(b string) bool {
	return len(b) >= 3 && len(b) <= 63 && !strings.Contains(b, "..") && isAlnum(b[0]) && isAlnum(b[len(b)-1]) &&
		onlyOf(b, "._-")
}

func validRegion(r string) bool { return len(r) <= 64 && onlyOf(r, "_-") }

func validHostname(h string) bool {
	return h != "" && len(h) <= 253 && h[0] != '.' && h[0] != '-' && onlyOf(h, ".-")
}

// onlyOf reports whether every byte of s is an ASCII letter, a digit or one of extra.
func onlyOf(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && strings.IndexByte(extra, s[i]) < 0 {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// canonicalEndpoint checks host[:port] and renders it canonically: host lower-cased, IPv6
// bracketed and compressed, the port without leading zeros and dropped when it is the scheme's
// default (80, or 443 with secure).
func canonicalEndpoint(e string, secure bool) (string, error) {
	if e == "" {
		return "", storeErr("endpoint is required for s3")
	}
	bad := storeErr("endpoint must be host[:port] of the S3 service, without scheme, userinfo or path (secure selects https)")
	host, port, err := net.SplitHostPort(e)
	switch {
	case err == nil && port == "":
		return "", bad
	case err != nil && strings.HasPrefix(e, "[") && strings.HasSuffix(e, "]"):
		host, port = e[1:len(e)-1], ""
	case err != nil && !strings.Contains(e, ":"):
		host, port = e, ""
	case err != nil:
		return "", bad
	}
	if strings.Contains(host, ":") { // IPv6, which only brackets let through
		ip := net.ParseIP(host)
		if ip == nil || ip.To4() != nil {
			return "", bad
		}
		host = "[" + ip.String() + "]"
	} else if !validHostname(host) {
		return "", bad
	}
	host = strings.ToLower(host)
	if port == "" {
		return host, nil
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strings.Trim(port, "0123456789") != "" {
		return "", bad
	}
	if n == 80 && !secure || n == 443 && secure {
		return host, nil
	}
	return host + ":" + strconv.Itoa(n), nil
}

// urlFault names what url.Parse disliked without quoting any of the input.
func urlFault(err error) string {
	var esc url.EscapeError
	var host url.InvalidHostError
	switch {
	case errors.As(err, &esc):
		return "invalid percent-escape"
	case errors.As(err, &host):
		return "invalid character in host"
	}
	return "malformed URL"
}

func storeErr(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidStore, msg) }

// URL renders the canonical store URL: "file://" + root, or "s3://bucket" + "/prefix" when there
// is a prefix, with every byte outside [A-Za-z0-9-._~/] of root or prefix percent-escaped.
func (p ParsedStore) URL() string {
	if p.Kind == StoreFile {
		return "file://" + escapePath(p.Root)
	}
	if p.Prefix == "" {
		return "s3://" + p.Bucket
	}
	return "s3://" + p.Bucket + "/" + escapePath(p.Prefix)
}

// Spec renders the canonical spec: what a host would send to name this store canonically.
func (p ParsedStore) Spec() StoreSpec {
	return StoreSpec{URL: p.URL(), Endpoint: p.Endpoint, Secure: p.Secure, Region: p.Region}
}

// Name is the ledger's name for the store, with every field that selects it and no credential:
// the canonical URL for a file store; for an s3 store the canonical URL, "@", the endpoint, then
// ";secure" when Secure and ";region=" + Region when a region is set, in that order. For example
// "s3://bucket/team/a@minio.internal:9000;secure". ParseStoreName inverts it.
func (p ParsedStore) Name() string {
	if p.Kind == StoreFile {
		return p.URL()
	}
	n := p.URL() + "@" + p.Endpoint
	if p.Secure {
		n += ";secure"
	}
	if p.Region != "" {
		n += ";region=" + p.Region
	}
	return n
}

// ParseStoreName inverts ParsedStore.Name. It also accepts the names older sidecars wrote (the
// URL as sent, "@endpoint" for s3), so a journal from before canonical names can still be settled.
func ParseStoreName(name string) (ParsedStore, error) {
	spec := StoreSpec{URL: name}
	if strings.HasPrefix(name, "s3://") {
		i := strings.LastIndexByte(name, '@')
		if i < 0 {
			return ParsedStore{}, storeErr("s3 store name has no @endpoint")
		}
		opts := strings.Split(name[i+1:], ";")
		spec.URL, spec.Endpoint, opts = name[:i], opts[0], opts[1:]
		if len(opts) > 0 && opts[0] == "secure" {
			spec.Secure, opts = true, opts[1:]
		}
		if len(opts) > 0 {
			if r, ok := strings.CutPrefix(opts[0], "region="); ok && r != "" {
				spec.Region, opts = r, opts[1:]
			}
		}
		if len(opts) > 0 {
			return ParsedStore{}, storeErr("s3 store name has an unknown, repeated or misplaced option")
		}
	}
	return spec.Parse()
}

// FileStoreURL is the canonical URL of the local directory dir (absolute; not checked here: Parse
// checks it).
func FileStoreURL(dir string) string { return "file://" + escapePath(dir) }

// escapePath percent-escapes every byte of p outside [A-Za-z0-9-._~/]. The result decodes back
// to p with one url.Parse, and holds no '@' or ';', which a store name uses as separators.
func escapePath(p string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if isAlnum(c) || strings.IndexByte("-._~/", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
