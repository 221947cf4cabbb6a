package dispatch

import (
	"testing"
	"time"
)

// A job's own execute deadline replaces the configured one, in the journal and on the wire; a
// job without one gets the default.
func TestPerJobExecuteDeadline(t *testing.T) {
	noLeaks(t)
	e := newEnv(t, nil) // default ExecuteDeadline: one minute
	defer e.close()
	f := newFake()
	if err := e.d.AddSidecar("a", f); err != nil {
		t.Fatal(err)
	}
	short := fakeRequest("short")
	short.ExecuteDeadline = 7 * time.Second
	js := e.submit(short)
	jd := e.submit(fakeRequest("default"))
	for _, id := range []string{js.ID, jd.ID} {
		e.waitJob(id, "settled", settled)
	}
	f.mu.Lock()
	sends := append(f.sends[:0:0], f.sends...)
	f.mu.Unlock()
	if len(sends) != 2 {
		t.Fatalf("%d sends, want 2", len(sends))
	}
	for _, j := range []Job{e.job(js.ID), e.job(jd.ID)} {
		want := time.Minute
		if j.ID == js.ID {
			want = 7 * time.Second
		}
		var dispatched time.Time
		for _, h := range j.History {
			if h.Event == EventDispatch {
				dispatched = h.At
			}
		}
		if got := j.Deadline.Sub(dispatched); got < want-time.Second || got > want+time.Second {
			t.Errorf("job %s: journaled deadline %v after dispatch, want %v", j.Index.Name, got, want)
		}
		for _, p := range sends {
			if p.JobID == j.ID && time.UnixMilli(p.DeadlineUnixMs).Sub(j.Deadline).Abs() > time.Millisecond {
				t.Errorf("job %s: deadline on the wire %v differs from the journal %v", j.Index.Name, time.UnixMilli(p.DeadlineUnixMs), j.Deadline)
			}
		}
	}
	bad := fakeRequest("bad")
	bad.ExecuteDeadline = -time.Second
	if _, err := e.d.Submit(t.Context(), bad); err == nil {
		t.Fatal("a negative execute deadline was admitted")
	}
}
