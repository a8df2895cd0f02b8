//! Reading component bytes from a file under a size limit. A path is whatever an operator or a
//! script passes (`agentrt policy check /dev/zero`, a FIFO, a runaway build output); reading it
//! whole without a bound once took 22 GB of memory. Every place that reads a component, or a
//! compiled artifact, from a file goes through [`read_component_file`].

use std::io::Read;
use std::path::Path;

use crate::error::LoadError;

/// The default bound on a component file: a policy written in Python carries CPython and is about
/// 18 MB; Rust policies are tens of KB.
pub const DEFAULT_MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// The bytes of the file at `path`, or an error naming the path and the limit once it holds more
/// than `limit` bytes. A regular file is measured before it is read; anything else (a device, a
/// pipe) is read until it passes the limit.
pub fn read_component_file(path: &Path, limit: u64) -> Result<Vec<u8>, LoadError> {
    let name = path.display().to_string();
    let too_large = || {
        LoadError::new(
            &name,
            format!("larger than the {limit}-byte limit on component files; not loaded"),
        )
    };
    let file = std::fs::File::open(path).map_err(|e| LoadError::new(&name, format!("cannot read: {e}")))?;
    let metadata = file
        .metadata()
        .map_err(|e| LoadError::new(&name, format!("cannot read: {e}")))?;
    if metadata.is_file() && metadata.len() > limit {
        return Err(too_large());
    }
    // Sized up front for a regular file: growing the vector while reading copied a 250 KB
    // component several times over (docs/performance.md).
    let expected = if metadata.is_file() {
        metadata.len() as usize + 1
    } else {
        0
    };
    let mut bytes = Vec::with_capacity(expected);
    // One byte past the limit tells "exactly at the limit" from "over it".
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| LoadError::new(&name, format!("cannot read: {e}")))?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_device_is_refused_at_the_limit() {
        let error = read_component_file(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(error.source_name, "/dev/zero");
        assert!(error.reason.contains("1048576-byte limit"), "{error}");
    }

    #[test]
    fn an_oversized_file_is_refused_before_it_is_read_and_one_at_the_limit_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.wasm");
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        let error = read_component_file(&path, 4095).unwrap_err();
        assert!(
            error.to_string().contains("big.wasm") && error.reason.contains("4095-byte limit"),
            "{error}"
        );
        assert_eq!(read_component_file(&path, 4096).unwrap().len(), 4096);
    }
}
