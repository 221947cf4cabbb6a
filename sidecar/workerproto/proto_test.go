package workerproto

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/cba1309c/steward/rpc"
)

func TestRoundTripAndBounds(t *testing.T) {
	var buf bytes.Buffer
	frames := []*Frame{
		{T: TypeHello, Pid: 7},
		{T: TypeProgress, Stage: "build", Done: 1, Total: 2},
		{T: TypeReserve, Seq: 1, Keys: []string{"a"}},
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
		"oversized header": {0xff, 0xff, 0xff, 0xff},
		"zero length":      {0, 0, 0, 0},
		"truncated body":   {0, 0, 0, 9, '{'},
		"bad json":         append([]byte{0, 0, 0, 3}, "{x}"...),
		"unknown type":     append([]byte{0, 0, 0, 10}, `{"t":"zz"}`...),
		"native < 0":       append([]byte{0, 0, 0, 50}, `{"t":"result","result":{"phase":"NATIVE_RETURN","code":-1}}`[:50]...),
	} {
		_, err := Read(bytes.NewReader(raw), MaxWorkerFrame)
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
			t.Errorf("%s: want a typed error, got %v", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"t":"hello","pid":1}`))
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
	})
}
