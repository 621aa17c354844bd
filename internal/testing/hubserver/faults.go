package hubserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Stats counts what the server did for one file of a repository. The
// counts are exact: each is updated before the response it counts ends.
type Stats struct {
	// Heads is the HEAD requests for the file (resolve or blob URL).
	Heads int
	// Gets is the GET requests that reached the file's bytes (at the
	// resolve URL, or the blob URL in redirect mode): not those refused by a
	// fault or an error, nor resolve's redirects. For file "" it is the
	// repository's model-info requests answered.
	Gets int
	// Redirects is the resolve requests (GET or HEAD) answered with a 302
	// to the blob URL.
	Redirects int
	// BodyBytes is the body bytes written for the file over all its GETs,
	// as they went out (a cut GET counts the bytes before the cut).
	BodyBytes int64
	// RangeStarts has one item per GET in Gets, in order: the first byte the
	// request asked for (0 without a Range header, size-N for bytes=-N, -1
	// for a Range header that is not a byte range).
	RangeStarts []int64
}

type statKey struct{ repo, file string }

// Stats returns a copy of the counters of repo's file (the path inside the
// repository; "" for the model-info requests).
func (s *Server) Stats(repo, file string) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats[statKey{repo, file}]
	if st == nil {
		return Stats{}
	}
	c := *st
	c.RangeStarts = append([]int64(nil), st.RangeStarts...)
	return c
}

// Requests is the number of requests the server has received, of any
// kind, answered or refused.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func (s *Server) count(repo, file string, f func(*Stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := statKey{repo, file}
	st := s.stats[k]
	if st == nil {
		st = &Stats{}
		s.stats[k] = st
	}
	f(st)
}

type faultKind int

const (
	faultRefuse faultKind = iota
	faultCut
	faultCorrupt
	faultStall
	faultThrottle
)

// BeforeHeaders is Stall's after for a stall before the response's status
// line and headers.
const BeforeHeaders int64 = -1

// fault is one armed fault. repo and file "" match any.
type fault struct {
	kind       faultKind
	repo, file string
	times      int // requests left; 0: until ClearFaults
	status     int
	after      int64
	hold       time.Duration
	bps        int64
	release    chan struct{}
	once       sync.Once
}

func (f *fault) matches(kind faultKind, repo, file string) bool {
	return f.kind == kind && (f.repo == "" || f.repo == repo) && (f.file == "" || f.file == file)
}

// takeLocked returns the first armed fault of kind matching (repo, file)
// and uses one of its times.
func (s *Server) takeLocked(kind faultKind, repo, file string) *fault {
	for i, f := range s.faults {
		if !f.matches(kind, repo, file) {
			continue
		}
		if f.times > 0 {
			f.times--
			if f.times == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		return f
	}
	return nil
}

func (s *Server) arm(f *fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
}

// Each fault below applies to the requests for repo's file, "" matching any
// repository or any file, and to the next times of them (0: every one until
// ClearFaults). Cut, Corrupt, Stall and Throttle act on GETs of a file's
// bytes (the resolve URL, or the blob URL in redirect mode); Refuse on any
// request. When several faults of one kind match, the first armed applies.

// Cut ends GETs of the file after n body bytes: the bytes are flushed and
// the connection is closed mid-body, so the client reads n bytes and then
// an unexpected EOF. A body of n bytes or less is not cut.
func (s *Server) Cut(repo, file string, n int64, times int) {
	s.arm(&fault{kind: faultCut, repo: repo, file: file, after: n, times: times})
}

// Corrupt serves the file's bytes inverted (each byte XOR 0xff) in GETs;
// the size and the advertised sha256 stay the real ones.
func (s *Server) Corrupt(repo, file string, times int) {
	s.arm(&fault{kind: faultCorrupt, repo: repo, file: file, times: times})
}

// Stall holds GETs of the file: before the status line and headers when
// after is BeforeHeaders, else once the headers and after body bytes are
// out (flushed). A stall lasts d, or when d is 0 until release is called;
// it ends early when the request's context ends (the client went away) or
// the server closes. release ends the stalls in progress and disarms the
// fault; it may be called more than once.
func (s *Server) Stall(repo, file string, after int64, d time.Duration, times int) (release func()) {
	f := &fault{kind: faultStall, repo: repo, file: file, after: after, hold: d, times: times, release: make(chan struct{})}
	s.arm(f)
	return func() {
		f.once.Do(func() { close(f.release) })
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, g := range s.faults {
			if g == f {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
				break
			}
		}
	}
}

// Refuse answers the next times requests for repo's file with status and
// the hub's JSON error body (no X-Error-Code). file "" matches any request
// of repo, model-info requests included; repo "" any request.
func (s *Server) Refuse(repo, file string, status, times int) {
	s.arm(&fault{kind: faultRefuse, repo: repo, file: file, status: status, times: times})
}

// Throttle limits every GET of the file to about bytesPerSecond, each
// response on its own, until ClearFaults; it writes in slices of a tenth of
// a second and flushes each.
func (s *Server) Throttle(repo, file string, bytesPerSecond int64) {
	if bytesPerSecond <= 0 {
		return
	}
	s.arm(&fault{kind: faultThrottle, repo: repo, file: file, bps: bytesPerSecond})
}

// ClearFaults disarms every fault and releases the stalls in progress.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	fs := s.faults
	s.faults = nil
	s.mu.Unlock()
	for _, f := range fs {
		if f.release != nil {
			f.once.Do(func() { close(f.release) })
		}
	}
}

