package sidecar

import "github.com/prometheus/client_golang/prometheus"

// budgetGauges registers the memory budget's gauges, read from b at each scrape.
func (m *metrics) budgetGauges(b *memBudget) {
	gauge := func(name, help string, v func(budgetState) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(b.state()) })
	}
	m.reg.MustRegister(
		gauge("steward_memory_budget_bytes", "The memory budget: the memory limits of all worker domains never sum above it.",
			func(s budgetState) float64 { return float64(s.total) }),
		gauge("steward_memory_budget_in_use_bytes", "Sum of the memory limits of the worker domains that exist now (mutations and idle spares).",
			func(s budgetState) float64 { return float64(s.used) }),
		gauge("steward_memory_budget_spares_bytes", "Part of the budget in use held by idle prestarted spares.",
			func(s budgetState) float64 { return float64(s.spares) }),
		gauge("steward_memory_budget_waiting", "Mutations waiting for memory budget.",
			func(s budgetState) float64 { return float64(s.waiting) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "steward_memory_budget_spares_retired_total",
			Help: "Idle spares retired because a waiting mutation needed their budget."},
			func() float64 { return float64(b.state().retired) }),
	)
}
