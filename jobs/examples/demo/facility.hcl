# The demo facility: a budget per PDU and one for the row.
headroom = 0.05

budget "pdu=p01-k01-a" { watts = 9000 }
budget "pdu=p01-k02-a" { watts = 9000 }
budget "pdu=p02-k01-a" { watts = 9000 }
budget "row=r01"       { watts = 16000 }
