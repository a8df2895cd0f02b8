//! Reading the operator's config file (`--config`) so that what is applied is a whole file the
//! operator finished writing, and reading it can cost the proxy nothing it cannot afford.
//!
//! - **Regular files only.** A FIFO would block the reader until someone writes to it; a device
//!   such as `/dev/zero` never ends. The file is opened without blocking (`O_NONBLOCK`, which a
//!   regular file ignores) and checked through the descriptor it was opened as, so a path swapped
//!   for a FIFO between a check and the open cannot hang the reload either.
//! - **A size cap** ([`MAX_CONFIG_BYTES`]): tenants' keys and quotas are a few kilobytes; the
//!   read stops one byte past the cap.
//! - **Whole and settled.** An editor or `echo >` that rewrites the file in place truncates it
//!   first and writes it in pieces: a reader in between sees an empty or half file that may even
//!   parse (one tenant of two). So a file is used only once it has not changed for
//!   [`SETTLE`]: read, then compare its length and modification time before and after; a file
//!   modified less than [`SETTLE`] ago is read again once it is that old. A file that keeps
//!   changing for [`MAX_WAIT`] is refused.
//! - **A rename never waits.** Writing a new file and renaming it over the old one is atomic
//!   (docs/multi-tenant.md says to): a file that is another file than the last one read (another
//!   inode) was put there whole, so it is read at once; so is the very version read last (same
//!   inode, length and modification time), which settled then. Only a file modified in place
//!   since the last read waits to settle ([`read_settled_since`]).
//!
//! Reading may therefore sleep: callers run it on a blocking thread, never on an async worker.

use std::fs::{File, Metadata};
use std::io::Read;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The largest config file read: keys, tokens and quotas of thousands of tenants fit in it.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// How long a file must have gone unmodified before it is taken as finished.
pub const SETTLE: Duration = Duration::from_millis(200);

/// How long a reader waits for a file that keeps changing before it refuses it.
pub const MAX_WAIT: Duration = Duration::from_secs(3);

/// One version of the config file: which file it is (device and inode) and its length and
/// modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    device: u64,
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    fn of(metadata: &Metadata) -> Self {
        #[cfg(unix)]
        let (device, inode) = {
            use std::os::unix::fs::MetadataExt;
            (metadata.dev(), metadata.ino())
        };
        #[cfg(not(unix))]
        let (device, inode) = (0, 0);
        Self {
            device,
            inode,
            len: metadata.len(),
            modified: metadata.modified().ok(),
        }
    }

    /// Whether `self`, read after `previous`, is whole without waiting to settle: another file
    /// (renamed over the old one), or the same version as then.
    fn whole_since(&self, previous: &FileStamp) -> bool {
        (self.device, self.inode) != (previous.device, previous.inode) || self == previous
    }
}

/// The text of the config file at `path`, once it is a settled regular file under the cap. The
/// error names the file and what is wrong with it.
pub fn read_settled(path: &Path) -> Result<String, String> {
    read_settled_since(path, None).map(|(text, _)| text)
}

/// [`read_settled`], knowing the stamp of the last version read (`previous`): a file renamed
/// over that one, or that very version, is read at once without the settle wait. Returns the
/// text and the stamp of the version it is.
pub fn read_settled_since(path: &Path, previous: Option<FileStamp>) -> Result<(String, FileStamp), String> {
    let started = std::time::Instant::now();
    loop {
        let read = read_once(path)?;
        let now = SystemTime::now();
        let age = read
            .stamp
            .modified
            .and_then(|m| now.duration_since(m).ok())
            .unwrap_or(SETTLE);
        let whole = previous.is_some_and(|p| read.stamp.whole_since(&p));
        if read.unchanged && (whole || age >= SETTLE) {
            return Ok((read.text, read.stamp));
        }
        if started.elapsed() >= MAX_WAIT {
            return Err(format!(
                "{} kept changing while it was read (for {} ms): it is being rewritten in place; \
                 write the new settings to another file and rename it over this one",
                path.display(),
                MAX_WAIT.as_millis()
            ));
        }
        // Until it is SETTLE old (at least a little, for one that changed under the read).
        std::thread::sleep(SETTLE.saturating_sub(age).max(Duration::from_millis(20)));
    }
}

/// One read of the file, and whether it stayed the same while read.
struct OneRead {
    text: String,
    stamp: FileStamp,
    unchanged: bool,
}

fn read_once(path: &Path) -> Result<OneRead, String> {
    let shown = path.display();
    let file = open_without_blocking(path).map_err(|e| format!("reading {shown}: {e}"))?;
    let before = file.metadata().map_err(|e| format!("reading {shown}: {e}"))?;
    if !before.is_file() {
        return Err(format!(
            "{shown} is not a regular file (it is {}): --config reads a TOML file",
            kind_of(&before)
        ));
    }
    if before.len() > MAX_CONFIG_BYTES {
        return Err(format!(
            "{shown} is {} bytes, over the limit of {MAX_CONFIG_BYTES} bytes for a config file",
            before.len()
        ));
    }
    let mut bytes = Vec::with_capacity(before.len() as usize);
    // One byte past the cap tells a file that grew while read from one that fits.
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "{shown} grew past the limit of {MAX_CONFIG_BYTES} bytes for a config file while it was read"
        ));
    }
    let after = std::fs::metadata(path).map_err(|e| format!("reading {shown}: {e}"))?;
    // The path's metadata, not the descriptor's: a file renamed over this one meanwhile differs.
    let stamp = FileStamp::of(&before);
    let unchanged = FileStamp::of(&after) == stamp && after.len() == bytes.len() as u64;
    let text = String::from_utf8(bytes).map_err(|e| {
        format!(
            "{shown} is not UTF-8 text (byte {} is not): a config file is TOML",
            e.utf8_error().valid_up_to()
        )
    })?;
    Ok(OneRead { text, stamp, unchanged })
}

#[cfg(unix)]
fn open_without_blocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_without_blocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

fn kind_of(metadata: &Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = metadata.file_type();
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if metadata.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settled_file_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, "[tenants.alpha]\n").unwrap();
        assert_eq!(read_settled(&path).unwrap(), "[tenants.alpha]\n");
    }

    #[test]
    fn devices_directories_and_oversize_files_are_refused_naming_the_file() {
        let e = read_settled(Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("/dev/zero is not a regular file (it is a device)"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = read_settled(dir.path()).unwrap_err();
        assert!(e.contains("a directory"), "{e}");
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let e = read_settled(&big).unwrap_err();
        assert!(e.contains("over the limit of 1048576 bytes"), "{e}");
        let e = read_settled(&dir.path().join("missing.toml")).unwrap_err();
        assert!(e.starts_with("reading ") && e.contains("missing.toml"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_at_once_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.toml");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        // Nobody writes to it: a blocking open would never return.
        let e = read_settled(&fifo).unwrap_err();
        assert!(e.contains("is not a regular file (it is a FIFO)"), "{e}");
    }
}
