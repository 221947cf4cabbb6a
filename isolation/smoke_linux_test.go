package isolation

import (
	"context"
	"testing"
)

func TestSmoke(t *testing.T) {
	needCgroups(t)
	for _, mode := range realModes(t) {
		t.Run(string(mode), func(t *testing.T) {
			s := newSupervisor(t, mode, nil)
			d, err := s.Start(context.Background(), Spec{Env: workerEnv("exit3")})
			if err != nil {
				t.Fatal(err)
			}
			o, err := d.Wait(context.Background())
			if err != nil || o.ExitCode != 3 {
				t.Fatalf("Wait = %+v, %v", o, err)
			}
			o, err = d.Terminate(context.Background())
			if err != nil || !o.AllReaped || o.Stage != "exited" {
				t.Fatalf("Terminate = %+v, %v", o, err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			t.Logf("report %+v", s.Report())
		})
	}
}
