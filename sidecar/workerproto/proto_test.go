package workerproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/cba1309c/steward/rpc"
)

func TestRoundTripAndBounds(t *testing.T) {
	var buf bytes.Buffer
	frames := []*Frame{
		{T: TypeHello, Pid: 7, Engine: &Engine{Name: "x", Protocol: 1, IndexTypes: []string{"BTREE"}, Settle: SettleFence}},
		{T: TypeProgress, Stage: "build", Done: 1, Total: 2},
		{T: TypeReserve, Seq: 1, Keys: []string{"a"}},
		{T: TypeReserve, Seq: 2, Prefixes: []string{"ds/_indices/u/"}},
		{T: TypeResult, Result: &Result{Phase: rpc.PhaseNativeReturn, Code: 8, ObservedLatest: 3}},
	}
	for _, f := range frames {
		if err := Write(&buf, f, MaxWorkerFrame); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range frames {
		got, err := Read(&buf, MaxWorkerFrame)
		if err != nil || got.T != want.T {
			t.Fatalf("read %v: %+v", err, got)
		}
	}
	if _, err := Read(&buf, MaxWorkerFrame); !errors.Is(err, io.EOF) {
		t.Fatalf("want EOF at the end, got %v", err)
	}
	big := &Frame{T: TypeReserve, Seq: 1, Keys: []string{string(bytes.Repeat([]byte("k"), 2*MaxWorkerFrame))}}
	if err := Write(&buf, big, MaxWorkerFrame); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized write: %v", err)
	}
	for name, raw := range map[string][]byte{
		"oversized header":      {0xff, 0xff, 0xff, 0xff},
		"zero length":           {0, 0, 0, 0},
		"truncated body":        {0, 0, 0, 9, '{'},
		"bad json":              append([]byte{0, 0, 0, 3}, "{x}"...),
		"unknown type":          append([]byte{0, 0, 0, 10}, `{"t":"zz"}`...),
		"hello without engine":  append([]byte{0, 0, 0, 21}, `{"t":"hello","pid":1}`...),
		"prefix without slash":  append([]byte{0, 0, 0, 38}, `{"t":"reserve","seq":1,"prefixes":["a"]}`[:38]...),
		"key ending in slash":   append([]byte{0, 0, 0, 36}, `{"t":"reserve","seq":1,"keys":["a/"]}`[:36]...),
		"settled (gone)":        append([]byte{0, 0, 0, 38}, `{"t":"settled","settled":{"outcome":"X"}}`[:38]...),
		"settle request (gone)": append([]byte{0, 0, 0, 42}, `{"t":"request","kind":"settle","request":{}}`[:42]...),
		"request kind":          append([]byte{0, 0, 0, 37}, `{"t":"request","kind":"x","request":{}}`[:37]...),
		"native < 0":            append([]byte{0, 0, 0, 50}, `{"t":"result","result":{"phase":"NATIVE_RETURN","code":-1}}`[:50]...),
	} {
		_, err := Read(bytes.NewReader(raw), MaxWorkerFrame)
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
			t.Errorf("%s: want a typed error, got %v", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"t":"hello","pid":1,"engine":{"name":"x","protocol":1,"index_types":["BTREE"],"settle":"fence"}}`))
	f.Add([]byte(`{"t":"reserve","seq":1,"prefixes":["a/b/"]}`))
	f.Add([]byte(`{"t":"settled","settled":{"outcome":"UNKNOWN","version":2,"holder":{}}}`))
	f.Add([]byte(`{"t":"request","kind":"settle","request":{"invocation_id":"x"}}`))
	f.Add([]byte(`{"t":"result","result":{"phase":"NATIVE_RETURN","code":0}}`))
	f.Add([]byte(`{"t":"reserve","seq":1,"keys":["a","b"]}`))
	f.Add([]byte(`{"t":"request","request":{"invocation_id":"x"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		fr, err := Decode(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if err := fr.Validate(); err != nil {
			t.Fatalf("decoded frame fails validation: %v", err)
		}
		if fr.T == TypeRequest {
			// A request body that validated decodes as a mutation, or fails with a typed error.
			if _, err := fr.Mutate(); err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("untyped mutate error %v", err)
			}
		}
		if fr.Engine != nil {
			_ = fr.Engine.Check()
		}
	})
}

func TestEngineCheck(t *testing.T) {
	good := Engine{Name: "lance", Protocol: 1, IndexTypes: []string{"BTREE", "IVF_PQ"}, Settle: SettleClaimFence}
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Engine){
		"protocol 2":     func(e *Engine) { e.Protocol = 2 },
		"settle unknown": func(e *Engine) { e.Settle = "maybe" },
		"no types":       func(e *Engine) { e.IndexTypes = nil },
		"lower case":     func(e *Engine) { e.IndexTypes = []string{"btree"} },
	} {
		e := good
		mut(&e)
		if err := e.Check(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for s, want := range map[string]bool{"lance": true, "a-b_9": true, "": false, "Lance": false, "a b": false, "x234567890123456789012345678901234": false} {
		if ValidEngineName(s) != want {
			t.Errorf("ValidEngineName(%q) != %v", s, want)
		}
	}
}

func TestRequestKinds(t *testing.T) {
	for _, kind := range []string{"", KindMutate} {
		f, err := NewRequest(kind, &MutateRequest{InvocationID: "m", TempDir: "/tmp/x"})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := Write(&buf, f, MaxRequestFrame); err != nil {
			t.Fatal(err)
		}
		got, err := Read(&buf, MaxRequestFrame)
		if err != nil {
			t.Fatal(err)
		}
		mr, err := got.Mutate()
		if err != nil || mr.InvocationID != "m" || mr.TempDir != "/tmp/x" {
			t.Errorf("kind %q: mutate %+v %v", kind, mr, err)
		}
	}
	if _, err := (&Frame{T: TypeRequest, Kind: "settle", Request: []byte(`{}`)}).Mutate(); !errors.Is(err, ErrMalformed) {
		t.Errorf("a settle request decoded as mutate: %v", err)
	}
}

// TestResultIndexUUID: an index_uuid is a folder name engines choose (a UUID), never a path, a
// control character or an unbounded string: anything else makes the result malformed.
func TestResultIndexUUID(t *testing.T) {
	for u, ok := range map[string]bool{
		"b13a4387-7066-4efd-a07e-641430e3d48b": true, "toy-x_1.2": true, "": true, "A": true,
		"../x": false, "a/b": false, "x\n": false, "-lead": false, ".hidden": false, strings.Repeat("a", 65): false,
		"caf\u00e9": false,
	} {
		f := &Frame{T: TypeResult, Result: &Result{Phase: rpc.PhaseNativeReturn, IndexUUID: u}}
		if err := f.Validate(); (err == nil) != ok {
			t.Errorf("index_uuid %q: %v, want ok=%v", u, err, ok)
		}
	}
}

// TestMutateRequestJSONIsTheParams: the worker's request type writes, byte for byte, what the
// sidecar wrote when the request was the index.mutate params themselves (engine left out) plus
// temp_dir: docs/ENGINE.md §4.1's engines read it unchanged.
func TestMutateRequestJSONIsTheParams(t *testing.T) {
	p := rpc.MutateParams{
		InvocationID: "inv", JobID: "job", DeadlineUnixMs: 1700000000000, PinnedVersion: 3, Op: rpc.OpCreate,
		Dataset:     rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://b"}, Path: "ds"},
		Index:       rpc.IndexSpec{Name: "ix", Columns: []string{"c"}, Type: rpc.IndexBTree, Params: map[string]string{"k": "v"}},
		IfNotExists: true, IfExists: true, Schema: []rpc.FieldContract{{Name: "c", Type: rpc.FieldInt64}},
		Credentials: &rpc.Credentials{AccessKey: "a", SecretKey: "s"}, Limits: &rpc.WorkerLimits{MemoryBytes: 1, Pids: 2},
		Fault: "hang", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		Segment: &rpc.SegmentSpec{},
	}
	gw := rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://steward", Endpoint: "127.0.0.1:7480", Region: "us-east-1"}, Path: "ds"}
	key := &rpc.Credentials{AccessKey: "GA", SecretKey: "GS"}
	for _, engine := range []string{"", "lance"} {
		p.Engine = engine
		old := p
		old.Dataset, old.Credentials, old.Engine = gw, key, ""
		want, err := json.Marshal(struct {
			rpc.MutateParams
			TempDir string `json:"temp_dir,omitempty"`
		}{old, "/tmp/x"})
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(NewMutateRequest(p, gw, key, "/tmp/x"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("engine %q:\n got %s\nwant %s", engine, got, want)
		}
	}
}
