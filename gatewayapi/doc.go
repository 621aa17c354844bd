// Package gatewayapi is what the controller and the gateway exchange, each
// name defined once: the model list the controller writes to a Nomad
// Variable and the gateways read (ModelList), each gateway's demand and the
// controller's client for it (Demand, DemandClient), finding the gateways
// registered in Nomad or Consul, the model states, and the tags of the
// replica services the controller's jobs register and the gateway
// discovers (docs/architecture.md, "Names every part shares"). Both sides
// import it, neither imports the other; it imports nothing of llmgw's.
package gatewayapi
