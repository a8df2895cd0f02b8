package policy

// Host is what the host grants a policy (`agentrt:policy/host`): a monotonic clock in
// microseconds, a log, a per-instance seed. Nothing else: no files, network, environment or wall
// clock (Go's time.Now, os and fmt.Print reach WASI stubs that return nothing useful or trap;
// docs/zero-wasi.md).
type Host interface {
	NowUs() uint64
	Log(level LogLevel, message string)
	RandomSeed() uint64
}

var host Host = &NativeHost{}

// SetHost replaces the host: the component's glue installs the real imports; tests may install
// their own.
func SetHost(h Host) { host = h }

// NowUs is the host's monotonic clock, in microseconds.
func NowUs() uint64 { return host.NowUs() }

// Log writes a line to the host's log, tagged with the tenant and slot (visible with
// AGENTRT_LOG=agentrt_runtime=debug or similar).
func Log(level LogLevel, message string) { host.Log(level, message) }

// RandomSeed is a seed chosen by the host per instance.
func RandomSeed() uint64 { return host.RandomSeed() }

// NativeHost stands in for the host outside a component (native tests): a clock that advances
// 1 µs per reading, a fixed seed, log lines kept in Lines.
type NativeHost struct {
	Clock uint64
	Seed  uint64
	Lines []string
}

func (h *NativeHost) NowUs() uint64 { h.Clock++; return h.Clock }
func (h *NativeHost) Log(_ LogLevel, message string) {
	h.Lines = append(h.Lines, message)
}
func (h *NativeHost) RandomSeed() uint64 { return h.Seed }
