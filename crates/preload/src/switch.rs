//! `SHMPIPE_RUN_RINGS`, read once by the constructor: which of the
//! library's fast paths a process under `shmpipe run` gets.
//!
//! | value | pipes | socket pairs |
//! | --- | --- | --- |
//! | unset, or `2` (the default) | resident rings (stage 2b), else hand-over | hand-over (2a) |
//! | `1` | hand-over | hand-over |
//! | anything else (`0`) | the kernel | the kernel |
//!
//! Either fast path also needs two usable CPUs (one waiting on its peer
//! in user space only delays it on one CPU). The crate's own test binary,
//! which no `shmpipe run` started, keeps both off unless the variable
//! asks or a test turns rings on.

use crate::sys;

/// What `SHMPIPE_RUN_RINGS` asks for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Every byte through the kernel: the hooks only keep their table.
    Off,
    /// Stage 2a: a `write` may hand its bytes to a reader waiting in the
    /// library's `read`.
    Handover,
    /// Stage 2b: pipes on resident rings, 2a's hand-over for the rest.
    Rings,
}

impl Mode {
    /// The mode a value of the variable (`None`: unset) asks for.
    pub fn parse(value: Option<&[u8]>) -> Mode {
        match value {
            None if cfg!(test) => Mode::Off,
            None | Some(b"2") => Mode::Rings,
            Some(b"1") => Mode::Handover,
            Some(_) => Mode::Off,
        }
    }

    /// Whether 2a's hand-over arena is wanted.
    pub fn hands_over(self) -> bool {
        self != Mode::Off
    }
}

/// The mode this process's environment asks for, `Off` on fewer than two
/// usable CPUs. Called from the constructor only (it reads the
/// environment).
pub fn from_env() -> Mode {
    // SAFETY: a NUL-terminated name; getenv returns null or a
    // NUL-terminated string, unchanged while constructors run.
    let v = unsafe { sys::getenv(c"SHMPIPE_RUN_RINGS".as_ptr()) };
    let asked = if v.is_null() {
        Mode::parse(None)
    } else {
        // SAFETY: `v` is a NUL-terminated string (above).
        Mode::parse(Some(unsafe { core::ffi::CStr::from_ptr(v) }.to_bytes()))
    };
    // One CPU: waiting in user space for a peer cannot help, it only
    // delays it. (A process pinned to one CPU before its `exec`, as
    // `taskset` pins a whole tree, counts as one, so such a tree pays
    // nothing for the fast paths; a tree whose stages are pinned apart
    // before their `exec`s gets none.)
    if asked != Mode::Off && sys::usable_cpus() < 2 {
        return Mode::Off;
    }
    asked
}

#[cfg(test)]
mod tests {
    use super::Mode;

    #[test]
    fn values_name_their_modes() {
        assert_eq!(Mode::parse(Some(b"2")), Mode::Rings);
        assert_eq!(Mode::parse(Some(b"1")), Mode::Handover);
        assert_eq!(Mode::parse(Some(b"0")), Mode::Off);
        assert_eq!(Mode::parse(Some(b"")), Mode::Off);
        assert_eq!(Mode::parse(Some(b"22")), Mode::Off);
        // Unset is rings in a program (`cfg(not(test))`), off here.
        assert_eq!(Mode::parse(None), Mode::Off);
        assert!(Mode::Handover.hands_over() && Mode::Rings.hands_over());
        assert!(!Mode::Off.hands_over());
    }
}
