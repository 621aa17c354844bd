package ctlcmd

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/gatewayapi"
)

func demandServer(t *testing.T, d gatewayapi.Demand) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != gatewayapi.DemandPath {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Two gateways' counts are summed per replica, with a row per model
// summing its replicas; a replica that reports nothing has no ratio.
func TestCacheTable(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	gw := func(p1, c1, p2, c2 int64) gatewayapi.Demand {
		return gatewayapi.Demand{SampledAt: at, Models: []gatewayapi.ModelDemand{
			{Model: "chat", Routing: "prefix", Cache: []gatewayapi.ReplicaCache{
				{Replica: "chat-0", Endpoint: "10.0.0.1:1", PromptTokens: p1, CachedTokens: c1},
				{Replica: "chat-1", Endpoint: "10.0.0.2:1", PromptTokens: p2, CachedTokens: c2},
			}},
			{Model: "other", Routing: "least-outstanding", Cache: []gatewayapi.ReplicaCache{
				{Replica: "other-0", Endpoint: "10.0.0.3:1", UnknownAnswers: 4},
			}},
			{Model: "asleep", Routing: "least-outstanding"},
		}}
	}
	a := demandServer(t, gw(1000, 900, 500, 100))
	b := demandServer(t, gw(1000, 700, 0, 0))
	r := run(t, nil, "cache", "--gateway", a, "--gateway", b)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := `MODEL  ROUTING            REPLICA  ENDPOINT    PROMPT  CACHED  HIT    UNKNOWN
chat   prefix             chat-0   10.0.0.1:1  2000    1600    80.0%  0
chat   prefix             chat-1   10.0.0.2:1  500     100     20.0%  0
chat   prefix             *        -           2500    1700    68.0%  0
other  least-outstanding  other-0  10.0.0.3:1  0       0       -      8
other  least-outstanding  *        -           0       0       -      8
`
	if r.stdout != want {
		t.Errorf("table:\n%s\nwant:\n%s", r.stdout, want)
	}
	// From the environment, as JSON.
	j := run(t, map[string]string{EnvGateways: a}, "cache", "-o", "json")
	var rows []cacheRow
	if err := json.Unmarshal([]byte(j.stdout), &rows); err != nil || j.code != 0 || len(rows) != 5 || rows[0].HitRatio == nil || *rows[0].HitRatio != 0.9 || rows[3].HitRatio != nil {
		t.Errorf("json: exit %d, %v: %s", j.code, err, j.stdout)
	}
	// A gateway that does not answer is named.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if e := run(t, nil, "cache", "--gateway", dead.URL); e.code != ExitUnreachable || !strings.Contains(e.stderr, "gateway "+dead.URL) {
		t.Errorf("dead gateway: exit %d: %s", e.code, e.stderr)
	}
	if e := run(t, nil, "cache", "--gateway", "nope"); e.code != ExitUsage || !strings.Contains(e.stderr, `--gateway "nope"`) {
		t.Errorf("bad URL: exit %d: %s", e.code, e.stderr)
	}
}
