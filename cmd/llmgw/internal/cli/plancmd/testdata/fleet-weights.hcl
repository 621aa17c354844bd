# fleet.hcl with what the nodes' stores hold (the driver's attributes
# driver.llmgw.weights.<key> = bytes) and how fast some of them fetch.
node "n1" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k01"
  pdu  = "p01-a"
  cpu_cores  = 96
  memory_gb  = 1024
  base_watts = 1000
  fabric = "ib-1"
  fetch_bytes_per_second = 500000000
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
  }
}
node "n2" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k01"
  pdu  = "p01-b"
  cpu_cores  = 96
  memory_gb  = 1024
  base_watts = 1000
  fabric = "ib-1"
  gpu "NVIDIA H200" {
    count = 8
    free  = 4
    power_limit = 700
  }
}
node "n3" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k02"
  pdu  = "p02-a"
  cpu_cores  = 96
  memory_gb  = 1024
  base_watts = 1000
  measured_watts = 2500
  fabric = "ib-1"
  weights = { "meta-llama--llama-3_1-70b-instruct--main-1d5a895c44" = 141100000000 }
  fetch_bytes_per_second = 1250000000
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
  }
}
node "n4" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k02"
  pdu  = "p02-b"
  cpu_cores  = 96
  memory_gb  = 1024
  base_watts = 1000
  fabric = "ib-1"
  weights = { "meta-llama--llama-3_1-70b-instruct--main-1d5a895c44" = 141100000000 }
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
  }
}
node "n5" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k01"
  pdu  = "p03-a"
  cpu_cores  = 96
  memory_gb  = 1024
  base_watts = 1000
  fabric = "ib-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
  }
}
node "n6" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k01"
  pdu  = "p03-b"
  cpu_cores  = 96
  memory_gb  = 1024
  base_watts = 1000
  fabric = "ib-2"
  weights = { "deepseek-ai--deepseek-v3--main-f5569e2667" = 688600000000 }
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
  }
}
node "n7" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k02"
  pdu  = "p04-a"
  cpu_cores  = 96
  memory_gb  = 1024
  base_watts = 1000
  fabric = "ib-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
  }
}
node "n8" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k02"
  pdu  = "p04-b"
  cpu_cores  = 96
  memory_gb  = 1024
  base_watts = 1000
  fabric = "ib-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
  }
}
