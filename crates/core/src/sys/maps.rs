//! Whether a process still holds an end: does it map the end's own region
//! writable? (See docs/shared-ends.md, "Who holds the end".)
//!
//! A holder slot names a process by its pid, and `kill(pid, 0)` says only
//! that some process has that pid. It cannot tell a holder from the same
//! pid after an `exec` (a fork-based spawn: the child claimed a slot at
//! the fork, and its new image never had the end's memory), from a zombie,
//! or from another process that reused the pid. The mapping can: every
//! copy of an end maps its own region read-write and shared, from the
//! moment it exists until it is dropped (a `fork` child inherits the
//! mapping; an `exec` drops every mapping), while the peer maps it
//! read-only, but for the reader's view of a pipe's writer control page
//! (see `setup::open_control_page`): exactly the first page of the
//! writer's region, writable, which no holder's mapping is (a holder
//! maps the control page and the data in one).

use std::io::{self, BufRead};
use std::os::fd::BorrowedFd;

use shmpipe_ring::layout::DATA_OFFSET;

/// `open("/proc/PID/maps")`, see
/// [proc_pid_maps(5)](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html):
/// whether process `pid` maps the file behind `file` writable and shared
/// (for a writer's region, `writer`, other than a reader's view of its
/// control page alone).
/// `Some(false)` when it is gone or maps it otherwise or not at all;
/// `None` when the kernel does not say (a process of another user, one
/// that is not dumpable, `/proc` not mounted): the caller counts it as a
/// holder.
pub(crate) fn maps_writable(pid: u32, file: BorrowedFd<'_>, writer: bool) -> Option<bool> {
    let (dev, ino) = super::inode(file).ok()?;
    let maps = match std::fs::File::open(format!("/proc/{pid}/maps")) {
        Ok(maps) => maps,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(false),
        Err(_) => return None,
    };
    let mut maps = io::BufReader::new(maps);
    let mut line = String::new();
    loop {
        line.clear();
        match maps.read_line(&mut line) {
            Ok(0) => return Some(false),
            Ok(_) if maps_line_is(&line, dev, ino, writer) => return Some(true),
            Ok(_) => {}
            // ESRCH mid-read: the process ended.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Some(false),
            Err(_) => return None,
        }
    }
}

/// Whether one line of a maps file (`start-end perms offset dev inode
/// path`) is a shared, writable mapping of the file `dev`/`ino`, and,
/// for a writer's region, not the reader's view of its control page.
fn maps_line_is(line: &str, dev: u64, ino: u64, writer: bool) -> bool {
    let mut fields = line.split_ascii_whitespace();
    let (Some(range), Some(perms), Some(offset), Some(at), Some(inode)) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return false;
    };
    let perms = perms.as_bytes();
    if perms.len() < 4 || perms[1] != b'w' || perms[3] != b's' {
        return false;
    }
    if inode.parse::<u64>() != Ok(ino) {
        return false;
    }
    let Some((major, minor)) = at.split_once(':') else {
        return false;
    };
    let (Ok(major), Ok(minor)) = (
        u32::from_str_radix(major, 16),
        u32::from_str_radix(minor, 16),
    ) else {
        return false;
    };
    if rustix::fs::major(dev) != major || rustix::fs::minor(dev) != minor {
        return false;
    }
    !(writer && offset.trim_start_matches('0').is_empty() && range_len(range) == Some(DATA_OFFSET))
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
    fn a_line_of_the_region_writable_and_shared_is_a_holder() {
        let dev = rustix::fs::makedev(0, 1);
        let l = "7f00-7f10 rw-s 00000000 00:01 4242   /memfd:shmpipe-data (deleted)\n";
        assert!(maps_line_is(l, dev, 4242, false));
        assert!(maps_line_is(l, dev, 4242, true));
        assert!(!maps_line_is(l, dev, 4243, false));
        assert!(!maps_line_is(l, rustix::fs::makedev(0, 2), 4242, false));
        let peer = "7f00-7f10 r--s 00000000 00:01 4242   /memfd:shmpipe-data (deleted)\n";
        assert!(!maps_line_is(peer, dev, 4242, false));
        let private = "7f00-7f10 rw-p 00000000 00:01 4242   /memfd:x\n";
        assert!(!maps_line_is(private, dev, 4242, false));
        assert!(!maps_line_is("garbage\n", dev, 4242, false));
    }

    #[test]
    fn a_readers_view_of_the_writers_control_page_is_no_holder() {
        let dev = rustix::fs::makedev(0, 1);
        let view = "7e000000-7e001000 rw-s 00000000 00:01 4242   /memfd:shmpipe-data\n";
        assert!(!maps_line_is(view, dev, 4242, true));
        // The same line of a reader's region is its owner's (no peer maps
        // a reader's region writable), and a writer's holder maps more.
        assert!(maps_line_is(view, dev, 4242, false));
        let holder = "7e000000-7e011000 rw-s 00000000 00:01 4242   /memfd:shmpipe-data\n";
        assert!(maps_line_is(holder, dev, 4242, true));
        // A holder's mapping split at the first page still counts by its rest.
        let rest = "7e001000-7e011000 rw-s 00001000 00:01 4242   /memfd:shmpipe-data\n";
        assert!(maps_line_is(rest, dev, 4242, true));
    }

    #[test]
    fn this_process_holds_what_it_maps_writable() {
        let fd = super::super::memfd("shmpipe-test", 4096).unwrap();
        let me = std::process::id();
        assert_eq!(maps_writable(me, fd.as_fd(), false), Some(false));
        let map = super::super::Mapping::new(fd.as_fd(), 4096, true).unwrap();
        assert_eq!(maps_writable(me, fd.as_fd(), false), Some(true));
        drop(map);
        let _read_only = super::super::Mapping::new(fd.as_fd(), 4096, false).unwrap();
        assert_eq!(maps_writable(me, fd.as_fd(), false), Some(false));
    }

    #[test]
    fn a_control_page_made_writable_is_no_holder_of_a_writers_region() {
        let fd = super::super::memfd("shmpipe-test", 3 * 4096).unwrap();
        let me = std::process::id();
        let view = super::super::Mapping::new(fd.as_fd(), 3 * 4096, false).unwrap();
        view.make_writable(DATA_OFFSET).unwrap();
        assert_eq!(maps_writable(me, fd.as_fd(), true), Some(false));
        let _holder = super::super::Mapping::new(fd.as_fd(), 3 * 4096, true).unwrap();
        assert_eq!(maps_writable(me, fd.as_fd(), true), Some(true));
    }
}
