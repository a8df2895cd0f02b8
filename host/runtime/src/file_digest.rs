//! The BLAKE3 digest of a component file, remembered by the file's identity so that loading an
//! unchanged file again neither reads nor hashes it.
//!
//! A load from the artifact cache spent a fifth of its time reading the component and hashing it
//! (docs/performance.md), only to find the digest it found last time. The digest names compiled
//! native code, so a remembered one must never outlive the bytes it was taken of. It is kept
//! under the file's device, inode, size, modification time and *change* time: any write to the
//! file, a `touch` that puts the modification time back included, sets the change time to the
//! kernel's clock, which no process can set back; a file replaced by a rename is another inode.
//!
//! What the stamp cannot see is a write within the same tick of the filesystem's clock as the
//! stamp was taken (timestamps are as coarse as a jiffy, or 2 s on FAT). So, as git does for its
//! index, a digest is remembered only for a file whose change time is at least [`SETTLE`] older
//! than the moment before its bytes were read: a file that was just written is read and hashed
//! on every load until it has settled. Platforms without these stat fields remember nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// How old a file's last change must be before its digest is remembered: more than any
/// filesystem's timestamp granularity.
pub(crate) const SETTLE: Duration = Duration::from_secs(2);

/// Paths remembered at most; past it the memo starts over (a host loads a handful of files).
const MAX_ENTRIES: usize = 1024;

/// What identifies one version of a file's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    /// The stamp of the file at `path` (following links), if the platform keeps one.
    #[cfg(unix)]
    pub(crate) fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        m.is_file().then(|| Self {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    #[cfg(not(unix))]
    pub(crate) fn of(_path: &Path) -> Option<Self> {
        None
    }

    /// Whether the file last changed at least `settle` before `when`.
    fn settled_before(&self, when: SystemTime, settle: Duration) -> bool {
        let Some(cutoff) = when.checked_sub(settle) else {
            return false;
        };
        let (secs, nanos) = self.ctime;
        let Ok(secs) = u64::try_from(secs) else {
            return false;
        };
        let changed = SystemTime::UNIX_EPOCH + Duration::new(secs, nanos.clamp(0, 999_999_999) as u32);
        changed < cutoff
    }
}

/// A component file's digest and size, as remembered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Remembered {
    pub digest: String,
    pub size: usize,
}

/// Digests of component files by path, each valid for one [`FileStamp`].
#[derive(Debug)]
pub(crate) struct DigestMemo {
    settle: Duration,
    entries: Mutex<HashMap<PathBuf, (FileStamp, Remembered)>>,
}

impl DigestMemo {
    pub(crate) fn new(settle: Duration) -> Self {
        Self {
            settle,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The remembered digest of `path`, if the file is still the one it was taken of.
    pub(crate) fn get(&self, path: &Path, now: &FileStamp) -> Option<Remembered> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(path) {
            Some((stamp, remembered)) if stamp == now => Some(remembered.clone()),
            _ => None,
        }
    }

    /// Remember `remembered` for `path` as stamped by `stamp`, taken before reading began at
    /// `read_at` — unless the file changed too recently for its stamp to tell a later write.
    pub(crate) fn put(&self, path: &Path, stamp: FileStamp, read_at: SystemTime, remembered: Remembered) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if !stamp.settled_before(read_at, self.settle) || remembered.size as u64 != stamp.len {
            entries.remove(path);
            return;
        }
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(path.to_path_buf(), (stamp, remembered));
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn remembered(bytes: &[u8]) -> Remembered {
        Remembered {
            digest: blake3::hash(bytes).to_hex().to_string(),
            size: bytes.len(),
        }
    }

    /// Read and remember `path` as a load does: stamp, note the time, read, hash.
    fn load(memo: &DigestMemo, path: &Path) -> Remembered {
        let stamp = FileStamp::of(path).unwrap();
        if let Some(r) = memo.get(path, &stamp) {
            return r;
        }
        let read_at = SystemTime::now();
        let r = remembered(&std::fs::read(path).unwrap());
        memo.put(path, stamp, read_at, r.clone());
        r
    }

    #[test]
    fn new_bytes_of_the_same_size_and_modification_time_are_hashed_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.wasm");
        std::fs::write(&path, b"first version").unwrap();
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        // Settled at once, so that the memo is in use for the rest of the test.
        let memo = DigestMemo::new(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(load(&memo, &path), remembered(b"first version"));
        assert!(memo.get(&path, &FileStamp::of(&path).unwrap()).is_some(), "remembered");

        // Rewritten in place, same length, modification time put back (as `cp -p` would).
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&path, b"other version").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(load(&memo, &path), remembered(b"other version"));

        // Replaced by a rename: another inode.
        std::thread::sleep(Duration::from_millis(20));
        let tmp = dir.path().join("p.tmp");
        std::fs::write(&tmp, b"third version").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert_eq!(load(&memo, &path), remembered(b"third version"));
    }

    #[test]
    fn a_file_that_just_changed_is_not_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.wasm");
        std::fs::write(&path, b"fresh").unwrap();
        let memo = DigestMemo::new(SETTLE);
        load(&memo, &path);
        assert_eq!(memo.get(&path, &FileStamp::of(&path).unwrap()), None);
    }
}
