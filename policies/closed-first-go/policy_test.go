// closed-first in Go, natively: the same cases as the Rust version's unit tests.
package closedfirst

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"agentrt.dev/policy"
	"agentrt.dev/policy/policytest"
)

func harness(t *testing.T, config ...[2]string) *policytest.Harness {
	t.Helper()
	h, err := policytest.New(New, config...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func block(key, session, lastAccess uint64) policy.Item {
	it := policytest.GpuBlock(key, lastAccess)
	it.Session = session
	return it
}

func closed(sessions ...uint64) []policy.Event {
	var events []policy.Event
	for _, s := range sessions {
		events = append(events, policytest.SessionEnd(s, policy.Closed))
	}
	return events
}

func arrival(session uint64, warmup bool) policy.Event {
	return &policy.RequestArrival{RequestID: 1, Agent: 1, Session: session, PromptTokens: 16, Warmup: warmup}
}

func TestAClosedSessionsBlocksGoFirstOldestFirstThenLRU(t *testing.T) {
	h := harness(t)
	items := []policy.Item{block(1, 7, 10), block(2, 9, 20), block(3, 7, 30), block(4, 9, 40), block(5, 0, 5)}
	if got := policytest.Rank(items, h.Score(items...)); !reflect.DeepEqual(got, []int{3, 2, 1, 0, 4}) {
		t.Fatalf("nothing closed: LRU, got %v", got)
	}
	h.Observe(closed(9)...)
	if got := policytest.Rank(items, h.Score(items...)); !reflect.DeepEqual(got, []int{2, 0, 4, 3, 1}) {
		t.Fatalf("9's blocks last, oldest last, got %v", got)
	}
}

func TestIdleAndEvictedEndsChangeNothingAndACallReopens(t *testing.T) {
	h := harness(t)
	items := []policy.Item{block(1, 7, 10), block(2, 9, 20)}
	lru := h.Score(items...)
	h.Observe(policytest.SessionEnd(7, policy.Idle), policytest.SessionEnd(7, policy.Evicted))
	if !reflect.DeepEqual(h.Score(items...), lru) {
		t.Fatal("an idle or evicted end changed the scores")
	}
	h.Observe(append(closed(7), arrival(7, true))...)
	if reflect.DeepEqual(h.Score(items...), lru) {
		t.Fatal("a warm-up reopened the session")
	}
	h.Observe(arrival(7, false))
	if !reflect.DeepEqual(h.Score(items...), lru) {
		t.Fatal("its own call did not reopen it")
	}
}

func TestTheOldestClosingIsForgottenAndTheSnapshotKeepsTheOrder(t *testing.T) {
	h := harness(t, [2]string{"max-sessions", "2"})
	h.Observe(closed(3, 1, 3, 2)...)
	state := h.Snapshot()
	want := policy.NewWriter(magic, format).U32(2).U64(1).U64(2).Bytes()
	if !bytes.Equal(state, want) {
		t.Fatalf("3 forgotten; 1 then 2: %v", state)
	}
	fresh := harness(t, [2]string{"max-sessions", "2"})
	if err := fresh.Restore(state); err != nil || !bytes.Equal(fresh.Snapshot(), state) {
		t.Fatal(err)
	}
	if err := harness(t, [2]string{"max-sessions", "1"}).Restore(state); err == nil ||
		!strings.Contains(err.Error(), "max-sessions is 1") {
		t.Fatal(err)
	}
	twice := append(policy.NewWriter(magic, format).U32(2).Bytes(), binary.LittleEndian.AppendUint64(
		binary.LittleEndian.AppendUint64(nil, 5), 5)...)
	if err := fresh.Restore(twice); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh.Snapshot(), state) {
		t.Fatal("a refused snapshot changed the state")
	}
}

func TestConfigurationIsCheckedByKey(t *testing.T) {
	for _, c := range [][2]string{{"max-sessions", "0"}, {"max-sessions", "x"}, {"max-session", "2"}} {
		if _, err := policytest.New(New, c); err == nil || !strings.Contains(err.Error(), c[0]) {
			t.Fatalf("%v: %v", c, err)
		}
	}
}
