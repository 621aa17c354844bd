package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// maxPending bounds what a sink keeps while its FIFO has no reader.
const maxPending = 256 << 10

// retryEvery is how often a sink without a reader tries to open its FIFO.
const retryEvery = time.Second

// Sink writes one output stream of the engine into a Nomad log FIFO.
//
// The FIFO is opened safely: without following a symlink in its last
// component, and only if it is a FIFO (or the null device, which Nomad
// passes when a task's logs are disabled). When nobody reads it (ENXIO on
// open, EPIPE on write: the Nomad client and its log collector are
// restarting), the sink keeps the most recent output in a bounded buffer,
// tries again at most once a second, and never fails the engine: a log
// reader that went away must not stop or block the model.
type Sink struct {
	path    string
	f       *os.File
	pending []byte
	nextTry time.Time
	dropped int64
	now     func() time.Time
	// Problems is called with open or write trouble worth a log line.
	problems func(error)
}

// NewSink returns a sink for path; an empty path discards.
func NewSink(path string, problems func(error)) *Sink {
	if problems == nil {
		problems = func(error) {}
	}
	return &Sink{path: path, now: time.Now, problems: problems}
}

// ErrNotFIFO is returned for a log path that is neither a FIFO nor the
// null device.
var ErrNotFIFO = errors.New("not a FIFO")

// OpenFIFO opens path for writing without blocking and without following
// a final symlink, and checks that it is a FIFO (or /dev/null).
func OpenFIFO(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close() //nolint:errcheck,gosec // the stat error is the one to report
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	mode := fi.Mode()
	ok := mode&fs.ModeNamedPipe != 0 || (path == os.DevNull && mode&fs.ModeCharDevice != 0)
	if !ok {
		f.Close() //nolint:errcheck,gosec // refusing the file is what matters
		return nil, fmt.Errorf("%s: %w (mode %s)", path, ErrNotFIFO, mode)
	}
	return f, nil
}

// Write implements io.Writer; it never returns an error.
func (s *Sink) Write(p []byte) (int, error) {
	if s.path == "" {
		return len(p), nil
	}
	if s.f == nil && !s.open() {
		s.keep(p)
		return len(p), nil
	}
	if len(s.pending) > 0 {
		buf := s.pending
		s.pending = nil
		if !s.write(buf) {
			s.keep(p)
			return len(p), nil
		}
	}
	s.write(p)
	return len(p), nil
}

func (s *Sink) write(p []byte) bool {
	n, err := s.f.Write(p)
	if err == nil {
		return true
	}
	if errors.Is(err, syscall.EPIPE) {
		s.problems(fmt.Errorf("log reader of %s went away; re-opening", s.path))
	} else {
		s.problems(fmt.Errorf("write %s: %w", s.path, err))
	}
	s.f.Close() //nolint:errcheck,gosec // the fd is being replaced
	s.f = nil
	s.keep(p[n:])
	s.nextTry = time.Time{}
	return false
}

func (s *Sink) open() bool {
	now := s.now()
	if now.Before(s.nextTry) {
		return false
	}
	s.nextTry = now.Add(retryEvery)
	f, err := OpenFIFO(s.path)
	if err != nil {
		if !errors.Is(err, syscall.ENXIO) { // ENXIO: no reader yet
			s.problems(fmt.Errorf("open log FIFO: %w", err))
		}
		return false
	}
	s.f = f
	if s.dropped > 0 {
		msg := fmt.Sprintf("[llmgw supervisor: %d bytes of output dropped while no log reader was attached]\n", s.dropped)
		s.dropped = 0
		s.write([]byte(msg))
	}
	return s.f != nil
}

func (s *Sink) keep(p []byte) {
	s.pending = append(s.pending, p...)
	if over := len(s.pending) - maxPending; over > 0 {
		s.dropped += int64(over)
		s.pending = append([]byte(nil), s.pending[over:]...)
	}
}

// Close flushes what it can and closes the FIFO.
func (s *Sink) Close() error {
	if s.path == "" {
		return nil
	}
	if len(s.pending) > 0 {
		s.nextTry = time.Time{}
		if s.f != nil || s.open() {
			buf := s.pending
			s.pending = nil
			s.write(buf)
		}
	}
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
