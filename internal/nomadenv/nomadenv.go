// Package nomadenv says which Nomad HTTP API the environment names, the
// one way llmgw's binaries (the controller, the gateway) read it: Nomad's
// task API socket, NOMAD_UNIX_ADDR, which Nomad sets in a task that has
// its workload identity in its environment (identity { env = true }), and
// else NOMAD_ADDR, as Nomad's own CLI reads it. Pure: the environment is a
// function.
package nomadenv

// The environment variables read, in the order they are tried.
const (
	// UnixAddr is the task API socket, e.g. unix:///…/secrets/api.sock.
	UnixAddr = "NOMAD_UNIX_ADDR"
	// Addr is Nomad's usual http(s):// or unix:// address.
	Addr = "NOMAD_ADDR"
)

// Address returns the Nomad address the environment names, and the
// variable it came from; both empty when neither is set.
//
// NOMAD_UNIX_ADDR goes first: Nomad sets it only beside the workload
// identity's NOMAD_TOKEN, which it is the address for, while NOMAD_ADDR in
// a task may be the client agent's own environment passed through (Nomad
// filters NOMAD_TOKEN from what a raw_exec or exec task inherits, not
// NOMAD_ADDR). An address given in a file or on the command line goes
// before both.
func Address(getenv func(string) string) (addr, from string) {
	for _, name := range []string{UnixAddr, Addr} {
		if v := getenv(name); v != "" {
			return v, name
		}
	}
	return "", ""
}
