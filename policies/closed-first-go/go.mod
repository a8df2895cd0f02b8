module agentrt.dev/policies/closed-first-go

go 1.25

require agentrt.dev/policy v0.0.0

replace agentrt.dev/policy => ../../sdk/go
