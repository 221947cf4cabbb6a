package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cba1309c/steward/internal/boltfile"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage/ledger"
	bolt "go.etcd.io/bbolt"
)

// The ledger owns names; to settle an invocation after a restart the sidecar must also know
// where that invocation would have committed. invJournal keeps, next to the ledger's journal,
// one record per invocation that reserved anything (its dataset and pinned version) and the
// connection spec of every store name the ledger holds, so the cleanup worker can reopen a
// store after a restart. Neither ever holds a credential: StoreSpec has none.

var (
	bucketInvocations = []byte("invocations")
	bucketStores      = []byte("stores")
)

// invRecord is what recovery needs to fence an invocation's slot.
type invRecord struct {
	Store  rpc.StoreSpec `json:"store"`
	Path   string        `json:"path"`
	Pinned int64         `json:"pinned"`
	At     int64         `json:"at_unix_ms"` // when the first reservation arrived
}

type invJournal struct{ db *bolt.DB }

// openInvJournal opens the records at path, creating them when absent. A file that is present but
// empty, truncated or damaged is a *ledger.CorruptError naming it: the records are half of the
// ledger slot's state, and the sidecar must not start without them.
func openInvJournal(path string) (*invJournal, error) {
	db, err := boltfile.Open(path, 0o600, &bolt.Options{Timeout: time.Second}, func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketInvocations, bucketStores} {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		return nil
	})
	var bad *boltfile.CorruptError
	if errors.As(err, &bad) {
		return nil, &ledger.CorruptError{Path: path, Err: bad.Err}
	}
	if err != nil {
		return nil, fmt.Errorf("open invocation records %s: %w", path, err)
	}
	return &invJournal{db: db}, nil
}

// put records an invocation and, when spec is not nil, its store's spec, in one durable commit.
func (j *invJournal) put(inv string, rec *invRecord, store string, spec *rpc.StoreSpec) error {
	return j.db.Update(func(tx *bolt.Tx) error {
		if rec != nil {
			b, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketInvocations).Put([]byte(inv), b); err != nil {
				return err
			}
		}
		if spec != nil {
			b, err := json.Marshal(spec)
			if err != nil {
				return err
			}
			return tx.Bucket(bucketStores).Put([]byte(store), b)
		}
		return nil
	})
}

// load returns every record and store spec. A record that does not decode is skipped (its
// invocation stays unsettled and is reported) rather than blocking the sidecar's start.
func (j *invJournal) load() (map[string]invRecord, map[string]rpc.StoreSpec, []string, error) {
	recs, specs := map[string]invRecord{}, map[string]rpc.StoreSpec{}
	var bad []string
	err := j.db.View(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketInvocations).ForEach(func(k, v []byte) error {
			var r invRecord
			if json.Unmarshal(v, &r) != nil {
				bad = append(bad, string(k))
				return nil
			}
			recs[string(k)] = r
			return nil
		}); err != nil {
			return err
		}
		return tx.Bucket(bucketStores).ForEach(func(k, v []byte) error {
			var s rpc.StoreSpec
			if json.Unmarshal(v, &s) != nil {
				bad = append(bad, "store "+string(k))
				return nil
			}
			specs[string(k)] = s
			return nil
		})
	})
	return recs, specs, bad, err
}

// forget deletes invocation records.
func (j *invJournal) forget(invs []string) error {
	if len(invs) == 0 {
		return nil
	}
	return j.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketInvocations)
		for _, inv := range invs {
			if err := b.Delete([]byte(inv)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (j *invJournal) close() error { return j.db.Close() }
