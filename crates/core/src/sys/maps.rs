//! Whether a process still holds an end: does it map the end's own region
//! writable, with the region's mark page? (See docs/shared-ends.md, "Who
//! holds the end".)
//!
//! A holder slot names a process by its pid, and `kill(pid, 0)` says only
//! that some process has that pid. It cannot tell a holder from the same
//! pid after an `exec` (a fork-based spawn: the child claimed a slot at
//! the fork, and its new image never had the end's memory), from a zombie,
//! or from another process that reused the pid. The mapping can: every
//! copy of an end maps its own region read-write and shared, from the
//! moment it exists until it is dropped (a `fork` child inherits the
//! mapping; an `exec` drops every mapping).
//!
//! The peer may map the region writable too (a pipe's reader, where the
//! seals allow it, see `setup::open_peer_view`), so a holder's mapping is
//! told apart by one page at the end of the file that only holders map,
//! the mark page ([`file_len`]): the peer maps the ring's part alone.
//!
//! ```text
//!   own region's memfd:  | ring: control page, data ... | mark page |
//!   a holder maps:       |<------------------------------------------>|
//!   the peer maps:       |<------------------------------>|
//! ```

use std::io::{self, BufRead, Read};
use std::os::fd::BorrowedFd;
use std::sync::Mutex;

/// The length of the memfd of one of our own regions whose ring takes
/// `ring_len` bytes: the ring's part, rounded up to a page, then the mark
/// page. The mark page is never touched (it costs no memory), only mapped.
pub(crate) fn file_len(ring_len: usize) -> usize {
    let page = rustix::param::page_size();
    ring_len.next_multiple_of(page) + page
}

/// `open("/proc/PID/maps")`, see
/// [proc_pid_maps(5)](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html):
/// whether process `pid` maps the file behind `file` (one of our own
/// regions, [`file_len`] long) writable and shared, its mark page
/// included: whether it is a holder.
/// `Some(false)` when it is gone or maps it otherwise or not at all;
/// `None` when the kernel does not say (a process of another user, one
/// that is not dumpable, `/proc` not mounted): the caller counts it as a
/// holder.
///
/// A maps file costs the kernel time for every mapping in it, and a
/// process that holds a thousand ends has thousands: asked about each of
/// them in turn, one read per answer made a server that forked with its
/// ends open spend most of its time here. So one read of a process is
/// kept (see [`Snapshot`]) and says "holds" again while the process's
/// size in `/proc/PID/statm` stays the same. Only a "holds" answer is
/// ever reused: a stale one keeps an end shared a little longer (slower,
/// never wrong); "does not hold" always comes from a fresh read.
pub(crate) fn maps_writable(pid: u32, file: BorrowedFd<'_>) -> Option<bool> {
    let st = rustix::fs::fstat(file).ok()?;
    let size = u64::try_from(st.st_size).ok()?;
    let want = Region {
        ino: st.st_ino,
        major: rustix::fs::major(st.st_dev),
        minor: rustix::fs::minor(st.st_dev),
        end: size.saturating_sub(rustix::param::page_size() as u64),
    };
    // Our own mappings change under other threads at any time, and no
    // caller asks about itself but tests: read afresh. A cache held by
    // another thread (or by a thread of the parent at `fork`) is skipped.
    let kept = (pid != std::process::id())
        .then(|| SNAPSHOTS.try_lock().ok())
        .flatten();
    let Some(mut kept) = kept else {
        return read(pid, want).map(|(holds, _)| holds);
    };
    let size = statm_size(pid);
    let i = kept
        .iter()
        .position(|s| s.as_ref().is_some_and(|s| s.pid == pid));
    if let (Some(i), Some(size)) = (i, size) {
        let s = kept[i].as_mut().expect("found above");
        if s.size == size && s.answers_left > 0 && s.holds(want) {
            s.answers_left -= 1;
            return Some(true);
        }
    }
    let (holds, regions) = read(pid, want)?;
    let snapshot = match (size, regions) {
        (Some(size), Some(mut regions)) if holds => {
            regions.sort_unstable();
            regions.dedup();
            let answers_left = regions.len();
            Snapshot {
                pid,
                size,
                regions,
                answers_left,
            }
        }
        _ => {
            if let Some(i) = i {
                kept[i] = None;
            }
            return Some(holds);
        }
    };
    // In the slot of the same pid, else an empty one, else the one with
    // the fewest answers left.
    let slot = i
        .or_else(|| kept.iter().position(Option::is_none))
        .unwrap_or_else(|| {
            (0..kept.len())
                .min_by_key(|&k| kept[k].as_ref().map_or(0, |s| s.answers_left))
                .expect("slots")
        });
    kept[slot] = Some(snapshot);
    Some(true)
}

