package ledger_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/ledger"
)

// The helper process is this test binary re-run with helperEnv set: it opens the journal,
// and 8 workers loop reserve → print "reserved <key>" → upload, until the parent SIGKILLs it.
const helperEnv = "LEDGER_TEST_HELPER"

func helperMain() {
	ctx := context.Background()
	cfg := storage.StoreConfig{Kind: storage.KindS3, Endpoint: os.Getenv("LEDGER_S3_ENDPOINT"),
		Bucket: os.Getenv("LEDGER_S3_BUCKET"), AccessKey: os.Getenv("LEDGER_S3_ACCESS"), SecretKey: os.Getenv("LEDGER_S3_SECRET")}
	s, err := storage.OpenStore(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	l, err := ledger.Open(ctx, ledger.Config{Path: os.Getenv(helperEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				owner := ledger.Owner{Kind: ledger.Invocation, ID: fmt.Sprintf("w%d-%d", w, i/4)}
				key := fmt.Sprintf("up/w%d/%06d", w, i)
				if err := l.Reserve(ctx, owner, "m", []string{key}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintf(out, "reserved %s\n", key)
				out.Flush()
				mu.Unlock()
				if err := s.Put(ctx, key, strings.NewReader(key), int64(len(key))); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(4)
				}
				if i%4 == 3 && w%2 == 0 { // half the workers finish their invocations
					_ = l.Accept(ctx, owner, "m", nil)
				}
			}
		}()
	}
	wg.Wait()
}

// A sidecar SIGKILLed while workers upload: every reservation it reported is in the journal
// after restart, and after recovery (every invocation NOT_COMMITTED, as nothing published a
// manifest) the bucket holds no object that no ticket owns — none at all once cleanup ends.
func TestSIGKILLDurability(t *testing.T) {
	s := minioStore(t)
	path := t.TempDir() + "/ledger.db"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	srvEnv := []string{helperEnv + "=" + path, "LEDGER_S3_BUCKET=" + s.Bucket()}
	cmd.Env = append(os.Environ(), append(srvEnv, s3Env(t)...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reported := map[string]bool{}
	sc := bufio.NewScanner(stdout)
	for len(reported) < 300 && sc.Scan() {
		if k, ok := strings.CutPrefix(sc.Text(), "reserved "); ok {
			reported[k] = true
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() { // lines already in the pipe were reserved too
		if k, ok := strings.CutPrefix(sc.Text(), "reserved "); ok {
			reported[k] = true
		}
	}
	_ = cmd.Wait()
	if len(reported) < 300 {
		t.Fatalf("helper reported %d reservations: %s", len(reported), stderr.String())
	}

	ctx := context.Background()
	cfg := ledger.Config{Path: path, RetryWait: 50 * time.Millisecond, Stores: stores(map[string]storage.Store{"m": s})}
	l := openLedger(t, cfg, false)
	held := map[string]bool{}
	owners, _ := l.Owners(ctx)
	for _, o := range owners {
		tk, _ := l.Tickets(ctx, o.Owner)
		for _, x := range tk {
			held[x.Key] = true
		}
	}
	// Every uploaded object is ticketed (reserved before upload) unless its owner accepted it
	// (only even workers accept).
	for k := range present(t, s, "up/") {
		if !held[k] && oddWorker(k) {
			t.Errorf("object %s in the bucket without a ticket", k)
		}
	}
	// Odd workers never accept: every reservation they reported must have survived.
	for k := range reported {
		if oddWorker(k) && !held[k] {
			t.Errorf("reservation of %s reported before SIGKILL, missing after restart", k)
		}
	}
	t.Logf("reported %d reservations, %d tickets after restart across %d owners", len(reported), len(held), len(owners))

	settled := 0
	rep, err := l.Recover(ctx, func(ctx context.Context, o ledger.Owner, _ []byte) (ledger.Verdict, error) {
		settled++
		return ledger.NotCommitted, nil
	})
	if err != nil || rep.Abandoned != len(owners) || settled != len(owners) {
		t.Fatalf("recover: %+v, %v", rep, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := l.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	for k := range present(t, s, "up/") {
		if oddWorker(k) {
			t.Errorf("orphan %s survived recovery", k)
		}
	}
}

func s3Env(t *testing.T) []string {
	t.Helper()
	srv := sharedServer(t)
	return []string{"LEDGER_S3_ENDPOINT=" + srv.Endpoint, "LEDGER_S3_ACCESS=" + srv.AccessKey, "LEDGER_S3_SECRET=" + srv.SecretKey}
}

// oddWorker reports whether key "up/w<d>/..." came from a worker that never accepts.
func oddWorker(key string) bool { return (key[len("up/w")]-'0')%2 == 1 }
