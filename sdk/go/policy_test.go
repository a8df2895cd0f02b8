package policy_test

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"agentrt.dev/policy"
	"agentrt.dev/policy/policytest"
)

func render(v any) string {
	tiers := map[policy.Tier]string{policy.TierGpu: "gpu", policy.TierHost: "host"}
	switch e := v.(type) {
	case *policy.RequestArrival:
		continues := "none"
		if e.Continues != nil {
			continues = fmt.Sprintf("%d/%d", e.Continues.SharedTokens, e.Continues.PreviousTokens)
		}
		return fmt.Sprintf("request-arrival request-id=%d agent=%d session=%d anchor-hash=%d prompt-tokens=%d "+
			"continues=%s warmup=%t at-us=%d", e.RequestID, e.Agent, e.Session, e.AnchorHash, e.PromptTokens, continues,
			e.Warmup, e.AtUs)
	case *policy.RequestFinish:
		return fmt.Sprintf("request-finish request-id=%d agent=%d session=%d prompt-tokens=%d cached-tokens=%d "+
			"output-tokens=%d warmup=%t ok=%t at-us=%d", e.RequestID, e.Agent, e.Session, e.PromptTokens,
			e.CachedTokens, e.OutputTokens, e.Warmup, e.Ok, e.AtUs)
	case *policy.ToolCall:
		return fmt.Sprintf("tool-call session=%d agent=%d tool=%d args-hash=%d at-us=%d", e.Session, e.Agent, e.Tool,
			e.ArgsHash, e.AtUs)
	case *policy.ToolReturn:
		return fmt.Sprintf("tool-return session=%d agent=%d tool=%d args-hash=%d result-tokens=%d latency-us=%d ok=%t",
			e.Session, e.Agent, e.Tool, e.ArgsHash, e.ResultTokens, e.LatencyUs, e.Ok)
	case *policy.SessionEnd:
		reasons := map[policy.EndReason]string{policy.Closed: "closed", policy.Idle: "idle", policy.Evicted: "evicted"}
		return fmt.Sprintf("session-end session=%d reason=%s at-us=%d", e.Session, reasons[e.Reason], e.AtUs)
	case *policy.EngineLoad:
		return fmt.Sprintf("engine-load queue-depth=%d running=%d free-blocks=%d total-blocks=%d at-us=%d",
			e.QueueDepth, e.Running, e.FreeBlocks, e.TotalBlocks, e.AtUs)
	case *policy.BlockEvent:
		return render(*e)
	case policy.BlockEvent:
		ops := []string{"stored", "touched", "removed", "all-cleared"}
		return fmt.Sprintf("block op=%s agent=%d block-hash=%d parent-hash=%d position=%d tier=%s", ops[e.Op], e.Agent,
			e.BlockHash, e.ParentHash, e.Position, tiers[e.Tier])
	case *policy.SessionWait:
		kinds := map[policy.WaitKind]string{policy.WaitTool: "tool", policy.WaitUser: "user"}
		return fmt.Sprintf("session-wait session=%d agent=%d kind=%s tool=%d expected-us=%d hinted=%t at-us=%d",
			e.Session, e.Agent, kinds[e.Kind], e.Tool, e.ExpectedUs, e.Hinted, e.AtUs)
	case *policy.Handoff:
		return fmt.Sprintf("handoff session=%d from-agent=%d to-agent=%d at-us=%d", e.Session, e.FromAgent, e.ToAgent,
			e.AtUs)
	case *policy.EngineCapacity:
		return fmt.Sprintf("engine-capacity capacity-tokens=%d resident-tokens=%d resident-sessions=%d held-sessions=%d "+
			"prefill-us-per-ktoken=%d decode-step-us=%d at-us=%d", e.CapacityTokens, e.ResidentTokens,
			e.ResidentSessions, e.HeldSessions, e.PrefillUsPerKtoken, e.DecodeStepUs, e.AtUs)
	case policy.Item:
		kinds := []string{"kv-block", "request", "tool-result", "session"}
		return fmt.Sprintf("item kind=%s key=%d agent=%d session=%d last-access=%d tokens=%d position=%d tier=%s",
			kinds[e.Kind], e.Key, e.Agent, e.Session, e.LastAccess, e.Tokens, e.Position, tiers[e.Tier])
	}
	return fmt.Sprintf("unexpected %T", v)
}

type packedCase struct {
	export string
	words  []uint64
	want   string
}

// sdk/conformance/packed.txt: the Rust SDK's words and what every SDK decodes them to.
func packedCases(t *testing.T) []packedCase {
	text, err := os.ReadFile("../conformance/packed.txt")
	if err != nil {
		t.Fatal(err)
	}
	var cases []packedCase
	for _, line := range strings.Split(string(text), "\n") {
		left, want, found := strings.Cut(line, "->")
		if strings.HasPrefix(line, "#") || !found {
			continue
		}
		fields := strings.Fields(left)
		c := packedCase{export: fields[0], want: strings.TrimSpace(want)}
		for _, w := range fields[1:] {
			v, err := strconv.ParseUint(w, 10, 64)
			if err != nil {
				t.Fatal(line, err)
			}
			c.words = append(c.words, v)
		}
		cases = append(cases, c)
	}
	return cases
}

