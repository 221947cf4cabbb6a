// Package slot owns the commit slot of a dataset version: the record, written by the sidecar
// alone, of who may write the manifest of version v, and the reading of that record against
// storage that decides an invocation's outcome without running engine code.
//
// A claim is `<dataset>/_steward/claims/<v:020>/<invocation id>.json`: one object per
// invocation and version, written with put-if-absent, by whichever comes first — the
// invocation's gateway about to forward its manifest of v, or a fence (docs/ENGINE.md §4.3):
//
//	gateway sees PUT <manifest of pinned+1>   ->  body read whole, sha256 taken
//	claim {commit, key, sha256}               ->  put-if-absent; lost to a fence: PUT refused
//	manifest                                  ->  put-if-absent; the claim names its bytes
//	resolve / confirmation                    ->  Decide: read the claim, then the manifest
//
// A fence closes version v to one invocation only: other writers still commit v (the
// manifest's own put-if-absent orders them), so no no-op version is ever written and any
// engine's format is fenced alike. Claims are permanent records, never custody objects. The
// package refuses to know about engines, ledgers or the wire protocol.
package slot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cba1309c/steward/storage"
)

// Kinds of claim.
const (
	KindCommit = "commit" // the invocation's gateway forwards the manifest named in the claim
	KindFence  = "fence"  // nobody may write the version's manifest any more
)

// ClaimGrace is how long after its claim an invocation whose gateway is gone, and whose manifest
// is not in the store, stays Unknown rather than fenced: an S3 put whose body its client (the
// gateway) had sent whole before it gave up or died may still complete at the server, and a
// fence written before it would call a landed commit NOT_COMMITTED. A manifest is at most 64 MiB
// and is claimed right before its put; a server takes milliseconds to seconds to finish a put it
// has whole. Within the grace Decide answers Unknown; callers ask again (custody every 30 s).
const ClaimGrace = 10 * time.Second

// MaxClaimSize bounds a claim object: anything larger under _steward/claims/ is not a claim.
const MaxClaimSize = 4096

// ErrCorrupt: a claim object does not decode. The slot is taken by something steward did not
// write; an invocation whose claim it is not has certainly not committed there.
var ErrCorrupt = errors.New("slot: corrupt claim")

// Claim is the record of a slot.
type Claim struct {
	Invocation string `json:"invocation"`
	Kind       string `json:"kind"`
	// Key is the store-relative key of the manifest the claim admits (commit claims).
	Key string `json:"key,omitempty"`
	// SHA256 is the hex digest of that manifest's bytes, and Size its length (commit claims).
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
	UnixMS int64  `json:"unix_ms"`
}

// ClaimKey is the store-relative key of invocation's claim of version v of dataset. Invocation
// ids are 1-128 of [A-Za-z0-9._:-] (PROTOCOL.md §3.1), a valid key segment unless "." or "..".
func ClaimKey(dataset string, v int64, invocation string) string {
	if invocation == "." || invocation == ".." {
		invocation = "%2E" + invocation[1:] // keep the key clean; such an id is refused at receive
	}
	return fmt.Sprintf("%s/_steward/claims/%020d/%s.json", strings.Trim(dataset, "/"), v, invocation)
}

// IsClaimKey reports whether rel, a key relative to a dataset, is one of its claims: a
// permanent record of the sidecar's, never a data or index object (a sweep leaves it).
func IsClaimKey(rel string) bool { return strings.HasPrefix(rel, "_steward/claims/") }

