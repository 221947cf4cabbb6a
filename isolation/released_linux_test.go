package isolation

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperOrphanExits is a worker that starts one child and exits: the child reports once it has
// been re-parented (to the supervisor, a subreaper), then exits too, unreaped: the domain is
// left with no live task and one zombie nobody has seen.
func helperOrphanExits() {
	enter()
	spawn("exit-when-orphaned", strconv.Itoa(os.Getpid()), false) // its kind: the parent to outlive
	os.Exit(0)
}

// helperExitWhenOrphaned waits until its parent (the pid its kind names: it may be gone
// before this runs) is no longer its parent, reports and exits.
func helperExitWhenOrphaned() {
	parent, _ := strconv.Atoi(os.Getenv("STEWARD_TEST_KIND"))
	for os.Getppid() == parent {
		time.Sleep(time.Millisecond)
	}
	report("orphan")
	os.Exit(0)
}

func init() {
	helpers["orphan-exits"] = helperOrphanExits
	helpers["exit-when-orphaned"] = helperExitWhenOrphaned
}

// TestTeardownShortcutWaitsForZombies: a domain whose worker exited is final at once when its
// pids controller charges nothing (Terminate's shortcut), but an unreaped zombie of the domain
// is still charged: the shortcut must not be taken while one exists, and Terminate must reap it
// (where the mode can prove it the domain's: not in v1, as before the shortcut).
func TestTeardownShortcutWaitsForZombies(t *testing.T) {
	needCgroups(t)
	for _, mode := range realModes(t) {
		t.Run(string(mode), func(t *testing.T) {
			s := newSupervisor(t, mode, nil)
			d, read := startReporting(t, s, "orphan-exits", Spec{})
			orphan := read(1)[0].pid
			<-d.Done()
			waitFor(t, func() bool { st, err := readProcStat(orphan); return err == nil && st.state == 'Z' })
			if st, _ := readProcStat(orphan); st.ppid != os.Getpid() {
				t.Fatalf("the orphan's parent is %d, want this process (%d)", st.ppid, os.Getpid())
			}
			d.mu.Lock()
			gone := d.gone()
			d.mu.Unlock()
			if gone || d.cg.released() {
				t.Fatalf("a domain with an unreaped zombie (pid %d) counts as gone (released %v)", orphan, d.cg.released())
			}
			o, err := d.Terminate(context.Background())
			if err != nil || !o.AllReaped || o.Survivors != 0 {
				t.Fatalf("Terminate: %+v %v", o, err)
			}
			if st, err := readProcStat(orphan); err == nil && st.ppid == os.Getpid() {
				if mode != ModeV1 {
					t.Fatalf("zombie %d not reaped by Terminate (state %c)", orphan, st.state)
				}
				// v1 lists no zombie in the domain (its /proc/<pid>/cgroup reads "/"), so nothing
				// proves this one the domain's: reap it as the host would.
				if !d.cg.released() {
					fd, err := pidfdOpen(orphan)
					if err != nil {
						t.Fatal(err)
					}
					_, _, _ = pidfdReap(fd)
					unix.Close(fd)
				} else {
					t.Fatal("released while the domain's zombie is unreaped")
				}
			}
			if !d.cg.released() {
				t.Fatal("released is false once every process of the domain is reaped")
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReleaseTwiceClosesNothingOfOthers: CloseHolding's release closes the domain's counter
// files after the answer, once: called again, it must not close the descriptors their numbers
// were given to since.
func TestReleaseTwiceClosesNothingOfOthers(t *testing.T) {
	needCgroups(t)
	s := newSupervisor(t, realModes(t)[0], nil)
	d, err := s.Start(context.Background(), Spec{Env: workerEnv("noop")})
	if err != nil {
		t.Fatal(err)
	}
	<-d.Done()
	var fds []int
	for i := range nCounters {
		if d.cg.cnt.open[i] {
			fds = append(fds, d.cg.cnt.fds[i])
		}
	}
	if len(fds) != int(nCounters) {
		t.Fatalf("%d of %d counters open", len(fds), nCounters)
	}
	release, err := d.CloseHolding()
	if err != nil {
		t.Fatal(err)
	}
	release()
	// The lowest free numbers are the ones just closed: these opens take them again.
	var reused []*os.File
	for range fds {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		reused = append(reused, f)
	}
	release()
	for _, f := range reused {
		if _, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil {
			t.Fatalf("descriptor %d, opened after the first release, closed by the second: %v", f.Fd(), err)
		}
	}
}
