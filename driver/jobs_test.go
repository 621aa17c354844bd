package driver

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/llmgw/llmgw/nomadplugin/hclspec"
)

// blockBody returns the source text inside a block's braces.
func blockBody(src []byte, b *hclsyntax.Block) []byte {
	return src[b.OpenBraceRange.End.Byte:b.CloseBraceRange.Start.Byte]
}

// TestExampleJobsAndClientConfig checks that the operator examples in
// jobs/ decode against the driver's schemas as a Nomad client would
// evaluate them.
func TestExampleJobsAndClientConfig(t *testing.T) {
	files, err := filepath.Glob("../jobs/*.nomad.hcl")
	if err != nil {
		t.Fatal(err)
	}
	engines := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, diags := hclsyntax.ParseConfig(src, f, hcl.InitialPos)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", f, diags)
		}
		var walk func(body *hclsyntax.Body)
		walk = func(body *hclsyntax.Body) {
			for _, b := range body.Blocks {
				if b.Type == "task" {
					drv, ok := b.Body.Attributes["driver"]
					if !ok {
						continue
					}
					// A driver set by a variable (llmgw's own jobs:
					// raw_exec or exec) is not the llmgw driver.
					v, diags := drv.Expr.Value(nil)
					if diags.HasErrors() || !v.IsKnown() || !v.Type().Equals(cty.String) || v.AsString() != PluginName {
						continue
					}
					for _, c := range b.Body.Blocks {
						if c.Type != "config" {
							continue
						}
						data, err := hclspec.EncodeHCL(TaskConfigSpec(), f, blockBody(src, c), nil)
						if err != nil {
							t.Errorf("%s: task %v config: %v", f, b.Labels, err)
							continue
						}
						tc, err := DecodeTaskConfig(data)
						if err != nil {
							t.Errorf("%s: task %v config: %v", f, b.Labels, err)
							continue
						}
						engines[tc.Engine] = true
					}
					continue
				}
				walk(b.Body)
			}
		}
		walk(file.Body.(*hclsyntax.Body))
	}
	for _, e := range []string{"vllm", "sglang", "tgi", "llamacpp", "command"} {
		if !engines[e] {
			t.Errorf("no example job in jobs/ for engine %s", e)
		}
	}

	src, err := os.ReadFile("../jobs/client.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// The agent config as a whole is HCL1 (quoted meta keys); the plugin
	// block alone is plain HCL.
	src = pluginBlock(t, src, `plugin "nomad-driver-llmgw"`)
	file, diags := hclsyntax.ParseConfig(src, "client.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	found := false
	for _, b := range file.Body.(*hclsyntax.Body).Blocks {
		if b.Type != "plugin" || len(b.Labels) != 1 || b.Labels[0] != "nomad-driver-llmgw" {
			continue
		}
		for _, c := range b.Body.Blocks {
			if c.Type != "config" {
				continue
			}
			found = true
			data, err := hclspec.EncodeHCL(ConfigSpec(), "client.hcl", blockBody(src, c), nil)
			if err != nil {
				t.Fatalf("plugin config: %v", err)
			}
			if _, err := DecodeConfig(data); err != nil {
				t.Errorf("plugin config: %v", err)
			}
		}
	}
	if !found {
		t.Error(`jobs/client.hcl has no plugin "nomad-driver-llmgw" { config { … } } block`)
	}
}

// pluginBlock cuts the block starting at header out of src, matching
// braces outside comments and strings.
func pluginBlock(t *testing.T, src []byte, header string) []byte {
	t.Helper()
	start := bytes.Index(src, []byte(header))
	if start < 0 {
		t.Fatalf("no %s block", header)
	}
	depth, inString, inComment := 0, false, false
	for i := start; i < len(src); i++ {
		c := src[i]
		switch {
		case inComment:
			if c == '\n' {
				inComment = false
			}
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
		case c == '#':
			inComment = true
		case c == '"':
			inString = true
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				return src[start : i+1]
			}
		}
	}
	t.Fatalf("unbalanced %s block", header)
	return nil
}