/// A shared, writable mapping seen in a maps file: of the file `major`/
/// `minor`/`ino`, up to byte `end` of the file (the end of its range;
/// for the region asked about, the start of its mark page).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Region {
    ino: u64,
    major: u32,
    minor: u32,
    end: u64,
}

/// One read of another process's maps file, the shared writable mappings
/// in it.
struct Snapshot {
    pid: u32,
    /// The process's size (`/proc/PID/statm`, pages) when it was read:
    /// an `exec`, an exit (a zombie's is 0), a pid taken over, or a
    /// mapping made or dropped almost always changes it.
    size: u64,
    /// Sorted.
    regions: Vec<Region>,
    /// Answers it may still give, so that a change the size did not show
    /// (one mapping dropped and another of its length made) is seen
    /// within as many looks as the process had regions.
    answers_left: usize,
}

impl Region {
    /// Whether this mapping makes its process a holder of the region
    /// `want`: a mapping of the same file that reaches into its mark page.
    fn counts_for(self, want: Region) -> bool {
        self.file() == want.file() && self.end > want.end
    }

    fn file(self) -> (u64, u32, u32) {
        (self.ino, self.major, self.minor)
    }
}

impl Snapshot {
    /// Whether the process mapped `want` as a holder: the mapping of its
    /// file that reaches furthest (the last of the file's, sorted) counts.
    fn holds(&self, want: Region) -> bool {
        let after = self.regions.partition_point(|r| r.file() <= want.file());
        after > 0 && self.regions[after - 1].counts_for(want)
    }
}

/// The processes read last: few (a holder's ends are shared with the
/// processes it forked or handed them to), each snapshot at most
/// `MAX_REGIONS` long.
static SNAPSHOTS: Mutex<[Option<Snapshot>; 4]> = Mutex::new([None, None, None, None]);

/// Regions a snapshot lists at most: a process with more is read afresh
/// for each answer, as before there were snapshots.
const MAX_REGIONS: usize = 8192;

/// Reads `/proc/PID/maps`: whether `pid` holds `want`, and its shared
/// writable regions if there are at most `MAX_REGIONS`. `Some((false,
/// _))` when the process is gone, `None` when the kernel does not say.
fn read(pid: u32, want: Region) -> Option<(bool, Option<Vec<Region>>)> {
    super::fault::count_maps_read();
    let maps = match std::fs::File::open(format!("/proc/{pid}/maps")) {
        Ok(maps) => maps,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Some((false, None)),
        Err(_) => return None,
    };
    let mut maps = io::BufReader::new(maps);
    let mut line = String::new();
    let mut holds = false;
    let mut regions = Some(Vec::new());
    loop {
        line.clear();
        match maps.read_line(&mut line) {
            Ok(0) => return Some((holds, regions)),
            Ok(_) => {
                let Some(r) = region_of(&line) else { continue };
                holds |= r.counts_for(want);
                match &mut regions {
                    Some(v) if v.len() < MAX_REGIONS => v.push(r),
                    // Too many to keep: the answer is all this read gives.
                    _ if holds => return Some((true, None)),
                    _ => regions = None,
                }
            }
            // ESRCH mid-read: the process ended.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Some((false, None)),
            Err(_) => return None,
        }
    }
}

/// `/proc/PID/statm`'s first field, the process's size in pages, see
/// [proc_pid_statm(5)](https://man7.org/linux/man-pages/man5/proc_pid_statm.5.html).
fn statm_size(pid: u32) -> Option<u64> {
    let mut text = [0u8; 128];
    let mut f = std::fs::File::open(format!("/proc/{pid}/statm")).ok()?;
    let n = f.read(&mut text).ok()?;
    let text = std::str::from_utf8(&text[..n]).ok()?;
    text.split_ascii_whitespace().next()?.parse().ok()
}

/// Whether one line of a maps file (`start-end perms offset dev inode
/// path`) is a holder's mapping of the file `dev`/`ino` of `size` bytes.
#[cfg(test)]
fn maps_line_is(line: &str, dev: u64, ino: u64, size: u64) -> bool {
    region_of(line).is_some_and(|r| {
        r.counts_for(Region {
            ino,
            major: rustix::fs::major(dev),
            minor: rustix::fs::minor(dev),
            end: size - 4096,
        })
    })
}

