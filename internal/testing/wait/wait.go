// Package wait is how a test waits for something that happens on its
// own time: For polls a condition until it holds or a deadline generous
// enough for a loaded machine passes, and then fails the test, naming
// what it waited for and what it last saw. It asserts nothing about how
// fast anything is; a test that needs a bound on time is written another
// way.
package wait

import (
	"testing"
	"time"
)

// Defaults of For.
const (
	// Timeout is how long For polls before it fails the test.
	Timeout = 30 * time.Second
	// Interval is the pause between two polls.
	Interval = 10 * time.Millisecond
)

type options struct {
	timeout, interval time.Duration
}

// Option changes how For polls.
type Option func(*options)

// Within polls for d instead of Timeout (an e2e test waiting on Nomad
// placing a job may need minutes).
func Within(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Every polls every d instead of Interval (a condition that asks a real
// agent over HTTP need not ask a hundred times a second).
func Every(d time.Duration) Option { return func(o *options) { o.interval = d } }

// For calls cond until it reports done, and fails t with what and cond's
// last word on what it saw when the timeout passes first. It may be called
// from a cleanup (t's context has ended then; For does not look at it).
func For(t testing.TB, what string, cond func() (done bool, saw string), opts ...Option) {
	t.Helper()
	o := options{timeout: Timeout, interval: Interval}
	for _, opt := range opts {
		opt(&o)
	}
	deadline := time.Now().Add(o.timeout)
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for {
		done, saw := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			if saw == "" {
				t.Fatalf("waited %s for %s", o.timeout, what)
			}
			t.Fatalf("waited %s for %s; last saw: %s", o.timeout, what, saw)
		}
		// Not cut short by t.Context(): a cleanup may wait too, and the
		// test's context has ended by then.
		<-tick.C
	}
}

// Until is For for a condition with nothing to say about what it saw.
func Until(t testing.TB, what string, cond func() bool, opts ...Option) {
	t.Helper()
	For(t, what, func() (bool, string) { return cond(), "" }, opts...)
}
