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

const recordVersion = 1

// builtin: the invocation ran on the built-in engine, whose slots custody reads and fences itself.
func (r record) builtin() bool { return r.Engine == "" || r.Engine == "builtin" }

func (r record) encode() ([]byte, error) {
	r.V = recordVersion
	return json.Marshal(r)
}

func decodeRecord(b []byte) (record, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("invocation record: %w", err)
	}
	if r.V != recordVersion {
		return record{}, fmt.Errorf("invocation record version %d, this sidecar reads %d", r.V, recordVersion)
	}
	return r, nil
}
