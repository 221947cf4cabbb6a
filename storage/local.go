package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// tmpDir holds in-flight writes inside the root, so that the final link/rename never crosses a
// filesystem. Keys under it are invisible to List.
const tmpDir = ".steward-tmp"

// LocalStore keeps objects as files under a root directory. Writes go to a temporary file that
// is fsynced and then renamed (Put) or hard-linked (PutIfAbsent: link fails with EEXIST, so it
// never replaces an object) into place, followed by an fsync of the parent directory.
type LocalStore struct {
	root string
}

var _ Store = (*LocalStore)(nil)

// NewLocalStore opens (creating if needed) a store rooted at dir.
func NewLocalStore(dir string) (*LocalStore, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: local store needs a root directory", ErrInvalidConfig)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := os.MkdirAll(filepath.Join(abs, tmpDir), 0o755); err != nil {
		return nil, opErr("open", dir, osKind(err), err)
	}
	return &LocalStore{root: abs}, nil
}

// Root returns the store's absolute directory.
func (s *LocalStore) Root() string { return s.root }

func (s *LocalStore) path(key string) string { return filepath.Join(s.root, filepath.FromSlash(key)) }

func (s *LocalStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.write(ctx, "put", key, r, os.Rename)
}

func (s *LocalStore) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.write(ctx, "put-if-absent", key, r, func(tmp, dst string) error {
		if _, err := os.Lstat(dst); err == nil {
			return fs.ErrExist // cheap early answer; the link below is the real arbiter
		}
		if err := os.Link(tmp, dst); err != nil {
			return err
		}
		return os.Remove(tmp)
	})
}

// write stages r in a temp file, fsyncs it, publishes it with place, and fsyncs the directory.
func (s *LocalStore) write(ctx context.Context, op, key string, r io.Reader, place func(tmp, dst string) error) (retErr error) {
	if err := checkKey(op, key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return opErr(op, key, ErrUnavailable, err)
	}
	dst := s.path(key)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return opErr(op, key, osKind(err), err)
	}
	f, err := os.CreateTemp(filepath.Join(s.root, tmpDir), "put-*")
	if err != nil {
		return opErr(op, key, osKind(err), err)
	}
	tmp := f.Name()
	defer func() {
		if retErr != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := io.Copy(f, ctxReader{ctx, r}); err != nil {
		return opErr(op, key, ErrUnavailable, err)
	}
	if err := f.Sync(); err != nil {
		return opErr(op, key, osKind(err), err)
	}
	if err := f.Close(); err != nil {
		return opErr(op, key, osKind(err), err)
	}
	if err := place(tmp, dst); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return opErr(op, key, ErrExists, nil)
		}
		return opErr(op, key, osKind(err), err)
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return opErr(op, key, osKind(err), err)
	}
	return nil
}

func (s *LocalStore) open(op, key string) (*os.File, os.FileInfo, error) {
	if err := checkKey(op, key); err != nil {
		return nil, nil, err
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		return nil, nil, opErr(op, key, osKind(err), err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, opErr(op, key, osKind(err), err)
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, opErr(op, key, ErrNotFound, nil)
	}
	return f, fi, nil
}

// localBody is the body of a Get: the file, and its size for ReadAll's bound.
type localBody struct {
	*os.File
	size int64
}

func (b localBody) objectSize() int64 { return b.size }

func (s *LocalStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, opErr("get", key, ErrUnavailable, err)
	}
	f, fi, err := s.open("get", key)
	if err != nil {
		return nil, err
	}
	return localBody{f, fi.Size()}, nil
}

func (s *LocalStore) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, opErr("get", key, ErrUnavailable, err)
	}
	f, fi, err := s.open("get", key)
	if err != nil {
		return nil, err
	}
	if off < 0 || length < 0 || off+length > fi.Size() {
		f.Close()
		return nil, opErr("get", key, ErrCorrupt, fmt.Errorf("range [%d,+%d) outside object of %d bytes", off, length, fi.Size()))
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, length), f}, nil
}

func (s *LocalStore) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := checkKey("stat", key); err != nil {
		return ObjectInfo{}, err
	}
	fi, err := os.Stat(s.path(key))
	if err != nil {
		return ObjectInfo{}, opErr("stat", key, osKind(err), err)
	}
	if fi.IsDir() {
		return ObjectInfo{}, opErr("stat", key, ErrNotFound, nil)
	}
	return ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

func (s *LocalStore) List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		infos, err := s.list(ctx, prefix)
		if err != nil {
			yield(ObjectInfo{}, err)
			return
		}
		for _, info := range infos {
			if !yield(info, nil) {
				return
			}
		}
	}
}

func (s *LocalStore) list(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	dir := prefix
	if !strings.HasSuffix(prefix, "/") {
		dir = path.Dir(prefix)
	}
	start := filepath.Join(s.root, filepath.FromSlash(dir))
	var out []ObjectInfo
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		rel, _ := filepath.Rel(s.root, p)
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if key == tmpDir {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while listing
			}
			return err
		}
		out = append(out, ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, opErr("list", prefix, osKind(err), err)
	}
	slices.SortFunc(out, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

func (s *LocalStore) DeleteBatch(ctx context.Context, keys []string) []DeleteResult {
	out := make([]DeleteResult, len(keys))
	for i, key := range keys {
		out[i].Key = key
		if err := checkKey("delete", key); err != nil {
			out[i].Err = err
			continue
		}
		if err := ctx.Err(); err != nil {
			out[i].Err = opErr("delete", key, ErrUnavailable, err)
			continue
		}
		p := s.path(key)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			out[i].Err = opErr("delete", key, osKind(err), err)
			continue
		}
		s.pruneEmptyDirs(filepath.Dir(p))
	}
	return out
}

// pruneEmptyDirs removes now-empty parents so a deleted prefix leaves nothing behind. Best
// effort: a concurrent writer may recreate a directory, and Remove fails on non-empty ones.
func (s *LocalStore) pruneEmptyDirs(dir string) {
	for dir != s.root && strings.HasPrefix(dir, s.root) {
		if os.Remove(dir) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// osKind maps an OS error to a sentinel. Anything unexpected (EIO, ENOSPC, a cancelled copy)
// is ErrUnavailable: the caller cannot know what the disk holds.
func osKind(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ErrNotFound
	case errors.Is(err, fs.ErrExist):
		return ErrExists
	case errors.Is(err, fs.ErrPermission):
		return ErrPermission
	case isNotDir(err):
		return ErrNotFound
	default:
		return ErrUnavailable
	}
}

// ctxReader stops a copy when its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
