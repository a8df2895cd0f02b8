// The component's glue (a folder Go's tools skip: it compiles only inside the module xtask
// assembles in <target>/go-build/NAME, beside the bindings `wit-bindgen go` generates). It
// implements the generated `guest` exports with the SDK's Guest over the registered policy, and
// installs the host's imports as the SDK's Host.
package export_agentrt_policy_guest

import (
	"agentrt.dev/policy"
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/agentrt_policy_host"
	types "wit_component/agentrt_policy_types"
)

type witHost struct{}

func (witHost) NowUs() uint64 { return agentrt_policy_host.NowUs() }
func (witHost) Log(level policy.LogLevel, message string) {
	agentrt_policy_host.Log(types.LogLevel(level), message)
}
func (witHost) RandomSeed() uint64 { return agentrt_policy_host.RandomSeed() }

var guest *policy.Guest

// The policy package registers itself in its init; the guest is made on the first call.
func g() *policy.Guest {
	if guest == nil {
		policy.SetHost(witHost{})
		guest = policy.Exported()
		if guest == nil {
			panic("no policy registered: call policy.Export in the policy package's init")
		}
	}
	return guest
}

type unitResult = witTypes.Result[witTypes.Unit, string]

func result(err error) unitResult {
	if err != nil {
		return witTypes.Err[witTypes.Unit, string](err.Error())
	}
	return witTypes.Ok[witTypes.Unit, string](witTypes.Unit{})
}

func Info() types.PolicyInfo {
	info := g().Info()
	return types.PolicyInfo{Name: info.Name, Version: info.Version, Description: info.Description}
}

func Init(config []witTypes.Tuple2[string, string]) unitResult {
	pairs := make([][2]string, len(config))
	for i, kv := range config {
		// The bindings' strings point into memory that is released after the call.
		pairs[i] = [2]string{clone(kv.F0), clone(kv.F1)}
	}
	return result(g().Init(pairs))
}

func clone(s string) string { return string(append([]byte(nil), s...)) }

func Observe(events []types.Event) {
	guest := g()
	for _, e := range events {
		if e.Tag() == types.Event_Block {
			b := e.Block()
			guest.ObserveBlock(policy.BlockEvent{Op: policy.BlockOp(b.Op), Agent: b.Agent, BlockHash: b.BlockHash,
				ParentHash: b.ParentHash, Position: b.Position, Tier: policy.Tier(b.Tier)})
			continue
		}
		if !guest.Observes() {
			continue
		}
		if event := convert(e); event != nil {
			guest.ObserveEvent(event)
		}
	}
}

func convert(e types.Event) policy.Event {
	switch e.Tag() {
	case types.Event_AgentRegistered:
		v := e.AgentRegistered()
		return &policy.AgentRegistered{Agent: v.Agent, Name: clone(v.Name), AnchorHash: v.AnchorHash,
			AnchorTokens: v.AnchorTokens}
	case types.Event_RequestArrival:
		v := e.RequestArrival()
		a := &policy.RequestArrival{RequestID: v.RequestId, Agent: v.Agent, Session: v.Session,
			AnchorHash: v.AnchorHash, PromptTokens: v.PromptTokens, Warmup: v.Warmup, AtUs: v.AtUs}
		if c, ok := v.Continues.Get(); ok {
			a.Continues = &policy.Continuation{SharedTokens: c.SharedTokens, PreviousTokens: c.PreviousTokens}
		}
		return a
	case types.Event_RequestFinish:
		v := e.RequestFinish()
		return &policy.RequestFinish{RequestID: v.RequestId, Agent: v.Agent, Session: v.Session,
			PromptTokens: v.PromptTokens, CachedTokens: v.CachedTokens, OutputTokens: v.OutputTokens,
			Warmup: v.Warmup, Ok: v.Ok, AtUs: v.AtUs}
	case types.Event_ToolCall:
		v := e.ToolCall()
		return &policy.ToolCall{Session: v.Session, Agent: v.Agent, Tool: v.Tool, ArgsHash: v.ArgsHash, AtUs: v.AtUs}
	case types.Event_ToolReturn:
		v := e.ToolReturn()
		return &policy.ToolReturn{Session: v.Session, Agent: v.Agent, Tool: v.Tool, ArgsHash: v.ArgsHash,
			ResultTokens: v.ResultTokens, LatencyUs: v.LatencyUs, Ok: v.Ok}
	case types.Event_SessionEnd:
		v := e.SessionEnd()
		return &policy.SessionEnd{Session: v.Session, Reason: policy.EndReason(v.Reason), AtUs: v.AtUs}
	case types.Event_EngineLoad:
		v := e.EngineLoad()
		return &policy.EngineLoad{QueueDepth: v.QueueDepth, Running: v.Running, FreeBlocks: v.FreeBlocks,
			TotalBlocks: v.TotalBlocks, AtUs: v.AtUs}
	case types.Event_SessionWait:
		v := e.SessionWait()
		return &policy.SessionWait{Session: v.Session, Agent: v.Agent, Kind: policy.WaitKind(v.Kind), Tool: v.Tool,
			ExpectedUs: v.ExpectedUs, Hinted: v.Hinted, AtUs: v.AtUs}
	case types.Event_Handoff:
		v := e.Handoff()
		return &policy.Handoff{Session: v.Session, FromAgent: v.FromAgent, ToAgent: v.ToAgent, AtUs: v.AtUs}
	case types.Event_EngineCapacity:
		v := e.EngineCapacity()
		return &policy.EngineCapacity{CapacityTokens: v.CapacityTokens, ResidentTokens: v.ResidentTokens,
			ResidentSessions: v.ResidentSessions, HeldSessions: v.HeldSessions,
			PrefillUsPerKtoken: v.PrefillUsPerKtoken, DecodeStepUs: v.DecodeStepUs, AtUs: v.AtUs}
	}
	return nil
}

