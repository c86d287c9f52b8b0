//! Waiting in slices, so that a close from another thread is seen: a
//! blocking call waits at most [`SLICE`] at a time in the Rust end (whose
//! own timeout is set to it), looks at its handle's closing mark between
//! slices, and returns `-EBADF` once it is set. The program's timeout is
//! kept here and counted down slice by slice. A call that does not wait
//! never reads a clock and never sees the difference.

use std::time::Duration;

use shmpipe::{Reader, Receiver, Sender, Writer};

use crate::error::Errno;
use crate::handle::{Handle, Prepare, Using};

/// The longest a blocking call waits without looking at its handle's
/// closing mark, so how long a close from another thread may wait for it
/// (the Python binding's slice, for the same reason). Each slice a blocked
/// call is woken once: about 20 cheap wake-ups a second, no measurable
/// load; much shorter would add up over many idle ends, much longer would
/// make a close noticeably slow.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// An end whose waits are timed.
pub(crate) trait Timed {
    /// Sets how long one wait may last.
    fn set_wait(&mut self, t: Duration) -> std::io::Result<()>;
}

macro_rules! timed {
    ($ty:ty, $set_timeout:ident) => {
        impl Timed for $ty {
            fn set_wait(&mut self, t: Duration) -> std::io::Result<()> {
                self.$set_timeout(Some(t))
            }
        }
        impl Prepare for $ty {
            fn prepare(&mut self) {
                // A slice is never zero, so this cannot fail.
                let _ = self.set_wait(SLICE);
            }
        }
    };
}

timed!(Reader, set_read_timeout);
timed!(Writer, set_write_timeout);
timed!(Receiver, set_read_timeout);
timed!(Sender, set_write_timeout);

/// The first slice of a wait with the program's timeout `t`.
fn first_slice(t: Option<Duration>) -> Duration {
    t.map_or(SLICE, |t| t.min(SLICE))
}

/// Sets the program's timeout (`None`: wait for ever).
pub(crate) fn set_timeout<H: Handle>(u: &mut Using<H>, t: Option<Duration>) -> Result<(), i32>
where
    H::End: Timed,
{
    u.end()?.set_wait(first_slice(t)).errno()?;
    u.slot().timeout = t;
    Ok(())
}

/// Runs `op`, a call on the end that may wait, slice by slice: again
/// after each slice (`-ETIMEDOUT` from the end) until it is done, the
/// program's timeout has passed (`-ETIMEDOUT`) or the handle closes
/// (`-EBADF`). `op` must be safe to run again after a slice: whatever it
/// did before its wait, it must remember.
#[inline]
pub(crate) fn sliced<H: Handle, T>(
    u: &mut Using<H>,
    mut op: impl FnMut(&mut H::End) -> Result<T, i32>,
) -> Result<T, i32>
where
    H::End: Timed,
{
    match op(u.end()?) {
        Err(libc::ETIMEDOUT) => slices(u, op),
        done => done,
    }
}

/// `sliced` once a slice has passed.
#[cold]
#[inline(never)]
fn slices<H: Handle, T>(
    u: &mut Using<H>,
    mut op: impl FnMut(&mut H::End) -> Result<T, i32>,
) -> Result<T, i32>
where
    H::End: Timed,
{
    let timeout = u.slot().timeout;
    let mut slice = first_slice(timeout);
    // Each slice lasted at least its length, so the program's timeout
    // never ends early.
    let mut waited = slice;
    let r = loop {
        if u.closing() {
            break Err(libc::EBADF);
        }
        if let Some(t) = timeout {
            if waited >= t {
                break Err(libc::ETIMEDOUT);
            }
            let next = (t - waited).min(SLICE);
            if next != slice {
                slice = next;
                u.end()?.set_wait(slice).errno()?;
            }
        }
        match op(u.end()?) {
            Err(libc::ETIMEDOUT) => waited += slice,
            done => break done,
        }
    };
    if slice != first_slice(timeout) {
        u.end()?.set_wait(first_slice(timeout)).errno()?;
    }
    r
}
