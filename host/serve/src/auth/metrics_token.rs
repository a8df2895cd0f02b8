//! The `/metrics` token (`--metrics-token`): without one the route is open, with one every scrape
//! must carry `Authorization: Bearer <token>` (the series name every tenant).

use std::sync::Arc;

use axum::http::HeaderMap;

use super::bearer::require_bearer;
use crate::front::error::ApiError;

/// What `/metrics` asks of a scrape.
#[derive(Debug, Clone, Default)]
pub struct MetricsToken(Option<Arc<str>>);

impl MetricsToken {
    /// `--metrics-token`; `None` leaves `/metrics` open.
    pub fn new(token: Option<String>) -> Self {
        Self(token.map(Into::into))
    }

    /// Accept the scrape if no token is set or it carries the token: 401 otherwise, saying
    /// whether the token was missing or wrong.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        match &self.0 {
            Some(token) => require_bearer(headers, token, "metrics token"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn with_bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
        headers
    }

    #[test]
    fn a_set_token_is_required_and_an_unset_one_leaves_the_route_open() {
        let token = MetricsToken::new(Some("m-secret".into()));
        assert!(token.check(&with_bearer("m-secret")).is_ok());
        let wrong = token.check(&with_bearer("m-secreT")).unwrap_err();
        assert_eq!(
            (wrong.status, wrong.message.as_str()),
            (StatusCode::UNAUTHORIZED, "wrong metrics token")
        );
        let missing = token.check(&HeaderMap::new()).unwrap_err();
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
        assert!(
            missing.message.contains("Bearer <metrics token>"),
            "{}",
            missing.message
        );
        assert!(MetricsToken::new(None).check(&HeaderMap::new()).is_ok());
    }
}
