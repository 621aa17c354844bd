// Package gatewayapi is what the controller and the gateway share, each
// name defined once: the model list the controller writes to a Nomad
// Variable and the gateways read (ModelList), each gateway's demand
// (Demand, served at DemandPath), the model states, the name and TLS tag
// a gateway registers with, and the tags of the replica services the
// controller's jobs register and the gateway discovers
// (docs/architecture.md, "Names every part shares"). Names and wire types
// only: finding the gateways and reading their demand is
// internal/gatewayclient's. Both sides import it, neither imports the
// other; it imports nothing of llmgw's and links no client.
package gatewayapi
