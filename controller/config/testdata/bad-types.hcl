# Values of the wrong type, and names the file may not have; the golden
# file shows each problem's wording.
node_base_watts = "lots"
api_token       = null
datacenters     = "dc1"
lisen           = "127.0.0.1:1"
nomad {
  tls {
    insecure = "sometimes"
  }
}
driver {
  env = ["A"]
}
driver {}
reconcil {}
