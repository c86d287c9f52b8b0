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
//! read-only.

use std::io::{self, BufRead};
use std::os::fd::BorrowedFd;

/// `open("/proc/PID/maps")`, see
/// [proc_pid_maps(5)](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html):
/// whether process `pid` maps the file behind `file` writable and shared.
/// `Some(false)` when it is gone or maps it otherwise or not at all;
/// `None` when the kernel does not say (a process of another user, one
/// that is not dumpable, `/proc` not mounted): the caller counts it as a
/// holder.
pub(crate) fn maps_writable(pid: u32, file: BorrowedFd<'_>) -> Option<bool> {
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
            Ok(_) if maps_line_is(&line, dev, ino) => return Some(true),
            Ok(_) => {}
            // ESRCH mid-read: the process ended.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Some(false),
            Err(_) => return None,
        }
    }
}

/// Whether one line of a maps file (`start-end perms offset dev inode
/// path`) is a shared, writable mapping of the file `dev`/`ino`.
fn maps_line_is(line: &str, dev: u64, ino: u64) -> bool {
    let mut fields = line.split_ascii_whitespace();
    let (Some(_range), Some(perms), Some(_offset), Some(at), Some(inode)) = (
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
    rustix::fs::major(dev) == major && rustix::fs::minor(dev) == minor
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_line_of_the_region_writable_and_shared_is_a_holder() {
        let dev = rustix::fs::makedev(0, 1);
        let l = "7f00-7f10 rw-s 00000000 00:01 4242   /memfd:shmpipe-data (deleted)\n";
        assert!(maps_line_is(l, dev, 4242));
        assert!(!maps_line_is(l, dev, 4243));
        assert!(!maps_line_is(l, rustix::fs::makedev(0, 2), 4242));
        let peer = "7f00-7f10 r--s 00000000 00:01 4242   /memfd:shmpipe-data (deleted)\n";
        assert!(!maps_line_is(peer, dev, 4242));
        let private = "7f00-7f10 rw-p 00000000 00:01 4242   /memfd:x\n";
        assert!(!maps_line_is(private, dev, 4242));
        assert!(!maps_line_is("garbage\n", dev, 4242));
    }

    #[test]
    fn this_process_holds_what_it_maps_writable() {
        let fd = super::super::memfd("shmpipe-test", 4096).unwrap();
        let me = std::process::id();
        assert_eq!(maps_writable(me, fd.as_fd()), Some(false));
        let map = super::super::Mapping::new(fd.as_fd(), 4096, true).unwrap();
        assert_eq!(maps_writable(me, fd.as_fd()), Some(true));
        drop(map);
        let _read_only = super::super::Mapping::new(fd.as_fd(), 4096, false).unwrap();
        assert_eq!(maps_writable(me, fd.as_fd()), Some(false));
    }
}
