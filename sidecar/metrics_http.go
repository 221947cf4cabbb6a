package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsListener serves the registry of metrics.get at /metrics over HTTP for a Prometheus
// scraper (Config.MetricsListen). It is the sidecar's: started by New, stopped by Close, and its
// goroutine ends before Close returns.
type metricsListener struct {
	srv  *http.Server
	addr net.Addr
	done chan struct{}
}

// ResolveMetricsAddr turns a --metrics-listen value into the address to bind. A bare port, an
// empty host (":9464") and "localhost" bind the IPv4 loopback, 127.0.0.1: the endpoint reveals
// the sidecar's load and version, so it is reachable from elsewhere only when an address says so
// (0.0.0.0:9464, [::]:9464, a host's own IP).
func ResolveMetricsAddr(v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		host, port = "", v // a bare port
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("metrics listen address %q: want PORT, localhost:PORT or HOST:PORT", v)
	}
	if host == "" || host == "localhost" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// startMetricsListener binds Config.MetricsListen, if set, and serves /metrics in the background.
func (s *Server) startMetricsListener() error {
	if s.cfg.MetricsListen == "" {
		return nil
	}
	addr, err := ResolveMetricsAddr(s.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("sidecar: metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	m := &metricsListener{addr: ln.Addr(), done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("metrics listener stopped", "error", err)
		}
	}()
	s.metricsHTTP = m
	s.log.Info("serving metrics", "addr", m.addr.String(), "path", "/metrics")
	return nil
}

// stopMetricsListener closes the listener, lets scrapes in progress finish for a moment, and
// waits for the serving goroutine.
func (s *Server) stopMetricsListener() {
	m := s.metricsHTTP
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil {
		_ = m.srv.Close()
	}
	<-m.done
}

// MetricsAddr is the address the metrics listener is bound to, or nil without one.
func (s *Server) MetricsAddr() net.Addr {
	if s.metricsHTTP == nil {
		return nil
	}
	return s.metricsHTTP.addr
}