// open returns the entry's bytes.
func (e *entry) open() (io.ReadSeeker, io.Closer, error) {
	if e.disk == "" {
		return bytes.NewReader(e.data), io.NopCloser(nil), nil
	}
	f, err := os.Open(e.disk)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	if st.Size() != e.size {
		_ = f.Close()
		return nil, nil, errors.New(e.disk + " changed size since it was added")
	}
	return f, f, nil
}

// serveFile answers a HEAD or GET of e's bytes with ServeContent, through
// the faults armed for it.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, repo, file string, e *entry) {
	rs, closer, err := e.open()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	defer func() { _ = closer.Close() }() // read only
	w.Header().Set("Content-Type", "application/octet-stream")
	if r.Method == http.MethodHead {
		s.count(repo, file, func(st *Stats) { st.Heads++ })
		http.ServeContent(w, r, path.Base(file), time.Time{}, rs)
		return
	}

	s.mu.Lock()
	cut := s.takeLocked(faultCut, repo, file)
	corrupt := s.takeLocked(faultCorrupt, repo, file)
	stall := s.takeLocked(faultStall, repo, file)
	throttle := s.takeLocked(faultThrottle, repo, file)
	s.mu.Unlock()

	start := rangeStart(r.Header.Get("Range"), e.size)
	s.count(repo, file, func(st *Stats) {
		st.Gets++
		st.RangeStarts = append(st.RangeStarts, start)
	})
	if corrupt != nil {
		rs = flipReader{rs}
	}
	bw := &bodyWriter{ResponseWriter: w, s: s, key: statKey{repo, file}, ctx: r.Context(), cut: -1, stallAt: -1}
	if cut != nil {
		bw.cut = cut.after
	}
	if throttle != nil {
		bw.bps = throttle.bps
	}
	if stall != nil {
		if stall.after == BeforeHeaders {
			if bw.hold(stall) != nil {
				return
			}
		} else {
			bw.stall, bw.stallAt = stall, stall.after
		}
	}
	http.ServeContent(bw, r, path.Base(file), time.Time{}, rs)
}

// rangeStart is the first byte a Range header asks for (see
// Stats.RangeStarts).
func rangeStart(h string, size int64) int64 {
	if h == "" {
		return 0
	}
	spec, ok := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !ok {
		return -1
	}
	first, _, _ := strings.Cut(spec, ",")
	a, b, ok := strings.Cut(strings.TrimSpace(first), "-")
	if !ok {
		return -1
	}
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	if a == "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 0 {
			return -1
		}
		return max(size-n, 0)
	}
	n, err := strconv.ParseInt(a, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// flipReader inverts every byte it reads.
type flipReader struct{ io.ReadSeeker }

func (f flipReader) Read(p []byte) (int, error) {
	n, err := f.ReadSeeker.Read(p)
	for i := range p[:n] {
		p[i] ^= 0xff
	}
	return n, err
}

// errClosed ends a stall or a throttle when the server closes.
var errClosed = errors.New("hubserver: closed")

// bodyWriter is the ResponseWriter ServeContent writes a GET's body to: it
// counts the bytes and applies the cut, the stall and the throttle.
type bodyWriter struct {
	http.ResponseWriter
	s   *Server
	key statKey
	ctx context.Context

	n       int64 // body bytes written
	cut     int64 // -1: none
	stall   *fault
	stallAt int64 // -1: none (or done)
	bps     int64
}

func (b *bodyWriter) flush() {
	_ = http.NewResponseController(b.ResponseWriter).Flush()
}

// hold waits out a stall.
func (b *bodyWriter) hold(f *fault) error {
	var timeout <-chan time.Time
	if f.hold > 0 {
		t := time.NewTimer(f.hold)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-f.release:
		return nil
	case <-timeout:
		return nil
	case <-b.ctx.Done():
		return b.ctx.Err()
	case <-b.s.done:
		return errClosed
	}
}

// sleep waits d, or less when the request or the server ends.
func (b *bodyWriter) sleep(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-b.ctx.Done():
		return b.ctx.Err()
	case <-b.s.done:
		return errClosed
	}
}

func (b *bodyWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if b.stallAt >= 0 && b.n >= b.stallAt {
			b.stallAt = -1
			b.flush()
			if err := b.hold(b.stall); err != nil {
				return written, err
			}
		}
		chunk := p
		if b.stallAt >= 0 && int64(len(chunk)) > b.stallAt-b.n {
			chunk = chunk[:b.stallAt-b.n]
		}
		cutNow := false
		if b.cut >= 0 && b.n+int64(len(chunk)) > b.cut {
			chunk = chunk[:b.cut-b.n]
			cutNow = true
		}
		step := max(b.bps/10, 1)
		if b.bps > 0 && int64(len(chunk)) > step {
			chunk = chunk[:step]
		}
		m, err := b.ResponseWriter.Write(chunk)
		b.n += int64(m)
		written += m
		if m > 0 {
			b.s.count(b.key.repo, b.key.file, func(st *Stats) { st.BodyBytes += int64(m) })
		}
		if err != nil {
			return written, err
		}
		p = p[m:]
		if cutNow {
			b.flush()
			// net/http closes the connection without a response end and
			// without logging: the client sees the body stop short.
			panic(http.ErrAbortHandler)
		}
		if b.bps > 0 && m > 0 {
			b.flush()
			if err := b.sleep(time.Duration(int64(m) * int64(time.Second) / b.bps)); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}
