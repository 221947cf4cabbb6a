// Command gohost is a minimal database host: it launches the steward sidecar through go-plugin,
// opens a durable dispatcher journal, submits one index job, waits for its terminal state and
// prints it. A real database does the same from its DDL path.
//
//	steward dataset create --store /tmp/lake --path sales --rows 100000
//	go run ./examples/gohost --steward bin/steward --store /tmp/lake --dataset sales
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

func main() {
	bin := flag.String("steward", "bin/steward", "path of the steward binary")
	store := flag.String("store", "", "local store directory holding the dataset (absolute or relative)")
	ds := flag.String("dataset", "", "dataset path inside the store")
	version := flag.Int64("version", 1, "dataset version the job is admitted at")
	column := flag.String("column", "category", "column to index")
	kind := flag.String("type", rpc.IndexBitmap, "index type: BTREE or BITMAP")
	journal := flag.String("journal", "", "dispatcher journal file (default: a temporary file)")
	flag.Parse()
	if *store == "" || *ds == "" {
		fmt.Fprintln(os.Stderr, "gohost: --store and --dataset are required")
		os.Exit(2)
	}
	if err := run(*bin, *store, *ds, *version, *column, *kind, *journal); err != nil {
		fmt.Fprintln(os.Stderr, "gohost:", err)
		os.Exit(1)
	}
}

func run(bin, store, ds string, version int64, column, kind, journal string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := filepath.Abs(store)
	if err != nil {
		return err
	}
	if journal == "" {
		dir, err := os.MkdirTemp("", "gohost-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		journal = filepath.Join(dir, "jobs.db")
	}

	// 1. Launch the sidecar (go-plugin, AutoMTLS). It dies with this process, whatever happens.
	log := hclog.New(&hclog.LoggerOptions{Name: "gohost", Level: hclog.Warn})
	sc, err := host.Launch(ctx, host.Config{Path: bin, Logger: log})
	if err != nil {
		return err
	}
	defer sc.Close()

	// 2. A dispatcher over a durable journal: jobs survive this process's restarts.
	jobs, err := dispatch.OpenBolt(journal, dispatch.BoltOptions{})
	if err != nil {
		return err
	}
	defer jobs.Close()
	d, err := dispatch.New(dispatch.Config{Store: jobs, Interval: 100 * time.Millisecond, Logger: log})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.AddSidecar("local", sc); err != nil {
		return err
	}
	go d.Run(ctx)

	// 3. Submit one job and wait for a terminal state.
	j, err := d.Submit(ctx, dispatch.Request{
		Dataset:         rpc.DatasetRef{Store: rpc.StoreSpec{URL: rpc.FileStoreURL(root)}, Path: ds},
		AdmittedVersion: version,
		Op:              rpc.OpCreate,
		Index:           rpc.IndexSpec{Name: "idx_" + column, Columns: []string{column}, Type: kind},
	})
	if err != nil {
		return err
	}
	for !terminal(j) {
		time.Sleep(50 * time.Millisecond)
		if j, err = d.Get(j.ID); err != nil {
			return err
		}
	}

	// 4. Print what the database would record.
	fmt.Printf("job %s: %s\n", j.ID, j.State)
	if r := j.Result; r != nil {
		fmt.Printf("  phase %s, code %d, committed version %d, wall %d ms, peak memory %d bytes\n",
			r.Phase, r.Code, r.CommittedVersion, r.WallMs, r.PeakMemoryBytes)
	}
	for _, h := range j.History {
		fmt.Printf("  %s  %-10s %s → %s\n", h.At.Format("15:04:05.000"), h.Event, h.From, h.To)
	}
	return nil
}

// terminal: settled, or UNKNOWN that the resolver has not settled yet is not terminal for us.
func terminal(j dispatch.Job) bool { return j.State.Settled() }
