node "n1" {
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
  }
}
node "n1" {
  gpu "NVIDIA H200" {
    count = 8
    power_limit = 700
  }
}
