package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestExecuteExitCodes(t *testing.T) {
	td := "plancmd/testdata/"
	plan := func(catalog string, extra ...string) []string {
		return append([]string{"plan", "--fleet", td + "fleet.hcl", "--facility", td + "facility.hcl", "--catalog", td + catalog}, extra...)
	}
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // a substring
		wantStderr string // a substring; "" wants stderr empty
	}{
		{"everything placed", plan("catalog.hcl"), 0, "4 of 4 replicas placed", ""},
		{"everything placed, json", plan("catalog.hcl", "-o", "json"), 0, `{"placements":[`, ""},
		{"everything placed, --json (deprecated)", plan("catalog.hcl", "--json"), 0, `{"placements":[`, "llmgw plan: --json is deprecated: use -o json\n"},
		{"some replica not placed", plan("catalog-over.hcl"), 2, "UNPLACED", "llmgw: 6 of 12 replicas not placed\n"},
		{"some replica not placed, json", plan("catalog-over.hcl", "-o", "json"), 2, `"unplaced":[{"replica":"llama-3.1-70b-6"`, "not placed"},
		{"bad input", plan("catalog-never.hcl"), 1, "", "llmgw: plancmd/testdata/catalog-never.hcl:2: profile llama-3.1-405b/b200x8: no node could ever hold it"},
		{"missing flag", []string{"plan", "--fleet", td + "fleet.hcl"}, 1, "", `required flag(s) "catalog", "facility" not set`},
		{"stray argument", append(plan("catalog.hcl"), "extra"), 1, "", `unknown command "extra"`},
		{"unknown command", []string{"nope"}, 1, "", `unknown command "nope"`},
		{"help", []string{"--help"}, 0, "plan", ""},
		{"plan help", []string{"plan", "--help"}, 0, "Exit status: 0 when every replica is", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Execute(t.Context(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout: got %q, want it to contain %q", stdout.String(), tt.wantStdout)
			}
			if tt.wantStderr == "" && stderr.Len() > 0 || !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr: got %q, want %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}

func TestRootHasPlan(t *testing.T) {
	root := NewRootCommand()
	cmd, _, err := root.Find([]string{"plan"})
	if err != nil || cmd.Name() != "plan" {
		t.Fatalf("find plan: got %v, %v", cmd, err)
	}
}
