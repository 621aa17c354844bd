package weightsapi

import "testing"

// An adapter the store fetches is linked in the task directory under its
// name, so the name must be one plain file name there.
func TestCheckAdapterLinkName(t *testing.T) {
	for name, ok := range map[string]bool{
		"sql": true, "sql-v2.1": true, ".hidden": true,
		"": false, ".": false, "..": false, "org/sql": false, "../../etc/x": false, `a\b`: false, "a\x00": false,
	} {
		if err := CheckAdapterLinkName(name); (err == nil) != ok {
			t.Errorf("%q: %v, want ok %v", name, err, ok)
		}
	}
	if got := AdapterLink("sql"); got != "llmgw-adapters/sql" {
		t.Errorf("AdapterLink(sql) = %q", got)
	}
}
