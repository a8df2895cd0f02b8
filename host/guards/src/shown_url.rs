//! URLs as they may be shown: in a log line, an error a client reads, a span attribute exported
//! to a tracing backend. An operator's URL can carry credentials (`http://user:PASSWORD@host`,
//! `?token=…`); none of that may leave the process, so every URL shown goes through [`shown`].

/// The parts of `url` that may be secret: the user information before `@`, the query, the
/// fragment.
pub fn secrets(url: &str) -> Vec<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let mut secrets = Vec::new();
    if let Some(at) = rest[..authority_end].rfind('@') {
        secrets.push(&rest[..at]);
    }
    if let Some(q) = rest.find(['?', '#']) {
        secrets.push(&rest[q + 1..]);
    }
    secrets.retain(|s| !s.is_empty());
    secrets
}

/// `url` with its user information, query and fragment replaced by `***`.
pub fn shown(url: &str) -> String {
    redact(url, url)
}

/// `text` (an error that may quote `url`) with `url`'s secrets replaced by `***`.
pub fn redact(text: &str, url: &str) -> String {
    let mut shown = text.to_string();
    for secret in secrets(url) {
        shown = shown.replace(secret, "***");
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_query_and_fragment_are_hidden_and_the_rest_kept() {
        assert_eq!(shown("http://user:PASSWORD@vllm:8000/v1"), "http://***@vllm:8000/v1");
        assert_eq!(
            shown("https://vllm:8000/v1?token=SECRET#frag"),
            "https://vllm:8000/v1?***"
        );
        assert_eq!(shown("http://127.0.0.1:8000"), "http://127.0.0.1:8000");
        assert_eq!(shown("vllm:8000"), "vllm:8000");
        let error = "error sending request for url (http://user:PASSWORD@vllm:8000/v1/chat)";
        assert!(!redact(error, "http://user:PASSWORD@vllm:8000").contains("PASSWORD"));
    }
}
