package hostile_test

import (
	"encoding/json"
	"testing"

	"github.com/cba1309c/steward/internal/testing/hostile"
)

// TestParse: findings and the last line come back from stderr lines, whatever precedes the
// prefix; a line that is not a finding is ignored.
func TestParse(t *testing.T) {
	f := hostile.Finding{Attack: "ns.pid", Tried: "compare", Verdict: hostile.Blocked, Errno: "ENOENT", Left: []string{"/tmp/x"}}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	lines := []string{"noise", "2026 " + hostile.FindingPrefix + string(b), hostile.FindingPrefix + "{broken", hostile.DonePrefix + `{"findings":1}`}
	got, done := hostile.Parse(lines)
	if !done || len(got) != 1 || got[0].Attack != f.Attack || got[0].Verdict != f.Verdict || got[0].Errno != f.Errno || got[0].Left[0] != "/tmp/x" {
		t.Fatalf("Parse = %+v, %v", got, done)
	}
	if _, done := hostile.Parse(lines[:2]); done {
		t.Fatal("done without the last line")
	}
}

// TestDigest: a secret is named by a 16-hex prefix of its SHA-256, the same for the same secret.
func TestDigest(t *testing.T) {
	a, b := hostile.Digest("secret-a"), hostile.Digest("secret-b")
	if len(a) != 16 || a == b || a != hostile.Digest("secret-a") {
		t.Fatalf("digests %q %q", a, b)
	}
}
