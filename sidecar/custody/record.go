package custody

import (
	"encoding/json"
	"fmt"

	"github.com/cba1309c/steward/rpc"
)

// record is an invocation's note on the ledger: what recovery needs to fence its commit slot.
// It never holds a credential (StoreSpec has none).
type record struct {
	V      int           `json:"v"`     // recordVersion
	Store  rpc.StoreSpec `json:"store"` // canonical
	Path   string        `json:"path"`
	Pinned int64         `json:"pinned"`
	// Engine is the registered engine of the invocation; "" (records before engines) and
	// "builtin" are the built-in engine.
	Engine string `json:"engine,omitempty"`
	At     int64  `json:"at_unix_ms"` // when the first reservation arrived
}

// Record versions. A built-in engine's record stays version 1, which every sidecar reads; a
// record of another engine is version 2, so that a sidecar from before engines refuses it (and
// keeps the tickets) instead of fencing a foreign format's slot with the built-in engine's fence.
const (
	recordVersion       = 1
	recordVersionEngine = 2
)

// builtin: the invocation ran on the built-in engine, whose slots custody reads and fences itself.
func (r record) builtin() bool { return r.Engine == "" || r.Engine == "builtin" }

func (r record) encode() ([]byte, error) {
	r.V = recordVersion
	if !r.builtin() {
		r.V = recordVersionEngine
	}
	return json.Marshal(r)
}

func decodeRecord(b []byte) (record, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("invocation record: %w", err)
	}
	switch {
	case r.V == recordVersion && r.builtin(), r.V == recordVersionEngine && !r.builtin():
		return r, nil
	}
	return record{}, fmt.Errorf("invocation record version %d (engine %q), this sidecar reads %d and %d", r.V, r.Engine, recordVersion, recordVersionEngine)
}
