package h1

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// holdBeforeChunking is how much of a body of unknown length is held
// before the headers go out: a body that ends within it is sent with a
// Content-Length, a longer one chunked (as net/http does, with its size).
const holdBeforeChunking = 2048

// response is the http.ResponseWriter of one request.
type response struct {
	c      *conn
	req    *http.Request
	body   *eofBody
	header http.Header

	status        int
	wroteHeader   bool // WriteHeader has run (the status is set)
	committed     bool // the status line and headers are in c.bw
	contentLength int64
	written       int64 // body bytes accepted
	chunked       bool
	http10, head  bool
	closeAfter    bool
	pending       []byte // body held before commit (unknown length)
}

func (w *response) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header, 8)
	}
	return w.header
}

func (w *response) WriteHeader(code int) {
	if w.wroteHeader {
		if w.c.s.Log != nil {
			w.c.s.Log.Debug("superfluous WriteHeader", "path", w.req.URL.Path, "status", code)
		}
		return
	}
	if code < 100 || code > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// An interim answer goes out at once; the final one follows.
		w.body.interim(func() {
			bw := w.c.bw
			_, _ = bw.WriteString("HTTP/1.1 " + statusLine(code) + "\r\n")
			writeHeader(bw, w.header)
			_, _ = bw.WriteString("\r\n")
			_ = bw.Flush()
		})
		return
	}
	w.wroteHeader = true
	w.status = code
	if cl := w.Header().Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			w.contentLength = n
		} else {
			w.header.Del("Content-Length")
		}
	}
}

func (w *response) bodyAllowed() bool {
	return (w.status < 100 || w.status >= 200) && w.status != http.StatusNoContent && w.status != http.StatusNotModified
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, w.c.werr
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		return 0, http.ErrContentLength
	}
	if w.c.werr != nil {
		return 0, w.c.werr
	}
	w.written += int64(len(p))
	if w.head {
		return len(p), nil
	}
	if !w.committed {
		if w.contentLength < 0 && len(w.pending)+len(p) <= holdBeforeChunking {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		w.commit(false, p)
	}
	return w.writeBody(p)
}

func (w *response) WriteString(s string) (int, error) {
	return w.Write([]byte(s))
}

func (w *response) writeBody(p []byte) (int, error) {
	bw := w.c.bw
	if w.chunked {
		var hex [16]byte
		_, _ = bw.Write(strconv.AppendInt(hex[:0], int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
	}
	if _, err := bw.Write(p); err != nil {
		return 0, err
	}
	if w.chunked {
		_, _ = bw.WriteString("\r\n")
	}
	if w.c.werr != nil {
		return 0, w.c.werr
	}
	return len(p), nil
}

// Flush sends the headers and what is written so far.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush, with the error (http.ResponseController uses it).
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false, nil)
	}
	if err := w.c.bw.Flush(); err != nil {
		return err
	}
	return w.c.werr
}

// SetWriteDeadline is for http.ResponseController.
func (w *response) SetWriteDeadline(t time.Time) error {
	w.c.writeDeadline = true
	return w.c.nc.SetWriteDeadline(t)
}

// commit writes the status line and headers to c.bw, and what body is
// held. final: the handler has returned, so a held body is the whole of
// it. next is the write that made the commit, sniffed for a Content-Type
// when nothing is held (a first write too large to hold, or one with a
// Content-Length set).
func (w *response) commit(final bool, next []byte) {
	w.committed = true
	w.body.beginResponse()
	h := w.Header()
	delete(h, "Transfer-Encoding")
	if w.bodyAllowed() && w.contentLength < 0 {
		switch {
		case final:
			n := int64(len(w.pending))
			if w.head {
				n = w.written // what a GET would have had
			}
			if !w.head || n > 0 {
				h["Content-Length"] = []string{strconv.FormatInt(n, 10)}
			}
			w.contentLength = n
		case w.head:
			// No body follows, so no framing: a chunked HEAD answer
			// would owe the client a last chunk it must not get.
		case w.http10:
			w.closeAfter = true // the end of the body is the connection's
		default:
			w.chunked = true
			h["Transfer-Encoding"] = []string{"chunked"}
		}
	}
	if _, ok := h["Content-Type"]; !ok && w.bodyAllowed() && h.Get("Content-Encoding") == "" {
		sniff := w.pending
		if len(sniff) == 0 {
			sniff = next
		}
		if len(sniff) > 0 {
			h["Content-Type"] = []string{http.DetectContentType(sniff)}
		}
	}
	// A Shutdown begun while the handler ran: this is the connection's
	// last response, and the client must hear so.
	if hasToken(h["Connection"], "close") || w.c.s.closing.Load() {
		w.closeAfter = true
	}
	if w.closeAfter && !w.http10 {
		h["Connection"] = []string{"close"}
	}
	bw := w.c.bw
	proto := "HTTP/1.1 "
	_, _ = bw.WriteString(proto)
	_, _ = bw.WriteString(statusLine(w.status))
	_, _ = bw.WriteString("\r\n")
	if _, ok := h["Date"]; !ok {
		var d [len(http.TimeFormat) + 8]byte
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.Write(time.Now().UTC().AppendFormat(d[:0], http.TimeFormat))
		_, _ = bw.WriteString("\r\n")
	}
	writeHeader(bw, h)
	_, _ = bw.WriteString("\r\n")
	if len(w.pending) > 0 {
		p := w.pending
		w.pending = w.pending[:0]
		if !w.head {
			_, _ = w.writeBody(p)
		}
	}
}

// finish ends the response once the handler has returned.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true, nil)
	}
	if w.chunked {
		_, _ = w.c.bw.WriteString("0\r\n\r\n")
	}
	_ = w.c.bw.Flush()
	if w.bodyAllowed() && !w.head && w.contentLength >= 0 && w.written != w.contentLength {
		// Fewer bytes than promised: the client can only tell from the
		// connection closing.
		w.closeAfter = true
	}
}

// headerWriter is what writeHeader writes to.
type headerWriter interface {
	io.Writer
	io.StringWriter
}

// writeHeader writes h's fields, a value's CR and LF as spaces so that no
// value can add a field or end the headers.
func writeHeader(bw headerWriter, h http.Header) {
	for k, vv := range h {
		if !validFieldName(k) {
			continue
		}
		for _, v := range vv {
			_, _ = bw.WriteString(k)
			_, _ = bw.WriteString(": ")
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			_, _ = bw.WriteString(strings.TrimSpace(v))
			_, _ = bw.WriteString("\r\n")
		}
	}
}

// validFieldName reports whether k is an RFC 9110 token.
func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := range len(k) {
		b := k[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0:
		default:
			return false
		}
	}
	return true
}

// statusLine is "200 OK".
func statusLine(code int) string {
	if code == http.StatusOK {
		return "200 OK"
	}
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	return strconv.Itoa(code) + " " + text
}

// hasToken reports whether a comma-separated header value lists token.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for f := range strings.SplitSeq(v, ",") {
			if equalFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}
