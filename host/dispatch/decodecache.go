package dispatch

import (
	"bytes"
	"sync"
)

// decodeCache remembers the Job decoded from each stored record, so that reading the active jobs
// (every phase of every Round reads them all, and a round runs at every submit and answer)
// decodes only the records that changed since the last read.
//
// It never returns a stale job: an entry holds a copy of the record's bytes beside the job
// decoded from them, and a lookup hits only when the bytes read now are equal to those, whichever
// transaction, node or restore wrote them. (On etcd this is stronger than comparing mod revisions,
// which a cluster restored from a backup reuses.) A hit hands out Job.clone, so a caller that
// changes its job cannot change the entry; an entry is never changed after it is stored.
//
// Bounds: each full read of the active jobs (begin ... sweep) drops at its end the entries no
// read begun since touched, so the cache holds about the active jobs; and it holds at most
// maxBytes of records (beside their decoded copies, about as large): past that, a record not
// cached is decoded every time.
type decodeCache struct {
	mu       sync.Mutex
	entries  map[string]*cachedJob // record key → entry
	size     int                   // sum of len(raw)
	gen      uint64                // the latest begun read
	maxBytes int
}

type cachedJob struct {
	raw  []byte // the record, copied
	job  Job    // decoded from raw; never changed
	seen uint64 // the latest read (gen) that used it
}

// defaultCacheBytes bounds a store's decodeCache: about 20,000 in-flight Lance jobs (a record of
// one is about 800 bytes), twenty times the default MaxUnresolved.
const defaultCacheBytes = 16 << 20

func newDecodeCache() *decodeCache {
	return &decodeCache{entries: map[string]*cachedJob{}, maxBytes: defaultCacheBytes}
}

// begin starts a full read of the active jobs; sweep(gen) ends it.
func (c *decodeCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	return c.gen
}

// sweep drops the entries that no read begun at or after gen has used.
func (c *decodeCache) sweep(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if e.seen < gen {
			c.size -= len(e.raw)
			delete(c.entries, k)
		}
	}
}

// job returns the job of record raw stored under key: a copy of the entry decoded from equal
// bytes, else decode(key, raw). A decoded job is remembered when remember is set and it fits; gen
// is the read it belongs to (0: the latest begun).
func (c *decodeCache) job(key string, raw []byte, gen uint64, remember bool, decode func(key string, raw []byte) (Job, error)) (Job, error) {
	c.mu.Lock()
	if gen == 0 {
		gen = c.gen
	}
	e := c.entries[key]
	hit := e != nil && bytes.Equal(e.raw, raw)
	if hit {
		e.seen = max(e.seen, gen)
	}
	c.mu.Unlock()
	if hit {
		return e.job.clone(), nil
	}
	j, err := decode(key, raw)
	if err != nil || !remember {
		return j, err
	}
	n := &cachedJob{raw: bytes.Clone(raw), job: j.clone(), seen: gen}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.entries[key]; old != nil {
		c.size -= len(old.raw)
		delete(c.entries, key)
	}
	if c.size+len(n.raw) <= c.maxBytes {
		c.entries[key] = n
		c.size += len(n.raw)
	}
	return j, nil
}
