package controller

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/httpjson"
	"github.com/llmgw/llmgw/internal/suggest"
)

// The models' part of the API: GET /v1/models[/{model}[/history]],
// GET /v1/signals, and pins: PUT and DELETE /v1/models/{model}/pin.

// Pin durations: a pin always expires, so that one forgotten does not hold
// a model's count for good.
const (
	DefaultPinFor = time.Hour
	MinPinFor     = time.Minute
	MaxPinFor     = 7 * 24 * time.Hour
)

// models returns the view's models with the latest signals.
func (c *Controller) models() []controllerapi.ModelView {
	v := c.views.get()
	out := make([]controllerapi.ModelView, len(v.Models))
	copy(out, v.Models)
	return c.scale.withSignals(out)
}

func (c *Controller) listModels(w http.ResponseWriter, _ *http.Request) {
	httpjson.WriteIndented(w, http.StatusOK, c.models())
}

// findModel returns a model of the view, or writes 404 with a hint.
func (c *Controller) findModel(w http.ResponseWriter, name string) (controllerapi.ModelView, bool) {
	var names []string
	for _, m := range c.models() {
		if m.Name == name {
			return m, true
		}
		names = append(names, m.Name)
	}
	if len(names) == 0 {
		// No pass yet: the catalog's names still make the hint.
		cat, _ := c.files.get()
		for _, m := range cat.Models {
			names = append(names, m.Name)
		}
	}
	writeErr(w, http.StatusNotFound, fmt.Sprintf("no model %q", name), suggest.Hint(name, names))
	return controllerapi.ModelView{}, false
}

func (c *Controller) getModel(w http.ResponseWriter, r *http.Request) {
	if m, ok := c.findModel(w, r.PathValue("model")); ok {
		httpjson.WriteIndented(w, http.StatusOK, m)
	}
}

func (c *Controller) getHistory(w http.ResponseWriter, r *http.Request) {
	m, ok := c.findModel(w, r.PathValue("model"))
	if !ok {
		return
	}
	h, _ := c.History(m.Name)
	httpjson.Write(w, http.StatusOK, h)
}

func (c *Controller) getSignals(w http.ResponseWriter, _ *http.Request) {
	httpjson.WriteIndented(w, http.StatusOK, c.Signals())
}

func (c *Controller) putPin(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	m, names, ok := c.files.model(name)
	if !ok {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no model %q in the catalog", name), suggest.Hint(name, names))
		return
	}
	var req controllerapi.PinRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, "body: "+err.Error(), `send {"replicas": 3, "for": "1h", "reason": "..."}`)
		return
	}
	if m.Autoscale == nil {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("model %s has a fixed count (replicas = %d): there is no autoscaler to override", name, m.Replicas),
			"change replicas in the catalog and reload")
		return
	}
	a := m.Autoscale
	if req.Replicas < a.Min || req.Replicas > a.Max {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("replicas: %d is outside model %s's autoscale min %d and max %d", req.Replicas, name, a.Min, a.Max),
			"a pin overrides the autoscaler, not the catalog's bounds: change min or max in the catalog to go beyond them")
		return
	}
	d := DefaultPinFor
	if req.For != "" {
		var err error
		if d, err = time.ParseDuration(req.For); err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("for: %q is not a duration", req.For), `such as "30m", "2h"`)
			return
		}
	}
	if d < MinPinFor || d > MaxPinFor {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("for: %s is outside %s to %s", d, MinPinFor, fmtHours(MaxPinFor)),
			"a pin always expires; set it again to hold it longer")
		return
	}
	now := c.now().UTC()
	p := controllerapi.Pin{Model: name, Replicas: req.Replicas, Until: now.Add(d), Reason: strings.TrimSpace(req.Reason), SetAt: now, SetBy: caller(r)}
	if err := c.store.SetPin(p); err != nil {
		writeErr(w, http.StatusBadGateway, err.Error(), "")
		return
	}
	c.log.Info("pin set", "model", name, "replicas", p.Replicas, "until", p.Until, "by", p.SetBy, "reason", p.Reason)
	httpjson.WriteIndented(w, http.StatusOK, controllerapi.PinAnswer{Pin: p, Warning: c.awaitView(r.Context())})
}

func (c *Controller) deletePin(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	found, err := c.store.ReleasePin(name)
	if err != nil {
		writeErr(w, http.StatusBadGateway, err.Error(), "")
		return
	}
	if !found {
		hint := ""
		if _, names, ok := c.files.model(name); !ok {
			hint = suggest.Hint(name, names)
		}
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no pin on model %q", name), hint)
		return
	}
	c.log.Info("pin released", "model", name, "by", caller(r))
	out := map[string]string{"released": name}
	if warn := c.awaitView(r.Context()); warn != "" {
		out["warning"] = warn
	}
	httpjson.WriteIndented(w, http.StatusOK, out)
}

func fmtHours(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return d.String()
}
