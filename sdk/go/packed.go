package policy

// The packed forms the host uses on its hot paths, decoded into the SDK's types — and encoded, as
// the host does, for tests. This file is what is particular to the contract line,
// `agentrt:policy@0.5.0`: a new line changes it (and the glue's conversions, _component/export.go).
// Layouts (wit/policy.wit, `observe-packed`, `observe-blocks`, `score-packed`; the Rust SDK's
// packed module is the reference, sdk/conformance/packed.txt the cases every SDK decodes):
//
//	block event, 3 words: [op | tier << 4 | position << 8 | agent << 32, block hash, parent hash]
//	score item,  5 words: [key, session, last-access, tokens | agent << 32,
//	                       position | kind << 32 | tier << 40]
//	event: a header [kind | payload words << 8 | flags << 16 | agent << 32] and its payload
//	       (every kind but agent-registered, which always comes typed through `observe`)

// ContractVersion is the contract line this SDK builds (`agentrt policy test` prints the one a
// component speaks).
const ContractVersion = "0.5.0"

const (
	WordsPerEvent = 3
	ItemWords     = 5
	// MaxPosition is where a packed block event's position saturates.
	MaxPosition = 1<<24 - 1
)

// The `event` case ordinals: the header's kind.
const (
	kindRequestArrival = 1 + iota
	kindRequestFinish
	kindToolCall
	kindToolReturn
	kindSessionEnd
	kindEngineLoad
	kindBlock
	kindSessionWait
	kindHandoff
	kindEngineCapacity
)

// DecodeBlock decodes one packed block event (3 words); false for an op or tier this SDK does
// not know (a newer host): skip it.
func DecodeBlock(words []uint64) (BlockEvent, bool) {
	head := words[0]
	op, tier := BlockOp(head&0xf), Tier(head>>4&0xf)
	if op > AllCleared || tier > TierHost {
		return BlockEvent{}, false
	}
	return BlockEvent{
		Op:         op,
		Agent:      uint32(head >> 32),
		BlockHash:  words[1],
		ParentHash: words[2],
		Position:   uint32(head>>8) & MaxPosition,
		Tier:       tier,
	}, true
}

// DecodeItem decodes one packed item (5 words); unknown kinds decode as KvBlock, unknown tiers
// as Host (a tier the policy cannot tell apart is not the one it ranks for free).
func DecodeItem(words []uint64) Item {
	kind := ItemKind(words[4] >> 32 & 0xff)
	if kind > SessionItem {
		kind = KvBlock
	}
	tier := Tier(words[4] >> 40 & 0xff)
	if tier > TierHost {
		tier = TierHost
	}
	return Item{
		Kind:       kind,
		Key:        words[0],
		Agent:      uint32(words[3] >> 32),
		Session:    words[1],
		LastAccess: words[2],
		Tokens:     uint32(words[3]),
		Position:   uint32(words[4]),
		Tier:       tier,
	}
}