// ManifestVersion reads the version of a manifest name under a dataset's _versions/ folder, in
// every naming steward serves: the built-in engine's and Lance's V1 `<v>.manifest` (any number
// of digits) and Lance's V2 `<u64max-v:020>.manifest`. ok is false for any other name,
// including Lance's version hint and a detached manifest.
func ManifestVersion(name string) (v int64, ok bool) {
	digits, ok := strings.CutSuffix(name, ".manifest")
	if !ok || digits == "" || len(digits) > 20 || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	if len(digits) < 20 && digits[0] == '0' {
		return 0, false // not a name any of the three writes: "02" is no V1 name of version 2
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	if len(digits) == 20 && n > math.MaxInt64 {
		n = math.MaxUint64 - n // V2: inverted so that a listing is newest first
	}
	if n == 0 || n > math.MaxInt64 {
		return 0, false
	}
	return int64(n), true
}

// ManifestNames are the names version v's manifest has in each naming steward serves: the
// built-in engine's `<v:020>`, Lance's V1 `<v>` and Lance's V2 `<u64max-v:020>`. A dataset uses
// one of them for every version; a manifest of v under another would not be read.
func ManifestNames(v int64) []string {
	return []string{fmt.Sprintf("%020d.manifest", v), fmt.Sprintf("%d.manifest", v),
		fmt.Sprintf("%020d.manifest", uint64(math.MaxUint64)-uint64(v))}
}

// Commit is the claim an invocation's gateway writes before it forwards manifest body at key.
func Commit(invocation, key string, body []byte) Claim {
	sum := sha256.Sum256(body)
	return Claim{Invocation: invocation, Kind: KindCommit, Key: key, SHA256: hex.EncodeToString(sum[:]),
		Size: int64(len(body)), UnixMS: time.Now().UnixMilli()}
}

// Put writes c as its invocation's claim of version v with put-if-absent: storage.ErrExists
// when the invocation already holds a claim of v (its own commit, or a fence).
func Put(ctx context.Context, st storage.Store, dataset string, v int64, c Claim) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("slot: encode claim: %w", err)
	}
	return st.PutIfAbsent(ctx, ClaimKey(dataset, v, c.Invocation), bytes.NewReader(b), int64(len(b)))
}