func ObservePacked(packed []uint64) { g().ObservePacked(packed) }

func ObserveBlocks(packed []uint64) { g().ObserveBlocks(packed) }

func Score(items []types.Item) []float32 {
	converted := make([]policy.Item, len(items))
	for i, it := range items {
		converted[i] = policy.Item{Kind: policy.ItemKind(it.Kind), Key: it.Key, Agent: it.Agent, Session: it.Session,
			LastAccess: it.LastAccess, Tokens: it.Tokens, Position: it.Position, Tier: policy.Tier(it.Tier)}
	}
	return g().Score(converted)
}

func ScorePacked(packed []uint64) []float32 { return g().ScorePacked(packed) }

func Predict(horizon uint32) []types.Forecast {
	forecasts := g().Predict(horizon)
	out := make([]types.Forecast, len(forecasts))
	for i, f := range forecasts {
		out[i] = types.Forecast{Kind: uint8(f.Kind), Session: f.Session, Agent: f.Agent, Subject: f.Subject,
			Probability: f.Probability, Steps: f.Steps}
	}
	return out
}

func Act() []types.SideEffect {
	effects := g().Act()
	out := make([]types.SideEffect, 0, len(effects))
	for _, e := range effects {
		switch v := e.(type) {
		case policy.WarmPrefix:
			out = append(out, types.MakeSideEffectWarmPrefix(types.WarmPrefix{Agent: v.Agent, AnchorHash: v.AnchorHash,
				Probability: v.Probability}))
		case policy.Pin:
			out = append(out, types.MakeSideEffectPin(types.Pin{Agent: v.Agent, Session: v.Session, TtlMs: v.TtlMs}))
		case policy.Unpin:
			out = append(out, types.MakeSideEffectUnpin(types.Pin{Agent: v.Agent, Session: v.Session, TtlMs: v.TtlMs}))
		case policy.Preload:
			out = append(out, types.MakeSideEffectPreload(types.Preload{Model: v.Model, Probability: v.Probability}))
		case policy.Hedge:
			out = append(out, types.MakeSideEffectHedge(types.Hedge{Session: v.Session, Agent: v.Agent,
				Probability: v.Probability}))
		case policy.SetPriority:
			out = append(out, types.MakeSideEffectSetPriority(types.SetPriority{Session: v.Session, Priority: v.Priority}))
		case policy.Deny:
			out = append(out, types.MakeSideEffectDeny(types.Deny{Session: v.Session, Reason: v.Reason}))
		default:
			panic("act: an unknown side effect")
		}
	}
	return out
}

func Snapshot() []uint8 { return g().Snapshot() }

func Restore(state []uint8) unitResult {
	// The bindings' slice points into memory that is released after the call; a policy may keep
	// slices of it.
	return result(g().Restore(append([]byte(nil), state...)))
}
