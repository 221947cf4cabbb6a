package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// TestCondWritesVerdicts: what the per-store memory keeps. A store that honours put-if-absent is
// probed once; one that ignores it stays refused even if a later probe would pass; an unfinished
// probe is not remembered; concurrent calls share one probe; a full memory forgets a fine store,
// never a refused one. (The real probe against MinIO and a store that ignores the header is
// TestConditionalWritesRefusedOnS3.)
func TestCondWritesVerdicts(t *testing.T) {
	open := func(context.Context) (storage.Store, error) { return nil, nil }
	ignored := fmt.Errorf("probe: %w", storage.ErrConditionalWritesIgnored)
	unreachable := fmt.Errorf("probe: %w", storage.ErrUnavailable)
	for _, tc := range []struct {
		name    string
		results []error // what successive probes of the store return
		want    []error // what successive require calls return (nil, or the sentinel it wraps)
		probes  int     // probes run
	}{
		{"honoured once", []error{nil}, []error{nil, nil, nil}, 1},
		{"ignored stays refused", []error{ignored, nil}, []error{storage.ErrConditionalWritesIgnored, storage.ErrConditionalWritesIgnored, storage.ErrConditionalWritesIgnored}, 1},
		{"unreachable probed again", []error{unreachable, unreachable, nil}, []error{storage.ErrUnavailable, storage.ErrUnavailable, nil, nil}, 3},
		{"unreachable then ignored", []error{unreachable, ignored, nil}, []error{storage.ErrUnavailable, storage.ErrConditionalWritesIgnored, storage.ErrConditionalWritesIgnored}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCondWrites(hclog.NewNullLogger(), prometheus.NewRegistry())
			n := 0
			c.probe = func(context.Context, storage.Store) error { n++; return tc.results[min(n, len(tc.results))-1] }
			for i, want := range tc.want {
				err := c.require(context.Background(), "s3://b@h:9000", open)
				if want == nil && err != nil || want != nil && !errors.Is(err, want) {
					t.Fatalf("call %d: %v, want %v", i+1, err, want)
				}
			}
			if n != tc.probes {
				t.Fatalf("%d probes, want %d", n, tc.probes)
			}
		})
	}

	t.Run("concurrent calls share one probe", func(t *testing.T) {
		c := newCondWrites(hclog.NewNullLogger(), prometheus.NewRegistry())
		var n atomic.Int32
		release := make(chan struct{})
		c.probe = func(context.Context, storage.Store) error { n.Add(1); <-release; return nil }
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- c.require(context.Background(), "s3://b@h:9000", open) }()
		}
		time.Sleep(50 * time.Millisecond)
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n.Load() != 1 {
			t.Fatalf("%d probes for one store, want 1", n.Load())
		}
	})

	t.Run("bounded memory keeps refused stores", func(t *testing.T) {
		c := newCondWrites(hclog.NewNullLogger(), prometheus.NewRegistry())
		c.max = 2
		c.probe = func(context.Context, storage.Store) error { return ignored }
		_ = c.require(context.Background(), "bad", open)
		c.probe = func(context.Context, storage.Store) error { return nil }
		for _, name := range []string{"a", "b", "c"} {
			if err := c.require(context.Background(), name, open); err != nil {
				t.Fatal(err)
			}
		}
		if len(c.entries) > c.max {
			t.Fatalf("%d entries remembered, bound %d", len(c.entries), c.max)
		}
		if err := c.require(context.Background(), "bad", open); !errors.Is(err, storage.ErrConditionalWritesIgnored) {
			t.Fatalf("the refused store was forgotten: %v", err)
		}
	})
}