// Read returns invocation's claim of version v; storage.ErrNotFound when there is none,
// ErrCorrupt when the object is not one of this invocation's.
func Read(ctx context.Context, st storage.Store, dataset string, v int64, invocation string) (Claim, error) {
	b, err := storage.ReadAll(ctx, st, ClaimKey(dataset, v, invocation), MaxClaimSize)
	if errors.Is(err, storage.ErrTooLarge) {
		return Claim{}, fmt.Errorf("%w: larger than %d bytes", ErrCorrupt, MaxClaimSize)
	}
	if err != nil {
		return Claim{}, err
	}
	var c Claim
	if err := json.Unmarshal(b, &c); err != nil {
		return Claim{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if c.Invocation != invocation || (c.Kind != KindCommit && c.Kind != KindFence) {
		return Claim{}, fmt.Errorf("%w: kind %q of invocation %q", ErrCorrupt, c.Kind, c.Invocation)
	}
	return c, nil
}

// Outcome is what storage says about an invocation's slot.
type Outcome int

// Outcomes of Decide.
const (
	Unknown      Outcome = iota // the invocation may still write its manifest: ask again later
	Committed                   // the slot holds the manifest the invocation's claim names
	NotCommitted                // the invocation can never commit this version
)

func (o Outcome) String() string {
	switch o {
	case Committed:
		return "COMMITTED"
	case NotCommitted:
		return "NOT_COMMITTED"
	}
	return "UNKNOWN"
}

// Verdict is Decide's answer: the outcome, whether the invocation is fenced, its claim, and why,
// for people.
type Verdict struct {
	Outcome Outcome
	Fenced  bool
	Holder  Claim // the claim found or written; zero when the slot held none and none was written
	Reason  string
}

// Decide settles invocation's commit of version pinned+1 from storage alone. live says the
// invocation's gateway may still forward its manifest (its domain runs in this sidecar): its
// commit claim without the manifest is then Unknown; otherwise, once the claim is older than
// ClaimGrace, it is overwritten by a fence (the gateway that wrote it is gone, so the manifest it
// admitted can never be written) and the answer is NotCommitted. Without a claim the invocation is fenced with put-if-absent
// first, so whatever a live invocation does next, it can no longer commit. A storage error is
// returned as is: the outcome is then Unknown.
func Decide(ctx context.Context, st storage.Store, dataset string, pinned int64, invocation string, live bool) (Verdict, error) {
	v := pinned + 1
	for range 3 { // a lost put-if-absent means the gateway claimed meanwhile: read what it wrote
		c, err := Read(ctx, st, dataset, v, invocation)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			fence := Claim{Invocation: invocation, Kind: KindFence, UnixMS: time.Now().UnixMilli()}
			err := Put(ctx, st, dataset, v, fence)
			if errors.Is(err, storage.ErrExists) {
				continue
			}
			if err != nil {
				return Verdict{}, err
			}
			return Verdict{Outcome: NotCommitted, Fenced: true, Holder: fence, Reason: "fenced: the invocation can never commit"}, nil
		case errors.Is(err, ErrCorrupt):
			return Verdict{Outcome: NotCommitted, Reason: "the claim is not one steward wrote: " + err.Error()}, nil
		case err != nil:
			return Verdict{}, err
		}
		return decideClaimed(ctx, st, dataset, v, c, live)
	}
	return Verdict{}, fmt.Errorf("claim of version %d of %s: written and unreadable three times in a row: %w", v, dataset, storage.ErrUnavailable)
}

func decideClaimed(ctx context.Context, st storage.Store, dataset string, v int64, c Claim, live bool) (Verdict, error) {
	if c.Kind == KindFence {
		return Verdict{Outcome: NotCommitted, Fenced: true, Holder: c, Reason: "fenced: the invocation can never commit"}, nil
	}
	holds, err := Holds(ctx, st, c)
	switch {
	case err != nil:
		return Verdict{}, err
	case holds:
		return Verdict{Outcome: Committed, Holder: c, Reason: "the slot holds the manifest the invocation's claim names"}, nil
	case live:
		return Verdict{Outcome: Unknown, Holder: c, Reason: "claimed by the running invocation, whose manifest may still be in flight"}, nil
	}
	if found, err := present(ctx, st, c.Key); err != nil {
		return Verdict{}, err
	} else if found {
		return Verdict{Outcome: NotCommitted, Holder: c, Reason: "another writer committed the version first"}, nil
	}
	if age := time.Since(time.UnixMilli(c.UnixMS)); age < ClaimGrace {
		return Verdict{Outcome: Unknown, Holder: c, Reason: fmt.Sprintf("claimed %v ago and its manifest is not there: a put cut off then may still land; ask again after %v",
			age.Round(time.Second), ClaimGrace)}, nil
	}
	fence := Claim{Invocation: c.Invocation, Kind: KindFence, UnixMS: time.Now().UnixMilli()}
	b, _ := json.Marshal(fence)
	if err := st.Put(ctx, ClaimKey(dataset, v, c.Invocation), bytes.NewReader(b), int64(len(b))); err != nil {
		return Verdict{}, err
	}
	return Verdict{Outcome: NotCommitted, Fenced: true, Holder: fence, Reason: "the invocation's gateway is gone and its manifest never landed: fenced"}, nil
}

// Holds reports whether the manifest a commit claim names is in the store with exactly the
// claimed bytes.
func Holds(ctx context.Context, st storage.Store, c Claim) (bool, error) {
	if c.Kind != KindCommit || c.Key == "" || c.Size <= 0 {
		return false, nil
	}
	b, err := storage.ReadAll(ctx, st, c.Key, c.Size)
	switch {
	case errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrTooLarge):
		return false, nil
	case err != nil:
		return false, err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]) == c.SHA256, nil
}

func present(ctx context.Context, st storage.Store, key string) (bool, error) {
	_, err := st.Stat(ctx, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, storage.ErrNotFound):
		return false, nil
	}
	return false, err
}
