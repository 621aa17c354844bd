# fleet.hcl: the nodes, as the controller sees them in Nomad (read by `llmgw plan` only).
#
# Site ams1: 2 rooms (a, b) x 4 rows x 8 racks x 4 nodes = 256 nodes of 8 NVIDIA H200.
# Rows r01-r04 are in room a, r05-r08 in room b. Each rack has two PDUs (-a and -b),
# each feeding two of its nodes. Room a's nodes sit on InfiniBand fabric ib-ndr-1,
# room b's on ib-ndr-2.
#
# A node at full load draws 1200 W base + 8 x 700 W = 6.8 kW.
# A few nodes have unhealthy GPUs (free < count), and a few run work llmgw does not
# place (measured_watts above their base).

node "n-0001" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k01"
  pdu  = "p01-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0002" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k01"
  pdu  = "p01-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0003" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k01"
  pdu  = "p01-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0004" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k01"
  pdu  = "p01-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0005" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k02"
  pdu  = "p01-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0006" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k02"
  pdu  = "p01-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0007" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k02"
  pdu  = "p01-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0008" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k02"
  pdu  = "p01-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0009" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k03"
  pdu  = "p01-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0010" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k03"
  pdu  = "p01-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0011" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k03"
  pdu  = "p01-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0012" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k03"
  pdu  = "p01-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0013" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k04"
  pdu  = "p01-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0014" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k04"
  pdu  = "p01-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0015" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k04"
  pdu  = "p01-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0016" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k04"
  pdu  = "p01-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0017" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k05"
  pdu  = "p01-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0018" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k05"
  pdu  = "p01-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0019" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k05"
  pdu  = "p01-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    free  = 6
    power_limit = 700
    memory = 143771
  }
}

node "n-0020" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k05"
  pdu  = "p01-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0021" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k06"
  pdu  = "p01-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0022" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k06"
  pdu  = "p01-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0023" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k06"
  pdu  = "p01-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0024" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k06"
  pdu  = "p01-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0025" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k07"
  pdu  = "p01-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0026" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k07"
  pdu  = "p01-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0027" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k07"
  pdu  = "p01-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0028" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k07"
  pdu  = "p01-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0029" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k08"
  pdu  = "p01-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0030" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k08"
  pdu  = "p01-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0031" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k08"
  pdu  = "p01-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0032" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k08"
  pdu  = "p01-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0033" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k01"
  pdu  = "p02-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  measured_watts = 3100
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0034" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k01"
  pdu  = "p02-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  measured_watts = 2900
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0035" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k01"
  pdu  = "p02-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0036" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k01"
  pdu  = "p02-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0037" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k02"
  pdu  = "p02-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0038" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k02"
  pdu  = "p02-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0039" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k02"
  pdu  = "p02-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0040" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k02"
  pdu  = "p02-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0041" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k03"
  pdu  = "p02-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0042" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k03"
  pdu  = "p02-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0043" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k03"
  pdu  = "p02-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0044" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k03"
  pdu  = "p02-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0045" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k04"
  pdu  = "p02-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0046" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k04"
  pdu  = "p02-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0047" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k04"
  pdu  = "p02-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0048" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k04"
  pdu  = "p02-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0049" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k05"
  pdu  = "p02-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0050" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k05"
  pdu  = "p02-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0051" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k05"
  pdu  = "p02-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0052" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k05"
  pdu  = "p02-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0053" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k06"
  pdu  = "p02-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0054" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k06"
  pdu  = "p02-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0055" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k06"
  pdu  = "p02-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0056" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k06"
  pdu  = "p02-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0057" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k07"
  pdu  = "p02-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0058" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k07"
  pdu  = "p02-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0059" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k07"
  pdu  = "p02-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0060" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k07"
  pdu  = "p02-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0061" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k08"
  pdu  = "p02-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0062" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k08"
  pdu  = "p02-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0063" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k08"
  pdu  = "p02-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0064" {
  site = "ams1"
  room = "a"
  row  = "r02"
  rack = "r02-k08"
  pdu  = "p02-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0065" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k01"
  pdu  = "p03-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0066" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k01"
  pdu  = "p03-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0067" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k01"
  pdu  = "p03-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0068" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k01"
  pdu  = "p03-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0069" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k02"
  pdu  = "p03-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0070" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k02"
  pdu  = "p03-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0071" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k02"
  pdu  = "p03-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0072" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k02"
  pdu  = "p03-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0073" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k03"
  pdu  = "p03-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0074" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k03"
  pdu  = "p03-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0075" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k03"
  pdu  = "p03-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0076" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k03"
  pdu  = "p03-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0077" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k04"
  pdu  = "p03-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    free  = 7
    power_limit = 700
    memory = 143771
  }
}

