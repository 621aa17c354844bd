package facility

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readInParts reads a fleet file as llmgw plan does, its parts in order
// (their goroutines do not change what each part reads).
func readInParts(filename string, src []byte, n int) (f Fleet, parts int, err error) {
	r := NewFleetReader(filename, src, n)
	for i := range r.Parts() {
		r.Read(i)
	}
	f, err = r.Fleet()
	return f, r.Parts(), err
}

// errText is err's text, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestFleetReaderMatchesParseFleet: a JSON fleet read in parts is the
// fleet ParseFleet reads whole, positions included, and a fleet with
// problems gives the same problems in the same order.
func TestFleetReaderMatchesParseFleet(t *testing.T) {
	t.Parallel()
	good, _, _ := benchJSONFiles(200, 0)
	// Problems spread over the file: in the checks after decoding (a
	// node's values, a GPU's), in a learned block after the nodes, and
	// across nodes (a name twice); then with decoding problems too (a
	// type, a name the schema lacks), which send the reader to the whole
	// file.
	bad := string(good)
	for _, r := range []struct{ old, new string }{
		{`"cpu_cores": 192`, `"cpu_cores": -1`},
		{`"base_watts": 1200`, `"base_watts": -3`},
		{`"power_limit": 700`, `"power_limit": 0`},
		{`"fabric": "ib-0"`, `"fabric": "bad fabric"`},
	} {
		if !strings.Contains(bad, r.old) {
			t.Fatalf("the bench fleet has no %s", r.old)
		}
		// Replace one occurrence in each of three places of the file.
		for _, at := range []int{len(bad) / 5, len(bad) / 2, len(bad) * 4 / 5} {
			if i := strings.Index(bad[at:], r.old); i >= 0 {
				bad = bad[:at+i] + r.new + bad[at+i+len(r.old):]
			}
		}
	}
	bad = strings.Replace(bad, `"n000100"`, `"n000007"`, 1)
	bad = strings.TrimSuffix(strings.TrimSpace(bad), "}") + `, "learned": [{"m": {"p": {"gpu": "", "watts": -1, "samples": 2}}}]}` + "\n"
	undecodable := strings.Replace(strings.Replace(bad, `"memory_gb"`, `"memory_gib"`, 1), `"cpu_cores": 192`, `"cpu_cores": "many"`, 1)
	learnedFirst := `{"learned": [{"m": {"p": {"gpu": "H200", "watts": 300, "samples": 10}}}],` + strings.TrimPrefix(string(good), "{")

	for name, src := range map[string]string{"good": string(good), "bad": bad, "undecodable": undecodable, "learned first": learnedFirst} {
		want, wantErr := ParseFleet("fleet.json", []byte(src))
		switch name {
		case "bad":
			// ParseFleet's own order, held here: each node's problems in
			// the order of its checks, the nodes in file order, then the
			// learned blocks.
			var wantLines []string
			for _, l := range []int{851, 2117, 3383} {
				wantLines = append(wantLines,
					fmt.Sprintf(`fleet.json:%d: fabric: value "bad fabric": no spaces, control characters, '=' or ','`, l+2),
					fmt.Sprintf("fleet.json:%d: cpu_cores must not be negative, got -1", l+1),
					fmt.Sprintf("fleet.json:%d: base_watts must not be negative, got -3", l),
					fmt.Sprintf("fleet.json:%d: power_limit must be positive", l+7))
			}
			wantLines = append(wantLines, "fleet.json:4223: learned m/p on : gpu must name a GPU model",
				"fleet.json:4223: watts must not be negative, got -1")
			if diff := cmp.Diff(strings.Join(wantLines, "\n"), errText(wantErr)); diff != "" {
				t.Fatalf("bad: ParseFleet's problems (-want +got):\n%s", diff)
			}
		case "undecodable":
			if wantErr == nil || strings.Count(wantErr.Error(), "\n") < 8 {
				t.Fatalf("%s: want many problems, got %v", name, wantErr)
			}
		default:
			if wantErr != nil {
				t.Fatalf("%s: %v", name, wantErr)
			}
		}
		matchesInParts(t, name, "fleet.json", src, want, wantErr)
	}
}

// matchesInParts checks that the fleet file src, read in 2, 3, 7 and 64
// parts, gives what reading it whole gave (want, wantErr), in at least 3
// parts (2 when asked for 2).
func matchesInParts(t *testing.T, name, filename, src string, want Fleet, wantErr error) {
	t.Helper()
	for _, n := range []int{2, 3, 7, 64} {
		got, parts, err := readInParts(filename, []byte(src), n)
		if parts < min(n, 3) {
			t.Errorf("%s, n=%d: read in %d parts", name, n, parts)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s, n=%d: fleet (-whole +parts):\n%s", name, n, diff)
		}
		if diff := cmp.Diff(errText(wantErr), errText(err)); diff != "" {
			t.Errorf("%s, n=%d: problems (-whole +parts):\n%s", name, n, diff)
		}
	}
}

