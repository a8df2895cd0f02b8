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

// Tier says where a KV block's contents live: the engine's cache in accelerator memory, or a
// copy in host memory (a hit there is a load back).
type Tier uint8

const (
	TierGpu Tier = iota
	TierHost
)

// BlockEvent is one KV-block event, whether it arrived typed or packed.
type BlockEvent struct {
	Op         BlockOp
	Agent      uint32
	BlockHash  uint64
	ParentHash uint64
	Position   uint32
	Tier       Tier
}

// ItemKind says what a scored item is.
type ItemKind uint8

const (
	KvBlock ItemKind = iota
	Request
	ToolResult
	// SessionItem is a live session working-set admission may hold back (0.5.0): Tokens is its
	// context; its score is minus the expected seconds until its next call.
	SessionItem
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
	// Tier is the tier whose decision this is, for a KV block (TierGpu for other kinds).
	Tier Tier
}

// Event is one event that is not a block event, whether it arrived typed or packed:
// *AgentRegistered, *RequestArrival, *RequestFinish, *ToolCall, *ToolReturn, *SessionEnd,
// *EngineLoad, *SessionWait, *Handoff or *EngineCapacity (a *BlockEvent goes to ObserveBlock
// instead). Switch on its type.
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

// EndReason says why the host says a session is over.
type EndReason uint8

const (
	// Closed: the framework said so; the session's own content will not be asked for again.
	Closed EndReason = iota
	// Idle: inferred from the session's silence; it may still come back.
	Idle
	// Evicted: the host's session table was full and it stopped following the session.
	Evicted
)

// SessionEnd: a session is over, or the host stopped following it.
type SessionEnd struct {
	Session uint64
	Reason  EndReason
	AtUs    uint64
}

// WaitKind says what a paused session waits for.
type WaitKind uint8

const (
	// WaitTool: a tool call; its next request carries the result (typically seconds).
	WaitTool WaitKind = iota
	// WaitUser: a person; minutes, hours, or never.
	WaitUser
)

// SessionWait: a session paused until its next request arrives; Hinted when the framework said
// so, not when the host read it from a response.
type SessionWait struct {
	Session uint64
	Agent   uint32
	Kind    WaitKind
	// Tool is the hash of the tool's name for a tool wait (0 when unknown).
	Tool uint64
	// ExpectedUs is the framework's expected duration (0 when it gave none).
	ExpectedUs uint64
	Hinted     bool
	AtUs       uint64
}

// Handoff: the framework says which agent runs next in a session.
type Handoff struct {
	Session   uint64
	FromAgent uint32
	ToAgent   uint32
	AtUs      uint64
}

type EngineLoad struct {
	QueueDepth  uint32
	Running     uint32
	FreeBlocks  uint32
	TotalBlocks uint32
	AtUs        uint64
}

// EngineCapacity: the engine's KV capacity, the working set the host's admission counts against
// it, and what the engine's answers say its work costs (0.5.0).
type EngineCapacity struct {
	CapacityTokens     uint64
	ResidentTokens     uint64
	ResidentSessions   uint32
	HeldSessions       uint32
	PrefillUsPerKtoken uint32
	DecodeStepUs       uint32
	AtUs               uint64
}

func (*AgentRegistered) isEvent() {}
func (*RequestArrival) isEvent()  {}
func (*RequestFinish) isEvent()   {}
func (*ToolCall) isEvent()        {}
func (*ToolReturn) isEvent()      {}
func (*SessionEnd) isEvent()      {}
func (*EngineLoad) isEvent()      {}
func (*BlockEvent) isEvent()      {}
func (*SessionWait) isEvent()     {}
func (*Handoff) isEvent()         {}
func (*EngineCapacity) isEvent()  {}

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
