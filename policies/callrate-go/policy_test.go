// callrate in Go, natively: the same cases as the Rust version's unit tests.
package callrate

import (
	"reflect"
	"strings"
	"testing"

	"agentrt.dev/policy"
	"agentrt.dev/policy/policytest"
)

func arrival(agent uint32, warmup bool) policy.Event {
	return &policy.RequestArrival{Agent: agent, Session: 1, AnchorHash: uint64(agent) * 100, PromptTokens: 64, Warmup: warmup}
}

func calls(agents ...uint32) []policy.Event {
	events := make([]policy.Event, len(agents))
	for i, a := range agents {
		events[i] = arrival(a, false)
	}
	return events
}

func block(agent uint32, lastAccess uint64) policy.Item {
	return policy.Item{Kind: policy.KvBlock, Key: uint64(agent)<<32 | lastAccess, Agent: agent, Session: 1,
		LastAccess: lastAccess, Tokens: 16}
}

func harness(t *testing.T, config ...[2]string) *policytest.Harness {
	t.Helper()
	h, err := policytest.New(New, config...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestDecayHalvesPerHalfLifeAndFollowsTheChordBetween(t *testing.T) {
	for _, c := range [][4]uint64{{1 << 20, 0, 64, 1 << 20}, {1 << 20, 64, 64, 1 << 19}, {1 << 20, 32, 64, 3 << 18}, {1 << 20, 64 * 64, 64, 0}} {
		if got := Decay(c[0], c[1], c[2]); got != c[3] {
			t.Fatalf("decay%v = %d", c[:3], got)
		}
	}
}

func TestABusyAgentsOlderBlockOutranksARareAgentsNewerOne(t *testing.T) {
	h := harness(t)
	h.Observe(calls(1, 1, 1, 2)...)
	items := []policy.Item{block(1, 10), block(2, 20), block(1, 12)}
	if order := policytest.Rank(items, h.Score(items...)); !reflect.DeepEqual(order, []int{2, 0, 1}) {
		t.Fatal(order)
	}
}

func TestActWarmsTheHottestOtherAgentOncePerArrival(t *testing.T) {
	h := harness(t)
	h.Observe(calls(1, 1, 2)...)
	effects := h.Act()
	warm, ok := effects[0].(policy.WarmPrefix)
	if len(effects) != 1 || !ok || warm.Agent != 1 || warm.AnchorHash != 100 || warm.Probability <= 0.6 || warm.Probability >= 0.7 {
		t.Fatalf("%+v", effects)
	}
	if h.Act() != nil {
		t.Fatal("a second act without an arrival")
	}
	h.Observe(arrival(1, true))
	if h.Act() != nil {
		t.Fatal("a warm-up is not an arrival")
	}
}

func TestHitsCreditKnownAgentsThroughThePackedPath(t *testing.T) {
	h := harness(t)
	h.Observe(calls(1, 2)...)
	touched := func(agent uint32) policy.BlockEvent {
		return policy.BlockEvent{Op: policy.Touched, Agent: agent, BlockHash: 7}
	}
	h.ObserveBlocks(touched(1), touched(9))
	scores := h.Score(block(1, 1), block(2, 1))
	if scores[0] <= scores[1] {
		t.Fatal(scores)
	}
	if n := len(h.Snapshot()); n != 6+8+4+1+4+2*28 {
		t.Fatal(n)
	}
}

func TestSnapshotsRoundTripAndDamageIsRefusedByName(t *testing.T) {
	learned := harness(t)
	learned.Observe(calls(1, 2, 1, 3)...)
	state := learned.Snapshot()
	fresh := harness(t)
	if err := fresh.Restore(state); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fresh.Snapshot(), state) {
		t.Fatal("restore then snapshot")
	}
	unordered := append([]byte(nil), state...)
	unordered[6+8+4+1+4+28] = 1 // the second agent's handle: 1 after 1
	for words, bad := range map[string][]byte{
		"not from this policy": {'X', 'X', 'X', 'X', 1, 0},
		"truncated":            state[:len(state)-1],
		"trailing":             append(append([]byte(nil), state...), 0),
		"format 2":             append([]byte{'C', 'A', 'L', 'R', 2, 0}, state[6:]...),
		"ascending order":      unordered,
	} {
		if err := fresh.Restore(bad); err == nil || !strings.Contains(err.Error(), words) {
			t.Fatalf("%s: %v", words, err)
		}
	}
	if !reflect.DeepEqual(fresh.Snapshot(), state) {
		t.Fatal("a refused restore changed the state")
	}
	small := harness(t, [2]string{"max-agents", "2"})
	if err := small.Restore(state); err == nil || !strings.Contains(err.Error(), "max-agents") {
		t.Fatal(err)
	}
}

func TestConfigurationIsCheckedByKey(t *testing.T) {
	for _, kv := range [][2]string{{"half-life", "0"}, {"recency", "-1"}, {"max-agent", "3"}, {"max-agents", "4097"}} {
		if _, err := policytest.New(New, kv); err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Fatalf("%v: %v", kv, err)
		}
	}
}

func TestTheTableKeepsTheHottestAgents(t *testing.T) {
	h := harness(t, [2]string{"max-agents", "2"})
	h.Observe(calls(3, 3, 1, 2)...)
	// 3 is hottest; 1 has decayed a little since its call, 2 has not: 1 goes.
	p := h.Guest.Policy().(*CallRate)
	if len(p.agents) != 2 || p.agents[0].agent != 2 || p.agents[1].agent != 3 {
		t.Fatalf("%+v", p.agents)
	}
}
