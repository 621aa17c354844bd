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

func TestReadPrefix(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	tests := []struct {
		name         string
		body         string
		chunk        int
		knownLength  bool
		limit        int64
		wantModel    string
		wantErr      error
		wantComplete bool
	}{
		{"small, length known", `{"model":"m","x":1}`, 1 << 20, true, 1 << 20, "m", nil, true},
		{"small, chunked", `{"model":"m","x":1}`, 1 << 20, false, 1 << 20, "m", nil, false},
		{"byte by byte", `{"a":[1,2,3],"model":"m"}`, 1, true, 1 << 20, "m", nil, true},
		{"model first in a big body", `{"model":"m","p":"` + big + `"}`, 1 << 20, true, 1 << 20, "m", nil, false},
		{"model after a big member", `{"p":"` + big + `","model":"m"}`, 1 << 20, true, 1 << 20, "m", nil, true},
		{"model past the limit", `{"p":"` + big + `","model":"m"}`, 1 << 20, true, 64 << 10, "", errTooLarge, false},
		{"no model", `{"p":1}`, 3, true, 1 << 20, "", errNoModel, false},
		{"truncated", `{"p":[1,`, 3, true, 1 << 20, "", errBadJSON, false},
		{"empty", ``, 3, true, 1 << 20, "", errNoModel, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bud := &budget{limit: 1 << 30}
			src := &trickle{r: strings.NewReader(tt.body), n: tt.chunk}
			cl := int64(-1)
			if tt.knownLength {
				cl = int64(len(tt.body))
			}
			b, model, err := readPrefix(src, cl, tt.limit, bud)
			if !errors.Is(err, tt.wantErr) || model != tt.wantModel {
				t.Fatalf("got %q, %v; want %q, %v", model, err, tt.wantModel, tt.wantErr)
			}
			if err != nil {
				if bud.used.Load() != 0 {
					t.Errorf("budget used after an error: %d", bud.used.Load())
				}
				return
			}
			if b.complete() != tt.wantComplete {
				t.Errorf("complete: got %v, want %v", b.complete(), tt.wantComplete)
			}
			if src.read > len(`{"model":"m"`)+64<<10 && strings.HasPrefix(tt.body, `{"model"`) {
				t.Errorf("read %d bytes to find a model in the first 12", src.read)
			}
			// The attempt sends the whole body, prefix then rest.
			got, err := io.ReadAll(b.attempt(1))
			if err != nil || string(got) != tt.body {
				t.Errorf("attempt body: %d bytes, %v; want the %d sent", len(got), err, len(tt.body))
			}
			b.release()
			if bud.used.Load() != 0 {
				t.Errorf("budget used after release: %d", bud.used.Load())
			}
		})
	}
}

func TestReadPrefixRetry(t *testing.T) {
	body := `{"model":"m","p":"` + strings.Repeat("y", 64<<10) + `"}`
	b, _, err := readPrefix(&trickle{r: strings.NewReader(body), n: 1 << 20}, int64(len(body)), 1<<20, &budget{limit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer b.release()
	if b.complete() {
		t.Fatal("the body should not fit the first read")
	}
	// Attempt 1 reads only the prefix: attempt 2 may take over.
	a1 := b.attempt(1)
	if _, err := a1.Read(make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if !b.canRetry() {
		t.Fatal("canRetry false before the rest was read")
	}
	a2 := b.attempt(2)
	if _, err := a1.Read(make([]byte, 8)); !errors.Is(err, errAbandoned) {
		t.Errorf("abandoned attempt read: got %v, want errAbandoned", err)
	}
	got, err := io.ReadAll(a2)
	if err != nil || string(got) != body {
		t.Fatalf("attempt 2: %d bytes, %v", len(got), err)
	}
	if b.canRetry() {
		t.Error("canRetry true after the rest was read")
	}
	b.release()
	if _, err := a2.Read(make([]byte, 1)); !errors.Is(err, errBodyClosed) {
		t.Errorf("read after release: got %v, want errBodyClosed", err)
	}
}

func TestReadPrefixBudget(t *testing.T) {
	bud := &budget{limit: initialScan}
	b, _, err := readPrefix(strings.NewReader(`{"model":"m"}`), 13, 1<<20, bud)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := readPrefix(strings.NewReader(`{"model":"m"}`), 13, 1<<20, bud); !errors.Is(err, errBusy) {
		t.Errorf("second body over budget: got %v, want errBusy", err)
	}
	b.release()
	b.release() // twice is harmless
	if _, _, err := readPrefix(strings.NewReader(`{"model":"m"}`), 13, 1<<20, bud); err != nil {
		t.Errorf("after release: %v", err)
	}
}

func TestReadPrefixReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader(`{"p":`), iotest.ErrReader(boom))
	if _, _, err := readPrefix(r, -1, 1<<20, &budget{limit: 1 << 30}); !errors.Is(err, boom) {
		t.Errorf("got %v, want the reader's error", err)
	}
}
