package storage

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

const (
	// defaultPartSize is the part size of a streamed upload (one of unknown length).
	defaultPartSize = 8 << 20
	// minPartSize is S3's floor for every part but the last.
	minPartSize = 5 << 20
	// defaultPartsInFlight bounds the part buffers of one streamed upload: one being
	// filled by the writer while the others are on the wire.
	defaultPartsInFlight = 2
	// maxParts is S3's limit on the parts of one multipart upload.
	maxParts = 10_000
	// abortTimeout bounds the abort of a failed multipart upload, which runs even when the
	// caller's context is already done.
	abortTimeout = time.Minute
)

// putStream uploads an object of unknown length. An object that fits in one part goes up as
// a single PUT. A longer one becomes a multipart upload whose parts are sent concurrently,
// at most s.partsInFlight buffers of s.partSize at a time, so that the writer on the other
// end of r keeps producing while earlier parts are on the wire (minio-go's own stream path
// uploads each part synchronously and its parallel one allocates every buffer up front).
// If reading r or any request fails, the multipart upload is aborted: nothing is published
// and no incomplete upload is left behind (the error says so if the abort failed too).
func (s *S3Store) putStream(ctx context.Context, key string, r io.Reader, opts minio.PutObjectOptions) error {
	buf := make([]byte, s.partSize)
	n, err := io.ReadFull(r, buf)
	core := minio.Core{Client: s.client}
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		if s.unsignedPayload {
			opts.DisableContentSha256 = true
			opts.UserMetadata = map[string]string{crc32cHeader: crc32cOf(buf[:n])}
		}
		_, err = core.PutObject(ctx, s.bucket, key, bytes.NewReader(buf[:n]), int64(n), "", "", opts)
		return err
	case err != nil:
		return err
	}
	if s.unsignedPayload {
		opts.UserMetadata = map[string]string{"X-Amz-Checksum-Algorithm": "CRC32C"}
	}
	id, err := core.NewMultipartUpload(ctx, s.bucket, key, opts)
	if err != nil {
		return err
	}
	parts, err := s.putParts(ctx, core, key, id, r, buf)
	if err == nil {
		_, err = core.CompleteMultipartUpload(ctx, s.bucket, key, id, parts, minio.PutObjectOptions{})
	}
	if err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		defer cancel()
		if aerr := core.AbortMultipartUpload(actx, s.bucket, key, id); aerr != nil && !isCode(aerr, "NoSuchUpload") {
			err = errors.Join(err, fmt.Errorf("abort multipart upload: %w", aerr))
		}
	}
	return err
}

// putParts uploads first (a full part) and the rest of r as parts of upload id, each part
// in its own goroutine, and returns the parts in order once every upload has returned.
func (s *S3Store) putParts(ctx context.Context, core minio.Core, key, id string, r io.Reader, first []byte) ([]minio.CompletePart, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		parts []minio.CompletePart
		perr  error // the first part upload's error
	)
	free := make(chan []byte, s.partsInFlight) // buffers back from finished parts
	send := func(num int, data []byte) {
		defer wg.Done()
		p, err := core.PutObjectPart(ctx, s.bucket, key, id, num, bytes.NewReader(data), int64(len(data)), s.partOptions(data))
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if perr == nil {
				perr = fmt.Errorf("part %d: %w", num, err)
			}
			cancel()
		} else {
			parts = append(parts, minio.CompletePart{PartNumber: num, ETag: p.ETag, ChecksumCRC32C: p.ChecksumCRC32C})
		}
		free <- data[:cap(data)]
	}
	rerr := s.readParts(ctx, r, first, free, func(num int, data []byte) {
		wg.Add(1)
		go send(num, data)
	})
	if rerr != nil {
		cancel() // the upload is lost: stop the parts still on the wire
	}
	wg.Wait()
	if err := partsCause(rerr, perr); err != nil {
		return nil, err
	}
	slices.SortFunc(parts, func(a, b minio.CompletePart) int { return a.PartNumber - b.PartNumber })
	return parts, nil
}

// partOptions signs a part's payload (SigV4 streaming signature, on plain http) unless
// the store sends unsigned payloads; those carry a CRC32C the server checks instead.
func (s *S3Store) partOptions(data []byte) minio.PutObjectPartOptions {
	if !s.unsignedPayload {
		return minio.PutObjectPartOptions{}
	}
	return minio.PutObjectPartOptions{
		DisableContentSha256: true,
		CustomHeader:         http.Header{crc32cHeader: {crc32cOf(data)}},
	}
}

const crc32cHeader = "X-Amz-Checksum-Crc32c"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crc32cOf is the value of an x-amz-checksum-crc32c header for data.
func crc32cOf(data []byte) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc32.Checksum(data, castagnoli))
	return base64.StdEncoding.EncodeToString(b[:])
}

// readParts hands r to start part by part: first, then buffers allocated lazily up to
// s.partsInFlight and reused from free once that many exist. It stops at the end of r, at
// a read error, or when ctx is done (a part failed).
func (s *S3Store) readParts(ctx context.Context, r io.Reader, first []byte, free <-chan []byte, start func(int, []byte)) error {
	allocated := 1
	start(1, first)
	for num := 2; ; num++ {
		if err := ctx.Err(); err != nil {
			return err // a part failed: stop consuming r
		}
		var buf []byte
		if allocated < s.partsInFlight {
			buf, allocated = make([]byte, s.partSize), allocated+1
		} else {
			select {
			case buf = <-free:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		n, err := io.ReadFull(r, buf)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, io.ErrUnexpectedEOF):
			start(num, buf[:n])
			return nil
		case err != nil:
			return err
		}
		start(num, buf)
		if num == maxParts {
			if n, _ := io.ReadFull(r, make([]byte, 1)); n > 0 {
				return fmt.Errorf("%w: object longer than %d parts of %d bytes", errTooManyParts, maxParts, s.partSize)
			}
			return nil
		}
	}
}

// errTooManyParts: a streamed object does not fit in one multipart upload.
var errTooManyParts = errors.New("too many parts")

// partsCause returns the read error unless it only reports the cancellation that a failed
// part caused; then the part's error is the cause.
func partsCause(rerr, perr error) error {
	if perr != nil && (rerr == nil || errors.Is(rerr, context.Canceled)) {
		return perr
	}
	return rerr
}
