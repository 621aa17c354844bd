package hclspec

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type sample struct {
	Name     string            `codec:"name"`
	Count    int               `codec:"count"`
	Ratio    float64           `codec:"ratio"`
	On       bool              `codec:"on"`
	Period   time.Duration     `codec:"period"`
	Tags     []string          `codec:"tags"`
	Labels   map[string]string `codec:"labels"`
	Optional *int              `codec:"optional"`
	Inner    *inner            `codec:"inner"`
	Rules    []rule            `codec:"rule"`
	Any      any               `codec:"any"`
}

type inner struct {
	Level string `codec:"level"`
}

type rule struct {
	Match string `codec:"match"`
}

func sampleSpec() *Spec {
	return Object(map[string]*Spec{
		"name":     RequiredAttr("name", "string"),
		"count":    Default(Attr("count", "number"), Literal("3")),
		"ratio":    Attr("ratio", "number"),
		"on":       Default(Attr("on", "bool"), Literal("true")),
		"period":   Default(Attr("period", "string"), Literal(`"1m"`)),
		"tags":     Default(Attr("tags", "list(string)"), Literal("[]")),
		"labels":   Attr("labels", "map(string)"),
		"optional": Attr("optional", "number"),
		"inner":    Block("inner", false, Object(map[string]*Spec{"level": Attr("level", "string")})),
		"rule":     BlockList("rule", 0, 0, Object(map[string]*Spec{"match": RequiredAttr("match", "string")})),
		"any":      Attr("any", "any"),
	})
}

func roundTrip(t *testing.T, body string) (sample, error) {
	t.Helper()
	data, err := EncodeHCL(sampleSpec(), "config.hcl", []byte(body), nil)
	if err != nil {
		return sample{}, err
	}
	var s sample
	err = Decode(sampleSpec(), data, &s)
	return s, err
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	seven := 7
	tests := []struct {
		name string
		body string
		want sample
	}{
		{
			name: "defaults apply when absent",
			body: `name = "a"`,
			want: sample{Name: "a", Count: 3, On: true, Period: time.Minute, Tags: []string{}, Rules: []rule{}},
		},
		{
			name: "everything set",
			body: `
name     = "b"
count    = 5
ratio    = 0.25
on       = false
period   = "90s"
tags     = ["x", "y"]
labels   = { rack = "r1" }
optional = 7
inner { level = "debug" }
rule { match = "one" }
rule { match = "two" }
any = "free"
`,
			want: sample{
				Name: "b", Count: 5, Ratio: 0.25, On: false, Period: 90 * time.Second,
				Tags: []string{"x", "y"}, Labels: map[string]string{"rack": "r1"}, Optional: &seven,
				Inner: &inner{Level: "debug"}, Rules: []rule{{Match: "one"}, {Match: "two"}}, Any: "free",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := roundTrip(t, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrorsNameTheField(t *testing.T) {
	t.Parallel()
	tests := []struct{ body, want string }{
		{`count = 3`, `"name" is required`},
		{"name = \"a\"\nperiod = \"soon\"", `period`},
		{"name = \"a\"\ncount = 1.5", `count`},
		{"name = \"a\"\nbogus = 1", `Unsupported argument`},
		{"name = \"a\"\ncount = \"many\"", `count`},
		{"name = \"a\"\nperiod = \"-1s\"", `negative duration`},
	}
	for _, tc := range tests {
		_, err := roundTrip(t, tc.body)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
}

func TestToHCLDecRejectsBadSchemas(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]*Spec{
		"empty":        {},
		"bad type":     Attr("x", "lizt(string)"),
		"bad literal":  Default(Attr("x", "string"), Literal(`"unterminated`)),
		"nil in block": Block("b", false, nil),
	} {
		if _, err := ToHCLDec(s); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestUnknownStructFieldIsAnError(t *testing.T) {
	t.Parallel()
	data, err := EncodeHCL(sampleSpec(), "c.hcl", []byte(`name = "x"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var narrow struct {
		Name string `codec:"name"`
	}
	if err := Decode(sampleSpec(), data, &narrow); err == nil {
		t.Fatal("decoding into a struct that lacks schema attributes succeeded; want an error so schema and struct cannot drift apart")
	}
}
