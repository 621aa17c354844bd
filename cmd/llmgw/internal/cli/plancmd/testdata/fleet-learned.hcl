# Two rows of two racks; each rack has two PDUs of one node each.
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

# What measured budgets count: one shard of each profile, as learned.
learned "llama-3.1-70b" "h200x4" {
  gpu     = "NVIDIA H200"
  watts   = 1200
  samples = 500
}
learned "deepseek-v3" "h200x16" {
  gpu     = "NVIDIA H200"
  watts   = 3000
  samples = 500
}
