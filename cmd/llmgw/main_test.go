package main

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

// TestMain lets the test binary act as llmgw, so the tests below check the
// real process exit status.
func TestMain(m *testing.M) {
	if os.Getenv("LLMGW_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestExitStatus(t *testing.T) {
	td := "internal/cli/plancmd/testdata/"
	tests := []struct {
		name    string
		catalog string
		want    int
	}{
		{"placed", "catalog.hcl", 0},
		{"unplaced", "catalog-over.hcl", 2},
		{"bad input", "catalog-never.hcl", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "plan", "--fleet", td+"fleet.hcl", "--facility", td+"facility.hcl", "--catalog", td+tt.catalog, "--json")
			cmd.Env = append(os.Environ(), "LLMGW_TEST_MAIN=1")
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.want {
				t.Errorf("exit status: got %d, want %d", code, tt.want)
			}
		})
	}
}
