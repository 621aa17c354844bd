package fakeengine

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are what /metrics serves, on a registry of the server's own.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	promptTokens prometheus.Counter
	genTokens    prometheus.Counter
	inFlight     prometheus.Gauge
}

func newMetrics(model string, ready func() bool) *metrics {
	labels := prometheus.Labels{"model_name": model}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "fake_engine_requests_total",
			Help:        "HTTP requests served, by route and status code.",
			ConstLabels: labels,
		}, []string{"route", "code"}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "fake_engine_prompt_tokens_total",
			Help:        "Prompt tokens read by completion and embedding requests.",
			ConstLabels: labels,
		}),
		genTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "fake_engine_generation_tokens_total",
			Help:        "Tokens generated.",
			ConstLabels: labels,
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "fake_engine_requests_in_flight",
			Help:        "Completion and embedding requests being served.",
			ConstLabels: labels,
		}),
	}
	readyGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "fake_engine_ready",
		Help:        "1 once the model has loaded and /health answers 200.",
		ConstLabels: labels,
	}, func() float64 {
		if ready() {
			return 1
		}
		return 0
	})
	m.reg.MustRegister(m.requests, m.promptTokens, m.genTokens, m.inFlight, readyGauge)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
