//! TEST FIXTURE — a well-formed component for a world that is not `agentrt:policy`, so the host's
//! load-time check has something real to reject.

wit_bindgen::generate!({ path: "wit", world: "greeter" });

// Only exported (and so only constructed) in the wasm32 build.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
struct Greeter;

impl Guest for Greeter {
    fn greet(name: String) -> String {
        format!("hello, {name}")
    }
}

#[cfg(target_arch = "wasm32")]
export!(Greeter);
