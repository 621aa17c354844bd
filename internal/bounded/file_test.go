package bounded

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ReadFile refuses a file past MaxFileBytes, naming the path and the
// limit, without reading it whole.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(small, []byte("attempts = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(small); err != nil || string(b) != "attempts = 2\n" {
		t.Errorf("small file: %q, %v", b, err)
	}
	big := filepath.Join(dir, "big.hcl")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxFileBytes + 1); err != nil { // sparse
		t.Fatal(err)
	}
	_ = f.Close()
	_, err = ReadFile(big)
	if !IsLimit(err) || !strings.Contains(err.Error(), big) || !strings.Contains(err.Error(), strconv.Itoa(MaxFileBytes)) {
		t.Errorf("file over the limit: %v; want the size limit, naming the path and %d", err, MaxFileBytes)
	}
	if _, err := ReadFile(filepath.Join(dir, "none")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}
