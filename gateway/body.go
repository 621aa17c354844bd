package gateway

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// Body errors.
var (
	errTooLarge = errors.New("request body over the route's limit")
	errBusy     = errors.New("gateway body memory exhausted")
)

// initialScan is the first buffer's size when the body's length is
// unknown, and the pooled buffer's: most requests are a few KiB.
const initialScan = 4 << 10

var scanBufs = sync.Pool{New: func() any { b := make([]byte, 0, initialScan); return &b }}

// budget bounds the bytes all requests' bodies together hold.
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

// reqBody is a client's request body, held whole in memory: every
// upstream attempt sends it whole. Its buffer goes back to the pool on
// release, once no attempt is under way: the upstream client writes a
// body up to maxInlineBody before Do returns, and a larger one, which
// net/http's Transport may go on reading after, is never in a pooled
// buffer.
type reqBody struct {
	mu       sync.Mutex
	prefix   []byte // the whole body (the name is from when it was the part before "model")
	pooled   *[]byte
	held     int64 // bytes of the budget held
	bud      *budget
	released bool
}

// readBody reads the whole of r, at most limit bytes (errTooLarge past
// them, before reading when contentLength already says so), taking the
// buffer from bud (errBusy when it is spent). contentLength is the
// request's (-1 when unknown). On error the body is already released.
func readBody(r io.Reader, contentLength, limit int64, bud *budget) (*reqBody, error) {
	if contentLength > limit {
		return nil, errTooLarge
	}
	b := &reqBody{bud: bud}
	var buf []byte
	switch {
	case contentLength >= 0 && contentLength > initialScan:
		if !bud.take(contentLength) {
			return nil, errBusy
		}
		b.held = contentLength
		buf = make([]byte, 0, contentLength)
	default:
		if !bud.take(initialScan) {
			return nil, errBusy
		}
		b.held = initialScan
		b.pooled = scanBufs.Get().(*[]byte)
		buf = (*b.pooled)[:0]
	}
	for {
		if len(buf) == cap(buf) {
			if contentLength >= 0 && int64(len(buf)) == contentLength {
				break // net/http ends the body at its length
			}
			if int64(len(buf)) >= limit {
				// One byte more tells a body of exactly limit bytes
				// from a longer one.
				var one [1]byte
				n, err := io.ReadFull(r, one[:])
				if n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
					break
				}
				b.prefix = buf
				b.release()
				if err != nil && n == 0 {
					return nil, err
				}
				return nil, errTooLarge
			}
			grow := min(int64(cap(buf)), limit-int64(cap(buf)))
			if !bud.take(grow) {
				b.prefix = buf
				b.release()
				return nil, errBusy
			}
			b.held += grow
			nb := make([]byte, len(buf), int64(cap(buf))+grow)
			copy(nb, buf)
			b.putBuf(buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.prefix = buf
			b.release()
			return nil, err
		}
	}
	b.prefix = buf
	return b, nil
}

// putBuf returns buf to the pool when it is the pooled one.
func (b *reqBody) putBuf(buf []byte) {
	if b.pooled != nil && cap(buf) == cap(*b.pooled) && cap(buf) == initialScan {
		*b.pooled = buf[:0]
		scanBufs.Put(b.pooled)
	}
	b.pooled = nil
}

// replace puts nb in place of the whole body, before any attempt: the
// gateway's own edit of it. The budget keeps what it held for the read.
func (b *reqBody) replace(nb []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.putBuf(b.prefix)
	b.prefix = nb
}

// bytes is the whole body as it is now (nil once released).
func (b *reqBody) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.prefix
}

// release returns the buffer and the budget it held.
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

// bodyLimitError is the 413's message.
func bodyLimitError(path string, limit int64, setting string) string {
	return fmt.Sprintf("The request body is larger than %d bytes, the gateway's limit for POST %s (its setting %s).", limit, path, setting)
}
