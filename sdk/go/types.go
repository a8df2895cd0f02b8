package policy

// The contract's types (wit/policy.wit, `agentrt:policy/types`) as plain Go values. The SDK
// converts the generated bindings' values to these, so a policy and its tests never touch
// generated code.

// BlockOp is what happened to a KV-cache block.
type BlockOp uint8

const (
	Stored BlockOp = iota
	Touched
	Removed
	AllCleared
)

// BlockEvent is one KV-block event, whether it arrived typed or packed.
type BlockEvent struct {
	Op         BlockOp
	Agent      uint32
	BlockHash  uint64
	ParentHash uint64
	Position   uint32
}

// ItemKind says what a scored item is.
type ItemKind uint8

const (
	KvBlock ItemKind = iota
	Request
	ToolResult
)

// Item is a candidate for a decision; scores are returned in the same order.
type Item struct {
	Kind       ItemKind
	Key        uint64
	Agent      uint32
	Session    uint64
	LastAccess uint64
	Tokens     uint32
	Position   uint32
}

// Event is one event that is not a block event: *AgentRegistered, *RequestArrival,
// *RequestFinish, *ToolCall, *ToolReturn, *SessionEnd or *EngineLoad (a typed *BlockEvent goes to
// ObserveBlock instead). Switch on its type.
type Event interface{ isEvent() }

type AgentRegistered struct {
	Agent        uint32
	Name         string
	AnchorHash   uint64
	AnchorTokens uint32
}

// Continuation: how a prompt relates to the same agent's previous prompt in the session.
type Continuation struct {
	SharedTokens   uint32
	PreviousTokens uint32
}

type RequestArrival struct {
	RequestID    uint64
	Agent        uint32
	Session      uint64
	AnchorHash   uint64
	PromptTokens uint32
	// Continues is nil for the agent's first call in the session.
	Continues *Continuation
	// Warmup is true for requests the host issued on a policy's behalf: do not learn from them.
	Warmup bool
	AtUs   uint64
}

type RequestFinish struct {
	RequestID    uint64
	Agent        uint32
	Session      uint64
	PromptTokens uint32
	CachedTokens uint32
	OutputTokens uint32
	Warmup       bool
	Ok           bool
	AtUs         uint64
}

type ToolCall struct {
	Session  uint64
	Agent    uint32
	Tool     uint64
	ArgsHash uint64
	AtUs     uint64
}

type ToolReturn struct {
	Session      uint64
	Agent        uint32
	Tool         uint64
	ArgsHash     uint64
	ResultTokens uint32
	LatencyUs    uint64
	Ok           bool
}

type SessionEnd struct{ Session uint64 }

type EngineLoad struct {
	QueueDepth  uint32
	Running     uint32
	FreeBlocks  uint32
	TotalBlocks uint32
	AtUs        uint64
}

func (*AgentRegistered) isEvent() {}
func (*RequestArrival) isEvent()  {}
func (*RequestFinish) isEvent()   {}
func (*ToolCall) isEvent()        {}
func (*ToolReturn) isEvent()      {}
func (*SessionEnd) isEvent()      {}
func (*EngineLoad) isEvent()      {}
func (*BlockEvent) isEvent()      {}

// ForecastKind: what a forecast expects.
type ForecastKind uint8

const (
	NextAgent ForecastKind = iota
	NextTool
	SessionEnds
)

// Forecast is a probabilistic expectation of future activity (`predict`).
type Forecast struct {
	Kind        ForecastKind
	Session     uint64
	Agent       uint32
	Subject     uint64
	Probability float32
	Steps       uint32
}

// SideEffect is what `act` asks the host to do: WarmPrefix, Pin, Unpin, Preload, Hedge,
// SetPriority or Deny.
type SideEffect interface{ isSideEffect() }

type WarmPrefix struct {
	Agent       uint32
	AnchorHash  uint64
	Probability float32
}

type Pin struct {
	Agent   uint32
	Session uint64
	TtlMs   uint32
}

type Unpin Pin

type Preload struct {
	Model       string
	Probability float32
}

type Hedge struct {
	Session     uint64
	Agent       uint32
	Probability float32
}

type SetPriority struct {
	Session  uint64
	Priority int32
}

type Deny struct {
	Session uint64
	Reason  string
}

func (WarmPrefix) isSideEffect()  {}
func (Pin) isSideEffect()         {}
func (Unpin) isSideEffect()       {}
func (Preload) isSideEffect()     {}
func (Hedge) isSideEffect()       {}
func (SetPriority) isSideEffect() {}
func (Deny) isSideEffect()        {}

// Info is what a policy says about itself.
type Info struct {
	Name        string
	Version     string
	Description string
}

// LogLevel of a host.Log line.
type LogLevel uint8

const (
	Trace LogLevel = iota
	Debug
	InfoLevel
	Warn
	Error
)