node "n-0078" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k04"
  pdu  = "p03-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0079" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k04"
  pdu  = "p03-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0080" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k04"
  pdu  = "p03-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0081" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k05"
  pdu  = "p03-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0082" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k05"
  pdu  = "p03-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0083" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k05"
  pdu  = "p03-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0084" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k05"
  pdu  = "p03-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0085" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k06"
  pdu  = "p03-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0086" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k06"
  pdu  = "p03-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0087" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k06"
  pdu  = "p03-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0088" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k06"
  pdu  = "p03-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0089" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k07"
  pdu  = "p03-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0090" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k07"
  pdu  = "p03-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0091" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k07"
  pdu  = "p03-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0092" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k07"
  pdu  = "p03-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0093" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k08"
  pdu  = "p03-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0094" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k08"
  pdu  = "p03-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0095" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k08"
  pdu  = "p03-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0096" {
  site = "ams1"
  room = "a"
  row  = "r03"
  rack = "r03-k08"
  pdu  = "p03-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0097" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k01"
  pdu  = "p04-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0098" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k01"
  pdu  = "p04-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0099" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k01"
  pdu  = "p04-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0100" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k01"
  pdu  = "p04-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0101" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k02"
  pdu  = "p04-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0102" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k02"
  pdu  = "p04-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0103" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k02"
  pdu  = "p04-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0104" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k02"
  pdu  = "p04-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0105" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k03"
  pdu  = "p04-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0106" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k03"
  pdu  = "p04-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0107" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k03"
  pdu  = "p04-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0108" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k03"
  pdu  = "p04-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0109" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k04"
  pdu  = "p04-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0110" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k04"
  pdu  = "p04-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0111" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k04"
  pdu  = "p04-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0112" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k04"
  pdu  = "p04-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0113" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k05"
  pdu  = "p04-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0114" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k05"
  pdu  = "p04-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0115" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k05"
  pdu  = "p04-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0116" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k05"
  pdu  = "p04-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0117" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k06"
  pdu  = "p04-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0118" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k06"
  pdu  = "p04-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0119" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k06"
  pdu  = "p04-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0120" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k06"
  pdu  = "p04-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0121" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k07"
  pdu  = "p04-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0122" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k07"
  pdu  = "p04-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0123" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k07"
  pdu  = "p04-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0124" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k07"
  pdu  = "p04-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0125" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k08"
  pdu  = "p04-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0126" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k08"
  pdu  = "p04-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0127" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k08"
  pdu  = "p04-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0128" {
  site = "ams1"
  room = "a"
  row  = "r04"
  rack = "r04-k08"
  pdu  = "p04-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0129" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k01"
  pdu  = "p05-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0130" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k01"
  pdu  = "p05-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  measured_watts = 4200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0131" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k01"
  pdu  = "p05-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0132" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k01"
  pdu  = "p05-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0133" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k02"
  pdu  = "p05-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0134" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k02"
  pdu  = "p05-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0135" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k02"
  pdu  = "p05-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0136" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k02"
  pdu  = "p05-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0137" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k03"
  pdu  = "p05-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0138" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k03"
  pdu  = "p05-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0139" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k03"
  pdu  = "p05-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0140" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k03"
  pdu  = "p05-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0141" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k04"
  pdu  = "p05-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0142" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k04"
  pdu  = "p05-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0143" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k04"
  pdu  = "p05-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0144" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k04"
  pdu  = "p05-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0145" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k05"
  pdu  = "p05-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0146" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k05"
  pdu  = "p05-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0147" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k05"
  pdu  = "p05-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0148" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k05"
  pdu  = "p05-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0149" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k06"
  pdu  = "p05-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0150" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k06"
  pdu  = "p05-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    free  = 4
    power_limit = 700
    memory = 143771
  }
}

