package gateway

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// Body errors.
var (
	errTooLarge   = errors.New("model not found within the scan limit")
	errBusy       = errors.New("gateway body memory exhausted")
	errAbandoned  = errors.New("gateway: request body handed to another attempt")
	errBodyClosed = errors.New("gateway: request body released")
)

// initialScan is the first read's size when the body's length is unknown
// or larger: most requests name their model in the first few hundred bytes.
const initialScan = 4 << 10

var scanBufs = sync.Pool{New: func() any { b := make([]byte, 0, initialScan); return &b }}

// budget bounds the bytes all requests together hold while looking for
// their model.
type budget struct {
	limit int64
	used  atomic.Int64
}

func (b *budget) take(n int64) bool {
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *budget) give(n int64) { b.used.Add(-n) }

// reqBody is a client's request body split in two: the prefix the gateway
// read to find the model, and the rest, still unread in the client's
// connection. Each upstream attempt reads it through its own attemptBody;
// a later attempt may take over only while the rest is untouched, so a
// retry never sends a body with a hole in it. After release, no attempt
// can read, so the prefix buffer can go back to the pool.
type reqBody struct {
	mu       sync.Mutex
	prefix   []byte
	pooled   *[]byte
	held     int64 // bytes of the budget held
	bud      *budget
	rest     io.Reader // nil when the prefix is the whole body
	owner    int
	touched  bool
	released bool
	// clientErr: a read of the rest failed (the client broke off its body).
	clientErr atomic.Bool
}

// readPrefix reads r until the top-level "model" of its JSON object is
// found, at most limit bytes, taking the buffer from bud. contentLength is
// the request's (-1 when unknown). On success the body is ready for
// attempts; on error it is already released.
func readPrefix(r io.Reader, contentLength, limit int64, bud *budget) (*reqBody, string, error) {
	b := &reqBody{bud: bud, pooled: scanBufs.Get().(*[]byte)}
	buf := (*b.pooled)[:0]
	if !bud.take(int64(cap(buf))) {
		b.putBuf(buf)
		return nil, "", errBusy
	}
	b.held = int64(cap(buf))
	var (
		eof     bool
		resume  int
		scanned = -1
		model   string
		scanErr = errShort
	)
	for {
		if int64(len(buf)) == contentLength {
			eof = true
		}
		// Scan when something changed enough: at the end of the body, at
		// the limit, or when the unscanned part has grown by half, so the
		// scans together read the prefix a bounded number of times.
		if len(buf) > scanned && (eof || int64(len(buf)) >= limit || len(buf)-max(scanned, 0) >= max(scanned, 0)/2) {
			model, resume, scanErr = scanModel(buf, resume)
			scanned = len(buf)
			if !errors.Is(scanErr, errShort) {
				break
			}
		}
		if eof {
			scanErr = errBadJSON
			if len(buf) == 0 {
				scanErr = errNoModel
			}
			break
		}
		if int64(len(buf)) >= limit {
			scanErr = errTooLarge
			break
		}
		if len(buf) == cap(buf) {
			grow := int64(min(max(cap(buf), initialScan), int(limit)-cap(buf)))
			if contentLength >= 0 {
				grow = min(grow, contentLength-int64(len(buf)))
			}
			if !bud.take(grow) {
				scanErr = errBusy
				break
			}
			b.held += grow
			nb := make([]byte, len(buf), cap(buf)+int(grow))
			copy(nb, buf)
			b.putBuf(buf)
			buf = nb
		}
		readTo := cap(buf)
		if int64(readTo) > limit {
			readTo = int(limit)
		}
		n, err := r.Read(buf[len(buf):readTo])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			eof = true
		} else if err != nil {
			scanErr = err
			break
		}
	}
	if scanErr != nil {
		b.prefix = buf
		b.release()
		return nil, "", scanErr
	}
	b.prefix = buf
	if !eof && int64(len(buf)) != contentLength {
		b.rest = r
	}
	return b, model, nil
}

