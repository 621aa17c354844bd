package controller

import (
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
)

// phaseEvents are the task events that mark a replica's start: the start
// of the event's message, and the phase. The driver's words
// (driver/weights.go, driver/fetch.go, driver/plugin.go, driver/events.go).
// The fetch's phases come from the prestart task where there is one, else
// from the engine task, which then fetched itself.
var phaseEvents = []struct{ prefix, name string }{
	{"Fetch started", "fetch_started"},
	{"Fetch finished", "fetch_finished"},
	{"Weights present", "weights_present"},
	{"Started ", "engine_started"},
	{"Loading the model: 100%", "model_loaded"},
	{"Ready after", "ready"},
}

// phases reads a replica's start from its allocation's task events.
func phases(a *api.AllocationListStub) []controllerapi.Phase {
	if a == nil {
		return nil
	}
	out := []controllerapi.Phase{{Name: "placed", At: time.Unix(0, a.CreateTime).UTC()}}
	for _, pe := range phaseEvents {
	tasks:
		for _, task := range []string{render.FetchTaskName, render.TaskName} {
			ts := a.TaskStates[task]
			if ts == nil {
				continue
			}
			for _, e := range ts.Events {
				msg := e.DisplayMessage
				if msg == "" {
					msg = e.Message
				}
				if strings.HasPrefix(msg, pe.prefix) {
					out = append(out, controllerapi.Phase{Name: pe.name, At: time.Unix(0, e.Time).UTC(), Detail: msg})
					break tasks
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}
