// agentrt's policy SDK for Go (sdk/go/README.md). No dependencies: policies import it through a
// `replace` directive, and xtask builds it with GOPROXY=off.
module agentrt.dev/policy

go 1.25
