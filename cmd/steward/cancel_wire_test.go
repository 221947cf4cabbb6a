package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
)

// wireSession is a real `steward serve --framing ndjson` driven frame by frame, with a transcript.
type wireSession struct {
	p   *serveProc
	log strings.Builder
}

func (w *wireSession) send(id int, method string, params any) {
	w.p.t.Helper()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	fmt.Fprintf(&w.log, ">> %s\n", req)
	if _, err := fmt.Fprintf(w.p.in, "%s\n", req); err != nil {
		w.p.t.Fatalf("write: %v", err)
	}
}

// next reads the next frame.
func (w *wireSession) next() map[string]json.RawMessage {
	w.p.t.Helper()
	if !w.p.out.Scan() {
		w.p.t.Fatalf("no frame (%v)\n%s\n%s", w.p.out.Err(), w.log.String(), w.p.stderr)
	}
	fmt.Fprintf(&w.log, "<< %s\n", w.p.out.Text())
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(w.p.out.Bytes(), &msg); err != nil {
		w.p.t.Fatal(err)
	}
	return msg
}

// until reads frames until one satisfies ok, and returns it.
func (w *wireSession) until(ok func(map[string]json.RawMessage) bool) map[string]json.RawMessage {
	for {
		if m := w.next(); ok(m) {
			return m
		}
	}
}

// waitQueued polls metrics.get (kept out of the transcript) until n mutations are queued.
func (w *wireSession) waitQueued(n int) {
	w.p.t.Helper()
	want := fmt.Sprintf("steward_mutate_queue_depth %d\n", n)
	for id := 1000; ; id++ {
		if id > 1500 {
			w.p.t.Fatalf("queue depth never %d", n)
		}
		req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "metrics.get"})
		fmt.Fprintf(w.p.in, "%s\n", req)
		for w.p.out.Scan() {
			var msg struct {
				ID     int `json:"id"`
				Result struct {
					Text string `json:"text"`
				} `json:"result"`
			}
			if json.Unmarshal(w.p.out.Bytes(), &msg) == nil && msg.ID == id {
				if strings.Contains(msg.Result.Text, want) {
					return
				}
				break
			}
			fmt.Fprintf(&w.log, "<< %s\n", w.p.out.Text())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isID(id int) func(map[string]json.RawMessage) bool {
	return func(m map[string]json.RawMessage) bool { return string(m["id"]) == fmt.Sprint(id) }
}

func holdOf(inv string) func(map[string]json.RawMessage) bool {
	return func(m map[string]json.RawMessage) bool {
		return string(m["method"]) == `"$/progress"` && strings.Contains(string(m["params"]), `"invocation_id":"`+inv+`"`) &&
			strings.Contains(string(m["params"]), `"stage":"hold:`)
	}
}

// answers reads the next two responses and checks they are first the mutation's (id m), then the
// cancel's (id c): the cancel's reply follows the answer on the wire.
func (w *wireSession) answers(m, c int) (mutate, cancel map[string]json.RawMessage) {
	w.p.t.Helper()
	resp := func(msg map[string]json.RawMessage) bool { return msg["id"] != nil }
	first, second := w.until(resp), w.until(resp)
	if !isID(m)(first) || !isID(c)(second) {
		w.p.t.Fatalf("the cancel's reply (id %d) must follow the mutation's answer (id %d):\n%s", c, m, w.log.String())
	}
	return first, second
}

func field(t *testing.T, msg map[string]json.RawMessage, name string) string {
	t.Helper()
	var r map[string]json.RawMessage
	if err := json.Unmarshal(msg["result"], &r); err != nil {
		t.Fatalf("no result: %s", msg["error"])
	}
	return strings.Trim(string(r[name]), `"`)
}

// TestCancelOnTheWire speaks index.cancel to a real sidecar in ndjson: a queued mutation, a
// running one held before its commit, one held after its commit, a second cancel, and an id never
// seen. Each cancel's reply comes after its mutation's answer. The transcript is logged (it is
// docs/PROTOCOL.md §3.12's example).
func TestCancelOnTheWire(t *testing.T) {
	testenv.NeedRoot(t)
	parent := testbin.RandID("steward-test-")
	t.Cleanup(func() { testsidecar.CheckLeftovers(t, parent) })
	root := testenv.GuestDir(t)
	st, err := storage.OpenStore(context.Background(), storage.StoreConfig{Kind: storage.KindLocal, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dataset.Create(context.Background(), st, "events", dataset.NewGenerator(20000, 7), dataset.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &wireSession{p: startServe(t, nil, append(testsidecar.FastArgs(parent), "--executors", "1")...)}
	t.Cleanup(func() { t.Logf("transcript:\n%s", w.log.String()) })
	mutate := func(inv, index, fault string) map[string]any {
		p := map[string]any{"invocation_id": inv, "deadline_unix_ms": 0, "dataset": map[string]any{"store": map[string]any{"url": "file://" + root}, "path": "events"},
			"pinned_version": 1, "op": "CREATE", "index": map[string]any{"name": index, "columns": []string{"name"}, "type": "BTREE"}}
		if fault != "" {
			p["fault"] = fault
		}
		return p
	}
	deadline := func(p map[string]any) map[string]any {
		p["deadline_unix_ms"] = time.Now().Add(time.Minute).UnixMilli()
		return p
	}
	cancel := func(inv string) map[string]any { return map[string]any{"invocation_id": inv} }

	w.send(1, "index.mutate", deadline(mutate("inv-running", "by_name", "hold_before_commit")))
	w.until(holdOf("inv-running"))
	w.send(2, "index.mutate", deadline(mutate("inv-queued", "by_name_q", "")))
	w.waitQueued(1) // the one executor is busy: inv-queued waits in the queue
	w.send(3, "index.cancel", cancel("inv-queued"))
	m, c := w.answers(2, 3)
	if field(t, m, "code") != "-9" || field(t, m, "wall_ms") != "0" || field(t, c, "state") != "CANCELLED" || field(t, c, "outcome") != "NOT_COMMITTED" {
		t.Fatalf("queued:\n%s", w.log.String())
	}
	w.send(4, "index.cancel", cancel("inv-running"))
	m, c = w.answers(1, 4)
	if field(t, m, "code") != "-9" || field(t, m, "cancelled") != "true" || field(t, c, "outcome") != "NOT_COMMITTED" {
		t.Fatalf("running:\n%s", w.log.String())
	}
	w.send(5, "index.mutate", deadline(mutate("inv-landed", "by_name", "hold_after_commit")))
	w.until(holdOf("inv-landed"))
	w.send(6, "index.cancel", cancel("inv-landed"))
	m, c = w.answers(5, 6)
	if field(t, m, "phase") != "NATIVE_RETURN" || field(t, m, "committed_version") != "2" || field(t, c, "outcome") != "COMMITTED" {
		t.Fatalf("landed:\n%s", w.log.String())
	}
	w.send(7, "index.cancel", cancel("inv-landed"))
	if again := w.until(isID(7)); field(t, again, "state") != "CANCELLED" || field(t, again, "outcome") != "COMMITTED" {
		t.Fatalf("second cancel:\n%s", w.log.String())
	}
	w.send(8, "index.cancel", cancel("inv-never-sent"))
	if never := w.until(isID(8)); field(t, never, "state") != "UNKNOWN_INVOCATION" {
		t.Fatalf("unknown id:\n%s", w.log.String())
	}
}
