//! Writes the embedded preload library to a file that no other user can
//! replace before the loader maps it, and returns its path.
//!
//! Why a file in a private directory and not a sealed memfd loaded through
//! `/proc/self/fd/N`: the path in `LD_PRELOAD` is read again by every
//! process the program starts, at its exec. A memfd path names a
//! descriptor, which every descendant would have to keep open at that
//! number: a program that closes what it does not know (Python's
//! `close_fds`, daemons) would make its children's loader print an error
//! and run without the library, and one that reuses the number would make
//! the loader open whatever is there. A file in a directory only its owner
//! can write stays valid for the whole tree. Setuid programs are the same
//! either way: their loader ignores an `LD_PRELOAD` entry with a slash and
//! removes the variable from what they pass on.
//!
//! The directory, the first that works of `$XDG_RUNTIME_DIR/shmpipe` and
//! `$TMPDIR/shmpipe-UID` (`/tmp` without TMPDIR), is made with mode 0700 and
//! must be a real directory owned by this user with mode 0700, on a file
//! system that allows executable mappings, in a parent that other users
//! cannot rename it out of (owned by this user or root, and sticky if
//! others may write to it). The file's name carries a hash of its bytes, so
//! builds do not replace each other's while programs still start children;
//! an existing file is used only if it is this user's, not writable by
//! others, and holds exactly the embedded bytes; otherwise it is written
//! again, to a new name and renamed over, so no process ever maps half a
//! file.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The preload library, built by build.rs from crates/preload.
static LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libshmpipe_preload.so"));
/// A hash of [`LIBRARY`], from build.rs.
const HASH: &str = env!("SHMPIPE_PRELOAD_HASH");

/// The path of the preload library, written if need be.
pub fn library() -> io::Result<PathBuf> {
    // SAFETY: geteuid(2) cannot fail and reads no memory.
    let uid = unsafe { libc::geteuid() };
    let mut candidates = Vec::new();
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| Path::new(d).is_absolute()) {
        candidates.push(Path::new(&run).join("shmpipe"));
    }
    candidates.push(std::env::temp_dir().join(format!("shmpipe-{uid}")));
    let mut why = Vec::new();
    for dir in candidates {
        match private_dir(&dir, uid).and_then(|()| write_once(&dir, uid)) {
            Ok(path) => return Ok(path),
            Err(e) => why.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(io::Error::other(why.join("; ")))
}

fn refuse(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, what.to_owned())
}

/// Makes `dir` (mode 0700) if it is missing and checks that it is private.
fn private_dir(dir: &Path, uid: u32) -> io::Result<()> {
    let parent = dir.parent().ok_or_else(|| refuse("no parent directory"))?;
    let p = fs::metadata(parent)?;
    let others_write = p.mode() & 0o022 != 0;
    let sticky = p.mode() & 0o1000 != 0;
    if (p.uid() != uid && p.uid() != 0) || (others_write && !sticky) {
        return Err(refuse("its parent may be changed by other users"));
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = fs::symlink_metadata(dir)?;
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o777 != 0o700 {
        return Err(refuse("not a directory of this user's with mode 0700"));
    }
    if no_exec(dir)? {
        return Err(refuse("on a file system mounted noexec"));
    }
    Ok(())
}

/// Whether `dir`'s file system forbids executable mappings.
fn no_exec(dir: &Path) -> io::Result<bool> {
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: a zeroed statvfs is a valid out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path; statvfs writes only into `st`.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_flag & libc::ST_NOEXEC != 0)
}

/// The library's file in the private `dir`, written unless it is already
/// there, whole and this user's.
fn write_once(dir: &Path, uid: u32) -> io::Result<PathBuf> {
    let path = dir.join(format!("libshmpipe-preload-{HASH}.so"));
    if let Ok(m) = fs::symlink_metadata(&path) {
        let sound = m.is_file() && m.uid() == uid && m.mode() & 0o022 == 0;
        if sound && m.len() == LIBRARY.len() as u64 && fs::read(&path)? == LIBRARY {
            return Ok(path);
        }
    }
    let tmp = dir.join(format!(".libshmpipe-preload-{HASH}.{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o500)
        .open(&tmp)?;
    let written = f.write_all(LIBRARY).and_then(|()| f.sync_data());
    drop(f);
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, &path)) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::set_permissions(&path, fs::Permissions::from_mode(0o500))?;
    Ok(path)
}
