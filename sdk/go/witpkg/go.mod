// agentrt's own stand-in for go.bytecodealliance.org/pkg: just the API that `wit-bindgen go`
// 0.63's bindings of wit/policy.wit use (wit/types: Option, Result, Tuple2, Unit; wit/runtime:
// Allocate, Unpin, cabi_realloc), so a Go policy builds without the Go module proxy. Policies
// reach it through a `replace` directive that xtask writes (sdk/go/README.md).
module go.bytecodealliance.org/pkg

go 1.25
