package sidecar

import (
	"bytes"
	"strconv"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
)

// metrics is the sidecar's Prometheus registry. Labels are bounded sets (method names the router
// knows or "unknown", numeric codes): no request data and never a credential reaches a label.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	badFrames *prometheus.CounterVec
	inFlight  prometheus.Gauge
	buildInfo *prometheus.GaugeVec
	startTime prometheus.Gauge

	queueDepth prometheus.Gauge
	workers    prometheus.Gauge
	outcomes   *prometheus.CounterVec
	mutations  prometheus.Histogram
}

func newMetrics(version, epoch string) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steward_rpc_requests_total", Help: "JSON-RPC requests answered, by method and code (0 = success).",
	}, []string{"method", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "steward_rpc_request_duration_seconds",
		Help:    "Time from receipt to answer of JSON-RPC requests.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 4, 12),
	}, []string{"method"})
	m.badFrames = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steward_rpc_rejected_frames_total", Help: "Incoming frames refused before dispatch, by code.",
	}, []string{"code"})
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "steward_rpc_in_flight", Help: "JSON-RPC requests being handled.",
	})
	m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "steward_build_info", Help: "Build and process identity of this sidecar (value 1).",
	}, []string{"version", "epoch", "protocol_version"})
	m.startTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "steward_start_time_seconds", Help: "Unix time this sidecar process started.",
	})
	m.queueDepth = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "steward_mutate_queue_depth", Help: "Admitted mutations waiting for an executor.",
	})
	m.workers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "steward_mutate_workers_in_flight", Help: "Mutations holding an executor slot (launching, running or being torn down).",
	})
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steward_mutate_outcomes_total",
		Help: "index.mutate answers by outcome: committed, noop, not_committed (commit conflict), native_error (other engine errors), rejected_at_receive, rejected_before_invocation, indeterminate.",
	}, []string{"outcome"})
	for _, o := range []string{"committed", "noop", "not_committed", "native_error", "rejected_at_receive", "rejected_before_invocation", "indeterminate"} {
		m.outcomes.WithLabelValues(o)
	}
	m.mutations = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "steward_mutate_duration_seconds",
		Help:    "Time from receipt of index.mutate to its answer (queueing, run and teardown).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
	})
	m.reg.MustRegister(m.queueDepth, m.workers, m.outcomes, m.mutations)
	m.reg.MustRegister(m.requests, m.latency, m.badFrames, m.inFlight, m.buildInfo, m.startTime,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.buildInfo.WithLabelValues(version, epoch, strconv.Itoa(rpc.ProtocolVersion)).Set(1)
	m.startTime.Set(float64(time.Now().UnixNano()) / 1e9)
	return m
}

func (m *metrics) observe(method string, code rpc.Code, d time.Duration) {
	m.requests.WithLabelValues(method, strconv.FormatInt(int64(code), 10)).Inc()
	m.latency.WithLabelValues(method).Observe(d.Seconds())
}

func (m *metrics) rejectedFrame(err error) {
	m.badFrames.WithLabelValues(strconv.FormatInt(int64(rpc.ToWire(err).Code), 10)).Inc()
}

// text renders every metric in the Prometheus text exposition format.
func (m *metrics) text() (string, error) {
	families, err := m.reg.Gather()
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return "", err
		}
	}
	return buf.String(), nil
}

func (m *metrics) outcome(o string) { m.outcomes.WithLabelValues(o).Inc() }

// observeMutation counts an answered mutation by what the host may conclude from it.
func (m *metrics) observeMutation(r rpc.MutateResult, d time.Duration) {
	m.mutations.Observe(d.Seconds())
	switch {
	case r.Phase == rpc.PhasePreInvocationRejected:
		m.outcome("rejected_before_invocation")
	case r.Phase == rpc.PhaseIndeterminate:
		m.outcome("indeterminate")
	case r.Code == rpc.NativeOK && r.CommittedVersion > 0:
		m.outcome("committed")
	case r.Code == rpc.NativeOK:
		m.outcome("noop")
	case r.Code == rpc.NativeCommitConflict:
		m.outcome("not_committed")
	default:
		m.outcome("native_error") // the engine failed: see docs/PROTOCOL.md for what a host concludes
	}
}
