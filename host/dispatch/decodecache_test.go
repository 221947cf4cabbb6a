package dispatch

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// fillAll sets every field reachable from v (a settable value) to a value that is not zero and
// survives JSON: each pointer points at a filled value, each slice holds two filled elements,
// each map one filled entry. A kind it does not know fails the test, so a field of a new kind
// is noticed rather than skipped.
func fillAll(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(7.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillAll(t, v.Elem(), path)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fillAll(t, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillAll(t, k, path+"{k}")
		fillAll(t, e, path+"{v}")
		v.SetMapIndex(k, e)
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() || f.Tag.Get("json") == "-" {
				t.Fatalf("%s.%s: a field JSON does not store; extend fillAll", path, f.Name)
			}
			fillAll(t, v.Field(i), path+"."+f.Name)
		}
	default:
		t.Fatalf("%s: kind %s; extend fillAll and Job.clone", path, v.Kind())
	}
}

// changeAll changes every value reachable from v in place, writing through every pointer, slice
// and map (never replacing them), so that a copy sharing any of them with v sees a change.
func changeAll(v reflect.Value) {
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(v.Interface().(time.Time).Add(time.Hour)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "!")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(v.Float() + 1)
	case reflect.Pointer:
		if !v.IsNil() {
			changeAll(v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			changeAll(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			changeAll(e)
			v.SetMapIndex(k, e)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			changeAll(v.Field(i))
		}
	}
}

// filledJob is a job with every field set (fillAll), active (its slot held) and named id.
func filledJob(t *testing.T, id string) Job {
	var j Job
	fillAll(t, reflect.ValueOf(&j).Elem(), "Job")
	j.ID, j.Parent, j.SlotHeld = id, "", true
	return j
}

// TestCloneSharesNothing: a clone and its job share no slice, map or pointer, for every field of
// Job and of the types it holds, a field added later included.
func TestCloneSharesNothing(t *testing.T) {
	j := filledJob(t, "a")
	want := filledJob(t, "a")
	c := j.clone()
	if !reflect.DeepEqual(c, j) {
		t.Fatalf("clone differs from its job:\n%+v\n%+v", c, j)
	}
	changeAll(reflect.ValueOf(&c).Elem())
	if !reflect.DeepEqual(j, want) {
		t.Fatalf("changing the clone changed its job:\n%+v\nwant\n%+v", j, want)
	}
	if reflect.DeepEqual(c, want) {
		t.Fatal("changeAll changed nothing")
	}
}

// readPaths are the ways a Tx hands out a job, each returning job id as read in a new View.
var readPaths = []struct {
	name string
	read func(s Store, id string) (Job, error)
}{
	{"Get", func(s Store, id string) (Job, error) { return Get(s, id) }},
	{"Active", func(s Store, id string) (Job, error) { return findIn(s, id, true) }},
	{"All", func(s Store, id string) (Job, error) { return findIn(s, id, false) }},
}

func findIn(s Store, id string, active bool) (Job, error) {
	var found *Job
	err := s.View(func(tx Tx) error {
		each := tx.All
		if active {
			each = tx.Active
		}
		return each(func(j Job) error {
			if j.ID == id {
				found = &j
			}
			return nil
		})
	})
	if err == nil && found == nil {
		err = fmt.Errorf("%w: %s (active only: %t)", ErrNotFound, id, active)
	}
	if err != nil {
		return Job{}, err
	}
	return *found, nil
}

// storeCache is the decode cache of a store under the contract suite.
func storeCache(s Store) *decodeCache {
	switch s := s.(type) {
	case *BoltStore:
		return s.cache
	case *EtcdStore:
		return s.cache
	}
	return nil
}

// cachedKeys lists the keys the cache holds (for bbolt the job ids; for etcd the record keys,
// reduced to their last two parts, e.g. "active/a").
func cachedKeys(c *decodeCache) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k := range c.entries {
		parts := strings.Split(k, "/")
		if len(parts) > 1 {
			k = strings.Join(parts[len(parts)-2:], "/")
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// cacheContract is the part of the store contract about the decode cache (decodecache.go): a
// read never returns a record older than the stored one, and never one a caller changed.
var cacheContract = []struct {
	name string
	run  func(t *testing.T, s Store, another func() Store)
}{
	{"a job read shares nothing with what the store keeps", func(t *testing.T, s Store, _ func() Store) {
		j := filledJob(t, "a")
		mustUpdate(t, s, func(tx Tx) error { return tx.Put(&j) })
		want := filledJob(t, "a") // shares nothing with j, nor with anything read
		for _, changed := range readPaths {
			got, err := changed.read(s, "a")
			if err != nil {
				t.Fatalf("%s: %v", changed.name, err)
			}
			changeAll(reflect.ValueOf(&got).Elem())
			for _, p := range readPaths {
				if again, err := p.read(s, "a"); err != nil || !reflect.DeepEqual(again, want) {
					t.Fatalf("after changing a job %s returned, %s returns\n%+v, %v\nwant\n%+v", changed.name, p.name, again, err, want)
				}
			}
		}
	}},
	{"within an update, a job put or read shares nothing with the pending write", func(t *testing.T, s Store, _ func() Store) {
		want := filledJob(t, "a")
		mustUpdate(t, s, func(tx Tx) error {
			j := filledJob(t, "a")
			if err := tx.Put(&j); err != nil {
				return err
			}
			changeAll(reflect.ValueOf(&j).Elem()) // the job given to Put
			got, err := tx.Get("a")
			if err != nil || !reflect.DeepEqual(got, want) {
				return fmt.Errorf("Get after changing the job put: %+v, %v", got, err)
			}
			changeAll(reflect.ValueOf(&got).Elem()) // a job Get returned
			return tx.Active(func(j Job) error {
				if !reflect.DeepEqual(j, want) {
					return fmt.Errorf("Active after changing a job Get returned: %+v", j)
				}
				changeAll(reflect.ValueOf(&j).Elem())
				return nil
			})
		})
		for _, p := range readPaths {
			if got, err := p.read(s, "a"); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s after the update: %+v, %v", p.name, got, err)
			}
		}
	}},
	{"a record changed through another handle is read anew", func(t *testing.T, s Store, another func() Store) {
		o := another()
		j := contractJob("a", StatePending)
		mustUpdate(t, s, func(tx Tx) error { return tx.Put(&j) })
		for i, st := range []State{StateRunning, StateUnknown, StatePending} {
			w, r := s, o // written through one handle, read through the other, then the reverse
			if i%2 == 1 {
				w, r = o, s
			}
			for _, p := range readPaths { // the reader holds the old record decoded
				if got, err := p.read(r, "a"); err != nil || got.State == st {
					t.Fatalf("%s before the change: %s, %v", p.name, got.State, err)
				}
			}
			mustUpdate(t, w, func(tx Tx) error {
				j, err := tx.Get("a")
				if err != nil {
					return err
				}
				j.State = st
				j.record(time.Now(), EventStep, StatePending, fmt.Sprint("change ", i))
				return tx.Put(&j)
			})
			for _, p := range readPaths {
				if got, err := p.read(r, "a"); err != nil || got.State != st || len(got.History) != i+2 {
					t.Fatalf("%s after the change to %s: %s with %d entries, %v", p.name, st, got.State, len(got.History), err)
				}
			}
		}
	}},
	{"a job made inactive or deleted leaves the active jobs and the cache", func(t *testing.T, s Store, another func() Store) {
		o := another()
		a, b := contractJob("a", StatePending), contractJob("b", StatePending)
		mustUpdate(t, s, func(tx Tx) error { return errors.Join(tx.Put(&a), tx.Put(&b)) })
		if got := ids(t, o, true); got != "a b" {
			t.Fatalf("active = %q", got)
		}
		mustUpdate(t, s, func(tx Tx) error {
			b.State, b.SlotHeld = StateCommitted, false
			return errors.Join(tx.Delete("a"), tx.Put(&b))
		})
		if got := ids(t, o, true); got != "" {
			t.Fatalf("active after a delete and a commit = %q", got)
		}
		if got, err := Get(o, "b"); err != nil || got.State != StateCommitted {
			t.Fatalf("Get b = %s, %v", got.State, err)
		}
		if _, err := Get(o, "a"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get a after its delete = %v", err)
		}
		if got := ids(t, o, true); got != "" { // a full read sweeps b, which Get put back
			t.Fatalf("active = %q", got)
		}
		if got := cachedKeys(storeCache(o)); got != "" {
			t.Fatalf("the cache holds %q with no job active", got)
		}
		mustUpdate(t, s, func(tx Tx) error { return tx.Put(&a) }) // the very record deleted above
		if got := ids(t, o, true); got != "a" {
			t.Fatalf("active after a's return = %q", got)
		}
	}},
	{"a failed update leaves nothing in later reads", func(t *testing.T, s Store, _ func() Store) {
		a := contractJob("a", StatePending)
		mustUpdate(t, s, func(tx Tx) error { return tx.Put(&a) })
		boom := errors.New("boom")
		err := s.Update(func(tx Tx) error {
			j, err := tx.Get("a")
			if err != nil {
				return err
			}
			j.State = StateRunning
			if err := tx.Put(&j); err != nil {
				return err
			}
			for _, read := range []func(func(Job) error) error{tx.Active, tx.All} {
				if err := read(func(j Job) error {
					if j.State != StateRunning {
						return fmt.Errorf("the update's own write is not read: %s", j.State)
					}
					return nil
				}); err != nil {
					return err
				}
			}
			if j, err := tx.Get("a"); err != nil || j.State != StateRunning {
				return fmt.Errorf("Get in the update: %s, %v", j.State, err)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Update = %v", err)
		}
		for _, p := range readPaths {
			if got, err := p.read(s, "a"); err != nil || got.State != StatePending {
				t.Fatalf("%s after a failed update: %s, %v", p.name, got.State, err)
			}
		}
	}},
}

// TestDecodeCacheBounds: the cache keeps no more than maxBytes of records, decodes what it
// cannot keep every time, and a full read drops what it did not see.
func TestDecodeCacheBounds(t *testing.T) {
	c := newDecodeCache()
	c.maxBytes = 10
	decodes := 0
	decode := func(key string, raw []byte) (Job, error) {
		decodes++
		return Job{ID: key, Op: string(raw)}, nil
	}
	read := func(gen uint64, key, raw string) {
		t.Helper()
		if j, err := c.job(key, []byte(raw), gen, true, decode); err != nil || j.ID != key || j.Op != raw {
			t.Fatalf("job(%s, %s) = %+v, %v", key, raw, j, err)
		}
	}
	g := c.begin()
	read(g, "a", "1234")
	read(g, "b", "1234")
	read(g, "c", "1234") // 12 bytes: does not fit
	read(g, "a", "1234")
	read(g, "b", "1234")
	read(g, "c", "1234")
	if decodes != 4 || c.size != 8 || cachedKeys(c) != "a b" {
		t.Fatalf("%d decodes, %d bytes, keys %q; want 4, 8, \"a b\"", decodes, c.size, cachedKeys(c))
	}
	read(g, "a", "12345") // a new record for a replaces the old one
	read(g, "a", "12345")
	if decodes != 5 || c.size != 9 {
		t.Fatalf("%d decodes, %d bytes; want 5, 9", decodes, c.size)
	}
	c.sweep(g)
	if cachedKeys(c) != "a b" {
		t.Fatalf("a sweep of the read that used them dropped some: %q", cachedKeys(c))
	}
	g = c.begin()
	read(g, "b", "1234")
	read(0, "d", "1") // a Get: joins the latest read
	c.sweep(g)
	if cachedKeys(c) != "b d" || c.size != 5 {
		t.Fatalf("after a read of b (and a Get of d): keys %q, %d bytes", cachedKeys(c), c.size)
	}
	bad := errors.New("bad")
	if _, err := c.job("e", []byte("x"), 0, true, func(string, []byte) (Job, error) { return Job{}, bad }); !errors.Is(err, bad) {
		t.Fatalf("a decode error = %v", err)
	}
	if cachedKeys(c) != "b d" {
		t.Fatalf("a failed decode was kept: %q", cachedKeys(c))
	}
}