/// The region of one line of a maps file (`start-end perms offset dev
/// inode path`) if it is a shared, writable mapping.
fn region_of(line: &str) -> Option<Region> {
    let mut fields = line.split_ascii_whitespace();
    let (range, perms, offset, at, inode) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let perms = perms.as_bytes();
    if perms.len() < 4 || perms[1] != b'w' || perms[3] != b's' {
        return None;
    }
    let ino = inode.parse::<u64>().ok()?;
    let (major, minor) = at.split_once(':')?;
    let major = u32::from_str_radix(major, 16).ok()?;
    let minor = u32::from_str_radix(minor, 16).ok()?;
    let offset = u64::from_str_radix(offset, 16).ok()?;
    let end = offset.checked_add(range_len(range)? as u64)?;
    Some(Region {
        ino,
        major,
        minor,
        end,
    })
}

/// The length of a maps line's `start-end` range (hexadecimal).
fn range_len(range: &str) -> Option<usize> {
    let (start, end) = range.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    usize::from_str_radix(end, 16).ok()?.checked_sub(start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_line_of_the_region_writable_and_shared_with_its_mark_is_a_holder() {
        let dev = rustix::fs::makedev(0, 1);
        let l = "7f000000-7f002000 rw-s 00000000 00:01 4242   /memfd:shmpipe-data (deleted)\n";
        assert!(maps_line_is(l, dev, 4242, 0x2000));
        assert!(!maps_line_is(l, dev, 4243, 0x2000));
        assert!(!maps_line_is(l, rustix::fs::makedev(0, 2), 4242, 0x2000));
        let peer = "7f000000-7f002000 r--s 00000000 00:01 4242   /memfd:shmpipe-data (deleted)\n";
        assert!(!maps_line_is(peer, dev, 4242, 0x2000));
        let private = "7f000000-7f002000 rw-p 00000000 00:01 4242   /memfd:x\n";
        assert!(!maps_line_is(private, dev, 4242, 0x2000));
        assert!(!maps_line_is("garbage\n", dev, 4242, 0x2000));
    }

    #[test]
    fn a_writable_view_without_the_mark_page_is_no_holder() {
        let dev = rustix::fs::makedev(0, 1);
        // A pipe reader's view of a writer's region of 0x12000 bytes: the
        // ring's 0x11000, writable, without the mark page.
        let view = "7e000000-7e011000 rw-s 00000000 00:01 4242   /memfd:shmpipe-data\n";
        assert!(!maps_line_is(view, dev, 4242, 0x12000));
        let holder = "7e000000-7e012000 rw-s 00000000 00:01 4242   /memfd:shmpipe-data\n";
        assert!(maps_line_is(holder, dev, 4242, 0x12000));
        // A holder's mapping split anywhere still counts by its last part.
        let rest = "7e001000-7e012000 rw-s 00001000 00:01 4242   /memfd:shmpipe-data\n";
        assert!(maps_line_is(rest, dev, 4242, 0x12000));
        let mark = "7e011000-7e012000 rw-s 00011000 00:01 4242   /memfd:shmpipe-data\n";
        assert!(maps_line_is(mark, dev, 4242, 0x12000));
    }

    #[test]
    fn this_process_holds_what_it_maps_writable_with_the_mark() {
        let fd = super::super::memfd("shmpipe-test", file_len(4096)).unwrap();
        let me = std::process::id();
        assert_eq!(maps_writable(me, fd.as_fd()), Some(false));
        let view = super::super::Mapping::new(fd.as_fd(), 4096, true).unwrap();
        assert_eq!(maps_writable(me, fd.as_fd()), Some(false));
        let map = super::super::Mapping::new(fd.as_fd(), file_len(4096), true).unwrap();
        assert_eq!(maps_writable(me, fd.as_fd()), Some(true));
        drop((map, view));
        let _read_only = super::super::Mapping::new(fd.as_fd(), file_len(4096), false).unwrap();
        assert_eq!(maps_writable(me, fd.as_fd()), Some(false));
    }

    #[test]
    fn a_snapshot_counts_the_mapping_that_reaches_furthest() {
        let r = |ino, end| Region {
            ino,
            major: 0,
            minor: 1,
            end,
        };
        let mut regions = vec![r(7, 0x3000), r(5, 0x1000), r(5, 0x3000), r(9, 0x9000)];
        regions.sort_unstable();
        let s = Snapshot {
            pid: 1,
            size: 1,
            regions,
            answers_left: 4,
        };
        assert!(s.holds(r(5, 0x2000)));
        assert!(!s.holds(r(7, 0x3000)));
        assert!(!s.holds(r(6, 0)));
        assert!(s.holds(r(9, 0x8000)));
        assert!(!s.holds(r(10, 0)));
    }
}
