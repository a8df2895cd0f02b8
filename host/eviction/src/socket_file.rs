//! The eviction socket's file: a private channel between agentrt and the engine's plugin.
//!
//! Whoever can connect to the socket ranks the engine's evictions, so the file is created with
//! mode 0600 (agentrt's user only) or, when the operator names a group, 0660 owned by that group,
//! whatever the umask. The socket is bound inside a fresh 0700 folder beside the path, given its
//! mode and group there, and only then linked at the path (a link never replaces what is there),
//! so no one else can connect in between.
//!
//! What is already at the path decides whether agentrt may start:
//!
//! | at the path | what happens |
//! |---|---|
//! | nothing | bound |
//! | a socket nobody listens on (a previous agentrt's, left by a crash) | replaced |
//! | a socket someone listens on | refused: another agentrt (or something else) serves it |
//! | a regular file, folder, symlink or anything else | refused, left as it is |
//!
//! A missing folder on the way to the path (`/run/agentrt` on a fresh machine) is created, as
//! `mkdir -p` would, with the socket's audience and no one else: mode 0700, or 0750 owned by the
//! `--eviction-socket-group` group so that its members can reach the socket. An operator's own
//! folder is never changed. When agentrt may not create it (`/run` is root's), the error names
//! the folder and the command that makes it.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// Who besides agentrt's user may connect.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketAccess {
    /// A group whose members may connect too (`--eviction-socket-group`): a name, or a numeric
    /// gid. `None`: only agentrt's user (mode 0600).
    pub group: Option<String>,
}

impl SocketAccess {
    /// The socket file's mode: 0660 with a group, else 0600.
    pub fn mode(&self) -> u32 {
        if self.group.is_some() {
            0o660
        } else {
            0o600
        }
    }
}

/// Bind a listening socket at `path` under `access` (see the module doc for what an existing
/// file at the path does). The error names the path and what to do.
pub fn bind_private(path: &Path, access: &SocketAccess) -> io::Result<UnixListener> {
    let gid = access.group.as_deref().map(group_id).transpose()?;
    create_missing_folders(path, gid)?;
    clear_stale_socket(path)?;
    let staging = StagingDir::beside(path)?;
    let staged = staging.0.join("s");
    let listener = UnixListener::bind(&staged)?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(access.mode()))?;
    if let Some(gid) = gid {
        std::os::unix::fs::chown(&staged, None, Some(gid)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot give the eviction socket to group {} ({e}): agentrt's user must be a \
                     member of it; fix --eviction-socket-group",
                    access.group.as_deref().unwrap_or_default()
                ),
            )
        })?;
    }
    std::fs::hard_link(&staged, path).map_err(|e| {
        let why = if e.kind() == io::ErrorKind::AlreadyExists {
            "something was created there while agentrt was binding; remove it or choose another path".to_string()
        } else {
            e.to_string()
        };
        io::Error::new(e.kind(), format!("{}: {why}", path.display()))
    })?;
    Ok(listener)
}

/// Create the folders missing on the way to `path`'s folder, each 0700 (0750 and group `gid`'s
/// with a group), whatever the umask; folders that exist are left as they are.
fn create_missing_folders(path: &Path, gid: Option<u32>) -> io::Result<()> {
    let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    let missing: Vec<&Path> = folder.ancestors().take_while(|dir| !dir.exists()).collect();
    let mode = if gid.is_some() { 0o750 } else { 0o700 };
    // Outermost first, as `mkdir -p` goes.
    for dir in missing.into_iter().rev() {
        let created = std::fs::DirBuilder::new().mode(mode).create(dir);
        match created {
            Ok(()) => {}
            // Made by someone else meanwhile (a second agentrt for another replica's socket).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => continue,
            Err(e) => return Err(cannot_create(dir, folder, e)),
        }
        // The umask may have taken bits away; the mode is what the socket's audience needs.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
        if let Some(gid) = gid {
            std::os::unix::fs::chown(dir, None, Some(gid))?;
        }
        tracing::info!(folder = %dir.display(), mode = format!("{mode:o}"), "created the eviction socket's folder");
    }
    Ok(())
}

/// The error for a folder on the way to the socket that could not be made: which one, why, and
/// how the operator makes it.
fn cannot_create(dir: &Path, folder: &Path, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "the eviction socket's folder {} does not exist and agentrt cannot create {} ({e}): \
             create it for agentrt's user, e.g. `sudo install -d -m 0700 -o $(id -un) {}`, or \
             give --eviction-socket a path in a folder agentrt's user may write",
            folder.display(),
            dir.display(),
            folder.display()
        ),
    )
}

/// Remove a socket at `path` that nobody listens on; refuse anything else that is there.
fn clear_stale_socket(path: &Path) -> io::Result<()> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let file_type = metadata.file_type();
    if !file_type.is_socket() {
        let what = if file_type.is_symlink() {
            "a symbolic link"
        } else if file_type.is_dir() {
            "a folder"
        } else if file_type.is_file() {
            "a regular file"
        } else {
            "not a socket"
        };
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} is {what}, not a socket agentrt left: refusing to replace it; remove it \
                 yourself or give the eviction socket another path",
                path.display()
            ),
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "{}: another process is listening on this socket (another agentrt?); stop it or \
                 give the eviction socket another path",
                path.display()
            ),
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path)?;
            tracing::info!(path = %path.display(), "replaced a stale eviction socket nobody listened on");
            Ok(())
        }
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("{}: cannot tell whether this socket is in use ({e})", path.display()),
        )),
    }
}

/// A name (or a numeric id) → the group's id.
fn group_id(group: &str) -> io::Result<u32> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    let unknown = || {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("--eviction-socket-group {group:?}: no such group on this system"),
        )
    };
    let name = std::ffi::CString::new(group).map_err(|_| unknown())?;
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    // SAFETY: every pointer is valid for the call; `buf` outlives `entry`'s borrowed strings,
    // of which only `gr_gid` (a plain integer) is read.
    let rc = unsafe { libc::getgrnam_r(name.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return Err(unknown());
    }
    Ok(entry.gr_gid)
}

/// A 0700 folder beside the socket's path, removed (with what is left in it) when dropped.
struct StagingDir(PathBuf);

impl StagingDir {
    fn beside(path: &Path) -> io::Result<Self> {
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        // Short: a socket's path is limited to 107 bytes, and this folder's adds to the path's.
        let dir = parent.join(format!(".agentrt.{}.{nanos}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "agentrt cannot write in the eviction socket's folder {} (creating {}: {e}): \
                         give agentrt's user write access to it, or give --eviction-socket a path \
                         in a folder it may write",
                    parent.display(),
                    dir.display()
                ),
            )
        })?;
        Ok(Self(dir))
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
