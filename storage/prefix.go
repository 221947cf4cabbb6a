package storage

import (
	"context"
	"io"
	"iter"
	"strings"
)

// prefixStore confines a Store to keys under a prefix; keys it hands out are relative to it.
type prefixStore struct {
	inner  Store
	prefix string // ends with "/"
}

var _ Store = (*prefixStore)(nil)

// WithPrefix returns a view of s in which key k is stored as prefix+"/"+k.
func WithPrefix(s Store, prefix string) Store {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return s
	}
	return &prefixStore{inner: s, prefix: prefix + "/"}
}

func (p *prefixStore) full(op, key string) (string, error) {
	if err := checkKey(op, key); err != nil {
		return "", err
	}
	return p.prefix + key, nil
}

func (p *prefixStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	k, err := p.full("put", key)
	if err != nil {
		return err
	}
	return p.inner.Put(ctx, k, r, size)
}

func (p *prefixStore) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	k, err := p.full("put-if-absent", key)
	if err != nil {
		return err
	}
	return p.inner.PutIfAbsent(ctx, k, r, size)
}

func (p *prefixStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	k, err := p.full("get", key)
	if err != nil {
		return nil, err
	}
	return p.inner.Get(ctx, k)
}

func (p *prefixStore) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	k, err := p.full("get", key)
	if err != nil {
		return nil, err
	}
	return p.inner.GetRange(ctx, k, off, length)
}

func (p *prefixStore) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	k, err := p.full("stat", key)
	if err != nil {
		return ObjectInfo{}, err
	}
	info, err := p.inner.Stat(ctx, k)
	info.Key = strings.TrimPrefix(info.Key, p.prefix)
	return info, err
}

func (p *prefixStore) List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		for info, err := range p.inner.List(ctx, p.prefix+prefix) {
			info.Key = strings.TrimPrefix(info.Key, p.prefix)
			if !yield(info, err) || err != nil {
				return
			}
		}
	}
}

func (p *prefixStore) DeleteBatch(ctx context.Context, keys []string) []DeleteResult {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = p.prefix + k
	}
	res := p.inner.DeleteBatch(ctx, full)
	for i := range res {
		res[i].Key = keys[i]
	}
	return res
}
