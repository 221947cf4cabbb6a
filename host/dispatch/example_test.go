package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

// A host opens its job store, admits a job, and lets Run drive it on the sidecars it adds
// (dispatcher.AddSidecar("node-1", client) with a *host.Client from host.Launch).
func Example() {
	dir, _ := os.MkdirTemp("", "dispatch-example-")
	defer os.RemoveAll(dir)
	store, err := dispatch.OpenBolt(filepath.Join(dir, "jobs.db"), dispatch.BoltOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	d, err := dispatch.New(dispatch.Config{Store: store, Logger: hclog.NewNullLogger()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	req := dispatch.Request{
		Dataset:         rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file:///srv/data"}, Path: "warehouse/events"},
		AdmittedVersion: 7, Op: rpc.OpCreate,
		Index: rpc.IndexSpec{Name: "events_by_id", Columns: []string{"id"}, Type: rpc.IndexBTree},
	}
	j, err := d.Submit(context.Background(), req)
	fmt.Println(j.State, j.SlotHeld, err)

	req.Index.Name = "EVENTS_BY_ID" // same name, case-folded: fenced while the first job is live
	_, err = d.Submit(context.Background(), req)
	fmt.Println(err != nil && errors.Is(err, dispatch.ErrNameBusy))
	// Output:
	// PENDING true <nil>
	// true
}
