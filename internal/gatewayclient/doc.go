// Package gatewayclient is how the gateways are reached from outside: the
// gateways registered in Nomad or Consul as gatewayapi.GatewayServiceName
// (NomadGateways, ConsulGateways), which the controller reads the demand of
// and a gateway counts its peers by for share_limits, and a gateway's demand
// read over HTTP (DemandClient), which the controller's autoscaler and
// llmgw ctl cache read. The controller, the gateway and llmgw ctl import
// it; gatewayapi holds the names and the wire type it speaks, and no client.
package gatewayclient
