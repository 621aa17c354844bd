# Blocks left to the environment: every nomad and consul field comes from
# the test's NOMAD_* and CONSUL_* variables.
consul {}
service_provider = "consul"
