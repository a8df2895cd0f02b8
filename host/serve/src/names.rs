//! The names everything in the proxy agrees on: the unauthenticated tenant's, the policy slots'
//! with a meaning of their own, the rules for tenant names and for the `SECRET=TENANT` flags, and
//! the one rule for every name a client or a model gives that the proxy keeps or shows
//! ([`check_name`]: agents, tools).
//! The rule for tenant names is the registry's ([`agentrt_runtime::validate_tenant_name`]: names
//! become slots and metric labels), re-exported here. A leaf: it uses nothing else of the crate, so tenants, settings, identity and the admin API can
//! all use it without using each other.

pub use agentrt_runtime::validate_tenant_name;

/// The registry slot every tenant's KV-cache policy runs in.
pub const KV_SLOT: &str = "kv";
/// The slot whose `score` ranks a tenant's requests waiting in the proxy's admission queue
/// (`request` items; `--upstream-max-in-flight`).
pub const ADMISSION_SLOT: &str = "admission";
/// The tenant of unauthenticated serving (no API key in force), and the engine-wide policy's.
pub const DEFAULT_TENANT: &str = "default";

/// The longest name a client or a model may give that the proxy keeps or shows: an agent
/// (`x-agent-id`, `user`, a hint's agents, the engine plugin's names), a tool (a hint's, or one a
/// reply asks for).
pub const MAX_NAME_BYTES: usize = 256;

/// Why a name breaks [`check_name`]'s rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameFault {
    /// It is empty.
    Empty,
    /// It is longer than [`MAX_NAME_BYTES`] (its length in bytes).
    TooLong(usize),
    /// It holds a character that is not shown as itself (its code point): a control character,
    /// a bidirectional override or isolate, a zero-width or other invisible formatting character.
    Invisible(char),
}

impl std::fmt::Display for NameFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NameFault::Empty => write!(f, "empty"),
            NameFault::TooLong(n) => write!(f, "{n} bytes, over the limit of {MAX_NAME_BYTES}"),
            NameFault::Invisible(c) => write!(
                f,
                "holds U+{:04X}, a character that is not shown as itself (control, bidirectional or \
                 invisible formatting characters are refused in names)",
                *c as u32
            ),
        }
    }
}

/// The rule for every name a client or a model gives that the proxy keeps (agent tables, tool
/// waits) or shows (`/admin/tenants`, stats, logs): 1 to [`MAX_NAME_BYTES`] bytes of characters
/// that are shown as themselves. A NUL, CR LF, an ANSI escape or a bidirectional override in a
/// name would forge lines and reorder text wherever an operator reads it.
pub fn check_name(name: &str) -> Result<(), NameFault> {
    if name.is_empty() {
        return Err(NameFault::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(NameFault::TooLong(name.len()));
    }
    match name.chars().find(|c| !is_shown(*c)) {
        Some(c) => Err(NameFault::Invisible(c)),
        None => Ok(()),
    }
}

/// `name` made to follow [`check_name`]'s rule, for names no client can be told to fix (the
/// engine plugin's): each character that is not shown as itself becomes `?`, then it is cut to
/// [`MAX_NAME_BYTES`] at a character boundary; an empty name becomes `?`.
pub fn shown_name(name: &str) -> String {
    let mut shown: String = name.chars().map(|c| if is_shown(c) { c } else { '?' }).collect();
    let mut end = shown.len().min(MAX_NAME_BYTES);
    while !shown.is_char_boundary(end) {
        end -= 1;
    }
    shown.truncate(end);
    if shown.is_empty() {
        shown.push('?');
    }
    shown
}

/// Whether `c` is shown as itself: not a control character (C0, DEL, C1: NUL, CR, LF, ESC, …),
/// not a line or paragraph separator, and not one of Unicode's invisible formatting characters
/// (bidirectional marks, embeddings, overrides and isolates; zero-width characters; the byte
/// order mark; interlinear annotations; tag characters).
fn is_shown(c: char) -> bool {
    !(c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E007F}'
        ))
}

/// A secret that a command-line option gives to a tenant (`SECRET=TENANT`), named as that
/// option's errors name it.
#[derive(Debug, Clone, Copy)]
pub struct TenantSecret {
    /// The option, e.g. `--tenant`: errors start with it.
    pub flag: &'static str,
    /// What stands for the secret in the option's syntax, e.g. `API_KEY` in `API_KEY=TENANT`.
    pub placeholder: &'static str,
    /// What the secret is called in a sentence, e.g. `API key`.
    pub noun: &'static str,
}

/// `--tenant API_KEY=TENANT`: requests carrying the key belong to the tenant.
pub const API_KEY: TenantSecret = TenantSecret {
    flag: "--tenant",
    placeholder: "API_KEY",
    noun: "API key",
};

