package custody

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector of the ledger's figures.
func (c *Custody) Collector() prometheus.Collector { return newCollector(c) }

// ledgerCollector exposes the ledger's figures, read from Stats at gather time: no counter is
// kept twice, and a scrape sees one consistent snapshot.
type ledgerCollector struct {
	c     *Custody
	descs map[string]*prometheus.Desc
}

var ledgerMetricHelp = map[string]string{
	"steward_ledger_tickets":                       "Object tickets held, in transfer or awaiting deletion.",
	"steward_ledger_tickets_high_water":            "Most tickets held at once since the sidecar started.",
	"steward_ledger_capacity":                      "Ticket capacity; a reservation past it is refused before upload.",
	"steward_ledger_admission_failures_total":      "Reservations refused because the ledger was at capacity.",
	"steward_ledger_invocation_quota":              "Tickets one invocation may hold at once (0: no bound besides the capacity).",
	"steward_ledger_quota_refusals_total":          "Reservations refused because the invocation was at its ticket quota.",
	"steward_ledger_existing_name_refusals_total":  "Keys an engine asked to reserve that already existed in the store (refused).",
	"steward_ledger_pending_delete":                "Abandoned object names not yet deleted.",
	"steward_ledger_pending_retry_tasks":           "Cleanup tasks whose last delete attempt failed.",
	"steward_ledger_oldest_retry_age_seconds":      "Age of the oldest failure streak among the cleanup tasks (0: none).",
	"steward_ledger_delete_failures_total":         "Failed delete attempts, counted per object name.",
	"steward_ledger_deleted_total":                 "Object names deleted and released by the cleanup worker.",
	"steward_ledger_owners":                        "Owners (invocations, host transactions, sweeps) holding tickets.",
	"steward_ledger_prefix_tickets":                "Prefix tickets among the tickets held (each owns every object under its prefix).",
	"steward_ledger_prefix_objects_deleted_total":  "Objects deleted under abandoned prefix tickets.",
	"steward_ledger_unsettled_invocations":         "Invocations from before a restart whose outcome recovery could not decide yet.",
	"steward_ledger_unverified_failed_invocations": "Finished invocations whose outcome storage could not decide yet (retried each recovery pass); their tickets are kept.",
}

func newCollector(c *Custody) *ledgerCollector {
	lc := &ledgerCollector{c: c, descs: map[string]*prometheus.Desc{}}
	for name, help := range ledgerMetricHelp {
		lc.descs[name] = prometheus.NewDesc(name, help, nil, nil)
	}
	return lc
}

// Describe implements prometheus.Collector.
func (lc *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range lc.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (lc *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	st := lc.c.l.Stats()
	lc.c.mu.Lock()
	unsettled, unverified := lc.c.unsettled, len(lc.c.fence)
	lc.c.mu.Unlock()
	gauge := func(name string, v float64) {
		ch <- prometheus.MustNewConstMetric(lc.descs[name], prometheus.GaugeValue, v)
	}
	counter := func(name string, v float64) {
		ch <- prometheus.MustNewConstMetric(lc.descs[name], prometheus.CounterValue, v)
	}
	gauge("steward_ledger_tickets", float64(st.Used))
	gauge("steward_ledger_tickets_high_water", float64(st.HighWater))
	gauge("steward_ledger_capacity", float64(st.Capacity))
	counter("steward_ledger_admission_failures_total", float64(st.AdmissionFailures))
	gauge("steward_ledger_invocation_quota", float64(lc.c.cfg.Quota))
	counter("steward_ledger_quota_refusals_total", float64(st.QuotaRefusals))
	counter("steward_ledger_existing_name_refusals_total", float64(lc.c.existsRefusals.Load()))
	gauge("steward_ledger_pending_delete", float64(st.PendingDelete))
	gauge("steward_ledger_pending_retry_tasks", float64(st.PendingRetry))
	gauge("steward_ledger_oldest_retry_age_seconds", st.OldestRetryAge.Seconds())
	counter("steward_ledger_delete_failures_total", float64(st.DeleteFailures))
	counter("steward_ledger_deleted_total", float64(st.Deleted))
	gauge("steward_ledger_owners", float64(st.Owners))
	gauge("steward_ledger_prefix_tickets", float64(st.Prefixes))
	counter("steward_ledger_prefix_objects_deleted_total", float64(st.PrefixObjectsDeleted))
	gauge("steward_ledger_unsettled_invocations", float64(unsettled))
	gauge("steward_ledger_unverified_failed_invocations", float64(unverified))
}
