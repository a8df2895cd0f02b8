//! What the body of `PUT /admin/tenants/{tenant}/policy` names: a component's bytes (a `.wasm`
//! file, `curl --data-binary @mine.wasm`) or the name of a component `agentrt serve --policy`
//! would find (`curl --data ttl`: a built-in policy, or one in `$AGENTRT_COMPONENTS_DIR`). Only a
//! plain name is looked up, never a path: a tenant admin may not make the proxy read a file of
//! its choosing.

use agentrt_runtime::{ComponentLookup, PolicyComponent, PolicyEngine};

/// A Wasm binary's first bytes (`\0asm`).
const WASM_MAGIC: &[u8] = b"\0asm";

/// The longest body taken as a component name.
const MAX_NAME_BYTES: usize = 64;

/// What a policy upload's body asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum PolicyBody<'a> {
    /// A component's bytes.
    Component(&'a [u8]),
    /// A component's name, e.g. `ttl`.
    Name(&'a str),
}

/// Read `body` as a component or a name; the error says what the body must be.
pub fn read(body: &[u8]) -> Result<PolicyBody<'_>, String> {
    if body.starts_with(WASM_MAGIC) {
        return Ok(PolicyBody::Component(body));
    }
    let name = std::str::from_utf8(body).map(str::trim).unwrap_or_default();
    let plain = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.ends_with(".wasm")
        && !name.starts_with('.');
    if plain {
        return Ok(PolicyBody::Name(name));
    }
    Err(format!(
        "the body ({} bytes) is neither a Wasm component (it does not start with \\0asm) nor a policy's \
         name: send a component (curl --data-binary @policy.wasm) or name one (curl --data ttl)",
        body.len()
    ))
}

/// The component `name` names, loaded by `engine`, found by `lookup` as `--policy NAME` would be.
/// The error names what was missing, not where the proxy looked (the caller may be a tenant's
/// admin).
pub fn load_named(
    engine: &PolicyEngine,
    lookup: Option<&ComponentLookup>,
    name: &str,
) -> Result<PolicyComponent, String> {
    let Some(lookup) = lookup else {
        return Err(format!(
            "this proxy looks up no components by name; send the bytes of {name}.wasm instead"
        ));
    };
    let source = lookup.find(name).map_err(|_| {
        format!(
            "no policy component named `{name}` (names are looked up as `agentrt serve --policy` looks \
             them up: the built-in ones, then $AGENTRT_COMPONENTS_DIR); send the component's bytes instead"
        )
    })?;
    source.load(engine).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_a_component_a_name_or_refused_saying_which_it_must_be() {
        assert_eq!(
            read(b"\0asm\x0d\0\x01\0").unwrap(),
            PolicyBody::Component(b"\0asm\x0d\0\x01\0")
        );
        assert_eq!(read(b"ttl").unwrap(), PolicyBody::Name("ttl"));
        assert_eq!(read(b"fair-share\n").unwrap(), PolicyBody::Name("fair-share"));
        for refused in [&b""[..], b"../etc/passwd", b"/tmp/x", b"mine.wasm", b"a b", b"\xff\xfe"] {
            let e = read(refused).unwrap_err();
            assert!(e.contains("curl --data ttl"), "{e}");
        }
    }
}
