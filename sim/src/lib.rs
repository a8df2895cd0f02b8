//! The vLLM-faithful prefix-cache simulator, multi-agent workloads and the evaluation harness.