/// `--tenant-admin TOKEN=TENANT`: the token administers that tenant's routes of the admin API.
pub const TENANT_ADMIN_TOKEN: TenantSecret = TenantSecret {
    flag: "--tenant-admin",
    placeholder: "TOKEN",
    noun: "admin token",
};

/// Parse one `SECRET=TENANT` value (`--tenant`, `--tenant-admin`). It splits at the *last* `=`:
/// keys and tokens are often base64 and end in `=` padding, while tenant names cannot contain
/// `=` (they are restricted to letters, digits, `-`, `_` and `.`, which are safe in slot names and
/// Prometheus labels). The error never repeats the value: it holds a secret.
pub fn parse_tenant_secret(raw: &str, secret: TenantSecret) -> Result<(String, String), String> {
    let expected = format!("expected {}=TENANT", secret.placeholder);
    let (key, name) = raw
        .rsplit_once('=')
        .ok_or_else(|| format!("{expected}: there is no `=`"))?;
    if key.is_empty() {
        return Err(format!("{expected}: the {} is empty", secret.noun));
    }
    validate_tenant_name(name).map_err(|e| format!("{expected}: {e}"))?;
    Ok((key.to_string(), name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{check_name, parse_tenant_secret, shown_name, NameFault, API_KEY, MAX_NAME_BYTES, TENANT_ADMIN_TOKEN};

    #[test]
    fn names_are_visible_characters_within_the_cap() {
        for fine in [
            "planner",
            "Research Agent",
            "coder-2.v1",
            "исследователь",
            "工具_搜索",
            "a",
        ] {
            assert_eq!(check_name(fine), Ok(()), "{fine}");
        }
        for (bad, c) in [
            ("nul\0", '\0'),
            ("line\r\nforged", '\r'),
            ("\u{1b}[31mred", '\u{1b}'),
            ("evil\u{202E}txt.exe", '\u{202E}'),
            ("iso\u{2066}late", '\u{2066}'),
            ("zero\u{200B}width", '\u{200B}'),
            ("tab\tbed", '\t'),
            ("c1\u{85}", '\u{85}'),
        ] {
            assert_eq!(check_name(bad), Err(NameFault::Invisible(c)), "{bad:?}");
        }
        assert_eq!(check_name(""), Err(NameFault::Empty));
        assert_eq!(check_name(&"x".repeat(MAX_NAME_BYTES)), Ok(()));
        assert_eq!(
            check_name(&"x".repeat(MAX_NAME_BYTES + 1)),
            Err(NameFault::TooLong(257))
        );
        let e = check_name("evil\u{202E}").unwrap_err().to_string();
        assert!(e.contains("U+202E"), "{e}");
    }

    #[test]
    fn a_name_no_client_can_fix_is_shown_by_the_rule() {
        assert_eq!(shown_name("ok\0\r\n\u{202E}x"), "ok????x");
        assert_eq!(shown_name(""), "?");
        let long = "é".repeat(200);
        let shown = shown_name(&long);
        assert!(shown.len() <= MAX_NAME_BYTES && check_name(&shown).is_ok());
    }

    fn parse_tenant_key(raw: &str) -> Result<(String, String), String> {
        parse_tenant_secret(raw, API_KEY)
    }

    #[test]
    fn tenant_keys_split_at_the_last_equals_sign() {
        let pair = |k: &str, t: &str| Ok((k.to_string(), t.to_string()));
        // A base64 key with `==` padding: the first `=` is part of the key.
        assert_eq!(
            parse_tenant_key("c2VjcmV0IGtleQ===alpha"),
            pair("c2VjcmV0IGtleQ==", "alpha")
        );
        assert_eq!(parse_tenant_key("plain=team-a.prod_1"), pair("plain", "team-a.prod_1"));
        assert!(parse_tenant_key("no-separator").unwrap_err().contains("no `=`"));
        assert!(parse_tenant_key("=alpha").unwrap_err().contains("API key is empty"));
        assert!(parse_tenant_key("key=").unwrap_err().contains("tenant name is empty"));
        assert!(parse_tenant_key("key=a/b").unwrap_err().contains("'/'"));
        assert!(parse_tenant_key(&format!("key={}", "a".repeat(65)))
            .unwrap_err()
            .contains("longer than 64"));
    }

    #[test]
    fn tenant_admin_tokens_parse_alike_and_their_errors_name_the_token() {
        assert_eq!(
            parse_tenant_secret("dG9rZW4==beta", TENANT_ADMIN_TOKEN),
            Ok(("dG9rZW4=".to_string(), "beta".to_string()))
        );
        let error = parse_tenant_secret("=beta", TENANT_ADMIN_TOKEN).unwrap_err();
        assert_eq!(error, "expected TOKEN=TENANT: the admin token is empty");
        let error = parse_tenant_secret("tok-secret", TENANT_ADMIN_TOKEN).unwrap_err();
        assert!(!error.contains("tok-secret"), "the token is a secret: {error}");
    }
}
