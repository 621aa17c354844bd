// Package version holds the build's version, set by the linker
// (-X github.com/llmgw/llmgw/internal/version.Version=...). It must parse as
// a semantic version: Nomad's plugin loader rejects a plugin whose version
// does not.
package version

// Version is the release version of every llmgw binary.
var Version = "0.1.0-dev"
