module agentrt.dev/policies/__NAME__

go 1.25

require agentrt.dev/policy v0.0.0

replace agentrt.dev/policy => __SDK__/go
