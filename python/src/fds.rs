//! Rebuilding a pipe end from descriptor numbers that `multiprocessing`
//! handed to this process (see `shmpipe/_reduction.py`).

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

/// Duplicates an end's four open descriptors (close-on-exec), so the
/// caller keeps and closes its own numbers whatever happens here.
pub(crate) fn dup4(raw: [i32; 4]) -> io::Result<[OwnedFd; 4]> {
    let mut out = Vec::with_capacity(4);
    for fd in raw {
        if fd < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad descriptor",
            ));
        }
        // SAFETY: the caller owns `fd` and holds the GIL until this
        // returns, so no Python code closes it while it is borrowed; a
        // number that is not open only makes the fcntl calls fail (EBADF).
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        rustix::io::fcntl_getfd(borrowed)?;
        out.push(rustix::io::fcntl_dupfd_cloexec(borrowed, 0)?);
    }
    Ok(out.try_into().expect("four descriptors"))
}
