package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage"
)

// RunContract runs the behaviour every storage.Store must have against stores made by newStore
// (one fresh, empty store per subtest).
func RunContract(t *testing.T, newStore func(t *testing.T) storage.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s storage.Store)
	}{
		{"PutGetOverwrite", testPutGet},
		{"PutIfAbsent", testPutIfAbsent},
		{"PutIfAbsentRace", testPutIfAbsentRace},
		{"NotFound", testNotFound},
		{"Stat", testStat},
		{"GetRange", testGetRange},
		{"ReadAllBound", testReadAllBound},
		{"List", testList},
		{"DeleteBatch", testDeleteBatch},
		{"DeleteBatchLarge", testDeleteBatchLarge},
		{"InvalidKeys", testInvalidKeys},
		{"CancelledContext", testCancelled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

func put(t *testing.T, s storage.Store, key, body string) {
	t.Helper()
	if err := s.Put(context.Background(), key, strings.NewReader(body), int64(len(body))); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, s storage.Store, key string) string {
	t.Helper()
	b, err := storage.ReadAll(context.Background(), s, key, 1<<20)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(b)
}

func testPutGet(t *testing.T, s storage.Store) {
	put(t, s, "a/b/c.txt", "hello")
	if got := get(t, s, "a/b/c.txt"); got != "hello" {
		t.Fatalf("got %q", got)
	}
	put(t, s, "a/b/c.txt", "replaced")
	if got := get(t, s, "a/b/c.txt"); got != "replaced" {
		t.Fatalf("after overwrite got %q", got)
	}
	// Unknown size streams too.
	if err := s.Put(context.Background(), "unknown", strings.NewReader("streamed"), -1); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "unknown"); got != "streamed" {
		t.Fatalf("got %q", got)
	}
}

func testPutIfAbsent(t *testing.T, s storage.Store) {
	ctx := context.Background()
	if err := s.PutIfAbsent(ctx, "slot", strings.NewReader("first"), 5); err != nil {
		t.Fatal(err)
	}
	err := s.PutIfAbsent(ctx, "slot", strings.NewReader("second"), 6)
	if !errors.Is(err, storage.ErrExists) || !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("second put-if-absent: %v, want ErrExists", err)
	}
	if got := get(t, s, "slot"); got != "first" {
		t.Fatalf("slot holds %q after losing write", got)
	}
}

