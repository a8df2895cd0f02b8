// Package policytest drives a Go policy natively (`go test`), through the same Guest its
// component exports and the packed paths the host uses.
package policytest

import (
	"math"
	"sort"

	"agentrt.dev/policy"
)

// Harness is one policy instance behind its Guest, driven as the host drives a component.
type Harness struct {
	Guest *policy.Guest
	Host  *policy.NativeHost
}

// New configures a fresh policy with key/value pairs; the error is the refusal the host would
// report.
func New(newPolicy func() policy.Policy, config ...[2]string) (*Harness, error) {
	h := &Harness{Guest: policy.NewGuest(newPolicy), Host: &policy.NativeHost{Seed: 7}}
	policy.SetHost(h.Host)
	if err := h.Guest.Init(config); err != nil {
		return nil, err
	}
	return h, nil
}

// Observe sends events as the host sends a batch to a 0.5 component: *AgentRegistered through
// the typed Observe, every run of other events between registrations through ObservePacked.
func (h *Harness) Observe(events ...policy.Event) {
	var words []uint64
	for _, e := range events {
		if registered, ok := e.(*policy.AgentRegistered); ok {
			if len(words) > 0 {
				h.Guest.ObservePacked(words)
				words = nil
			}
			h.Guest.Observe([]policy.Event{registered})
			continue
		}
		words = policy.EncodeEvent(words, e)
	}
	if len(words) > 0 {
		h.Guest.ObservePacked(words)
	}
}

// ObserveBlocks sends block events through the packed path, as the host does.
func (h *Harness) ObserveBlocks(blocks ...policy.BlockEvent) {
	h.Guest.ObserveBlocks(policy.EncodeBlocks(blocks))
}

// Score scores through the packed path, as the host does, and panics when the typed path
// disagrees (the contract requires the same answer).
func (h *Harness) Score(items ...policy.Item) []float32 {
	packed := h.Guest.ScorePacked(policy.EncodeItems(items))
	typed := h.Guest.Score(items)
	for i := range packed {
		if math.Float32bits(packed[i]) != math.Float32bits(typed[i]) {
			panic("score and score-packed differ")
		}
	}
	return packed
}

func (h *Harness) Predict(horizon uint32) []policy.Forecast { return h.Guest.Predict(horizon) }
func (h *Harness) Act() []policy.SideEffect                 { return h.Guest.Act() }
func (h *Harness) Snapshot() []byte                         { return h.Guest.Snapshot() }
func (h *Harness) Restore(state []byte) error               { return h.Guest.Restore(state) }

// GpuBlock is a GPU-tier KV block of agent 1, in no session, 16 tokens at position 0: the item
// most eviction tests rank, told apart by its key and last access.
func GpuBlock(key, lastAccess uint64) policy.Item {
	return policy.Item{Kind: policy.KvBlock, Key: key, Agent: 1, LastAccess: lastAccess, Tokens: 16, Tier: policy.TierGpu}
}

// GpuBlockEvent is a GPU-tier block event of agent 1 at the root of the prefix tree.
func GpuBlockEvent(op policy.BlockOp, blockHash uint64) policy.BlockEvent {
	return policy.BlockEvent{Op: op, Agent: 1, BlockHash: blockHash, Tier: policy.TierGpu}
}

// SessionEnd is a session that ended for reason, at time 0.
func SessionEnd(session uint64, reason policy.EndReason) *policy.SessionEnd {
	return &policy.SessionEnd{Session: session, Reason: reason}
}

// Rank is the host's ranking rule (sdk/src/ranking.rs): item indices keep-most first; higher
// score first, ties by last-access (most recent first), non-finite scores last.
func Rank(items []policy.Item, scores []float32) []int {
	key := func(s float32) float64 {
		if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
			return math.Inf(-1)
		}
		return float64(s)
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool {
		a, b := order[x], order[y]
		if key(scores[a]) != key(scores[b]) {
			return key(scores[a]) > key(scores[b])
		}
		return items[a].LastAccess > items[b].LastAccess
	})
	return order
}
