// Package closedfirst is closed-first in Go: the blocks of sessions the framework closed go
// first, LRU otherwise.
//
// The rule of policies/closed-first-rust/SPEC.md; scores and snapshots are the Rust version's to
// the bit (tests/closed_first.rs).
package closedfirst

import (
	"slices"
	"strconv"

	"agentrt.dev/policy"
)

const (
	magic              = "CLFT"
	format             = 1
	defaultMaxSessions = 16384
	maxSessionsLimit   = 1 << 20
)

// ClosedFirst keeps the closed sessions in closing order (oldest first) and as a set.
type ClosedFirst struct {
	maxSessions uint64
	order       []uint64
	closed      map[uint64]struct{}
}

// New is a fresh instance with the default configuration.
func New() policy.Policy {
	return &ClosedFirst{maxSessions: defaultMaxSessions, closed: map[uint64]struct{}{}}
}

func init() { policy.Export(New) }

func (*ClosedFirst) Info() policy.Info {
	return policy.Info{Name: "closed-first", Version: "0.1.0",
		Description: "the blocks of sessions the framework closed go first, LRU otherwise; Go (SPEC.md)"}
}

func (c *ClosedFirst) Init(config *policy.Config) (err error) {
	if err = config.ExpectOnly("max-sessions"); err != nil {
		return err
	}
	c.maxSessions, err = config.Uint("max-sessions", defaultMaxSessions, 1, maxSessionsLimit)
	return err
}

func (c *ClosedFirst) Observe(event policy.Event) {
	switch e := event.(type) {
	case *policy.SessionEnd:
		if _, already := c.closed[e.Session]; e.Reason != policy.Closed || e.Session == 0 || already {
			return
		}
		c.closed[e.Session] = struct{}{}
		c.order = append(c.order, e.Session)
		if uint64(len(c.order)) > c.maxSessions {
			delete(c.closed, c.order[0])
			c.order = c.order[1:]
		}
	case *policy.RequestArrival:
		if _, closed := c.closed[e.Session]; closed && !e.Warmup {
			delete(c.closed, e.Session)
			// A wrong closing is rare: a linear search is cheaper than a second index.
			c.order = slices.DeleteFunc(c.order, func(s uint64) bool { return s == e.Session })
		}
	}
}

func (c *ClosedFirst) Score(items []policy.Item, scores []float32) {
	if len(items) == 0 {
		return
	}
	oldest, newest := items[0].LastAccess, items[0].LastAccess
	for _, it := range items {
		oldest, newest = min(oldest, it.LastAccess), max(newest, it.LastAccess)
	}
	openBonus := newest - oldest + 1
	for i, it := range items {
		score := it.LastAccess - oldest
		if _, closed := c.closed[it.Session]; !closed {
			score += openBonus
		}
		scores[i] = float32(score)
	}
}

func (c *ClosedFirst) Snapshot() []byte {
	w := policy.NewWriter(magic, format).U32(uint32(len(c.order)))
	for _, s := range c.order {
		w.U64(s)
	}
	return w.Bytes()
}

func (c *ClosedFirst) Restore(state []byte) error {
	r, version, err := policy.OpenReader(state, magic)
	if err != nil {
		return err
	}
	if version != format {
		return policy.Refusal("unknown closed-first snapshot format " + strconv.Itoa(int(version)) +
			" (this version reads 1)")
	}
	count := uint64(r.U32())
	if err := r.Err(); err != nil {
		return err
	}
	if count > c.maxSessions {
		return policy.Refusal("snapshot holds " + strconv.FormatUint(count, 10) +
			" closed sessions; max-sessions is " + strconv.FormatUint(c.maxSessions, 10))
	}
	order, closed := make([]uint64, 0, count), make(map[uint64]struct{}, count)
	for range count {
		s := r.U64()
		if _, twice := closed[s]; r.Err() == nil && (s == 0 || twice) {
			return policy.Refusal("snapshot lists session " + strconv.FormatUint(s, 10) + " twice or as 0")
		}
		order, closed[s] = append(order, s), struct{}{}
	}
	if err := r.Finish(); err != nil {
		return err
	}
	c.order, c.closed = order, closed
	return nil
}
