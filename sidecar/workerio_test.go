package sidecar

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage/gateway"
	"github.com/cba1309c/steward/storage/slot"
	"github.com/hashicorp/go-hclog"
)

// TestEngineText: an engine's text reaches the host printable and bounded: control characters
// and bidirectional overrides (a forged log line, a terminal escape, text that reads backwards)
// become spaces, invalid UTF-8 too, and a long text is cut on a rune boundary with "…".
func TestEngineText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain message", "plain message"},
		{"line\nforged {\"@level\":\"error\"}", "line forged {\"@level\":\"error\"}"},
		{"esc \x1b[31mred\x1b[0m", "esc  [31mred [0m"},
		{"bidi \u202Egnp.exe", "bidi  gnp.exe"},
		{"isolate \u2066x\u2069", "isolate  x "},
		{"bad \xff utf8", "bad   utf8"},
		{"nul\x00del\x7f", "nul del "},
	} {
		if got := engineText(tc.in, 1024); got != tc.want {
			t.Errorf("engineText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := strings.Repeat("é", 600) // 1200 bytes
	got := engineText(long, 1024)
	if !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || len(got) > 1024+len("…") || len(got) < 1020 {
		t.Fatalf("cut text: %d bytes, valid %v, %q…", len(got), utf8.ValidString(got), got[len(got)-8:])
	}
	if got := engineText("stage-name-that-is-long", 10); got != "stage-name…" {
		t.Fatalf("stage bound: %q", got)
	}
}

// TestConfirmedStandsOnStorage: the engine's account passes only where the gateway's record and
// storage agree (docs/ENGINE.md §4.2); every disagreement is INDETERMINATE -23 with no commit.
func TestConfirmedStandsOnStorage(t *testing.T) {
	s := &Server{}
	s.log = hclog.NewNullLogger()
	committed := rpc.MutateResult{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, CompletionReason: rpc.CompletionCommitted, CommittedVersion: 4}
	noop := rpc.MutateResult{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, CompletionReason: rpc.CompletionIfExistsNoop}
	failed := rpc.MutateResult{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeIO}
	lost := rpc.MutateResult{Phase: rpc.PhaseIndeterminate, Code: rpc.ReasonWorkerLost}
	yes, no, unknown := slot.Verdict{Outcome: slot.Committed}, slot.Verdict{Outcome: slot.NotCommitted}, slot.Verdict{Outcome: slot.Unknown}
	for _, tc := range []struct {
		name     string
		res      rpc.MutateResult
		ifExists bool
		v        slot.Verdict
		pass     bool
	}{
		{"commit confirmed", committed, false, yes, true},
		{"commit storage lacks", committed, false, no, false},
		{"commit storage cannot tell", committed, false, unknown, false},
		{"failure, nothing committed", failed, false, no, true},
		{"failure, storage holds its commit", failed, false, yes, false},
		{"failure, storage cannot tell", failed, false, unknown, false},
		{"no-op asked for", noop, true, no, true},
		{"no-op not asked for", noop, false, no, false},
		{"no-op, storage holds a commit", noop, true, yes, false},
		{"worker lost: storage decides later", lost, false, yes, true},
	} {
		j := &job{p: rpc.MutateParams{InvocationID: "inv", PinnedVersion: 3, IfExists: tc.ifExists}, admitted: admitted{eng: &engine{name: "x"}}}
		got := s.confirmed(j, tc.res, tc.v, nil)
		switch {
		case tc.pass && got != tc.res:
			t.Errorf("%s: changed to %+v", tc.name, got)
		case !tc.pass && (got.Phase != rpc.PhaseIndeterminate || got.Code != rpc.ReasonUnconfirmedCommit || got.CommittedVersion != 0 || got.CompletionReason != ""):
			t.Errorf("%s: %+v, want INDETERMINATE -23", tc.name, got)
		}
	}
	wrong := committed
	wrong.CommittedVersion = 9
	if got := s.confirmed(&job{p: rpc.MutateParams{InvocationID: "inv", PinnedVersion: 3}, admitted: admitted{eng: &engine{name: "x"}}}, wrong, yes, nil); got.Code != rpc.ReasonUnconfirmedCommit {
		t.Errorf("a commit claimed at another version: %+v", got)
	}
}

// TestDecideFromTheRecord: a gateway that saw no manifest, or refused it, decides NOT_COMMITTED
// without reading storage (the server here has no store at all).
func TestDecideFromTheRecord(t *testing.T) {
	s := &Server{}
	j := &job{p: rpc.MutateParams{InvocationID: "inv", PinnedVersion: 3}, admitted: admitted{eng: &engine{name: "x"}}}
	for _, st := range []gateway.SlotState{gateway.SlotNone, gateway.SlotRefused} {
		v, err := s.decide(j, gateway.Record{Slot: st})
		if err != nil || v.Outcome != slot.NotCommitted {
			t.Errorf("slot %s: %+v %v", st, v, err)
		}
	}
}

// TestAdmitLocalNamesPathAndFix: a file:// store the sidecar cannot serve is refused at receive
// with a typed error that names the path and the fix; a private (0700) directory is served.
func TestAdmitLocalNamesPathAndFix(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(dir, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		root string
		want error
		says string
	}{
		{filepath.Join(dir, "missing"), rpc.ErrInvalidParams, "does not exist: create it"},
		{file, rpc.ErrInvalidParams, "is not a directory"},
		{private, nil, ""},
	} {
		err := admitLocal(rpc.ParsedStore{Kind: rpc.StoreFile, Root: tc.root})
		if !errors.Is(err, tc.want) || tc.want != nil && (!strings.Contains(err.Error(), tc.root) || !strings.Contains(err.Error(), tc.says)) {
			t.Errorf("%s: %v, want %v saying %q", tc.root, err, tc.want, tc.says)
		}
	}
	if err := admitLocal(rpc.ParsedStore{Kind: rpc.StoreS3, Bucket: "bucket", Endpoint: "127.0.0.1:9"}); err != nil {
		t.Errorf("an s3 store is probed, not stat'ed: %v", err)
	}
}

// TestRedactForms: a secret is removed as it is and in the forms a writer turns it into.
func TestRedactForms(t *testing.T) {
	const sec = "s3cr3tKEY"
	for _, form := range []string{sec, "7333637233744b4559", "7333637233744B4559", "czNjcjN0S0VZ", "s 3 c r 3 t K E Y", "s-3-c-r-3-t-K-E-Y"} {
		msg := "before " + form + " after"
		if got := redact(msg, []string{sec}); strings.Contains(got, form) || !strings.Contains(got, "[redacted]") {
			t.Errorf("redact(%q) = %q", msg, got)
		}
	}
	if got := redact("s3cr3", []string{sec}); got != "s3cr3" {
		t.Errorf("a prefix of the secret was touched: %q", got)
	}
}
