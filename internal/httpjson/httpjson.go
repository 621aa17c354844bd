// Package httpjson writes the JSON answers of llmgw's HTTP servers (the
// controller's API, the gateway's): the body marshalled whole before the
// status goes out, with its Content-Type and Content-Length.
package httpjson

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Write answers status with v as compact JSON, no trailing newline: the
// gateway's OpenAI-compatible answers.
func Write(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	write(w, status, b, err)
}

// WriteIndented answers status with v as JSON indented by two spaces and
// ending in a newline, for an API read with curl: the controller's.
func WriteIndented(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	write(w, status, append(b, '\n'), err)
}

// write sends b, or, when v could not be marshalled, a 500 naming why.
func write(w http.ResponseWriter, status int, b []byte, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
