package hclspec_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/llmgw/llmgw/nomadplugin/hclspec"
)

// A plugin's configuration: the schema it returns from ConfigSchema, the
// bytes a Nomad client sends for an agent's config {} block, and the Go
// struct the plugin decodes them into.
func ExampleDecode() {
	type rule struct {
		Match string `codec:"match"`
	}
	type config struct {
		Model  string            `codec:"model"`
		Period time.Duration     `codec:"period"`
		Labels map[string]string `codec:"labels"`
		Rules  []rule            `codec:"rule"`
	}
	spec := hclspec.Object(map[string]*hclspec.Spec{
		"model":  hclspec.RequiredAttr("model", "string"),
		"period": hclspec.Default(hclspec.Attr("period", "string"), hclspec.Literal(`"10s"`)),
		"labels": hclspec.Attr("labels", "map(string)"),
		"rule":   hclspec.BlockList("rule", 0, 0, hclspec.Object(map[string]*hclspec.Spec{"match": hclspec.RequiredAttr("match", "string")})),
	})

	// What the Nomad client does with the block: evaluate it against the
	// schema, defaults included, and encode the result as cty msgpack.
	data, err := hclspec.EncodeHCL(spec, "agent.hcl", []byte(`
model  = "w1"
labels = { rack = "r12" }
rule { match = "a*" }
rule { match = "b*" }
`), nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	// What the plugin does in SetConfig.
	var cfg config
	if err := hclspec.Decode(spec, data, &cfg); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s every %s, labels %v, rules %v\n", cfg.Model, cfg.Period, cfg.Labels, cfg.Rules)

	// A value the struct cannot take is an error naming the attribute.
	data, err = hclspec.EncodeHCL(spec, "agent.hcl", []byte(`
model  = "w1"
period = "often"
`), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = hclspec.Decode(spec, data, &cfg)
	fmt.Println("error names period:", err != nil && strings.Contains(err.Error(), `'period' bad duration "often"`))
	// Output:
	// w1 every 10s, labels map[rack:r12], rules [{a*} {b*}]
	// error names period: true
}