func testPutIfAbsentRace(t *testing.T, s storage.Store) {
	const writers = 16
	for round := range 5 {
		key := fmt.Sprintf("race/%d", round)
		var wins, exists atomic.Int32
		var winner atomic.Value
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range writers {
			wg.Go(func() {
				body := fmt.Sprintf("writer-%02d", w)
				<-start
				err := s.PutIfAbsent(context.Background(), key, strings.NewReader(body), int64(len(body)))
				switch {
				case err == nil:
					wins.Add(1)
					winner.Store(body)
				case errors.Is(err, storage.ErrExists):
					exists.Add(1)
				default:
					t.Errorf("writer %d: %v", w, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if wins.Load() != 1 || exists.Load() != writers-1 {
			t.Fatalf("round %d: %d winners, %d ErrExists; want 1 and %d", round, wins.Load(), exists.Load(), writers-1)
		}
		if got := get(t, s, key); got != winner.Load() {
			t.Fatalf("round %d: stored %q, winner wrote %q", round, got, winner.Load())
		}
	}
}

// ReadAll refuses an object one byte over its bound, whether or not the store announced the size.
func testReadAllBound(t *testing.T, s storage.Store) {
	ctx := context.Background()
	put(t, s, "sized", strings.Repeat("x", 1000))
	if err := s.Put(ctx, "streamed", strings.NewReader(strings.Repeat("y", 1000)), -1); err != nil {
		t.Fatal(err)
	}
	put(t, s, "empty", "")
	tests := []struct {
		key   string
		limit int64
		ok    bool
	}{
		{"sized", 1000, true}, {"sized", 999, false}, {"sized", 0, false},
		{"streamed", 1000, true}, {"streamed", 999, false},
		{"empty", 0, true},
	}
	for _, tc := range tests {
		b, err := storage.ReadAll(ctx, s, tc.key, tc.limit)
		switch {
		case tc.ok && (err != nil || int64(len(b)) != tc.limit):
			t.Errorf("%s within bound %d: %d bytes, %v", tc.key, tc.limit, len(b), err)
		case !tc.ok && (!errors.Is(err, storage.ErrTooLarge) || b != nil):
			t.Errorf("%s over bound %d: %d bytes, %v; want ErrTooLarge", tc.key, tc.limit, len(b), err)
		}
	}
}

func testNotFound(t *testing.T, s storage.Store) {
	ctx := context.Background()
	if _, err := s.Get(ctx, "missing/key"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("get: %v", err)
	}
	if _, err := s.Stat(ctx, "missing/key"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("stat: %v", err)
	}
	if _, err := s.GetRange(ctx, "missing/key", 0, 1); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("get range: %v", err)
	}
	put(t, s, "dir/file", "x")
	if _, err := s.Stat(ctx, "dir"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("stat of a key prefix: %v", err)
	}
}

func testStat(t *testing.T, s storage.Store) {
	before := time.Now().Add(-2 * time.Second)
	put(t, s, "k", "12345")
	info, err := s.Stat(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != "k" || info.Size != 5 {
		t.Fatalf("stat = %+v", info)
	}
	if info.ModTime.Before(before) || info.ModTime.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("mod time %v not near now", info.ModTime)
	}
}

func testGetRange(t *testing.T, s storage.Store) {
	ctx := context.Background()
	put(t, s, "r", "0123456789")
	for _, tc := range []struct {
		name     string
		off, n   int64
		want     string
		wantFail bool
	}{
		{name: "middle", off: 2, n: 3, want: "234"},
		{name: "whole", off: 0, n: 10, want: "0123456789"},
		{name: "tail", off: 9, n: 1, want: "9"},
		{name: "empty", off: 4, n: 0, want: ""},
		{name: "past end", off: 8, n: 5, wantFail: true},
		{name: "beyond", off: 20, n: 1, wantFail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := s.GetRange(ctx, "r", tc.off, tc.n)
			var got []byte
			if err == nil {
				got, err = io.ReadAll(rc)
				rc.Close()
			}
			if tc.wantFail {
				if !errors.Is(err, storage.ErrCorrupt) {
					t.Fatalf("err = %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func testList(t *testing.T, s storage.Store) {
	ctx := context.Background()
	for _, k := range []string{"p/b", "p/a", "p/sub/c", "p-x", "pa/z", "q/1"} {
		put(t, s, k, k)
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"p/", []string{"p/a", "p/b", "p/sub/c"}},
		{"p", []string{"p-x", "p/a", "p/b", "p/sub/c", "pa/z"}},
		{"p/s", []string{"p/sub/c"}},
		{"", []string{"p-x", "p/a", "p/b", "p/sub/c", "pa/z", "q/1"}},
		{"none/", nil},
	} {
		t.Run("prefix="+tc.prefix, func(t *testing.T) {
			infos, err := storage.ListAll(ctx, s, tc.prefix)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, info := range infos {
				got = append(got, info.Key)
				if info.Size != int64(len(info.Key)) || info.ModTime.IsZero() {
					t.Errorf("%s: size %d mod %v", info.Key, info.Size, info.ModTime)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("list %q = %v, want %v", tc.prefix, got, tc.want)
			}
		})
	}
	// Breaking out of the iteration early must not hang or leak.
	for range s.List(ctx, "") {
		break
	}
}

func testDeleteBatch(t *testing.T, s storage.Store) {
	ctx := context.Background()
	put(t, s, "d/1", "x")
	put(t, s, "d/2", "y")
	keys := []string{"d/1", "d/absent", "d/2", "d/1", "../escape"}
	res := s.DeleteBatch(ctx, keys)
	if len(res) != len(keys) {
		t.Fatalf("%d results for %d keys", len(res), len(keys))
	}
	for i, r := range res {
		if r.Key != keys[i] {
			t.Fatalf("result %d is for %q, want %q", i, r.Key, keys[i])
		}
		wantErr := keys[i] == "../escape"
		if wantErr != (r.Err != nil) || (wantErr && !errors.Is(r.Err, storage.ErrInvalidKey)) {
			t.Fatalf("result %s: %v", r.Key, r.Err)
		}
	}
	if left, _ := storage.ListAll(ctx, s, "d/"); len(left) != 0 {
		t.Fatalf("left after delete: %v", left)
	}
}

func testDeleteBatchLarge(t *testing.T, s storage.Store) {
	ctx := context.Background()
	const n = storage.MaxDeleteBatch + 7
	keys := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("many/%05d", i)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := s.Put(ctx, keys[i], bytes.NewReader(nil), 0); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, r := range s.DeleteBatch(ctx, keys) {
		if r.Err != nil {
			t.Fatalf("%s: %v", r.Key, r.Err)
		}
	}
	if left, _ := storage.ListAll(ctx, s, "many/"); len(left) != 0 {
		t.Fatalf("%d objects left", len(left))
	}
}

func testInvalidKeys(t *testing.T, s storage.Store) {
	ctx := context.Background()
	for _, key := range []string{"", "/abs", "a/../b", "../up", "a//b", "dir/", "./a", "a\\b"} {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			if err := s.Put(ctx, key, strings.NewReader("x"), 1); !errors.Is(err, storage.ErrInvalidKey) {
				t.Errorf("put: %v", err)
			}
			if err := s.PutIfAbsent(ctx, key, strings.NewReader("x"), 1); !errors.Is(err, storage.ErrInvalidKey) {
				t.Errorf("put-if-absent: %v", err)
			}
			if _, err := s.Get(ctx, key); !errors.Is(err, storage.ErrInvalidKey) {
				t.Errorf("get: %v", err)
			}
			if _, err := s.Stat(ctx, key); !errors.Is(err, storage.ErrInvalidKey) {
				t.Errorf("stat: %v", err)
			}
		})
	}
}

func testCancelled(t *testing.T, s storage.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.PutIfAbsent(ctx, "c", strings.NewReader("x"), 1); !errors.Is(err, storage.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("put-if-absent on cancelled ctx: %v", err)
	}
	if _, err := s.Get(ctx, "c"); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("get on cancelled ctx: %v", err)
	}
}
