package httpjson

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// sample holds what the servers answer with: nesting, omitted fields,
// characters JSON escapes for HTML, a map whose keys are sorted.
var sample = map[string]any{
	"error": map[string]any{"message": "no model \"x<y>&z\"", "type": "invalid_request_error", "code": nil},
	"data":  []any{map[string]any{"id": "m-1", "object": "model"}, 3.5, true},
	"hint": struct {
		A string `json:"a,omitempty"`
		B []int  `json:"b"`
	}{B: []int{1, 2}},
}

func check(t *testing.T, name string, rec *httptest.ResponseRecorder, status int, body []byte) {
	t.Helper()
	if rec.Code != status {
		t.Errorf("%s: status %d, want %d", name, rec.Code, status)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", name, ct)
	}
	if cl := rec.Header().Get("Content-Length"); cl != strconv.Itoa(len(body)) {
		t.Errorf("%s: Content-Length %q, want %d", name, cl, len(body))
	}
	if !bytes.Equal(rec.Body.Bytes(), body) {
		t.Errorf("%s: body\n%q\nwant\n%q", name, rec.Body.Bytes(), body)
	}
}

// Write's body is json.Marshal's, byte for byte: no indent, no newline.
func TestWrite(t *testing.T) {
	t.Parallel()
	want, err := json.Marshal(sample)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	Write(rec, http.StatusNotFound, sample)
	check(t, "Write", rec, http.StatusNotFound, want)
	if bytes.HasSuffix(rec.Body.Bytes(), []byte("\n")) {
		t.Error("Write's body ends in a newline")
	}
}

// WriteIndented's body is what a json.Encoder indenting by two spaces
// writes, trailing newline included.
func TestWriteIndented(t *testing.T) {
	t.Parallel()
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetIndent("", "  ")
	if err := enc.Encode(sample); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	WriteIndented(rec, http.StatusOK, sample)
	check(t, "WriteIndented", rec, http.StatusOK, want.Bytes())
}

// A value JSON cannot hold is a 500 that says why, not a partial body.
func TestUnmarshalable(t *testing.T) {
	t.Parallel()
	for name, write := range map[string]func(http.ResponseWriter, int, any){"Write": Write, "WriteIndented": WriteIndented} {
		rec := httptest.NewRecorder()
		write(rec, http.StatusOK, map[string]float64{"watts": math.NaN()})
		if rec.Code != http.StatusInternalServerError || !bytes.Contains(rec.Body.Bytes(), []byte("NaN")) {
			t.Errorf("%s of NaN: %d %q, want a 500 naming NaN", name, rec.Code, rec.Body.String())
		}
	}
}
