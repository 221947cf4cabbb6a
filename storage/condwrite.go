package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrConditionalWritesIgnored: a store accepted a second put-if-absent of the same key, so it
// ignores the precondition (If-None-Match: * on S3). Commits at pinned+1 and fences rest on that
// precondition; on such a store two writers can both "win" a version and data is lost silently
// (lance#6595). Nothing that commits or fences may run on it.
var ErrConditionalWritesIgnored = errors.New("storage: store ignores conditional writes")

// ProbeKeyPrefix is where ProbeConditionalWrites writes its probe objects (removed after).
const ProbeKeyPrefix = "_steward/probe/"

// ProbeConditionalWrites checks that s honours put-if-absent: it writes a fresh probe key with
// PutIfAbsent, writes it again with PutIfAbsent, and requires the second to fail with ErrExists;
// then it deletes the probe. A store that accepts the second write fails with an *OpError of
// kind ErrConditionalWritesIgnored; an unreachable one with whatever the first write returned
// (ErrUnavailable, ErrPermission, ...), and then nothing is known.
func ProbeConditionalWrites(ctx context.Context, s Store) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	key := ProbeKeyPrefix + hex.EncodeToString(b[:])
	body := []byte("steward conditional-write probe\n")
	if err := s.PutIfAbsent(ctx, key, bytes.NewReader(body), int64(len(body))); err != nil {
		return err
	}
	second := s.PutIfAbsent(ctx, key, bytes.NewReader(body), int64(len(body)))
	_ = s.DeleteBatch(ctx, []string{key}) // best effort: a left probe is a few bytes outside any dataset
	switch {
	case second == nil:
		return opErr("put-if-absent", key, ErrConditionalWritesIgnored,
			fmt.Errorf("a second put-if-absent of %s succeeded", key))
	case errors.Is(second, ErrExists):
		return nil
	default:
		return second
	}
}
