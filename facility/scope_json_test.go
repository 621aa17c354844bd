package facility

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestScopeJSONRoundTrip(t *testing.T) {
	t.Parallel()
	in := Scope{{LevelSite, "ams1"}, {LevelRow, "r01"}, {LevelRack, "r01-k01"}, {LevelPDU, "p01-k01-a"}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var got Scope
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// Order in the object does not matter; levels come back coarse to fine.
	if err := json.Unmarshal([]byte(`{"rack":"k","site":"s"}`), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Scope{{LevelSite, "s"}, {LevelRack, "k"}}, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if err := json.Unmarshal([]byte(`{"cage":"x"}`), &got); !errors.Is(err, ErrUnknownLevel) {
		t.Fatalf("unknown level: got %v", err)
	}
	if err := json.Unmarshal([]byte(`{"rack":3}`), &got); err == nil {
		t.Fatal("non-string value accepted")
	}
}
