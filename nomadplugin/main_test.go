package nomadplugin_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/llmgw/llmgw/nomadplugin"
)

// TestMain lets this test binary be the examples' plugins: launched by
// plugintest (which sets Nomad's magic cookie in its environment) it runs
// the main of the plugin EXAMPLE_PLUGIN names instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv(nomadplugin.Handshake.MagicCookieKey) == nomadplugin.Handshake.MagicCookieValue {
		switch os.Getenv("EXAMPLE_PLUGIN") {
		case "widget":
			ExampleServeDevice()
		case "sleep":
			ExampleServeDriver()
		default:
			fmt.Fprintf(os.Stderr, "EXAMPLE_PLUGIN=%q: want widget or sleep\n", os.Getenv("EXAMPLE_PLUGIN"))
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// self is this test binary, the plugin the examples and tests launch.
func self(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatalf("test binary: %v", err)
	}
	return p
}
