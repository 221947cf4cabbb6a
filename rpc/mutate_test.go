package rpc_test

import (
	"testing"

	"github.com/cba1309c/steward/rpc"
)

// validMutate is a CREATE that passes Validate; cases change only its schema.
func validMutate(schemaType string) rpc.MutateParams {
	return rpc.MutateParams{
		InvocationID:   "inv-1",
		DeadlineUnixMs: 1,
		Dataset:        rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file:///d"}, Path: "p"},
		PinnedVersion:  1,
		Op:             rpc.OpCreate,
		Index:          rpc.IndexSpec{Name: "n", Columns: []string{"c"}, Type: rpc.IndexBTree},
		Schema:         []rpc.FieldContract{{Name: "c", Type: schemaType}},
	}
}

// TestSchemaFieldTypes: Validate accepts the schema types of docs/PROTOCOL.md §3.1 and refuses
// everything else. "7>" once passed: the vector branch ignored that the prefix was missing.
func TestSchemaFieldTypes(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  string
		ok   bool
	}{
		{"int64", rpc.FieldInt64, true},
		{"float64", rpc.FieldFloat64, true},
		{"string", rpc.FieldString, true},
		{"list of strings", rpc.FieldListString, true},
		{"vector of 1", "vector<float32,1>", true},
		{"vector of 128", "vector<float32,128>", true},
		{"vector of six digits", "vector<float32,999999>", true},

		{"digit and bracket without prefix", "7>", false},
		{"bracket alone", ">", false},
		{"digits alone", "128", false},
		{"empty", "", false},
		{"prefix cut short", "float32,8>", false},
		{"prefix without dimension", "vector<float32,", false},
		{"empty dimension", "vector<float32,>", false},
		{"zero dimension", "vector<float32,0>", false},
		{"leading zero", "vector<float32,08>", false},
		{"seven digits", "vector<float32,1000000>", false},
		{"negative dimension", "vector<float32,-1>", false},
		{"fractional dimension", "vector<float32,1.5>", false},
		{"space before dimension", "vector<float32, 8>", false},
		{"doubled bracket", "vector<float32,8>>", false},
		{"no closing bracket", "vector<float32,8", false},
		{"other element type", "vector<float64,8>", false},
		{"upper case", "VECTOR<float32,8>", false},
		{"upper case scalar", "Int64", false},
		{"list of ints", "list<int64>", false},
		{"trailing space", "int64 ", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validMutate(tc.typ).Validate()
			if tc.ok && err != nil {
				t.Fatalf("type %q refused: %v", tc.typ, err)
			}
			if !tc.ok && err == nil {
				t.Fatalf("type %q accepted", tc.typ)
			}
		})
	}
}

// TestOptimizeNamesTheIndexOnly: OPTIMIZE takes index.name and nothing else of the index, and
// neither if_not_exists nor if_exists (docs/PROTOCOL.md §3.1).
func TestOptimizeNamesTheIndexOnly(t *testing.T) {
	optimize := func(change func(*rpc.MutateParams)) rpc.MutateParams {
		p := validMutate(rpc.FieldInt64)
		p.Op, p.Index, p.Schema = rpc.OpOptimize, rpc.IndexSpec{Name: "n"}, nil
		change(&p)
		return p
	}
	for _, tc := range []struct {
		name   string
		change func(*rpc.MutateParams)
		ok     bool
	}{
		{"name only", func(*rpc.MutateParams) {}, true},
		{"with a schema contract", func(p *rpc.MutateParams) { p.Schema = []rpc.FieldContract{{Name: "c", Type: rpc.FieldInt64}} }, true},
		{"no name", func(p *rpc.MutateParams) { p.Index.Name = "" }, false},
		{"columns", func(p *rpc.MutateParams) { p.Index.Columns = []string{"c"} }, false},
		{"type", func(p *rpc.MutateParams) { p.Index.Type = rpc.IndexBTree }, false},
		{"params", func(p *rpc.MutateParams) { p.Index.Params = map[string]string{"k": "v"} }, false},
		{"if_not_exists", func(p *rpc.MutateParams) { p.IfNotExists = true }, false},
		{"if_exists", func(p *rpc.MutateParams) { p.IfExists = true }, false},
		{"lower case op", func(p *rpc.MutateParams) { p.Op = "optimize" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := optimize(tc.change).Validate()
			if tc.ok != (err == nil) {
				t.Fatalf("ok=%v, got %v", tc.ok, err)
			}
		})
	}
}

// TestMutationValidatesWithoutInvocation: a host checks a job's mutation before any invocation
// exists (no id, deadline or credentials yet); the params refuse what it lacks, and refuse what
// its mutation refuses.
func TestMutationValidatesWithoutInvocation(t *testing.T) {
	p := validMutate(rpc.FieldInt64)
	p.InvocationID, p.DeadlineUnixMs = "", 0
	if err := p.Mutation().Validate(); err != nil {
		t.Fatalf("a job's mutation without an invocation: %v", err)
	}
	if err := p.Validate(); err == nil {
		t.Fatal("params without invocation_id and deadline passed")
	}
	for name, edit := range map[string]func(*rpc.MutateParams){
		"relative store":  func(p *rpc.MutateParams) { p.Dataset.Store.URL = "file://d" },
		"pinned 0":        func(p *rpc.MutateParams) { p.PinnedVersion = 0 },
		"bad job id":      func(p *rpc.MutateParams) { p.JobID = "a b" },
		"unknown op":      func(p *rpc.MutateParams) { p.Op = "MERGE" },
		"negative limits": func(p *rpc.MutateParams) { p.Limits = &rpc.WorkerLimits{Pids: -1} },
	} {
		q := validMutate(rpc.FieldInt64)
		edit(&q)
		if q.Mutation().Validate() == nil || q.Validate() == nil {
			t.Errorf("%s: passed (mutation %v, params %v)", name, q.Mutation().Validate(), q.Validate())
		}
	}
}
