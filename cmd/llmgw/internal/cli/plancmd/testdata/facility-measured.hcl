headroom = 0.05
budget "row=r01"     {
  watts = 40000
  count = "measured"
}
budget "rack=r01-k01" { watts = 20000 }
budget "rack=r01-k02" { watts = 20000 }
budget "pdu=p02-a"   { watts = 7000 }
budget "pdu=p03-a"   {
  watts = 9000
  count = "measured"
}
hold "rack=r02-k02" {
  reason = "PDU swap"
  drain  = true
}