node "n-0151" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k06"
  pdu  = "p05-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0152" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k06"
  pdu  = "p05-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0153" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k07"
  pdu  = "p05-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0154" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k07"
  pdu  = "p05-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0155" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k07"
  pdu  = "p05-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0156" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k07"
  pdu  = "p05-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0157" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k08"
  pdu  = "p05-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0158" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k08"
  pdu  = "p05-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0159" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k08"
  pdu  = "p05-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0160" {
  site = "ams1"
  room = "b"
  row  = "r05"
  rack = "r05-k08"
  pdu  = "p05-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0161" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k01"
  pdu  = "p06-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0162" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k01"
  pdu  = "p06-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0163" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k01"
  pdu  = "p06-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0164" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k01"
  pdu  = "p06-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0165" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k02"
  pdu  = "p06-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0166" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k02"
  pdu  = "p06-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0167" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k02"
  pdu  = "p06-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0168" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k02"
  pdu  = "p06-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0169" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k03"
  pdu  = "p06-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0170" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k03"
  pdu  = "p06-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0171" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k03"
  pdu  = "p06-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0172" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k03"
  pdu  = "p06-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0173" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k04"
  pdu  = "p06-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0174" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k04"
  pdu  = "p06-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0175" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k04"
  pdu  = "p06-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0176" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k04"
  pdu  = "p06-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0177" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k05"
  pdu  = "p06-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0178" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k05"
  pdu  = "p06-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0179" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k05"
  pdu  = "p06-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0180" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k05"
  pdu  = "p06-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0181" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k06"
  pdu  = "p06-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0182" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k06"
  pdu  = "p06-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0183" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k06"
  pdu  = "p06-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0184" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k06"
  pdu  = "p06-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0185" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k07"
  pdu  = "p06-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0186" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k07"
  pdu  = "p06-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0187" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k07"
  pdu  = "p06-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0188" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k07"
  pdu  = "p06-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0189" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k08"
  pdu  = "p06-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0190" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k08"
  pdu  = "p06-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0191" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k08"
  pdu  = "p06-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0192" {
  site = "ams1"
  room = "b"
  row  = "r06"
  rack = "r06-k08"
  pdu  = "p06-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0193" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k01"
  pdu  = "p07-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0194" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k01"
  pdu  = "p07-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0195" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k01"
  pdu  = "p07-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0196" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k01"
  pdu  = "p07-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0197" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k02"
  pdu  = "p07-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0198" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k02"
  pdu  = "p07-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0199" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k02"
  pdu  = "p07-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0200" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k02"
  pdu  = "p07-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0201" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k03"
  pdu  = "p07-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    free  = 6
    power_limit = 700
    memory = 143771
  }
}

node "n-0202" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k03"
  pdu  = "p07-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0203" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k03"
  pdu  = "p07-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0204" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k03"
  pdu  = "p07-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0205" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k04"
  pdu  = "p07-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0206" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k04"
  pdu  = "p07-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0207" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k04"
  pdu  = "p07-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0208" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k04"
  pdu  = "p07-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0209" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k05"
  pdu  = "p07-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0210" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k05"
  pdu  = "p07-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0211" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k05"
  pdu  = "p07-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0212" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k05"
  pdu  = "p07-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0213" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k06"
  pdu  = "p07-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0214" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k06"
  pdu  = "p07-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0215" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k06"
  pdu  = "p07-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0216" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k06"
  pdu  = "p07-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0217" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k07"
  pdu  = "p07-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0218" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k07"
  pdu  = "p07-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0219" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k07"
  pdu  = "p07-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0220" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k07"
  pdu  = "p07-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0221" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k08"
  pdu  = "p07-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0222" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k08"
  pdu  = "p07-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  measured_watts = 3600
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0223" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k08"
  pdu  = "p07-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0224" {
  site = "ams1"
  room = "b"
  row  = "r07"
  rack = "r07-k08"
  pdu  = "p07-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0225" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k01"
  pdu  = "p08-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0226" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k01"
  pdu  = "p08-k01-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0227" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k01"
  pdu  = "p08-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0228" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k01"
  pdu  = "p08-k01-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0229" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k02"
  pdu  = "p08-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0230" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k02"
  pdu  = "p08-k02-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0231" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k02"
  pdu  = "p08-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0232" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k02"
  pdu  = "p08-k02-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0233" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k03"
  pdu  = "p08-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0234" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k03"
  pdu  = "p08-k03-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0235" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k03"
  pdu  = "p08-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0236" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k03"
  pdu  = "p08-k03-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0237" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k04"
  pdu  = "p08-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0238" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k04"
  pdu  = "p08-k04-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0239" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k04"
  pdu  = "p08-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0240" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k04"
  pdu  = "p08-k04-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0241" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k05"
  pdu  = "p08-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0242" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k05"
  pdu  = "p08-k05-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0243" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k05"
  pdu  = "p08-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0244" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k05"
  pdu  = "p08-k05-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0245" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k06"
  pdu  = "p08-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0246" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k06"
  pdu  = "p08-k06-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0247" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k06"
  pdu  = "p08-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0248" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k06"
  pdu  = "p08-k06-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0249" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k07"
  pdu  = "p08-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0250" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k07"
  pdu  = "p08-k07-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0251" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k07"
  pdu  = "p08-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0252" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k07"
  pdu  = "p08-k07-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0253" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k08"
  pdu  = "p08-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0254" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k08"
  pdu  = "p08-k08-a"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0255" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k08"
  pdu  = "p08-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}

node "n-0256" {
  site = "ams1"
  room = "b"
  row  = "r08"
  rack = "r08-k08"
  pdu  = "p08-k08-b"
  cpu_cores  = 192
  memory_gb  = 2048
  base_watts = 1200
  fabric = "ib-ndr-2"
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
    memory = 143771
  }
}
