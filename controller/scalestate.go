package controller

import (
	"sort"
	"sync"
	"time"

	"github.com/llmgw/llmgw/controller/autoscale"
	"github.com/llmgw/llmgw/controllerapi"
)

// scaleState is the autoscaler's state in memory: one Scaler per
// autoscaled model, fed by the signal rounds (signals.go) and asked by the
// passes (decideCounts); the last round of signals and where they came
// from; each model's hour of history (history.go); each model's last
// change of count carried out (scaleEvents). Nothing of it is stored: a
// restarted controller starts with none, and a standby keeps its own from
// its own rounds.
type scaleState struct {
	// mu guards every field below. Invariant: signals, sources and
	// signalsAt are all one round's, and after each round scalers and
	// history hold only that round's models (a model that leaves the
	// catalog or stops autoscaling loses both); a pass may add the scaler
	// of a model no round has read yet.
	mu      sync.Mutex
	scalers map[string]*autoscale.Scaler
	history map[string]*ring
	// signals and sources are the last round of the autoscaler's signals,
	// taken at signalsAt (Options.Now).
	signals   map[string]controllerapi.ModelSignals
	sources   []controllerapi.SourceView
	signalsAt time.Time
	// lastScale is each model's last change of count carried out.
	lastScale map[string]*controllerapi.ScaleEvent
}

func newScaleState() *scaleState {
	return &scaleState{scalers: map[string]*autoscale.Scaler{}, history: map[string]*ring{}, lastScale: map[string]*controllerapi.ScaleEvent{}}
}

// observe gives each model's scaler its sample of a round, drops the
// scalers of models not in it, and keeps the round as the last.
func (s *scaleState) observe(signals map[string]controllerapi.ModelSignals, sources []controllerapi.SourceView, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, sig := range signals {
		sc := s.scalers[name]
		if sc == nil {
			sc = autoscale.New(autoscale.Config{})
			s.scalers[name] = sc
		}
		sc.Observe(sampleOf(sig))
	}
	for name := range s.scalers {
		if _, ok := signals[name]; !ok {
			delete(s.scalers, name) // the model left the catalog or stopped autoscaling
		}
	}
	s.signals, s.sources, s.signalsAt = signals, sources, at
}

// clearSignals forgets the last round: no model autoscales.
func (s *scaleState) clearSignals() {
	s.mu.Lock()
	s.signals, s.sources, s.signalsAt = nil, nil, time.Time{}
	s.mu.Unlock()
}

// view is GET /v1/signals of the last round.
func (s *scaleState) view(interval time.Duration) controllerapi.SignalsView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := controllerapi.SignalsView{At: s.signalsAt, Interval: interval.Seconds(),
		Sources: append([]controllerapi.SourceView{}, s.sources...), Models: map[string]controllerapi.ModelSignals{}}
	for k, v := range s.signals {
		out.Models[k] = v
	}
	sort.Slice(out.Sources, func(i, j int) bool {
		if out.Sources[i].Source != out.Sources[j].Source {
			return out.Sources[i].Source < out.Sources[j].Source
		}
		return out.Sources[i].Name < out.Sources[j].Name
	})
	return out
}

// withSignals returns models with each one's last signals set.
func (s *scaleState) withSignals(models []controllerapi.ModelView) []controllerapi.ModelView {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range models {
		if sig, ok := s.signals[models[i].Name]; ok {
			models[i].Signals = &sig
		}
	}
	return models
}

// setLastChange records a model's change of count.
func (s *scaleState) setLastChange(model string, ev controllerapi.ScaleEvent) {
	s.mu.Lock()
	s.lastScale[model] = &ev
	s.mu.Unlock()
}

// lastChanges returns a copy of each model's last change of count.
func (s *scaleState) lastChanges() map[string]*controllerapi.ScaleEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*controllerapi.ScaleEvent, len(s.lastScale))
	for k, e := range s.lastScale {
		cp := *e
		out[k] = &cp
	}
	return out
}
