package gateway

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// trickle is a reader that hands out at most n bytes a call and counts how
// much was read.
type trickle struct {
	r    io.Reader
	n    int
	read int
}

func (t *trickle) Read(p []byte) (int, error) {
	if len(p) > t.n {
		p = p[:t.n]
	}
	n, err := t.r.Read(p)
	t.read += n
	return n, err
}

func TestReadBody(t *testing.T) {
	big := `{"model":"m","p":"` + strings.Repeat("x", 100<<10) + `"}`
	tests := []struct {
		name        string
		body        string
		chunk       int
		knownLength bool
		limit       int64
		wantErr     error
		maxRead     int // -1: any
	}{
		{"small, length known", `{"model":"m","x":1}`, 1 << 20, true, 1 << 20, nil, -1},
		{"small, chunked", `{"model":"m","x":1}`, 1 << 20, false, 1 << 20, nil, -1},
		{"byte by byte", `{"a":[1,2,3],"model":"m"}`, 1, true, 1 << 20, nil, -1},
		{"big, length known", big, 1 << 20, true, 1 << 20, nil, -1},
		{"big, chunked", big, 1000, false, 1 << 20, nil, -1},
		{"exactly the limit, chunked", big, 1000, false, int64(len(big)), nil, -1},
		{"over the limit, length known: nothing read", big, 1 << 20, true, 64 << 10, errTooLarge, 0},
		{"over the limit, chunked: read to the limit", big, 1000, false, 64 << 10, errTooLarge, 64<<10 + 1},
		{"one byte over, chunked", big, 1000, false, int64(len(big)) - 1, errTooLarge, len(big)},
		{"empty", ``, 3, true, 1 << 20, nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bud := &budget{limit: 1 << 30}
			src := &trickle{r: strings.NewReader(tt.body), n: tt.chunk}
			cl := int64(-1)
			if tt.knownLength {
				cl = int64(len(tt.body))
			}
			b, err := readBody(src, cl, tt.limit, bud)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			if tt.maxRead >= 0 && src.read > tt.maxRead {
				t.Errorf("read %d bytes, want at most %d", src.read, tt.maxRead)
			}
			if err != nil {
				if bud.used.Load() != 0 {
					t.Errorf("budget used after an error: %d", bud.used.Load())
				}
				return
			}
			if bud.used.Load() > max(int64(len(tt.body))*2, initialScan) {
				t.Errorf("budget holds %d for a %d-byte body", bud.used.Load(), len(tt.body))
			}
			if got := b.bytes(); string(got) != tt.body {
				t.Errorf("body: %d bytes; want the %d sent", len(got), len(tt.body))
			}
			b.release()
			if bud.used.Load() != 0 {
				t.Errorf("budget used after release: %d", bud.used.Load())
			}
			if got := b.bytes(); got != nil {
				t.Errorf("after release the body still has %d bytes", len(got))
			}
		})
	}
}

func TestReadBodyBudget(t *testing.T) {
	bud := &budget{limit: initialScan}
	b, err := readBody(strings.NewReader(`{"model":"m"}`), 13, 1<<20, bud)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readBody(strings.NewReader(`{"model":"m"}`), 13, 1<<20, bud); !errors.Is(err, errBusy) {
		t.Errorf("second body over budget: got %v, want errBusy", err)
	}
	b.release()
	b.release() // twice is harmless
	if _, err := readBody(strings.NewReader(`{"model":"m"}`), 13, 1<<20, bud); err != nil {
		t.Errorf("after release: %v", err)
	}
	// A body that grows past the budget while read.
	bud = &budget{limit: 16 << 10}
	big := strings.Repeat(" ", 64<<10)
	if _, err := readBody(strings.NewReader(big), -1, 1<<20, bud); !errors.Is(err, errBusy) {
		t.Errorf("chunked body over the budget: got %v, want errBusy", err)
	}
	if bud.used.Load() != 0 {
		t.Errorf("budget used after errBusy: %d", bud.used.Load())
	}
}

func TestReadBodyReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader(`{"p":`), iotest.ErrReader(boom))
	if _, err := readBody(r, -1, 1<<20, &budget{limit: 1 << 30}); !errors.Is(err, boom) {
		t.Errorf("got %v, want the reader's error", err)
	}
}
