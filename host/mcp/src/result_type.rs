//! Results carried across protocol versions: the gateway's client session to a server and an
//! agent's session to the gateway may have negotiated different MCP versions.
//!
//! From 2026-07-28 on a result must say `resultType` (`"complete"` for an ordinary answer); before,
//! it has no such field. rmcp's server side removes the field for an older client but does not add
//! it for a newer one, so a result from a server on an older version would reach a newer client
//! without it (the Python SDK's client refuses that). The gateway adds `"complete"` where the
//! server left the field out — the meaning the spec gives the absent field — and changes nothing
//! else of the answer.

use rmcp::model::{
    CallToolResponse, CallToolResult, CompleteResult, GetPromptResponse, GetPromptResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, ReadResourceResponse, ReadResourceResult,
    ResultType,
};

/// A forwarded result, with `resultType` said explicitly.
pub trait ExplicitResultType {
    /// The result with `resultType: "complete"` where the server left the field out; a value
    /// the server gave is kept.
    fn with_explicit_result_type(self) -> Self;
}

macro_rules! explicit_result_type {
    ($($result:ty),* $(,)?) => {
        $(impl ExplicitResultType for $result {
            fn with_explicit_result_type(mut self) -> Self {
                self.result_type.get_or_insert(ResultType::COMPLETE);
                self
            }
        })*
    };
}

explicit_result_type!(
    CallToolResult,
    CompleteResult,
    GetPromptResult,
    ListPromptsResult,
    ListResourceTemplatesResult,
    ListResourcesResult,
    ListToolsResult,
    ReadResourceResult,
);

impl ExplicitResultType for CallToolResponse {
    fn with_explicit_result_type(self) -> Self {
        match self {
            Self::Complete(result) => Self::Complete(result.with_explicit_result_type()),
            other => other,
        }
    }
}

impl ExplicitResultType for GetPromptResponse {
    fn with_explicit_result_type(self) -> Self {
        match self {
            Self::Complete(result) => Self::Complete(result.with_explicit_result_type()),
            other => other,
        }
    }
}

impl ExplicitResultType for ReadResourceResponse {
    fn with_explicit_result_type(self) -> Self {
        match self {
            Self::Complete(result) => Self::Complete(result.with_explicit_result_type()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_result_type_becomes_complete_and_a_present_one_stays() {
        let mut legacy = CallToolResult::success(vec![]);
        legacy.result_type = None;
        assert_eq!(
            legacy.with_explicit_result_type().result_type,
            Some(ResultType::COMPLETE)
        );
        let other = ListToolsResult {
            result_type: Some(ResultType::TASK),
            ..ListToolsResult::default()
        };
        assert_eq!(other.with_explicit_result_type().result_type, Some(ResultType::TASK));
    }
}
