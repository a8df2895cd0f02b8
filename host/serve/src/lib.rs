//! The OpenAI-compatible serving proxy in front of vLLM.
