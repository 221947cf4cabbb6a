package hostile

import "testing"

// TestIDMapHost: ids map through /proc/self/uid_map ranges; an id outside them is unmapped; only
// the full identity map is the initial namespace's.
func TestIDMapHost(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       idMap
		id      uint64
		host    uint64
		mapped  bool
		initial bool
	}{
		{"initial namespace", idMap{{0, 0, 4294967295}}, 1, 1, true, true},
		{"root to a guest uid", idMap{{0, 100000, 1}}, 0, 100000, true, false},
		{"unmapped", idMap{{0, 100000, 1}}, 1, 0, false, false},
		{"second range", idMap{{0, 100000, 1}, {1, 200000, 10}}, 5, 200004, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ok := tc.m.host(tc.id)
			if h != tc.host || ok != tc.mapped || tc.m.initial() != tc.initial {
				t.Fatalf("host(%d) = %d, %v; initial %v", tc.id, h, ok, tc.m.initial())
			}
		})
	}
	if got := nsID("net:[4026531833]"); got != "4026531833" {
		t.Fatalf("nsID = %q", got)
	}
}
