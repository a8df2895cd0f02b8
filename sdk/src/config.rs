//! A policy's configuration: the `init` key/value pairs with typed getters that fail with a message
//! naming the key, and a check that rejects keys the policy does not know.

/// Key/value configuration passed to `init`.
#[derive(Debug, Clone, Default)]
pub struct Config {
    pairs: Vec<(String, String)>,
}

impl Config {
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        Self { pairs }
    }

    /// Build from string pairs (handy in tests).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self::new(pairs.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    /// The raw value of `key`; the last one wins when a key repeats.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Parse `key` as `T`, or return `default` when it is absent.
    pub fn parse_or<T: core::str::FromStr>(&self, key: &str, default: T) -> Result<T, String>
    where
        T::Err: core::fmt::Display,
    {
        match self.get(key) {
            None => Ok(default),
            Some(raw) => raw
                .trim()
                .parse()
                .map_err(|e| format!("config key `{key}`: cannot parse {raw:?}: {e}")),
        }
    }

    /// Fail with a message naming every key not in `known`.
    pub fn expect_only(&self, known: &[&str]) -> Result<(), String> {
        let unknown: Vec<&str> = self
            .pairs
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !known.contains(k))
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "unknown config key(s) {unknown:?}; this policy accepts {known:?}"
            ))
        }
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_getters_name_the_bad_key() {
        let c = Config::from_pairs([("k", "3"), ("w", "x")]);
        assert_eq!(c.parse_or("k", 1u32).unwrap(), 3);
        assert_eq!(c.parse_or("missing", 7u32).unwrap(), 7);
        let err = c.parse_or("w", 1.0f32).unwrap_err();
        assert!(err.contains("`w`"), "{err}");
    }

    #[test]
    fn unknown_keys_are_listed() {
        let c = Config::from_pairs([("k", "3"), ("typo", "1")]);
        assert!(c.expect_only(&["k", "typo"]).is_ok());
        let err = c.expect_only(&["k"]).unwrap_err();
        assert!(err.contains("typo"), "{err}");
    }
}
