//! What a [`WaitSet`](crate::WaitSet) holds ([`Source`]) and what it
//! knows each member by ([`Token`]), with the looks at an end that the
//! set makes.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};

use crate::{Listener, Reader, Receiver, Sender, Writer};

/// What a member of a [`WaitSet`](crate::WaitSet) is known by: the caller
/// chooses it at [`add`](crate::WaitSet::add), and
/// [`wait`](crate::WaitSet::wait) reports it when the member is ready. A
/// number of the caller's (say, a client's index), as `mio`'s `Token` is;
/// anything that takes a token also takes a plain `u64`.
///
/// # Examples
///
/// ```
/// use shmpipe::waitset::Token;
/// let mut set = shmpipe::WaitSet::new()?;
/// let (rx, mut tx) = shmpipe::message_pipe()?;
/// set.add(Token(7), rx)?; // or set.add(7, rx)
/// tx.send(b"hi")?;
/// let mut ready = Vec::new();
/// set.wait(&mut ready, None)?;
/// assert_eq!(ready, [Token(7)]);
/// assert_eq!(ready[0].0, 7);
/// assert_eq!(ready, [7]); // a token equals its number
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(pub u64);

impl From<u64> for Token {
    fn from(n: u64) -> Token {
        Token(n)
    }
}

impl From<Token> for u64 {
    fn from(t: Token) -> u64 {
        t.0
    }
}

// (Not `u64 == Token` too: a second `PartialEq` of `u64` would leave
// `some_u64 == iter.sum()` and the like without a type, in every crate
// that links this one.)
impl PartialEq<u64> for Token {
    fn eq(&self, n: &u64) -> bool {
        self.0 == *n
    }
}

impl fmt::Display for Token {
    /// The number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Anything a [`WaitSet`](crate::WaitSet) holds: what
/// [`add`](crate::WaitSet::add) takes (any of these converts into it) and
/// [`remove`](crate::WaitSet::remove) gives back.
///
/// # Examples
///
/// ```
/// use shmpipe::waitset::Source;
/// let (rx, tx) = shmpipe::message_pipe()?;
/// assert!(matches!(Source::from(rx), Source::Receiver(_)));
/// assert!(matches!(Source::from(tx), Source::Sender(_)));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub enum Source {
    /// A byte stream's reading end: ready when there are bytes or EOF.
    Reader(Reader),
    /// A byte stream's writing end: ready when there is room (see the
    /// [module](super)) or the reader is gone.
    Writer(Writer),
    /// A message pipe's reading end: ready when there is a message or EOF.
    Receiver(Receiver),
    /// A message pipe's writing end: ready when there is room or the
    /// receiver is gone.
    Sender(Sender),
    /// A listener: ready when a client connects or a pending one speaks.
    Listener(Listener),
}

macro_rules! source_from {
    ($ty:ident) => {
        impl From<$ty> for Source {
            fn from(end: $ty) -> Source {
                Source::$ty(end)
            }
        }
    };
}
source_from!(Reader);
source_from!(Writer);
source_from!(Receiver);
source_from!(Sender);
source_from!(Listener);

/// Calls `$body` with `$e` bound to the end inside a source that is not a
/// listener, else evaluates `$listener`.
macro_rules! with_end {
    ($src:expr, $e:ident => $body:expr, $listener:expr) => {
        match $src {
            Source::Reader(x) => {
                let $e = &mut x.end;
                $body
            }
            Source::Receiver(x) => {
                let $e = &mut x.end;
                $body
            }
            Source::Writer(x) => {
                let $e = &mut x.end;
                $body
            }
            Source::Sender(x) => {
                let $e = &mut x.end;
                $body
            }
            Source::Listener(_) => $listener,
        }
    };
}

impl Source {
    /// What the epoll instance watches: what an end sleeps on (its wake
    /// pipe or socket), a listener's readiness descriptor.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Source::Reader(x) => x.end.side.bell.sleeps_on(),
            Source::Receiver(x) => x.end.side.bell.sleeps_on(),
            Source::Writer(x) => x.end.side.bell.sleeps_on(),
            Source::Sender(x) => x.end.side.bell.sleeps_on(),
            Source::Listener(l) => l.as_fd(),
        }
    }

    pub(super) fn is_listener(&self) -> bool {
        matches!(self, Source::Listener(_))
    }

    #[inline]
    pub(super) fn ready_now(&mut self) -> bool {
        with_end!(self, e => e.ready_now(), false)
    }

    pub(super) fn arm(&mut self) -> bool {
        with_end!(self, e => e.arm_quietly(), true)
    }

    /// Armed, but a wake may be lost (see `End::armed_briefly`).
    pub(super) fn armed_briefly(&self) -> bool {
        match self {
            Source::Reader(x) => x.end.armed_briefly(),
            Source::Receiver(x) => x.end.armed_briefly(),
            Source::Writer(x) => x.end.armed_briefly(),
            Source::Sender(x) => x.end.armed_briefly(),
            Source::Listener(_) => false,
        }
    }

    pub(super) fn woken(&mut self, hung_up: bool) -> bool {
        with_end!(self, e => e.woken(hung_up), false)
    }
}
