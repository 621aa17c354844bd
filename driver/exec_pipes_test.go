package driver

import (
	"errors"
	"os"
	"testing"
)

// When the third pipe cannot be opened, the two opened before are closed:
// ExecTask's error path leaks no descriptor in the long-lived plugin.
func TestOpenPipesClosesWhatItOpenedOnError(t *testing.T) {
	var opened []*os.File
	calls := 0
	fail := errors.New("too many open files")
	open := func() (*os.File, *os.File, error) {
		calls++
		if calls == 3 {
			return nil, nil, fail
		}
		r, w, err := os.Pipe()
		if err == nil {
			opened = append(opened, r, w)
		}
		return r, w, err
	}
	if _, err := openPipes(3, open); !errors.Is(err, fail) {
		t.Fatalf("openPipes: %v, want the open error", err)
	}
	if len(opened) != 4 {
		t.Fatalf("%d files opened, want 4", len(opened))
	}
	for _, f := range opened {
		if err := f.Close(); !errors.Is(err, os.ErrClosed) {
			t.Errorf("%s was left open (closing it now: %v)", f.Name(), err)
		}
	}
	ps, err := openPipes(2, os.Pipe)
	if err != nil || len(ps) != 2 {
		t.Fatalf("openPipes(2): %v, %d pipes", err, len(ps))
	}
	for _, p := range ps {
		_ = p.r.Close()
		_ = p.w.Close()
	}
}
