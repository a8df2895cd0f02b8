// Package policy is agentrt's policy SDK for Go: write a policy as a type with the hooks it
// needs, register it with Export, build it with `cargo xtask build-policies` (sdk/go/README.md).
//
// A policy implements Policy (Info and Score) and any of the optional hooks below; the SDK
// implements every export of `agentrt:policy/guest` (contract 0.5.0) in terms of them, decoding
// the packed hot paths (`observe-packed`, `observe-blocks`, `score-packed`) so a policy sees
// typed Events, BlockEvents and Items only.
//
//	type Mine struct{ boost uint32 }
//	func (*Mine) Info() policy.Info { return policy.Info{Name: "mine", Version: "0.1.0"} }
//	func (m *Mine) Score(items []policy.Item, scores []float32) { … }
//	func init() { policy.Export(func() policy.Policy { return &Mine{} }) }
package policy

import "strconv"

// Policy is what every policy implements. Score writes one priority per item into scores (same
// length, same order); higher = keep, ties go to the most recent (`LastAccess`).
type Policy interface {
	Info() Info
	Score(items []Item, scores []float32)
}

// The optional hooks. A policy without one gets the neutral default noted.
type (
	// Initer reads the configuration of a fresh instance; an error refuses it (default: accepts
	// no keys).
	Initer interface{ Init(config *Config) error }
	// Observer takes one event that is not a block event, in arrival order, typed or packed
	// (default: ignored, and packed events are not even decoded).
	Observer interface{ Observe(event Event) }
	// BlockObserver takes one KV-block event, typed or packed (default: ignored, and packed
	// events are not even decoded).
	BlockObserver interface{ ObserveBlock(block BlockEvent) }
	// Predictor gives forecasts within horizon steps (default: none).
	Predictor interface {
		Predict(horizon uint32) []Forecast
	}
	// Actor gives side effects for the host to carry out now (default: none).
	Actor interface{ Act() []SideEffect }
	// Snapshotter writes learned state and continues from it; Restore gets only non-empty state
	// and refuses with an error, changing nothing (default: no state; a non-empty snapshot is
	// refused).
	Snapshotter interface {
		Snapshot() []byte
		Restore(state []byte) error
	}
)

var exported func() Policy

// Export registers the policy's constructor (call it from the policy package's init): each
// `init` of the component starts from a fresh value.
func Export(newPolicy func() Policy) { exported = newPolicy }

// Exported is a Guest driving the registered policy, or nil when none is registered.
func Exported() *Guest {
	if exported == nil {
		return nil
	}
	return NewGuest(exported)
}

// Guest implements the contract's `guest` interface over one policy instance: what the component
// exports (through the generated bindings) and what the test harness drives.
type Guest struct {
	newPolicy func() Policy
	policy    Policy
	observer  Observer
	blocks    BlockObserver
}

// NewGuest drives policies made by newPolicy; it holds an unconfigured one until Init.
func NewGuest(newPolicy func() Policy) *Guest {
	g := &Guest{newPolicy: newPolicy}
	g.adopt(newPolicy())
	return g
}

func (g *Guest) adopt(p Policy) {
	g.policy = p
	g.observer, _ = p.(Observer)
	g.blocks, _ = p.(BlockObserver)
}

// Policy is the instance being driven.
func (g *Guest) Policy() Policy { return g.policy }

func (g *Guest) Info() Info { return g.policy.Info() }

// Init configures a fresh instance; on a refusal the previous one stays.
func (g *Guest) Init(pairs [][2]string) error {
	fresh := g.newPolicy()
	config := NewConfig(pairs)
	var err error
	if initer, ok := fresh.(Initer); ok {
		err = initer.Init(config)
	} else {
		err = config.ExpectOnly()
	}
	if err != nil {
		return err
	}
	g.adopt(fresh)
	return nil
}

