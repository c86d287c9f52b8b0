//! The processes of one link test: the parent forks its children, waits
//! until each is set up, starts them all at once, and reaps them.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Instant;

use crate::sys;

/// The processes of one run: control pipes for "ready" and "go", and the
/// forked children, killed and reaped if anything fails.
pub(crate) struct Team {
    ready_r: OwnedFd,
    ready_w: OwnedFd,
    go_r: OwnedFd,
    go_w: OwnedFd,
    children: Vec<sys::Child>,
}

impl Team {
    /// The control pipes, before any child.
    pub(crate) fn new() -> io::Result<Self> {
        let flags = rustix::pipe::PipeFlags::CLOEXEC;
        let (ready_r, ready_w) = rustix::pipe::pipe_with(flags)?;
        let (go_r, go_w) = rustix::pipe::pipe_with(flags)?;
        Ok(Self {
            ready_r,
            ready_w,
            go_r,
            go_w,
            children: Vec::new(),
        })
    }

    /// Forks a child that runs `body`; `body` calls the barrier it is given
    /// once it is set up, and returns when its part is done.
    pub(crate) fn spawn(
        &mut self,
        body: impl FnOnce(&dyn Fn() -> io::Result<()>) -> io::Result<()>,
    ) -> io::Result<()> {
        let (ready_w, go_r) = (&self.ready_w, &self.go_r);
        let barrier = || -> io::Result<()> {
            rustix::io::write(ready_w, b"r")?;
            let mut b = [0u8; 1];
            match rustix::io::read(go_r, &mut b)? {
                1 => Ok(()),
                _ => Err(io::Error::other("parent went away before the start")),
            }
        };
        let child = sys::spawn(|| body(&barrier))?;
        self.children.push(child);
        Ok(())
    }

    /// Waits until every child is set up and at its barrier.
    pub(crate) fn wait_ready(&mut self) -> io::Result<()> {
        let mut got = 0;
        let mut b = [0u8; 16];
        while got < self.children.len() {
            match rustix::io::read(&self.ready_r, &mut b) {
                Ok(0) => return Err(io::Error::other("children went away before the start")),
                Ok(n) => got += n,
                Err(e) if e == rustix::io::Errno::INTR && !sys::watchdog_fired() => {}
                Err(e) if e == rustix::io::Errno::INTR => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "children not ready in time",
                    ))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Starts the children waiting at their barriers.
    pub(crate) fn go(&mut self) -> io::Result<()> {
        let go = vec![b'g'; self.children.len()];
        rustix::io::write(&self.go_w, &go)?;
        Ok(())
    }

    /// Reaps every child; an error if any failed.
    pub(crate) fn join(mut self, deadline: Instant) -> io::Result<()> {
        let mut first_err = None;
        for c in &mut self.children {
            if let Err(e) = c.wait(deadline) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}
