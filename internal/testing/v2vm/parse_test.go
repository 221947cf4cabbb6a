package v2vm

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		console string
		kernel  string
		steps   []StepResult
		done    bool
	}{
		{name: "a whole run, the first marker behind SeaBIOS's escapes",
			console: "SeaBIOS\r\n\x1bc\x1b[?7l\x1b[2Jv2vm: kernel 6.1.0-57-cloud-amd64\r\nv2vm: controllers memory pids\r\n" +
				"v2vm: begin a\r\nline 1\r\n[ 1.0] kernel says\r\nv2vm: end a exit 0 ms 1500\r\n" +
				"v2vm: begin b\r\nv2vm: end b exit 3 ms 7\r\nv2vm: done\r\n",
			kernel: "6.1.0-57-cloud-amd64",
			steps: []StepResult{{Name: "a", Took: 1500 * time.Millisecond, Lines: []string{"line 1", "[ 1.0] kernel says"}},
				{Name: "b", Exit: 3, Took: 7 * time.Millisecond}},
			done: true},
		{name: "cut off inside a step",
			console: "v2vm: kernel k\nv2vm: begin a\nhalf",
			kernel:  "k", steps: []StepResult{{Name: "a", Lines: []string{"half"}}}},
		{name: "an end of another step is output, not an end",
			console: "v2vm: kernel k\nv2vm: begin a\nv2vm: end b exit 0 ms 1\nv2vm: end a exit 1 ms 2\nv2vm: done\n",
			kernel:  "k", steps: []StepResult{{Name: "a", Exit: 1, Took: 2 * time.Millisecond, Lines: []string{"v2vm: end b exit 0 ms 1"}}}, done: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := parse(strings.NewReader(tc.console), time.Now())
			if r.Kernel != tc.kernel || r.Done != tc.done || len(r.Steps) != len(tc.steps) {
				t.Fatalf("parsed %+v", r)
			}
			for i, s := range r.Steps {
				w := tc.steps[i]
				if s.Name != w.Name || s.Exit != w.Exit || s.Took != w.Took || strings.Join(s.Lines, "|") != strings.Join(w.Lines, "|") {
					t.Errorf("step %d: %+v, want %+v", i, s, w)
				}
			}
		})
	}
}

// FuzzParse: any console parses, and every step it reports was begun by a marker naming it.
func FuzzParse(f *testing.F) {
	f.Add("v2vm: kernel k\nv2vm: begin a\nx\nv2vm: end a exit 0 ms 1\nv2vm: done\n")
	f.Add("v2vm: begin \nv2vm: end  exit -1 ms 99999999999999999999\n")
	f.Fuzz(func(t *testing.T, console string) {
		r := parse(strings.NewReader(console), time.Now())
		for _, s := range r.Steps {
			if !strings.Contains(console, "v2vm: begin "+s.Name) {
				t.Fatalf("step %q was never begun", s.Name)
			}
		}
		if r.Done && !strings.Contains(console, "v2vm: done") {
			t.Fatal("done without the marker")
		}
	})
}

// TestPanickedBeforeInit: only a kernel that died before the guest's first marker is booted again.
func TestPanickedBeforeInit(t *testing.T) {
	for _, tc := range []struct {
		console string
		want    bool
	}{
		{"SeaBIOS\n[    2.143939] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n[    2.149628] Kernel panic - not syncing: Fatal exception in interrupt\n", true},
		{"SeaBIOS\nv2vm: kernel 6.12\nv2vm: begin a\n[   9.1] Kernel panic - not syncing: Attempted to kill init!\n", false},
		{"SeaBIOS\nBooting from ROM...\n", false}, // stopped without a panic: not the emulator's known fault
	} {
		r := parse(strings.NewReader(tc.console), time.Now())
		if got := panickedBeforeInit(r); got != tc.want {
			t.Errorf("panickedBeforeInit(%q) = %v, want %v", tc.console, got, tc.want)
		}
	}
	r := parse(strings.NewReader("x\n[ 2.1] Oops: int3: 0000 [#1]\n[ 2.2] Kernel panic - not syncing\n"), time.Now())
	if l := panicLine(r.Console); !strings.Contains(l, "Oops: int3") {
		t.Errorf("panicLine = %q, want the first Oops line", l)
	}
}
