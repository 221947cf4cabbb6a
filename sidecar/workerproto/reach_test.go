package workerproto

import (
	"slices"
	"testing"

	"github.com/cba1309c/steward/rpc"
)

func TestReach(t *testing.T) {
	tests := []struct {
		name    string
		ds      rpc.DatasetRef
		network bool
		read    []string
		write   []string
		mount   []string
		connect []uint16
	}{
		{"file store: no network, the dataset and the staging dir writable below the root's mount",
			rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file:///srv/lake"}, Path: "wh/events"}, false,
			[]string{"/srv/lake"}, []string{"/srv/lake/wh/events", "/srv/lake/.steward-tmp"}, []string{"/srv/lake"}, nil},
		{"s3 with a port", rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://bucket/p", Endpoint: "127.0.0.1:9000"}, Path: "ds"}, true,
			nil, nil, nil, []uint16{9000}},
		{"s3 https without a port", rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://bucket", Endpoint: "s3.example", Secure: true}, Path: "ds"}, true,
			nil, nil, nil, []uint16{443}},
		{"s3 http without a port", rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://bucket", Endpoint: "s3.example"}, Path: "ds"}, true,
			nil, nil, nil, []uint16{80}},
		{"a store that does not parse reaches nothing", rpc.DatasetRef{Store: rpc.StoreSpec{URL: "ftp://x"}, Path: "ds"}, false,
			nil, nil, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			network, p := Reach(tc.ds)
			if network != tc.network || !slices.Equal(p.Read, tc.read) || !slices.Equal(p.Write, tc.write) ||
				!slices.Equal(p.Mount, tc.mount) || !slices.Equal(p.Connect, tc.connect) || p.Exec != nil {
				t.Fatalf("Reach = %v, %+v", network, p)
			}
		})
	}
}

func TestEngineReach(t *testing.T) {
	p := EngineReach([]string{"/opt/lance/venv/bin/python", "-B", "/opt/lance/engine.py", "relative/arg"})
	if want := []string{"/opt/lance/venv", "/opt/lance"}; !slices.Equal(p.Read, want) {
		t.Fatalf("Read = %v, want %v", p.Read, want)
	}
	if p.Exec == nil {
		t.Fatal("an engine's Exec is nil: the system's trees would stay executable")
	}
	if b := EngineReach(nil); b.Exec != nil || b.Read != nil {
		t.Fatalf("the built-in engine: %+v", b)
	}
}
