//! Process limits: the number of open descriptors, which a server with
//! many clients raises.

use std::io;

/// process that holds one or more descriptors per client (a server with
/// thousands of clients needs more than the usual 1024). Returns the new
/// soft limit.
///
/// # Examples
///
/// ```
/// let limit = shmpipe::raise_fd_limit()?;
/// assert!(limit >= 3);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn raise_fd_limit() -> io::Result<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        lim.current = lim.maximum;
        setrlimit(Resource::Nofile, lim)?;
    }
    Ok(lim.current.unwrap_or(u64::MAX))
}
