package bounded

import (
	"fmt"
	"os"
)

// ReadFile reads the file at path, refusing one larger than MaxFileBytes
// (a *LimitError naming the path) before reading it whole. It is the one
// file read of the package: the rest (bounded.go) is pure.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path) //nolint:gosec // the operator names the file
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	b, err := ReadAll(f, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