// DecodeBlocks decodes packed block events, skipping unknown ops and tiers and trailing words
// that do not make a whole event.
func DecodeBlocks(words []uint64) []BlockEvent {
	blocks := make([]BlockEvent, 0, len(words)/WordsPerEvent)
	for i := 0; i+WordsPerEvent <= len(words); i += WordsPerEvent {
		if b, ok := DecodeBlock(words[i : i+WordsPerEvent]); ok {
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// DecodeItems decodes packed items; trailing words that do not make a whole item are ignored
// (the host checks one score per item).
func DecodeItems(words []uint64) []Item {
	items := make([]Item, 0, len(words)/ItemWords)
	for i := 0; i+ItemWords <= len(words); i += ItemWords {
		items = append(items, DecodeItem(words[i:i+ItemWords]))
	}
	return items
}

// DecodeEvent decodes the `observe-packed` event at the start of words: the event (nil for one
// to skip: a kind, reason or wait kind this SDK does not know, a payload shorter than it reads)
// and how many words it took (all of them when it is cut short, with a nil event). Block events
// come back as *BlockEvent.
func DecodeEvent(words []uint64) (Event, int) {
	head := words[0]
	size := int(head >> 8 & 0xff)
	if 1+size > len(words) {
		return nil, len(words)
	}
	return decodeEvent(head, words[1:1+size]), 1 + size
}

// DecodeEvents decodes `observe-packed` words, oldest first, skipping what DecodeEvent skips.
func DecodeEvents(words []uint64) []Event {
	var events []Event
	for len(words) > 0 {
		event, used := DecodeEvent(words)
		words = words[used:]
		if event != nil {
			events = append(events, event)
		}
	}
	return events
}

func decodeEvent(head uint64, p []uint64) Event {
	flags := uint16(head >> 16)
	flag := func(bit uint) bool { return flags&(1<<bit) != 0 }
	agent := uint32(head >> 32)
	switch n := len(p); uint8(head) {
	case kindRequestArrival:
		if n < 6 {
			return nil
		}
		a := &RequestArrival{RequestID: p[0], Agent: agent, Session: p[1], AnchorHash: p[2],
			PromptTokens: uint32(p[4]), Warmup: flag(0), AtUs: p[3]}
		if flag(1) {
			a.Continues = &Continuation{SharedTokens: uint32(p[5]), PreviousTokens: uint32(p[5] >> 32)}
		}
		return a
	case kindRequestFinish:
		if n < 5 {
			return nil
		}
		return &RequestFinish{RequestID: p[0], Agent: agent, Session: p[1], PromptTokens: uint32(p[3]),
			CachedTokens: uint32(p[3] >> 32), OutputTokens: uint32(p[4]), Warmup: flag(0), Ok: flag(1), AtUs: p[2]}
	case kindToolCall:
		if n < 4 {
			return nil
		}
		return &ToolCall{Session: p[0], Agent: agent, Tool: p[1], ArgsHash: p[2], AtUs: p[3]}
	case kindToolReturn:
		if n < 5 {
			return nil
		}
		return &ToolReturn{Session: p[0], Agent: agent, Tool: p[1], ArgsHash: p[2], ResultTokens: uint32(p[4]),
			LatencyUs: p[3], Ok: flag(0)}
	case kindSessionEnd:
		reason := EndReason(flags & 0xff)
		if n < 2 || reason > Evicted {
			return nil
		}
		return &SessionEnd{Session: p[0], Reason: reason, AtUs: p[1]}
	case kindEngineLoad:
		if n < 3 {
			return nil
		}
		return &EngineLoad{QueueDepth: uint32(p[0]), Running: uint32(p[0] >> 32), FreeBlocks: uint32(p[1]),
			TotalBlocks: uint32(p[1] >> 32), AtUs: p[2]}
	case kindBlock:
		if n < WordsPerEvent {
			return nil
		}
		if b, ok := DecodeBlock(p); ok {
			return &b
		}
	case kindSessionWait:
		kind := WaitKind(flags & 0xff)
		if n < 4 || kind > WaitUser {
			return nil
		}
		return &SessionWait{Session: p[0], Agent: agent, Kind: kind, Tool: p[1], ExpectedUs: p[2], Hinted: flag(8),
			AtUs: p[3]}
	case kindHandoff:
		if n < 3 {
			return nil
		}
		return &Handoff{Session: p[0], FromAgent: agent, ToAgent: uint32(p[1]), AtUs: p[2]}
	case kindEngineCapacity:
		if n < 5 {
			return nil
		}
		return &EngineCapacity{CapacityTokens: p[0], ResidentTokens: p[1], ResidentSessions: uint32(p[2]),
			HeldSessions: uint32(p[2] >> 32), PrefillUsPerKtoken: uint32(p[3]), DecodeStepUs: uint32(p[3] >> 32),
			AtUs: p[4]}
	}
	return nil
}

func blockHead(b BlockEvent) uint64 {
	position := uint64(b.Position)
	if position > MaxPosition {
		position = MaxPosition
	}
	return uint64(b.Op) | uint64(b.Tier)<<4 | position<<8 | uint64(b.Agent)<<32
}

// EncodeBlocks packs block events as the host does (for tests).
func EncodeBlocks(blocks []BlockEvent) []uint64 {
	words := make([]uint64, 0, len(blocks)*WordsPerEvent)
	for _, b := range blocks {
		words = append(words, blockHead(b), b.BlockHash, b.ParentHash)
	}
	return words
}

// EncodeItems packs items as the host does (for tests).
func EncodeItems(items []Item) []uint64 {
	words := make([]uint64, 0, len(items)*ItemWords)
	for _, it := range items {
		words = append(words, it.Key, it.Session, it.LastAccess, uint64(it.Tokens)|uint64(it.Agent)<<32,
			uint64(it.Position)|uint64(it.Kind)<<32|uint64(it.Tier)<<40)
	}
	return words
}

func bit(on bool, at uint) uint64 {
	if on {
		return 1 << at
	}
	return 0
}

// EncodeEvent appends one event's `observe-packed` words as the host packs them (for tests);
// an *AgentRegistered, which the host always sends typed, appends nothing.
func EncodeEvent(words []uint64, e Event) []uint64 {
	packed := func(kind uint8, flags uint64, agent uint32, payload ...uint64) []uint64 {
		head := uint64(kind) | uint64(len(payload))<<8 | flags<<16 | uint64(agent)<<32
		return append(append(words, head), payload...)
	}
	switch v := e.(type) {
	case *RequestArrival:
		var shared uint64
		if v.Continues != nil {
			shared = uint64(v.Continues.SharedTokens) | uint64(v.Continues.PreviousTokens)<<32
		}
		return packed(kindRequestArrival, bit(v.Warmup, 0)|bit(v.Continues != nil, 1), v.Agent,
			v.RequestID, v.Session, v.AnchorHash, v.AtUs, uint64(v.PromptTokens), shared)
	case *RequestFinish:
		return packed(kindRequestFinish, bit(v.Warmup, 0)|bit(v.Ok, 1), v.Agent,
			v.RequestID, v.Session, v.AtUs, uint64(v.PromptTokens)|uint64(v.CachedTokens)<<32, uint64(v.OutputTokens))
	case *ToolCall:
		return packed(kindToolCall, 0, v.Agent, v.Session, v.Tool, v.ArgsHash, v.AtUs)
	case *ToolReturn:
		return packed(kindToolReturn, bit(v.Ok, 0), v.Agent, v.Session, v.Tool, v.ArgsHash, v.LatencyUs,
			uint64(v.ResultTokens))
	case *SessionEnd:
		return packed(kindSessionEnd, uint64(v.Reason), 0, v.Session, v.AtUs)
	case *EngineLoad:
		return packed(kindEngineLoad, 0, 0, uint64(v.QueueDepth)|uint64(v.Running)<<32,
			uint64(v.FreeBlocks)|uint64(v.TotalBlocks)<<32, v.AtUs)
	case *BlockEvent:
		return packed(kindBlock, 0, 0, blockHead(*v), v.BlockHash, v.ParentHash)
	case *SessionWait:
		return packed(kindSessionWait, uint64(v.Kind)|bit(v.Hinted, 8), v.Agent, v.Session, v.Tool, v.ExpectedUs, v.AtUs)
	case *Handoff:
		return packed(kindHandoff, 0, v.FromAgent, v.Session, uint64(v.ToAgent), v.AtUs)
	case *EngineCapacity:
		return packed(kindEngineCapacity, 0, 0, v.CapacityTokens, v.ResidentTokens,
			uint64(v.ResidentSessions)|uint64(v.HeldSessions)<<32, uint64(v.PrefillUsPerKtoken)|uint64(v.DecodeStepUs)<<32,
			v.AtUs)
	}
	return words
}
