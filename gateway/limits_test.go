package gateway

import (
	"testing"
	"time"
)

// TestLimiterReconfigure: a key's buckets keep what they hold across a
// reload, within the new size; a limit that was none starts full; the
// share divides every limit.
func TestLimiterReconfigure(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := &keyLimiter{}
	l.configure(&Key{RequestsPerMinute: 10}, 1)
	for range 8 {
		if _, r, _ := l.reserve(now, 0); r != "" {
			t.Fatal(r)
		}
		l.settle(now, 0, 0, true, true)
	}
	l.configure(&Key{RequestsPerMinute: 20, TokensPerMinute: 100, MaxConcurrency: 3}, 1)
	if l.reqs != 2 || l.toks != 100 || l.conc != 3 {
		t.Errorf("after raising: reqs %v toks %v conc %d, want 2 kept, 100 new and full, 3", l.reqs, l.toks, l.conc)
	}
	l.configure(&Key{RequestsPerMinute: 20, TokensPerMinute: 100, MaxConcurrency: 3}, 0.5)
	if l.rpm != 10 || l.tpm != 50 || l.conc != 1 || l.toks != 50 {
		t.Errorf("half: rpm %v tpm %v conc %d toks %v", l.rpm, l.tpm, l.conc, l.toks)
	}
	// An estimate over the whole bucket takes the whole bucket, not never.
	taken, r, _ := l.reserve(now, 1_000)
	if r != "" || taken != 50 {
		t.Errorf("estimate over the bucket: taken %v, refused %q", taken, r)
	}
	// Used more than taken: the bucket goes below zero and the key waits.
	l.settle(now, taken, 80, true, true)
	if l.toks != -30 {
		t.Errorf("toks %v, want -30", l.toks)
	}
	_, r, retry := l.reserve(now, 10)
	if r != reasonTPM || retry != time.Duration(40.0/50*float64(time.Minute)) {
		t.Errorf("refused %q, retry %s", r, retry)
	}
}
