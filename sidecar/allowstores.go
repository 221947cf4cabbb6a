package sidecar

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cba1309c/steward/rpc"
)

// ErrStoreNotAllowed: a call without per-call credentials names an s3 store off the sidecar's
// allow-list (Config.AllowStores), so the sidecar's own keys are not sent there. Nothing was done.
var ErrStoreNotAllowed = errors.New("store not on the sidecar's allow-list")

// StoreNotAllowedError names the store (canonical name, never a credential) a call was refused for.
type StoreNotAllowedError struct{ Store string }

func (e *StoreNotAllowedError) Error() string {
	return fmt.Sprintf("%v: %s (send credentials with the call, or start the sidecar with --allow-store for it)", ErrStoreNotAllowed, e.Store)
}

// Unwrap exposes ErrStoreNotAllowed to errors.Is.
func (e *StoreNotAllowedError) Unwrap() error { return ErrStoreNotAllowed }

// AllowList holds the stores the sidecar's own keys may be sent to (Config.AllowStores), parsed.
type AllowList []rpc.ParsedStore

// ParseAllowStores reads canonical s3 store names (rpc.ParseStoreName). A file store needs no key
// and is refused, so that a list never looks as if it restricted one. Errors wrap
// rpc.ErrInvalidStore.
func ParseAllowStores(names []string) (AllowList, error) {
	var a AllowList
	for _, n := range names {
		p, err := rpc.ParseStoreName(n)
		if err != nil {
			return nil, fmt.Errorf("allow-store %q: %w", n, err)
		}
		if p.Kind != rpc.StoreS3 {
			return nil, fmt.Errorf("allow-store %q: %w: only s3 stores take the sidecar's keys (a file store needs none)", n, rpc.ErrInvalidStore)
		}
		a = append(a, p)
	}
	return a, nil
}

// allows reports whether p is an entry or lies below one: the same endpoint, scheme (secure),
// region and bucket, and a prefix equal to the entry's or under it ("" allows the whole bucket).
func (a AllowList) allows(p rpc.ParsedStore) bool {
	for _, e := range a {
		if e.Kind == p.Kind && e.Endpoint == p.Endpoint && e.Secure == p.Secure && e.Region == p.Region && e.Bucket == p.Bucket &&
			(e.Prefix == "" || p.Prefix == e.Prefix || strings.HasPrefix(p.Prefix, e.Prefix+"/")) {
			return true
		}
	}
	return false
}

// names are the canonical names of the entries, for hello.
func (a AllowList) names() []string {
	out := make([]string, 0, len(a))
	for _, e := range a {
		out = append(out, e.Name())
	}
	return out
}

// credsFor returns the credentials a storage call on store p uses: the call's own when it
// brought them; none for a file store; for an s3 store, the sidecar's own keys (none if it has
// none) only when the store is on the allow-list, else a *StoreNotAllowedError. This is the one
// place where the sidecar's keys are handed out, so a worker only ever gets them for its own
// call's store.
func (s *Server) credsFor(p rpc.ParsedStore, creds *rpc.Credentials) (*rpc.Credentials, error) {
	if creds != nil {
		return creds, nil
	}
	return s.allow.credsFor(p, s.ownCreds)
}

func (a AllowList) credsFor(p rpc.ParsedStore, own *rpc.Credentials) (*rpc.Credentials, error) {
	if p.Kind != rpc.StoreS3 {
		return nil, nil
	}
	if !a.allows(p) {
		return nil, &StoreNotAllowedError{Store: p.Name()}
	}
	return own, nil
}

// OwnCredentialsFor applies the sidecar's rule to a call on spec that brings no credentials: own
// for an s3 store on allow, none for a file store, a *StoreNotAllowedError for any other s3
// store (steward doctor checks a store the way the sidecar would reach it).
func OwnCredentialsFor(spec rpc.StoreSpec, own *rpc.Credentials, allow []string) (*rpc.Credentials, error) {
	a, err := ParseAllowStores(allow)
	if err != nil {
		return nil, err
	}
	p, err := spec.Parse()
	if err != nil {
		return nil, err
	}
	return a.credsFor(p, own)
}

// ownSecrets are the sidecar's own keys, for redaction (nil without keys).
func (s *Server) ownSecrets() []string {
	if s.ownCreds == nil {
		return nil
	}
	return []string{s.ownCreds.SecretKey, s.ownCreds.AccessKey}
}
