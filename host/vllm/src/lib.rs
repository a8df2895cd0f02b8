//! Engine adapter for vLLM: KV-cache event subscriber and the eviction-ranking service for the vLLM plugin.
