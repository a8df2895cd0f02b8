//! What the config-file tests share: the operator's token and two tenants' file, a file written
//! and settled, and the proxy started with it.

use std::path::{Path, PathBuf};

use crate::support::{Proxy, Setup};

/// The operator token the test files' `--admin-token` gives.
pub const OPERATOR: &str = "s3cret";
/// Tenants alpha (`key-a`) and beta (`key-b`).
pub const TWO_TENANTS: &str = "[tenants.alpha]\napi_keys = [\"key-a\"]\n\n[tenants.beta]\napi_keys = [\"key-b\"]\n";

/// `text` written to `name` in a fresh folder, old enough to be read at once.
pub fn write_config(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, text).unwrap();
    // A file just written is read once it has settled; make it old enough at once.
    std::thread::sleep(agentrt_serve::tenant::config_file::SETTLE);
    (dir, file)
}

/// `agentrt serve` (policy `lru`) with `--config file`.
pub async fn proxy_with_config(file: &Path) -> Proxy {
    Setup {
        config: Some(file.to_path_buf()),
        ..Setup::new("lru")
    }
    .start()
    .await
}
