package ledger_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/ledger"
)

// A writer reserves a name before uploading, then accepts it once published; a failed
// writer abandons its names and the cleanup worker deletes them.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ledger-example-")
	defer os.RemoveAll(dir)
	store, _ := storage.NewLocalStore(filepath.Join(dir, "objects"))
	l, err := ledger.Open(ctx, ledger.Config{
		Path:   filepath.Join(dir, "ledger.db"),
		Stores: func(string) (storage.Store, error) { return store, nil },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	ok := ledger.Owner{Kind: ledger.Invocation, ID: "inv-1"}
	failed := ledger.Owner{Kind: ledger.Invocation, ID: "inv-2"}
	for _, w := range []struct {
		owner ledger.Owner
		key   string
	}{{ok, "ds/data/a.parquet"}, {failed, "ds/data/b.parquet"}} {
		if err := l.Reserve(ctx, w.owner, "main", []string{w.key}); err != nil {
			fmt.Println(err) // ErrCapacity: do not upload
			return
		}
		_ = store.Put(ctx, w.key, strings.NewReader("rows"), 4)
	}
	_ = l.Accept(ctx, ok, "main", nil)      // published by a manifest
	_ = l.Abandon(ctx, failed, "main", nil) // never will be
	_ = l.WaitIdle(ctx)

	left, _ := storage.ListAll(ctx, store, "ds/")
	fmt.Println(len(left), left[0].Key, l.Stats().Used)
	// Output: 1 ds/data/a.parquet 0
}
