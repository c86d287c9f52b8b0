//! The server's cache of small files' contents, shared by all clients,
//! and what it trusts to tell that a file is still the one it read.
//!
//! A file is known by (device, inode) and its contents by the times no
//! user can set: the change time (`st_ctime`, set by the kernel on every
//! write, truncate, rename, link count and attribute change, `utimensat`
//! included) and the birth time (`statx`'s `STATX_BTIME`, where the
//! filesystem keeps one), beside the size and mtime. The inode number
//! alone proves nothing: ext4 gives a deleted file's number to the next
//! file made; mtime and size prove nothing either (`touch -r`, `cp -p`,
//! `tar x` set them).
//!
//! The inode's generation (`FS_IOC_GETVERSION`) would tell a reused inode
//! too, but rustix has no safe call for it and this crate has no unsafe
//! code; the birth time does the same where it is kept, and the change
//! time everywhere.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, StatxFlags};

use super::CACHE_FILE_MAX;

/// Bytes of file contents the server keeps in memory, over all files.
const CACHE_BUDGET: u64 = 512 << 20;

/// How long after a file's last change its copy is trusted. Timestamps
/// come from a clock that ticks in steps (the kernel's coarse clock: a
/// jiffy, up to 10 ms; a second on filesystems that keep no more), so a
/// write in the same step as the one before leaves the change time as it
/// was. A copy read that soon after the file's change time may be older
/// than a later write with the same stamp: it is used for the open that
/// read it, and read again at the next (as git treats a "racily clean"
/// entry). Two seconds covers a one-second granularity with room.
const SETTLE: Duration = Duration::from_secs(2);

/// What `statx` (or `fstat`) says of an open file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub(crate) regular: bool,
    pub(crate) size: u64,
    key: (u64, u64),
    stamp: Stamp,
}

/// What must not change while a copy is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
    /// `None` where the filesystem keeps no birth time.
    btime: Option<(i64, u32)>,
}

/// Reads what the cache needs of `fd`: `statx`, or `fstat` on kernels
/// without it (before Linux 4.11; no birth time then).
pub(crate) fn meta(fd: &fs::File) -> rustix::io::Result<Meta> {
    let want = StatxFlags::BASIC_STATS | StatxFlags::BTIME;
    match rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, want) {
        Ok(x) => {
            let t = |t: rustix::fs::StatxTimestamp| (t.tv_sec, t.tv_nsec);
            let has_btime = StatxFlags::from_bits_retain(x.stx_mask).contains(StatxFlags::BTIME);
            let dev = rustix::fs::makedev(x.stx_dev_major, x.stx_dev_minor);
            Ok(Meta {
                regular: FileType::from_raw_mode(x.stx_mode.into()) == FileType::RegularFile,
                size: x.stx_size,
                key: (dev, x.stx_ino),
                stamp: Stamp {
                    size: x.stx_size,
                    mtime: t(x.stx_mtime),
                    ctime: t(x.stx_ctime),
                    btime: has_btime.then(|| t(x.stx_btime)),
                },
            })
        }
        Err(rustix::io::Errno::NOSYS) => {
            let st = rustix::fs::fstat(fd)?;
            let size = st.st_size.max(0) as u64;
            Ok(Meta {
                regular: FileType::from_raw_mode(st.st_mode) == FileType::RegularFile,
                size,
                key: (st.st_dev, st.st_ino),
                stamp: Stamp {
                    size,
                    mtime: (st.st_mtime, st.st_mtime_nsec as u32),
                    ctime: (st.st_ctime, st.st_ctime_nsec as u32),
                    btime: None,
                },
            })
        }
        Err(e) => Err(e),
    }
}

/// File contents kept in memory, by (device, inode).
#[derive(Debug, Default)]
pub(crate) struct Cache {
    files: Mutex<Files>,
}

#[derive(Debug, Default)]
struct Files {
    map: HashMap<(u64, u64), Cached>,
    bytes: u64,
}

/// A file's contents as of one stamp.
#[derive(Debug)]
struct Cached {
    stamp: Stamp,
    /// Read at least [`SETTLE`] after the change time: trusted while the
    /// stamp holds. Otherwise read again at the next open.
    settled: bool,
    data: Arc<[u8]>,
}

/// Whether a copy read now of a file changed at `ctime` can be trusted
/// for later opens (see [`SETTLE`]).
fn settled(ctime: (i64, u32)) -> bool {
    let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else {
        return false;
    };
    match u64::try_from(ctime.0) {
        Ok(s) => now >= Duration::new(s, ctime.1.min(999_999_999)) + SETTLE,
        Err(_) => true, // changed before 1970: long settled
    }
}

impl Cache {
    /// The file's contents from the cache, read in if it fits. `None` when
    /// the cache has no room: the file is then served with `pread`, never
    /// from a private copy (which one client could multiply by its open
    /// files).
    pub(crate) fn get(&self, file: &fs::File, m: &Meta) -> Option<Arc<[u8]>> {
        let size = m.size;
        if size > CACHE_FILE_MAX {
            return None;
        }
        {
            let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
            let stale = match files.map.get(&m.key) {
                Some(c) if c.settled && c.stamp == m.stamp => return Some(c.data.clone()),
                Some(c) => c.data.len() as u64,
                None => 0,
            };
            if files.bytes - stale + size > CACHE_BUDGET {
                return None; // no room: not even read
            }
        }
        let mut data = vec![0u8; size as usize];
        file.read_exact_at(&mut data, 0).ok()?;
        let data: Arc<[u8]> = data.into();
        let settled = settled(m.stamp.ctime);
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = files.map.remove(&m.key) {
            files.bytes -= old.data.len() as u64;
        }
        if files.bytes + size > CACHE_BUDGET {
            return None; // filled meanwhile: the copy is dropped, not kept
        }
        files.bytes += size;
        files.map.insert(
            m.key,
            Cached {
                stamp: m.stamp,
                settled,
                data: data.clone(),
            },
        );
        Some(data)
    }
}
