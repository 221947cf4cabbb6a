package sidecar

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storecfg"
	"github.com/hashicorp/go-hclog"
)

// workerLogBudget bounds what one worker may put into the sidecar's log; the rest is drained and
// counted, so a flooding worker can neither block on its stderr nor drown the log.
const workerLogBudget = 256 << 10

// workerLog forwards a worker's stderr lines into the sidecar's log, with credentials redacted.
type workerLog struct {
	log     hclog.Logger
	secrets []string
	mu      sync.Mutex
	partial []byte
	logged  int
	dropped int
}

func newWorkerLog(log hclog.Logger) *workerLog { return &workerLog{log: log} }

// bind names the invocation a (possibly pre-started) worker now serves and the credentials to
// redact from its lines: the call's own and any the sidecar handed the worker (extra).
func (w *workerLog) bind(invocation, traceID string, creds *rpc.Credentials, extra ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = w.log.With("invocation", invocation)
	if traceID != "" {
		w.log = w.log.With("trace_id", traceID)
	}
	w.secrets = append([]string(nil), extra...)
	if creds != nil {
		w.secrets = append(w.secrets, creds.SecretKey, creds.AccessKey, creds.SessionToken)
	}
}

// redactAlso adds secrets to redact from the worker's lines from now on (the engine's
// per-invocation gateway key, made once the request is about to be sent).
func (w *workerLog) redactAlso(secrets ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.secrets = append(w.secrets, secrets...)
}

func (w *workerLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.logged >= workerLogBudget {
		w.dropped += len(p)
		return len(p), nil
	}
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			if len(w.partial) > 4096 {
				i = 4096
			} else {
				break
			}
		}
		line := redact(string(w.partial[:i]), w.secrets)
		w.partial = w.partial[min(i+1, len(w.partial)):]
		w.logged += len(line)
		w.log.Info("worker stderr", "line", line)
		if w.logged >= workerLogBudget {
			w.log.Warn("worker log budget spent; dropping the rest", "budget_bytes", workerLogBudget)
			w.partial = nil
			break
		}
	}
	return len(p), nil
}

// redact replaces every secret of at least 4 bytes in s, as it is and in the forms a careless or
// hostile writer turns it into: hex (either case), base64 (standard and URL) and spelled out with
// one separator between its characters ("s e c r e t", "s-e-c-r-e-t").
func redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) < 4 {
			continue
		}
		for _, form := range secretForms(sec) {
			if strings.Contains(s, form) {
				s = strings.ReplaceAll(s, form, "[redacted]")
			}
		}
		s = redactSpelled(s, sec)
	}
	return s
}

func secretForms(sec string) []string {
	h := hex.EncodeToString([]byte(sec))
	return []string{sec, h, strings.ToUpper(h), base64.StdEncoding.EncodeToString([]byte(sec)),
		base64.RawStdEncoding.EncodeToString([]byte(sec)), base64.URLEncoding.EncodeToString([]byte(sec)),
		base64.RawURLEncoding.EncodeToString([]byte(sec))}
}

// redactSpelled replaces sec written with the same one-byte separator between each of its bytes.
func redactSpelled(s, sec string) string {
	for i := 0; i+2*len(sec)-1 <= len(s); i++ {
		if s[i] != sec[0] || i+1 >= len(s) {
			continue
		}
		sep := s[i+1]
		n := 2*len(sec) - 1
		if i+n > len(s) {
			break
		}
		match := true
		for j := 0; j < len(sec); j++ {
			if s[i+2*j] != sec[j] || j > 0 && s[i+2*j-1] != sep {
				match = false
				break
			}
		}
		if match {
			return redactSpelled(s[:i]+"[redacted]"+s[i+n:], sec)
		}
	}
	return s
}

// sanitize redacts the job's credentials from a message bound for the host.
func (s *Server) sanitize(j *job, msg string) string { return s.sanitizeCreds(j.p.Credentials, msg) }

// maxEngineText bounds an engine's text that reaches the host (a result's message; a progress
// stage is bounded tighter): longer text is cut, with "…".
const maxEngineText = 1024

// maxStage bounds a progress stage's name.
const maxStage = 64

