//! Descriptors inherited across `exec`: the parent's side
//! ([`inherit_across_exec`]: a pre-exec hook clears close-on-exec in the
//! child only) and the child's ([`take_inherited`]: ownership of numbers
//! that were plainly inherited, and of no others).

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use crate::error;

/// `fcntl(fd, F_SETFD, 0)` in a pre-exec hook, see
/// [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html): arranges for `fds` to survive `exec`
/// in the child `cmd` spawns (and only there): the descriptors are moved into the command, which closes them
/// when it is dropped, and a pre-exec hook clears their close-on-exec flag
/// in the child.
pub(crate) fn inherit_across_exec(cmd: &mut std::process::Command, fds: Vec<OwnedFd>) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let raw: Vec<i32> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    let _keep = fds;
    let hook = move || {
        let _ = &_keep;
        for &fd in &raw {
            // SAFETY: `_keep` holds these descriptors open in the parent
            // until the Command is dropped, so in the forked child they
            // are open with the same numbers; fcntl is async-signal-safe.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
        }
        Ok(())
    };
    // SAFETY: the hook only calls fcntl (async-signal-safe), allocates
    // nothing and takes no lock, as code between fork and exec must.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Takes ownership of the descriptors `raws` that this process inherited
/// across `exec`, after `check` has seen them, and makes them close-on-exec
/// again (`fcntl(F_GETFD)`, `fcntl(F_SETFD, FD_CLOEXEC)`, see
/// [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html)).
///
/// Nothing is taken unless every number is open, distinct, and *not*
/// close-on-exec: the parent's `inherit_across_exec` cleared the flag on
/// exactly these, while every descriptor this process opened itself
/// (Rust's `std` and shmpipe open all theirs close-on-exec) has it, so a
/// number that now belongs to another file of ours, or was taken already
/// (taking sets the flag), is refused instead of getting a second owner.
/// `check` vets what the descriptors are before ownership is taken, so a
/// refusal closes nothing.
///
/// Only called by `handoff::from_env` for numbers that our parent's
/// `inherit_across_exec` put in the environment.
pub(crate) fn take_inherited<const N: usize>(
    raws: [i32; N],
    check: impl FnOnce([BorrowedFd<'_>; N]) -> io::Result<()>,
) -> io::Result<[OwnedFd; N]> {
    use rustix::io::FdFlags;
    use std::os::fd::FromRawFd;
    for (k, &raw) in raws.iter().enumerate() {
        if raw < 0 || raws[..k].contains(&raw) {
            return Err(error::invalid_data(format!(
                "inherited descriptor {raw} is negative or named twice"
            )));
        }
        // SAFETY: F_GETFD only inspects the descriptor table; a closed
        // number fails with EBADF.
        let flags = rustix::io::fcntl_getfd(unsafe { BorrowedFd::borrow_raw(raw) })
            .map_err(|_| error::invalid_data(format!("inherited descriptor {raw} is not open")))?;
        if flags.contains(FdFlags::CLOEXEC) {
            return Err(error::invalid_data(format!(
                "descriptor {raw} was not inherited (it is close-on-exec: \
                 opened by this process, or taken already)"
            )));
        }
    }
    // SAFETY: each number is open (checked above) and stays open while
    // `check` runs: nothing here closes it, and it is not close-on-exec,
    // so no one in this process opened it (see above) to close it.
    check(raws.map(|raw| unsafe { BorrowedFd::borrow_raw(raw) }))?;
    Ok(raws.map(|raw| {
        // SAFETY: open, distinct, inherited for us and owned by no one
        // else in this process (see above); from here on we own it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // Cannot fail on an open descriptor; if it did, the descriptor
        // would merely leak into a later exec.
        let _ = rustix::io::fcntl_setfd(&fd, FdFlags::CLOEXEC);
        fd
    }))
}
