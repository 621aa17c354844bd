headroom = 0.05
budget "shelf=s1" { watts = 1000 }
budget "pdu=p01-a" {
  watts = -17300
}
