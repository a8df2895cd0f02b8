//! Bearer tokens: reading one from the headers and checking it without leaking, through response
//! time, how much of a guess was right. The metrics token and the admin tokens are checked this
//! way; tenants' API keys select a tenant by lookup instead ([`super::api_keys`]).

use axum::http::HeaderMap;

use crate::front::error::ApiError;

/// The token of an `Authorization: Bearer …` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// Accept the request only if it carries `Authorization: Bearer <expected>`; `what` names the
/// token in the error ("admin token").
pub fn require_bearer(headers: &HeaderMap, expected: &str, what: &str) -> Result<(), ApiError> {
    let given = given_bearer(headers, what)?;
    if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        return Err(ApiError::unauthorized(format!("wrong {what}")));
    }
    Ok(())
}

/// The bearer token of `headers`, or 401 naming the token expected (`what`: "admin token").
pub fn given_bearer<'h>(headers: &'h HeaderMap, what: &str) -> Result<&'h str, ApiError> {
    bearer(headers).ok_or_else(|| ApiError::unauthorized(format!("missing `Authorization: Bearer <{what}>`")))
}

/// Compare without an early exit, so response time does not reveal how much of a guess matched.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}
