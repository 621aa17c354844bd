package wait_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/wait"
)

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	n := 0
	wait.For(t, "the third call", func() (bool, string) { n++; return n == 3, "" })
	if n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}
}

// fakeT records a Fatalf and ends its goroutine as testing.T's does.
type fakeT struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = strings.TrimSpace(strings.ReplaceAll(format, "%s", "·"))
	for _, a := range args {
		f.msg += " | " + toString(a)
	}
	f.mu.Unlock()
	panic(fatal{})
}

type fatal struct{}

func toString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case time.Duration:
		return v.String()
	}
	return "?"
}

func TestForFailsNamingWhatAndTheLastSaw(t *testing.T) {
	t.Parallel()
	ft := &fakeT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(fatal); !ok {
					panic(r)
				}
			}
		}()
		wait.For(ft, "the replica", func() (bool, string) { return false, "2 of 3 serving" }, wait.Within(30*time.Millisecond), wait.Every(time.Millisecond))
	}()
	if !strings.Contains(ft.msg, "the replica") || !strings.Contains(ft.msg, "2 of 3 serving") {
		t.Errorf("failure %q: want what and the last saw", ft.msg)
	}
}

// A cleanup may wait: the test's context has ended by then, and For
// still polls until the condition holds.
func TestForInACleanup(t *testing.T) {
	t.Parallel()
	n := 0
	t.Run("sub", func(t *testing.T) {
		t.Cleanup(func() {
			wait.For(t, "the third call, in a cleanup", func() (bool, string) { n++; return n == 3, "" })
		})
	})
	if n != 3 {
		t.Errorf("cond called %d times in the cleanup, want 3", n)
	}
}