// engineText makes an engine's text fit for the host and its logs: printable (control and
// bidirectional-override characters become spaces: no forged lines, no terminal escapes, no
// text that reads other than it is), at most max bytes (cut on a rune boundary, with "…").
// Redaction comes first, by the caller, so that a cut never leaves half a secret.
func engineText(msg string, max int) string {
	var b strings.Builder
	for _, r := range msg {
		switch {
		case r == utf8.RuneError, unicode.IsControl(r), r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069:
			r = ' '
		}
		if b.Len()+utf8.RuneLen(r) > max {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// progressSender forwards progress to the host without ever blocking the session: a slow or
// vanished host loses intermediate steps, never the worker's time. Within a stage the latest
// report wins; the last report of each stage the engine has left waits its turn (up to
// maxEndedStages of them), so a host that reads sees an engine's stages in their order even when
// the engine passes through several within one interval. When the answer is ready (stop), the
// stages still waiting are sent at once, then the latest report if it ends its stage (done =
// total) or is of another stage than the last one sent: a bounded burst, once, that a flood of
// steps within one stage never gets.
type progressSender struct {
	peer    *rpc.Peer
	secrets []string // redacted from stages: the call's and the sidecar's keys
	inv     string
	trace   string // the mutation's traceparent, carried on every notification
	mu      sync.Mutex
	latest  *rpc.ProgressParams
	ended   []*rpc.ProgressParams // the last unsent report of each stage left, oldest first
	wake    chan struct{}
	quit    chan struct{}
	done    chan struct{}
}

func newProgressSender(peer *rpc.Peer, inv, traceParent string, secrets []string) *progressSender {
	p := &progressSender{peer: peer, inv: inv, trace: traceParent, secrets: secrets, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

// progressInterval spaces the notifications of one mutation: at most 10 a second reach the
// host, whatever the engine sends.
const progressInterval = 100 * time.Millisecond

// maxEndedStages bounds the finished stages waiting to be sent; past it the oldest is dropped.
const maxEndedStages = 16

// redactAlso adds secrets to redact from stages from now on (the engine's gateway key).
func (p *progressSender) redactAlso(secrets ...string) {
	p.mu.Lock()
	p.secrets = append(p.secrets, secrets...)
	p.mu.Unlock()
}

func (p *progressSender) send(stage string, done, total int64) {
	p.mu.Lock()
	secrets := p.secrets
	p.mu.Unlock()
	stage = engineText(redact(stage, secrets), maxStage)
	p.mu.Lock()
	if p.latest != nil && p.latest.Stage != stage {
		if len(p.ended) == maxEndedStages {
			p.ended = slices.Delete(p.ended, 0, 1)
		}
		p.ended = append(p.ended, p.latest)
	}
	p.latest = &rpc.ProgressParams{InvocationID: p.inv, Stage: stage, Done: done, Total: total, TraceParent: p.trace}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// next takes the report to send now: a finished stage's first, else the latest.
func (p *progressSender) next() *rpc.ProgressParams {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ended) > 0 {
		msg := p.ended[0]
		p.ended = slices.Delete(p.ended, 0, 1)
		return msg
	}
	msg := p.latest
	p.latest = nil
	return msg
}

func (p *progressSender) loop() {
	defer close(p.done)
	last := "" // the stage of the last notification sent
	for {
		select {
		case <-p.quit:
			p.flush(last)
			return
		case <-p.wake:
		}
		for msg := p.next(); msg != nil; msg = p.next() {
			p.notify(context.Background(), msg)
			last = msg.Stage
			select {
			case <-p.quit:
				p.flush(last)
				return
			case <-time.After(progressInterval):
			}
		}
	}
}

// flush sends the finished stages still waiting, and the latest report if it ends its stage or
// is of a stage other than last, within one send timeout in all.
func (p *progressSender) flush(last string) {
	p.mu.Lock()
	msgs := p.ended
	if l := p.latest; l != nil && (len(msgs) > 0 || l.Stage != last || l.Done == l.Total) {
		msgs = append(msgs, p.latest)
	}
	p.ended, p.latest = nil, nil
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, msg := range msgs {
		p.notify(ctx, msg)
	}
}

func (p *progressSender) notify(ctx context.Context, msg *rpc.ProgressParams) {
	if p.peer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = p.peer.Notify(ctx, rpc.NotifyProgress, msg)
}

func (p *progressSender) stop() {
	close(p.quit)
	<-p.done
}

// sidecarRequestTimeout bounds one storage request of the sidecar itself (resolve, custody).
const sidecarRequestTimeout = 5 * time.Second

// openStore opens the store with the call's credentials, or the sidecar's own where credsFor
// allows (a *StoreNotAllowedError otherwise).
func (s *Server) openStore(ctx context.Context, p rpc.ParsedStore, creds *rpc.Credentials) (storage.Store, error) {
	creds, err := s.credsFor(p, creds)
	if err != nil {
		return nil, err
	}
	cfg := storecfg.Config(p, creds)
	// PROTOCOL.md promises each storage request of the sidecar 5 s and one retry. minio-go's
	// MaxRetries counts attempts (1 disables retries), so one retry is 2; two 5 s attempts and
	// the backoff between them fit resolveTimeout.
	cfg.MaxRetries = 2
	cfg.RequestTimeout = sidecarRequestTimeout
	return storage.OpenStore(ctx, cfg)
}

// observeLatest reads the dataset's latest version after an indeterminate end, best effort.
func (s *Server) observeLatest(j *job) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := s.openStore(ctx, j.store, j.creds)
	if err != nil {
		return 0
	}
	v, err := dataset.LatestVersion(ctx, st, j.p.Dataset.Path)
	if err != nil {
		return 0
	}
	return v
}