// TestFleetReaderMatchesParseFleetNative: the same for a fleet in HCL's
// native syntax, good and with problems in its nodes and in decoding.
func TestFleetReaderMatchesParseFleetNative(t *testing.T) {
	t.Parallel()
	good, _, _ := benchFiles(200, 0)
	cpu := regexp.MustCompile(`cpu_cores += 192`)
	bad := string(good)
	for _, at := range []int{len(bad) / 5, len(bad) / 2, len(bad) * 4 / 5} {
		if loc := cpu.FindStringIndex(bad[at:]); loc != nil {
			bad = bad[:at+loc[0]] + "cpu_cores = -1" + bad[at+loc[1]:]
		}
	}
	undecodable := strings.Replace(bad, "cpu_cores = -1", `cpu_cores = "many"`, 1)
	for name, src := range map[string]string{"good": string(good), "bad": bad, "undecodable": undecodable} {
		want, wantErr := ParseFleet("fleet.hcl", []byte(src))
		if (name == "good") != (wantErr == nil) || (name == "bad" && strings.Count(wantErr.Error(), "\n") != 2) {
			t.Fatalf("%s: %v", name, wantErr)
		}
		matchesInParts(t, name, "fleet.hcl", src, want, wantErr)
	}
}

// TestFleetReaderWhole: a file not split (JSON whose nodes are not one
// array, one node) is one part; a part the parser refuses (a split inside
// a comment, a heredoc or a block) sends the reader back to the whole file
// and its parser's own problems.
func TestFleetReaderWhole(t *testing.T) {
	t.Parallel()
	for name, tt := range map[string]struct {
		filename, src string
		split         bool
	}{
		"native":      {"fleet.hcl", okNode + strings.Replace(okNode, "n1", "n2", 1), true},
		"native, one": {"fleet.hcl", okNode, false},
		// A line that begins with a node block inside a comment, a
		// heredoc or a block: the part before it does not parse.
		"in a comment":   {"fleet.hcl", okNode + "/*\n" + strings.Replace(okNode, "n1", "n2", 1) + "*/\n" + strings.Replace(okNode, "n1", "n3", 1), true},
		"in a heredoc":   {"fleet.hcl", okNode + "node \"n2\" {\n  rack = <<EOT\nx\nnode \"n3\" {\nEOT\n}\n" + strings.Replace(okNode, "n1", "n4", 1), true},
		"in a block":     {"fleet.hcl", "node \"n1\" {\nnode \"n2\" {\n}\n}\n" + strings.Replace(okNode, "n1", "n3", 1), true},
		"nodes, object":  {"fleet.json", `{"node": {"n1": {"rack": "k1"}, "n2": {"rack": "k2"}}}`, false},
		"a bad run":      {"fleet.json", `{"node": [{"n1": {"rack": "k1"}}, {"n2": {"rack": "k2"}}, [1]]}`, true},
		"not JSON":       {"fleet.json", `{"node": [`, false},
		"one node":       {"fleet.json", `{"node": [{"n1": {"rack": "k1"}}]}`, false},
		"nodes and rest": {"fleet.json", `{"node": [{"n1": {"rack": "k1"}}, {"n2": {"rack": "k2"}}]}`, true},
	} {
		want, wantErr := ParseFleet(tt.filename, []byte(tt.src))
		got, parts, err := readInParts(tt.filename, []byte(tt.src), 8)
		if (parts > 1) != tt.split {
			t.Errorf("%s: %d parts, want split %v", name, parts, tt.split)
		}
		if !cmp.Equal(want, got) || errText(wantErr) != errText(err) {
			t.Errorf("%s: parts give %+v, %v; whole %+v, %v", name, got, err, want, wantErr)
		}
	}
}

// FuzzFleetReader: whatever a JSON fleet holds, reading it in parts gives
// what reading it whole gives.
func FuzzFleetReader(f *testing.F) {
	good, _, _ := benchJSONFiles(6, 0)
	f.Add(good)
	f.Add([]byte(`{"node": [{"n1": {"rack": "k1"}}, {"n2": {"rack": "k2", "gpu": [{"H": {"count": 9, "free": 10}}]}}]}`))
	f.Add([]byte("{\"learned\": [{\"m\": {\"p\": {\"watts\": 1}}}],\n\"node\": [{\"n1\": {}},\n {\"n1\": {}}]}"))
	f.Add([]byte(`{"node": [{"n1": {"rack": 1}}, {"": {}}, {"n3": {"gpu": []}}]}`))
	f.Fuzz(func(t *testing.T, src []byte) { sameInParts(t, "fuzz.json", src) })
}

// FuzzFleetReaderNative: the same for the native syntax, whatever lines
// begin with a node block.
func FuzzFleetReaderNative(f *testing.F) {
	good, _, _ := benchFiles(6, 0)
	f.Add(good)
	f.Add([]byte(okNode + "/*\n" + okNode + "*/\n" + okNode))
	f.Add([]byte("node \"n1\" {\nnode \"n2\" {\n}\n}\nnode \"n3\" {}\n"))
	f.Add([]byte("node \"n1\" {\n  rack = <<EOT\nnode \"n2\" {\nEOT\n}\nnode \"n3\" {}\n"))
	f.Add([]byte("learned \"m\" \"p\" {\n  gpu = \"H\"\n  watts = 1\n  samples = 2\n}\nnode \"n1\" {}\nnode{}\nnode \"n1\" {}\n"))
	f.Fuzz(func(t *testing.T, src []byte) { sameInParts(t, "fuzz.hcl", src) })
}

// sameInParts fails t unless the fleet file src reads in 2 and in 5 parts
// to what it reads whole: the same fleet, the same problems.
func sameInParts(t *testing.T, filename string, src []byte) {
	t.Helper()
	want, wantErr := ParseFleet(filename, src)
	for _, n := range []int{2, 5} {
		got, _, err := readInParts(filename, src, n)
		if !cmp.Equal(want, got) || errText(wantErr) != errText(err) {
			t.Fatalf("n=%d: parts give %+v, %v; whole %+v, %v", n, got, err, want, wantErr)
		}
	}
}