// fill reads more of the rest into the prefix, before any attempt, until
// the prefix holds n bytes or the whole body, taking the buffer from the
// budget: the prefix policy keys a request by its body's first bytes.
// It stops short, keeping what it read, when the budget is spent or a read
// fails (an attempt then meets the failure again, as the client's).
// contentLength is the request's (-1 when unknown).
func (b *reqBody) fill(n int, contentLength int64) {
	if contentLength >= 0 {
		n = int(min(int64(n), contentLength))
	}
	if b.rest == nil || len(b.prefix) >= n {
		return
	}
	buf := b.prefix
	if cap(buf) < n {
		grow := int64(n - cap(buf))
		if !b.bud.take(grow) {
			return
		}
		b.held += grow
		nb := make([]byte, len(buf), n)
		copy(nb, buf)
		b.putBuf(buf)
		buf = nb
	}
	for len(buf) < n {
		k, err := b.rest.Read(buf[len(buf):n])
		buf = buf[:len(buf)+k]
		if errors.Is(err, io.EOF) {
			b.rest = nil
			break
		}
		if err != nil {
			break
		}
	}
	if int64(len(buf)) == contentLength {
		b.rest = nil
	}
	b.prefix = buf
}

// putBuf returns buf to the pool when it is the pooled one.
func (b *reqBody) putBuf(buf []byte) {
	if b.pooled != nil && cap(buf) == cap(*b.pooled) && cap(buf) == initialScan {
		*b.pooled = buf[:0]
		scanBufs.Put(b.pooled)
	}
	b.pooled = nil
}

// replace puts nb in place of the whole body (the prefix of a complete
// body), before any attempt: the gateway's own edit of it. The budget
// keeps what it held for the read.
func (b *reqBody) replace(nb []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.putBuf(b.prefix)
	b.prefix = nb
}

// complete reports whether the prefix is the whole body.
func (b *reqBody) complete() bool { return b.rest == nil }

// attempt returns the body for upstream attempt n (from 1). It is the
// caller's to check canRetry first.
func (b *reqBody) attempt(n int) *attemptBody {
	b.mu.Lock()
	b.owner = n
	b.mu.Unlock()
	return &attemptBody{b: b, n: n}
}

// canRetry reports whether another attempt can send the whole body again:
// the rest has not been read by an earlier attempt.
func (b *reqBody) canRetry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.touched && !b.released
}

// release ends every attempt's reads and returns the buffer. An attempt's
// transport may go on reading after the response was handled; it gets
// errBodyClosed.
func (b *reqBody) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return
	}
	b.released = true
	b.putBuf(b.prefix)
	b.prefix = nil
	b.bud.give(b.held)
	b.held = 0
}

// attemptBody is one attempt's view of the request body: the prefix, then
// the rest.
type attemptBody struct {
	b   *reqBody
	n   int
	off int
}

func (a *attemptBody) Read(p []byte) (int, error) {
	b := a.b
	b.mu.Lock()
	if b.released {
		b.mu.Unlock()
		return 0, errBodyClosed
	}
	if b.owner != a.n {
		b.mu.Unlock()
		return 0, errAbandoned
	}
	if a.off < len(b.prefix) {
		n := copy(p, b.prefix[a.off:])
		a.off += n
		b.mu.Unlock()
		return n, nil
	}
	if b.rest == nil {
		b.mu.Unlock()
		return 0, io.EOF
	}
	b.touched = true
	rest := b.rest
	b.mu.Unlock()
	n, err := rest.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.clientErr.Store(true)
	}
	return n, err
}

// clientFailed reports whether reading the client's body failed: an
// attempt that failed then is the client's doing, not the replica's.
func (b *reqBody) clientFailed() bool { return b.clientErr.Load() }

// Close is a no-op: the client's body belongs to the server.
func (a *attemptBody) Close() error { return nil }
