// Package callrate is callrate in Go: the reference policy of the language SDKs
// (policies/callrate/SPEC.md).
//
// Per-agent decayed call counts + recency, one warm-up in Act. All arithmetic is uint64 until the
// one conversion to float32, so this ranks, acts and snapshots exactly like the Rust, Python,
// JavaScript and C versions (tests/languages.rs). The table is a slice kept in ascending agent
// order: the snapshot's order and the tie rule's.
package callrate

import (
	"sort"
	"strconv"

	"agentrt.dev/policy"
)

const (
	call      = 1 << 16 // a counted call, in 1/65536ths
	hit       = 1 << 10 // a cache hit is worth 1/64 of a call
	countCap  = 1 << 36
	maxAgents = 4096
	format    = 1
	magic     = "CALR"
)

type agent struct {
	agent             uint32
	count, at, anchor uint64
}

// CallRate is the policy; New makes a fresh one with the defaults.
type CallRate struct {
	halfLife, recency, maxAgents uint64
	requests                     uint64
	last                         uint32
	pending                      bool
	agents                       []agent
}

func New() policy.Policy { return &CallRate{halfLife: 64, recency: 256, maxAgents: 256} }

func init() { policy.Export(New) }

func (*CallRate) Info() policy.Info {
	return policy.Info{
		Name:    "callrate",
		Version: "0.1.0",
		Description: "keeps blocks of agents called often recently (decayed call counts + recency), " +
			"warms the hottest other agent; Go",
	}
}

func (p *CallRate) Init(config *policy.Config) (err error) {
	if err = config.ExpectOnly("half-life", "recency", "max-agents"); err != nil {
		return err
	}
	if p.halfLife, err = config.Uint("half-life", 64, 1, 65536); err != nil {
		return err
	}
	if p.recency, err = config.Uint("recency", 256, 0, 1<<20); err != nil {
		return err
	}
	p.maxAgents, err = config.Uint("max-agents", 256, 1, maxAgents)
	return err
}

// Decay is c decayed over d requests with half-life h: whole half-lives shift, the rest follows
// the chord to 1/2.
func Decay(c, d, h uint64) uint64 {
	q := d / h
	if q >= 64 {
		return 0
	}
	b := c >> q
	return b - b*(d%h)/(2*h)
}

// find is the index of handle, or where it would go, and whether it is there.
func (p *CallRate) find(handle uint32) (int, bool) {
	i := sort.Search(len(p.agents), func(k int) bool { return p.agents[k].agent >= handle })
	return i, i < len(p.agents) && p.agents[i].agent == handle
}

func (p *CallRate) rateAt(i int) uint64 {
	return Decay(p.agents[i].count, p.requests-p.agents[i].at, p.halfLife)
}

func (p *CallRate) rate(handle uint32) uint64 {
	if i, ok := p.find(handle); ok {
		return p.rateAt(i)
	}
	return 0
}

func (p *CallRate) credit(i int, amount uint64) {
	p.agents[i].count = min(p.rateAt(i)+amount, countCap)
	p.agents[i].at = p.requests
}

func (p *CallRate) Observe(event policy.Event) {
	a, ok := event.(*policy.RequestArrival)
	if !ok || a.Warmup || a.Agent == 0 {
		return
	}
	p.requests++
	i, found := p.find(a.Agent)
	if !found {
		p.agents = append(p.agents, agent{})
		copy(p.agents[i+1:], p.agents[i:])
		p.agents[i] = agent{agent: a.Agent, at: p.requests}
	}
	p.agents[i].anchor = a.AnchorHash
	p.credit(i, call)
	p.last = a.Agent
	p.pending = true
	for uint64(len(p.agents)) > p.maxAgents {
		coldest := 0
		for k := 1; k < len(p.agents); k++ {
			if p.rateAt(k) < p.rateAt(coldest) { // ascending: ties keep the smaller handle
				coldest = k
			}
		}
		p.agents = append(p.agents[:coldest], p.agents[coldest+1:]...)
	}
}

func (p *CallRate) ObserveBlock(block policy.BlockEvent) {
	if block.Op != policy.Touched {
		return
	}
	if i, ok := p.find(block.Agent); ok {
		p.credit(i, hit)
	}
}

func (p *CallRate) Score(items []policy.Item, scores []float32) {
	var newest uint64
	for _, it := range items {
		newest = max(newest, it.LastAccess)
	}
	for k, it := range items {
		age := newest - it.LastAccess
		var fresh uint64
		if age < p.recency {
			fresh = p.recency - age
		}
		scores[k] = float32((p.rate(it.Agent)>>8)*(p.recency+1) + fresh)
	}
}

func (p *CallRate) Act() []policy.SideEffect {
	if !p.pending {
		return nil
	}
	p.pending = false
	var total, bestRate uint64
	best := -1
	for i, a := range p.agents {
		r := p.rateAt(i)
		total += r
		if a.agent == p.last || a.anchor == 0 {
			continue
		}
		if best < 0 || r > bestRate { // ascending: ties keep the first
			best, bestRate = i, r
		}
	}
	if best < 0 || bestRate == 0 {
		return nil
	}
	probability := float32(bestRate*65536/total) / 65536
	return []policy.SideEffect{policy.WarmPrefix{
		Agent: p.agents[best].agent, AnchorHash: p.agents[best].anchor, Probability: probability,
	}}
}

func (p *CallRate) Snapshot() []byte {
	w := policy.NewWriter(magic, format).U64(p.requests).U32(p.last).Bool(p.pending).U32(uint32(len(p.agents)))
	for _, a := range p.agents {
		w.U32(a.agent).U64(a.count).U64(a.at).U64(a.anchor)
	}
	return w.Bytes()
}

func (p *CallRate) Restore(state []byte) error {
	r, version, err := policy.OpenReader(state, magic)
	if err != nil {
		return err
	}
	if version != format {
		return policy.Refusal("snapshot format " + strconv.Itoa(int(version)) + "; this policy reads 1")
	}
	requests, last, pending, n := r.U64(), r.U32(), r.Bool(), r.U32()
	if r.Err() == nil && uint64(n) > p.maxAgents {
		return policy.Refusal("snapshot holds " + strconv.Itoa(int(n)) + " agents; max-agents is " +
			strconv.FormatUint(p.maxAgents, 10))
	}
	agents := make([]agent, 0, min(n, maxAgents))
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		a := agent{agent: r.U32()}
		if i > 0 && r.Err() == nil && a.agent <= agents[i-1].agent {
			return policy.Refusal("snapshot agents are not in ascending order at " + strconv.Itoa(int(a.agent)))
		}
		a.count, a.at, a.anchor = r.U64(), r.U64(), r.U64()
		agents = append(agents, a)
	}
	if err := r.Finish(); err != nil {
		return err
	}
	p.requests, p.last, p.pending, p.agents = requests, last, pending, agents
	return nil
}
