package render

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/facility"
)

func TestParseMetaRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			job, err := Job(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseMeta(job.Meta)
			if err != nil {
				t.Fatalf("ParseMeta: %v", err)
			}
			d := tc.in.Decision
			var nodes []string
			var watts []float64
			for _, s := range d.Shards {
				nodes = append(nodes, s.Node)
				watts = append(watts, s.Watts)
			}
			want := Meta{
				Model:     tc.in.Model.Name,
				Profile:   tc.in.Profile.Name,
				Replica:   d.Replica,
				ProfileFP: facility.ProfileFingerprint(tc.in.Model, tc.in.Profile),
				Gen:       tc.in.Gen,
				Domain:    d.Domain,
				Shards:    len(d.Shards),
				Nodes:     nodes,
				Render:    RenderVersion,
				Watts:     watts,
				GPU:       tc.in.Profile.GPU,
				GPUs:      tc.in.Profile.GPUs,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ParseMeta (-want +got):\n%s", diff)
			}
			if got, want := JobID(got.Replica, got.ProfileFP, got.Gen), *job.ID; got != want {
				t.Errorf("JobID from meta = %q, job ID %q", got, want)
			}
			for i, tg := range job.TaskGroups {
				k, ok := ShardIndex(*tg.Name)
				if !ok || k != i {
					t.Errorf("ShardIndex(%q) = %d, %v; want %d", *tg.Name, k, ok, i)
				}
				if tg.Meta[GroupMetaNode] != got.Nodes[i] {
					t.Errorf("group %d meta node %q, job meta %q", i, tg.Meta[GroupMetaNode], got.Nodes[i])
				}
			}
		})
	}
}

