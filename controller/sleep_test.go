package controller

import (
	"net/http"
	"testing"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// The controller reads llama.cpp's real server's sleep from its own state
// (/props' is_sleeping) without waking it: asleep after its idle seconds,
// read asleep again and again, awake after a completion.
func TestRealLlamaCppSleepState(t *testing.T) {
	d, _ := engine.Lookup(engine.LlamaCpp)
	if d.Sleep == nil {
		t.Fatal("llama.cpp's descriptor has no sleep mode")
	}
	s := realengine.Start(t, realengine.TinyModel(t), d.Sleep.IdleFlag, "1")
	client := &http.Client{}
	read := func() (bool, string) {
		asleep, err := readSleep(t.Context(), client, s.URL, d.Sleep)
		if err != nil {
			return false, err.Error()
		}
		return asleep, "awake"
	}
	wait.For(t, "the engine asleep", read)
	for range 3 { // reading does not wake it
		if asleep, err := readSleep(t.Context(), client, s.URL, d.Sleep); err != nil || !asleep {
			t.Fatalf("read again: asleep %v, %v", asleep, err)
		}
	}
	if code, b := realengine.Post(t, s.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`); code != 200 {
		t.Fatalf("completion: %d %s", code, b)
	}
	if asleep, err := readSleep(t.Context(), client, s.URL, d.Sleep); err != nil || asleep {
		t.Errorf("after a completion: asleep %v, %v; want awake", asleep, err)
	}
}
