package testetcd

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestClusterSurvivesAMemberKill starts a real 3-member cluster, SIGKILLs one member (a quorum of
// two still commits), stops another (no quorum: writes time out) and brings both back.
func TestClusterSurvivesAMemberKill(t *testing.T) {
	c := Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// put retries until within passes: a request in flight while a leader dies times out.
	put := func(v string, within time.Duration) error {
		deadline := time.Now().Add(within)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := cli.Put(ctx, "k", v)
			cancel()
			if err == nil || time.Now().After(deadline) {
				return err
			}
		}
	}
	if err := put("1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	c.Members[0].Kill()
	if err := put("2", 20*time.Second); err != nil {
		t.Fatalf("two of three members: %v", err)
	}
	c.Members[1].Stop()
	if err := put("3", 2*time.Second); err == nil {
		t.Fatal("a write committed without a quorum")
	}
	for _, m := range c.Members[:2] {
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := put("4", 20*time.Second); err != nil {
		t.Fatalf("after the restarts: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := cli.Get(ctx, "k"); err != nil || string(r.Kvs[0].Value) != "4" {
		t.Fatalf("Get = %v, %v", r, err)
	}
}
