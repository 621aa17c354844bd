// Package observe turns what Nomad reports — nodes with their location meta
// and GPU devices, allocations, device power stats — into the facility
// model the placement engine works on. It is pure: the controller fetches,
// this package converts.
package observe