func TestParseMetaErrors(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		MetaManaged: "true", MetaModel: "m", MetaProfile: "p", MetaReplica: "m-0",
		MetaProfileFP: "0123456789abcdef", MetaGen: "0", MetaDomain: "site=s,rack=r", MetaShards: "2",
		MetaNodes: "a,b", MetaRender: "1", MetaWatts: "2600,2600", MetaGPU: "NVIDIA H200", MetaGPUs: "8",
	}
	if _, err := ParseMeta(good); err != nil {
		t.Fatalf("good meta: %v", err)
	}
	for _, tc := range []struct {
		name string
		set  map[string]string
		drop string
		is   error
		msg  string
	}{
		{"not managed", map[string]string{MetaManaged: "false"}, "", ErrNotManaged, ""},
		{"no managed key", nil, MetaManaged, ErrNotManaged, ""},
		{"no model", nil, MetaModel, ErrBadMeta, "llmgw.model: missing"},
		{"empty replica", map[string]string{MetaReplica: ""}, "", ErrBadMeta, "llmgw.replica: missing"},
		{"no fp", nil, MetaProfileFP, ErrBadMeta, "llmgw.profile_fp"},
		{"no gen", nil, MetaGen, ErrBadMeta, "llmgw.gen: missing"},
		{"negative gen", map[string]string{MetaGen: "-1"}, "", ErrBadMeta, "llmgw.gen"},
		{"no domain", nil, MetaDomain, ErrBadMeta, "llmgw.domain: missing"},
		{"bad domain", map[string]string{MetaDomain: "shelf=3"}, "", ErrBadMeta, "llmgw.domain"},
		{"domain out of order", map[string]string{MetaDomain: "rack=r,site=s"}, "", ErrBadMeta, "coarse to fine"},
		{"bad shards", map[string]string{MetaShards: "two"}, "", ErrBadMeta, "llmgw.shards"},
		{"zero shards", map[string]string{MetaShards: "0"}, "", ErrBadMeta, "llmgw.shards"},
		{"nodes mismatch", map[string]string{MetaNodes: "a"}, "", ErrBadMeta, "1 nodes for 2 shards"},
		{"bad render", map[string]string{MetaRender: "v1"}, "", ErrBadMeta, "llmgw.render"},
		{"no render", nil, MetaRender, ErrBadMeta, "llmgw.render: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta := map[string]string{}
			for k, v := range good {
				meta[k] = v
			}
			for k, v := range tc.set {
				meta[k] = v
			}
			delete(meta, tc.drop)
			_, err := ParseMeta(meta)
			if !errors.Is(err, tc.is) {
				t.Fatalf("ParseMeta error %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
	// An empty domain is valid: a replica pinned to no level (a fleet
	// without location labels).
	meta := map[string]string{}
	for k, v := range good {
		meta[k] = v
	}
	meta[MetaDomain] = ""
	if m, err := ParseMeta(meta); err != nil || m.Domain != nil {
		t.Errorf("empty domain: %v, %v", m.Domain, err)
	}
}

func TestJobIDStable(t *testing.T) {
	t.Parallel()
	m := llama8b
	p := m.Profiles[0]
	fp := facility.ProfileFingerprint(m, p)
	if a, b := JobID("llama-3.1-8b-0", fp, 0), JobID("llama-3.1-8b-0", fp, 0); a != b {
		t.Fatalf("JobID not stable: %q, %q", a, b)
	}
	if got, want := JobID("llama-3.1-8b-0", fp, 0), "llmgw-llama-3.1-8b-0-"+fp[:8]+"-g0"; got != want {
		t.Errorf("JobID = %q, want %q", got, want)
	}
	p2 := p
	p2.Args = append([]string{"--enable-prefix-caching"}, p.Args...)
	fp2 := facility.ProfileFingerprint(m, p2)
	if fp == fp2 {
		t.Fatal("fingerprint did not change with the args")
	}
	ids := map[string]string{}
	for _, c := range []struct {
		what    string
		replica string
		fp      string
		gen     int
	}{
		{"base", "llama-3.1-8b-0", fp, 0},
		{"fingerprint", "llama-3.1-8b-0", fp2, 0},
		{"replica", "llama-3.1-8b-1", fp, 0},
		{"generation", "llama-3.1-8b-0", fp, 1},
		{"generation 10", "llama-3.1-8b-0", fp, 10},
		{"replica 1, generation 0 vs replica 11", "llama-3.1-8b-11", fp, 0},
	} {
		id := JobID(c.replica, c.fp, c.gen)
		if other, ok := ids[id]; ok {
			t.Errorf("%s and %s give one ID %q", c.what, other, id)
		}
		ids[id] = c.what
	}

	// Through Job: same input, same ID; a changed profile or generation, a
	// new ID; a change that only steers placement (replicas, watts, weight)
	// or a new decision (re-placing in place), the same.
	in := input(llama8b, 0, fullScope("r01-k01", "p01-k01-a"), nil, "n-0001")
	j1, err := Job(in)
	if err != nil {
		t.Fatal(err)
	}
	placement := in
	placement.Profile.Watts = 650
	placement.Profile.Weight = 4
	placement.Model.Replicas = 40
	j2, err := Job(placement)
	if err != nil {
		t.Fatal(err)
	}
	if *j1.ID != *j2.ID {
		t.Errorf("placement-only change moved the ID: %q → %q", *j1.ID, *j2.ID)
	}
	changed := in
	changed.Profile.Args = []string{"--max-model-len", "8192"}
	j3, err := Job(changed)
	if err != nil {
		t.Fatal(err)
	}
	if *j1.ID == *j3.ID {
		t.Errorf("changed args kept the ID %q", *j1.ID)
	}
	nextGen := in
	nextGen.Gen = 1
	j4, err := Job(nextGen)
	if err != nil {
		t.Fatal(err)
	}
	if *j1.ID == *j4.ID {
		t.Errorf("generation 1 kept the ID %q", *j1.ID)
	}
	moved := in
	moved.Decision.Shards = shards(in.Profile, "n-0002")
	moved.Decision.Domain = fullScope("r01-k01", "p01-k01-b")
	j5, err := Job(moved)
	if err != nil {
		t.Fatal(err)
	}
	if *j1.ID != *j5.ID {
		t.Errorf("re-placing moved the ID: %q → %q", *j1.ID, *j5.ID)
	}
}

func TestServiceNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("very-long-model-name-", 5)
	for _, tc := range []struct{ got, want string }{
		{ServiceName("llama-3.1-8b"), "llmgw-llama-3-1-8b"},
		{ServiceName("Qwen2.5_72B"), "llmgw-qwen2-5-72b"},
		{ServiceName("gpt-oss-120b"), "llmgw-gpt-oss-120b"},
		{DistServiceName("deepseek-v3-1"), "llmgw-deepseek-v3-1-dist"},
		{ServiceName(long), ServiceName(long)},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	for _, s := range []string{ServiceName(long), ServiceName(long + "x"), DistServiceName(long + "-12"), ServiceName("---"), ServiceName("")} {
		if len(s) > 63 || s == "" || s[0] == '-' || s[len(s)-1] == '-' {
			t.Errorf("%q is not an RFC 1123 label", s)
		}
		for _, c := range s {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				t.Errorf("%q has %q", s, c)
			}
		}
	}
	if ServiceName(long) == ServiceName(long+"x") {
		t.Error("two long names cut to one")
	}
}

func TestShardIndex(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"shard-0", 0, true},
		{"shard-12", 12, true},
		{"shard-", 0, false},
		{"shard--1", 0, false},
		{"shard-01", 0, false},
		{"shard-+1", 0, false},
		{"engine", 0, false},
	} {
		got, ok := ShardIndex(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ShardIndex(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestScopeRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []facility.Scope{
		nil,
		scope("rack=r01-k01"),
		fullScope("r01-k01", "p01-k01-a"),
	} {
		str := FormatScope(s)
		back, err := ParseScope(str)
		if err != nil {
			t.Fatalf("ParseScope(%q): %v", str, err)
		}
		if diff := cmp.Diff(s, back); diff != "" {
			t.Errorf("round trip of %q (-want +got):\n%s", str, diff)
		}
	}
	if got, want := FormatScope(fullScope("r01-k01", "p01-k01-a")), "site=ams1,room=a,row=r01,rack=r01-k01,pdu=p01-k01-a"; got != want {
		t.Errorf("FormatScope = %q, want %q", got, want)
	}
}
