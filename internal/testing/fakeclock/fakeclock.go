// Package fakeclock is the tests' one settable clock: a Clock's Now is
// what a test injects where the code under test reads the time
// (nomadfake.WithClock, the controller's and the gateway's Options.Now, a
// driver's now), and it moves only when the test moves it (Advance, Set).
// It counts its reads, so that a test can wait (with wait.For) until the
// code under test has looked at a time it set. It is safe for concurrent
// use.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a settable clock.
type Clock struct {
	mu    sync.Mutex
	now   time.Time
	reads int
}

// New returns a clock that reads start until it is moved.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time and counts the read.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.now
}

// Advance moves the clock d forward (back, for a negative d).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Reads is how many times Now has been called.
func (c *Clock) Reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}