// Observe hands each event to the policy: block events to ObserveBlock, the others to Observe.
func (g *Guest) Observe(events []Event) {
	for _, e := range events {
		g.ObserveEvent(e)
	}
}

// Observes reports whether the policy takes events other than block events (Observer): the glue
// skips converting them when it does not.
func (g *Guest) Observes() bool { return g.observer != nil }

// ObserveEvent hands one event to the policy, as Observe does.
func (g *Guest) ObserveEvent(e Event) {
	if b, ok := e.(*BlockEvent); ok {
		g.ObserveBlock(*b)
	} else if g.observer != nil {
		g.observer.Observe(e)
	}
}

// ObserveBlock hands one typed block event to the policy.
func (g *Guest) ObserveBlock(b BlockEvent) {
	if g.blocks != nil {
		g.blocks.ObserveBlock(b)
	}
}

// ObservePacked decodes `observe-packed` events for the policy: block events to ObserveBlock,
// the others to Observe (not at all when it ignores both).
func (g *Guest) ObservePacked(words []uint64) {
	if g.observer == nil && g.blocks == nil {
		return
	}
	for len(words) > 0 {
		// Block events go undecoded to a policy without ObserveBlock, the others to one without
		// Observe: skipped by the header's word count.
		isBlock := uint8(words[0]) == kindBlock
		if isBlock && g.blocks == nil || !isBlock && g.observer == nil {
			words = words[min(len(words), 1+int(words[0]>>8&0xff)):]
			continue
		}
		event, used := DecodeEvent(words)
		words = words[used:]
		if event != nil {
			g.ObserveEvent(event)
		}
	}
}

// ObserveBlocks decodes packed block events for the policy (not at all when it ignores them).
func (g *Guest) ObserveBlocks(words []uint64) {
	if g.blocks == nil {
		return
	}
	for i := 0; i+WordsPerEvent <= len(words); i += WordsPerEvent {
		if b, ok := DecodeBlock(words[i : i+WordsPerEvent]); ok {
			g.blocks.ObserveBlock(b)
		}
	}
}

// Score returns one score per item (a fresh slice: the host reads it after the call returns).
func (g *Guest) Score(items []Item) []float32 {
	scores := make([]float32, len(items))
	g.policy.Score(items, scores)
	return scores
}

// ScorePacked decodes packed items and scores them.
func (g *Guest) ScorePacked(words []uint64) []float32 {
	return g.Score(DecodeItems(words))
}

func (g *Guest) Predict(horizon uint32) []Forecast {
	if p, ok := g.policy.(Predictor); ok {
		return p.Predict(horizon)
	}
	return nil
}

func (g *Guest) Act() []SideEffect {
	if a, ok := g.policy.(Actor); ok {
		return a.Act()
	}
	return nil
}

func (g *Guest) Snapshot() []byte {
	if s, ok := g.policy.(Snapshotter); ok {
		return s.Snapshot()
	}
	return nil
}

// Restore: the empty snapshot restores nothing.
func (g *Guest) Restore(state []byte) error {
	if len(state) == 0 {
		return nil
	}
	if s, ok := g.policy.(Snapshotter); ok {
		return s.Restore(state)
	}
	return Refusal("this policy keeps no state but was given " + strconv.Itoa(len(state)) + " bytes")
}

// RecencyScores is recency as a score, as in every agentrt SDK
// (sdk/conformance/recency_scores.txt): the batch's least recently used item scores 0, newer ones
// the engine ticks since it — LRU's order under the host's ranking rule (higher = keep), and never
// negative: a negative score on a host-tier block means "not worth storing", which recency alone
// never says.
func RecencyScores(items []Item, scores []float32) {
	if len(items) == 0 {
		return
	}
	oldest := items[0].LastAccess
	for _, it := range items {
		oldest = min(oldest, it.LastAccess)
	}
	for i, it := range items {
		scores[i] = float32(it.LastAccess - oldest)
	}
}