// recorder keeps what reaches it, rendered.
type recorder struct{ heard []string }

func (*recorder) Info() policy.Info                  { return policy.Info{Name: "recorder", Version: "0.1.0"} }
func (*recorder) Score(_ []policy.Item, _ []float32) {}
func (r *recorder) Observe(e policy.Event)           { r.heard = append(r.heard, render(e)) }
func (r *recorder) ObserveBlock(b policy.BlockEvent) { r.heard = append(r.heard, render(b)) }

func TestPackedWordsDecodeAsInEverySDK(t *testing.T) {
	cases := packedCases(t)
	for _, c := range cases {
		var got []string
		switch c.export {
		case "events":
			for _, e := range policy.DecodeEvents(c.words) {
				got = append(got, render(e))
			}
			// The same words through the guest reach the policy's hooks alike.
			h, _ := policytest.New(func() policy.Policy { return &recorder{} })
			h.Guest.ObservePacked(c.words)
			if heard := h.Guest.Policy().(*recorder).heard; !reflect.DeepEqual(heard, got) {
				t.Fatalf("the guest: %q, decoded: %q", heard, got)
			}
			// And the harness's encoder gives back words that decode alike.
			var again []uint64
			for _, e := range policy.DecodeEvents(c.words) {
				again = policy.EncodeEvent(again, e)
			}
			if !reflect.DeepEqual(policy.DecodeEvents(again), policy.DecodeEvents(c.words)) {
				t.Fatalf("re-encoded: %v", again)
			}
		case "blocks":
			for _, b := range policy.DecodeBlocks(c.words) {
				got = append(got, render(b))
			}
			blocks := policy.DecodeBlocks(c.words)
			if !reflect.DeepEqual(policy.DecodeBlocks(policy.EncodeBlocks(blocks)), blocks) {
				t.Fatal("blocks re-encoded")
			}
		case "items":
			for _, it := range policy.DecodeItems(c.words) {
				got = append(got, render(it))
			}
			items := policy.DecodeItems(c.words)
			if !reflect.DeepEqual(policy.DecodeItems(policy.EncodeItems(items)), items) {
				t.Fatal("items re-encoded")
			}
		}
		text := strings.Join(got, " ; ")
		if text == "" {
			text = "nothing"
		}
		if text != c.want {
			t.Fatalf("%s %v\nwant %s\ngot  %s", c.export, c.words, c.want, text)
		}
	}
	if len(cases) < 25 {
		t.Fatalf("only %d cases", len(cases))
	}
}

func TestTypedAndPackedEventsReachThePolicyAlike(t *testing.T) {
	var events []policy.Event
	events = append(events, &policy.AgentRegistered{Agent: 2, Name: "coder", AnchorHash: 5, AnchorTokens: 64})
	for _, c := range packedCases(t) {
		if c.export == "events" {
			events = append(events, policy.DecodeEvents(c.words)...)
		}
	}
	typed, _ := policytest.New(func() policy.Policy { return &recorder{} })
	packed, _ := policytest.New(func() policy.Policy { return &recorder{} })
	typed.Guest.Observe(events)
	packed.Observe(events...) // as the host sends them: registrations typed, the rest packed
	a, b := typed.Guest.Policy().(*recorder).heard, packed.Guest.Policy().(*recorder).heard
	if !reflect.DeepEqual(a, b) || len(a) != len(events) {
		t.Fatalf("typed %d, packed %d, of %d", len(a), len(b), len(events))
	}
	kinds := map[string]bool{}
	for _, e := range events {
		kinds[fmt.Sprintf("%T", e)] = true
	}
	if len(kinds) != 11 {
		t.Fatalf("every kind of the contract: %v", kinds)
	}
}

func TestConfigNamesTheKey(t *testing.T) {
	c := policy.NewConfig([][2]string{{"a", "12"}, {"b", "x"}, {"a", "13"}, {"c", "-1"}, {"d", "99"}})
	if v, err := c.Uint("a", 0, 0, 100); v != 13 || err != nil {
		t.Fatalf("the last value wins: %d %v", v, err)
	}
	if v, err := c.Uint("missing", 5, 0, 1); v != 5 || err != nil {
		t.Fatalf("fallback: %d %v", v, err)
	}
	for key, words := range map[string]string{"b": "not a whole number", "c": "not a whole number", "d": "outside 0..=10"} {
		if _, err := c.Uint(key, 0, 0, 10); err == nil || !strings.Contains(err.Error(), "config key "+key+": ") || !strings.Contains(err.Error(), words) {
			t.Fatalf("%s: %v", key, err)
		}
	}
	err := c.ExpectOnly("a", "b")
	if err == nil || err.Error() != "unknown config key(s) c, d; known: a, b" {
		t.Fatalf("%v", err)
	}
	if f, err := policy.NewConfig([][2]string{{"f", "0.5"}}).Float("f", 0, 0, 1); f != 0.5 || err != nil {
		t.Fatalf("%v %v", f, err)
	}
}

