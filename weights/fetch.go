package weights

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"
)

// chunk is how much is read, limited and written at a time.
const chunk = 256 << 10

// progressEvery is how often a running fetch reports its progress.
const progressEvery = 5 * time.Second

type fileResult struct {
	transferred int64 // bytes read from the network this time
	resumed     int64 // bytes kept from an earlier cut fetch
	size        int64
	sha256      string
}

// download fetches f into part, resuming from what part already holds
// (a Range request from its size; the bytes kept are hashed again, so
// the check covers the whole file), and verifies size and sha256. A file
// that differs from its sha256 is removed, so the next try starts over.
func (c *client) download(ctx context.Context, f File, part string, limiter *rate.Limiter, now func() time.Time,
	stall time.Duration, progress func(done, total int64, rate float64)) (fileResult, error) {
	var res fileResult
	out, err := os.OpenFile(part, os.O_CREATE|os.O_RDWR, 0o644) //nolint:gosec // weights are read by the engines' users
	if err != nil {
		return res, permanent{fmt.Errorf("model store: %w", err)}
	}
	defer func() { _ = out.Close() }()
	fi, err := out.Stat()
	if err != nil {
		return res, err
	}
	have := fi.Size()
	if f.Size >= 0 && have > f.Size {
		have = 0
	}
	h := sha256.New()
	if have > 0 {
		if _, err := io.CopyN(h, out, have); err != nil {
			return res, fmt.Errorf("model store: rehash %s: %w", part, err)
		}
	}
	if err := out.Truncate(have); err != nil {
		return res, err
	}
	if _, err := out.Seek(have, io.SeekStart); err != nil {
		return res, err
	}
	res.resumed = have

	if f.Size < 0 || have < f.Size {
		n, err := c.get(ctx, f, out, h, have, limiter, now, stall, progress)
		res.transferred = n.transferred
		if n.restarted {
			res.resumed = 0
		}
		if err != nil {
			return res, err
		}
		have = n.size
	}
	if err := out.Sync(); err != nil {
		return res, err
	}
	res.size = have
	res.sha256 = hex.EncodeToString(h.Sum(nil))
	if f.Size >= 0 && have != f.Size {
		_ = os.Remove(part)
		return res, fmt.Errorf("%s is %d bytes, the source says %d; removed, fetching again", f.Name, have, f.Size)
	}
	if f.SHA256 != "" && res.sha256 != f.SHA256 {
		_ = os.Remove(part)
		return res, fmt.Errorf("%s: sha256 %s, want %s: refused and removed, fetching again", f.Name, res.sha256, f.SHA256)
	}
	return res, nil
}

type getResult struct {
	transferred int64
	size        int64
	restarted   bool // the source ignored the range: started over
}

func (c *client) get(ctx context.Context, f File, out *os.File, h hash.Hash, have int64, limiter *rate.Limiter,
	now func() time.Time, stall time.Duration, progress func(done, total int64, rate float64)) (getResult, error) {
	r := getResult{size: have}
	// A request that gets no headers, or no byte of its body, for stall
	// is ended: the try fails and the next resumes.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stalled := fmt.Errorf("%s: nothing received for %s", redact(f.URL), stall)
	watchdog := time.AfterFunc(stall, func() { cancel(stalled) })
	defer watchdog.Stop()
	req, err := c.request(ctx, http.MethodGet, f.URL)
	if err != nil {
		return r, permanent{err}
	}
	req.Header.Set("Accept-Encoding", "identity")
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, stalled) {
			return r, stalled
		}
		return r, fmt.Errorf("%s: %w", redact(f.URL), err)
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusOK:
		if have > 0 {
			// The source ignored the range: start over.
			if err := out.Truncate(0); err != nil {
				return r, err
			}
			if _, err := out.Seek(0, io.SeekStart); err != nil {
				return r, err
			}
			h.Reset()
			r.size, r.restarted = 0, true
		}
	case http.StatusPartialContent:
		start, ok := rangeStart(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			return r, fmt.Errorf("%s: asked from byte %d, got Content-Range %q", redact(f.URL), have, resp.Header.Get("Content-Range"))
		}
	case http.StatusRequestedRangeNotSatisfiable:
		// What is kept is longer than the file now: start over.
		if err := out.Truncate(0); err != nil {
			return r, err
		}
		return r, fmt.Errorf("%s: range from byte %d not satisfiable: starting over", redact(f.URL), have)
	default:
		return r, httpError(resp)
	}
	total := f.Size
	buf := make([]byte, chunk)
	last, lastBytes := now(), r.size
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			watchdog.Reset(stall)
			if limiter != nil {
				if err := limiter.WaitN(ctx, n); err != nil {
					return r, err
				}
			}
			if _, err := out.Write(buf[:n]); err != nil {
				return r, err
			}
			h.Write(buf[:n])
			r.size += int64(n)
			r.transferred += int64(n)
			if total >= 0 && r.size > total {
				return r, fmt.Errorf("%s: more than the %d bytes the source said", redact(f.URL), total)
			}
			if t := now(); t.Sub(last) >= progressEvery {
				progress(r.size, total, float64(r.size-lastBytes)/t.Sub(last).Seconds())
				last, lastBytes = t, r.size
			}
		}
		if errors.Is(rerr, io.EOF) {
			return r, nil
		}
		if rerr != nil {
			if cause := context.Cause(ctx); errors.Is(cause, stalled) {
				return r, fmt.Errorf("%w (after %d bytes)", stalled, r.size)
			}
			return r, fmt.Errorf("%s: cut after %d bytes: %w", redact(f.URL), r.size, rerr)
		}
	}
}

// rangeStart reads the first byte of a Content-Range "bytes a-b/n".
func rangeStart(cr string) (int64, bool) {
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, false
	}
	a, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(a, 10, 64)
	return n, err == nil
}
