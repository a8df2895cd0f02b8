// Package __PACKAGE__ is __NAME__, an agentrt policy in Go (skeleton from `agentrt policy new`).
// README.md (in a project made outside an agentrt checkout) lists the events and how to build,
// test and table it. No files, clocks or randomness from Go's library: inside the component they
// reach stubs that give nothing useful, so use policy.NowUs and policy.RandomSeed.
package __PACKAGE__

import "agentrt.dev/policy"

// __TYPE__ is the policy. YOUR STATE HERE: what it learns from events.
type __TYPE__ struct{}

// New makes a fresh instance: every `init` of the component starts from one.
func New() policy.Policy { return &__TYPE__{} }

func init() { policy.Export(New) }

func (*__TYPE__) Info() policy.Info {
	return policy.Info{Name: "__NAME__", Version: "0.1.0", Description: "WHAT IT KEEPS AND WHY"}
}

func (p *__TYPE__) Init(config *policy.Config) error {
	// YOUR CONFIG KEYS HERE: config.Uint("key", fallback, low, high), named in ExpectOnly.
	return config.ExpectOnly()
}

func (p *__TYPE__) Observe(event policy.Event) {
	// YOUR LOGIC HERE: learn from events (switch event.(type)), e.g. a session the framework
	// closed: *policy.SessionEnd with Reason == policy.Closed.
}

func (p *__TYPE__) Score(items []policy.Item, scores []float32) {
	// YOUR LOGIC HERE: one score per item, higher = keep. Recency = LRU, the baseline.
	policy.RecencyScores(items, scores)
}

// Also available: ObserveBlock, Predict, Act (side effects such as warm-ups), and Snapshot with
// Restore (state across hot swaps; policy.NewWriter and policy.OpenReader have the encoding).
// Leave out what you do not use: the SDK has a default for each.