func TestSnapshotsUseTheRustLayoutAndReportDamage(t *testing.T) {
	state := policy.NewWriter("TEST", 2).U8(1).U16(2).U32(3).U64(4).F32(0.5).Bool(true).Bytes()
	want := []byte{'T', 'E', 'S', 'T', 2, 0, 1, 2, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3f, 1}
	if !reflect.DeepEqual(state, want) {
		t.Fatalf("%v", state)
	}
	r, version, err := policy.OpenReader(state, "TEST")
	if err != nil || version != 2 {
		t.Fatal(version, err)
	}
	if r.U8() != 1 || r.U16() != 2 || r.U32() != 3 || r.U64() != 4 || r.F32() != 0.5 || !r.Bool() || r.Finish() != nil {
		t.Fatal("round trip")
	}
	if _, _, err := policy.OpenReader(state, "XXXX"); err == nil || !strings.Contains(err.Error(), "not from this policy") {
		t.Fatal(err)
	}
	r, _, _ = policy.OpenReader(state[:8], "TEST")
	r.U64()
	r.U8()
	if err := r.Finish(); err == nil || err.Error() != "snapshot is truncated" {
		t.Fatal(err)
	}
	r, _, _ = policy.OpenReader(state, "TEST")
	if err := r.Finish(); err == nil || !strings.Contains(err.Error(), "20 unexpected trailing bytes") {
		t.Fatal(err)
	}
}

// minimal implements only Info and Score: every other export has its default.
type minimal struct{}

func (minimal) Info() policy.Info { return policy.Info{Name: "minimal", Version: "0.1.0"} }
func (minimal) Score(items []policy.Item, scores []float32) {
	policy.RecencyScores(items, scores)
}

func TestDefaultsForEveryHookNotImplemented(t *testing.T) {
	newMinimal := func() policy.Policy { return minimal{} }
	if _, err := policytest.New(newMinimal, [2]string{"x", "1"}); err == nil || !strings.Contains(err.Error(), "x; known: none") {
		t.Fatal(err)
	}
	h, err := policytest.New(newMinimal)
	if err != nil {
		t.Fatal(err)
	}
	h.Observe(policytest.SessionEnd(1, policy.Closed), &policy.BlockEvent{Op: policy.Stored})
	h.ObserveBlocks(policytest.GpuBlockEvent(policy.Touched, 1))
	if h.Act() != nil || h.Predict(4) != nil || h.Snapshot() != nil || h.Restore(nil) != nil {
		t.Fatal("neutral defaults")
	}
	if err := h.Restore([]byte{1}); err == nil || !strings.Contains(err.Error(), "keeps no state") {
		t.Fatal(err)
	}
	items := []policy.Item{{LastAccess: 5}, {LastAccess: 9}, {LastAccess: 9}, {LastAccess: 1}}
	scores := h.Score(items...)
	if !reflect.DeepEqual(scores, []float32{4, 8, 8, 0}) {
		t.Fatal(scores)
	}
	if order := policytest.Rank(items, scores); !reflect.DeepEqual(order, []int{1, 2, 0, 3}) {
		t.Fatal(order)
	}
}

func TestTheRankingRuleIsTheHosts(t *testing.T) {
	// sdk/src/ranking.rs's own case.
	nan := float32(0)
	nan = nan / nan
	items := []policy.Item{{LastAccess: 10}, {LastAccess: 30}, {LastAccess: 20}, {LastAccess: 40}, {LastAccess: 50}}
	if order := policytest.Rank(items, []float32{1, 1, 2, nan, 1}); !reflect.DeepEqual(order, []int{2, 4, 1, 0, 3}) {
		t.Fatal(order)
	}
}

// sdk/conformance/recency_scores.txt: the same batches, the same scores, in all five SDKs.
func TestRecencyScoresGiveTheCasesEverySDKGives(t *testing.T) {
	text, err := os.ReadFile("../conformance/recency_scores.txt")
	if err != nil {
		t.Fatal(err)
	}
	cases := 0
	for _, line := range strings.Split(string(text), "\n") {
		left, right, found := strings.Cut(line, "->")
		if strings.HasPrefix(line, "#") || !found {
			continue
		}
		var items []policy.Item
		for _, w := range strings.Fields(left) {
			v, err := strconv.ParseUint(w, 10, 64)
			if err != nil {
				t.Fatal(line, err)
			}
			items = append(items, policy.Item{LastAccess: v})
		}
		var want []float32
		for _, w := range strings.Fields(right) {
			v, err := strconv.ParseFloat(w, 64)
			if err != nil {
				t.Fatal(line, err)
			}
			want = append(want, float32(v))
		}
		got := make([]float32, len(items))
		policy.RecencyScores(items, got)
		if len(want) != len(got) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%q: got %v", line, got)
		}
		cases++
	}
	if cases < 8 {
		t.Fatalf("only %d cases", cases)
	}
}
