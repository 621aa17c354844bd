package enginemetrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/llmgw/llmgw/engine"
)

// MaxBody bounds a scrape's body: an engine's exposition is tens of KiB.
const MaxBody = 4 << 20

// DefaultTimeout bounds a scrape when the caller's context has no sooner
// deadline.
const DefaultTimeout = 5 * time.Second

// accept asks for the text format every engine serves by default; a
// prometheus_client engine would otherwise be free to answer OpenMetrics.
const accept = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// Scrape fetches base+names.Path ("http://127.0.0.1:8000" + "/metrics")
// with client and parses it. now stamps the sample when the response has
// been read (nil: time.Now). The scrape ends with ctx, and after
// DefaultTimeout at the latest. A status other than 200 is an error
// carrying the start of the body, which is where llama.cpp says to start it
// with --metrics.
func Scrape(ctx context.Context, client *http.Client, base string, names engine.Metrics, now func() time.Time) (Sample, error) {
	if !names.Known() {
		return Sample{}, errors.New("no metrics are known for this engine")
	}
	body, at, err := fetch(ctx, client, strings.TrimSuffix(base, "/")+names.Path, now)
	if err != nil {
		return Sample{}, err
	}
	s, err := Parse(bytes.NewReader(body), names, at)
	if err != nil {
		return Sample{}, fmt.Errorf("scrape %s%s: %w", strings.TrimSuffix(base, "/"), names.Path, err)
	}
	return s, nil
}

// ScrapeAny is Scrape for an engine not known beforehand: it reads
// base+path and finds the engine as ParseAny does.
func ScrapeAny(ctx context.Context, client *http.Client, base, path string, now func() time.Time) (string, Sample, error) {
	url := strings.TrimSuffix(base, "/") + path
	body, at, err := fetch(ctx, client, url, now)
	if err != nil {
		return "", Sample{}, err
	}
	e, s, err := ParseAny(bytes.NewReader(body), at)
	if err != nil {
		return "", Sample{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	return e, s, nil
}

// fetch GETs url and returns its body and when it was read.
func fetch(ctx context.Context, client *http.Client, url string, now func() time.Time) ([]byte, time.Time, error) {
	if client == nil {
		client = http.DefaultClient
	}
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	req.Header.Set("Accept", accept)
	resp, err := client.Do(req)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close() //nolint:errcheck // read only
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("scrape %s: read body: %w", url, err)
	}
	at := now()
	if resp.StatusCode != http.StatusOK {
		return nil, time.Time{}, fmt.Errorf("scrape %s: %s: %s", url, resp.Status, firstLine(body))
	}
	if len(body) > MaxBody {
		return nil, time.Time{}, fmt.Errorf("scrape %s: body over %d bytes", url, MaxBody)
	}
	return body, at, nil
}

// firstLine is the start of a body, for an error message.
func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
