//! `shmpipe run`: runs a program, and every process it starts, with the
//! preload library (`crates/preload`) in `LD_PRELOAD`.
//!
//! `shmpipe` replaces itself with the program (`execvp`), so there is no
//! process in the middle: the exit status, death by a signal, signals sent
//! to the program, its process group and its standard descriptors are the
//! program's own, as under `env`. Only `LD_PRELOAD` changes: the library is
//! appended to what is there (and, with hand-over on, descriptor 1000 holds
//! the arena's memfd). What Rust's start-up changed in this process
//! (SIGPIPE ignored, closed 0/1/2 opened on /dev/null) is put back first.
//! [`place`] writes the embedded library where only this user can change it.

mod place;

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// `shmpipe run`'s command line.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The program and its arguments (`--` before them is optional).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM [ARGS]..."
    )]
    command: Vec<OsString>,
}

/// What `shmpipe run` exits with when it cannot start the program, as `env`
/// and `timeout` do: 125 for its own failure, 126 when the program cannot
/// be run, 127 when it is not found.
const FAILED: u8 = 125;

/// Whether SIGPIPE was ignored when this process started, before Rust's
/// start-up ignored it.
static SIGPIPE_WAS_IGNORED: AtomicBool = AtomicBool::new(false);
/// Which of descriptors 0, 1 and 2 were closed at start (bit n for fd n),
/// before Rust's start-up opened /dev/null on them.
static STD_FDS_CLOSED: AtomicU8 = AtomicU8::new(0);

/// Notes what Rust's start-up is about to change; runs before `main`.
extern "C" fn note_start_state() {
    // SAFETY: a zeroed sigaction is a valid out-parameter; with a null new
    // action, sigaction only reads the current one.
    let ignored = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    };
    SIGPIPE_WAS_IGNORED.store(ignored, Ordering::Relaxed);
    let mut closed = 0;
    for fd in 0..3 {
        // SAFETY: F_GETFD reads no memory.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            closed |= 1 << fd;
        }
    }
    STD_FDS_CLOSED.store(closed, Ordering::Relaxed);
}

// The loader calls the executable's `.init_array` before `main`, so before
// Rust's runtime sets SIGPIPE to ignored and fills closed 0/1/2.
#[used]
#[link_section = ".init_array"]
static NOTE_START_STATE: extern "C" fn() = note_start_state;

/// Runs `shmpipe run`; returns only if the program could not be started.
pub fn run(args: RunArgs) -> ExitCode {
    let lib = match place::library() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("shmpipe run: cannot place the preload library: {e}");
            return ExitCode::from(FAILED);
        }
    };
    let preload = match with_library(std::env::var_os("LD_PRELOAD"), lib.as_os_str()) {
        Some(p) => p,
        None => {
            eprintln!(
                "shmpipe run: the preload library's path {} has a space or colon, which LD_PRELOAD cannot carry",
                lib.display()
            );
            return ExitCode::from(FAILED);
        }
    };
    std::env::set_var("LD_PRELOAD", &preload);
    leave_arena_descriptor();
    let program = &args.command[0];
    let argv: Vec<CString> = args
        .command
        .iter()
        // An argument from the command line holds no NUL.
        .map(|a| CString::new(a.as_bytes()).expect("no NUL in an argument"))
        .collect();
    let err = exec(&argv);
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    // If stderr was closed at start, exec closed it again: say nothing.
    if STD_FDS_CLOSED.load(Ordering::Relaxed) & 4 == 0 {
        eprintln!("shmpipe run: {}: {err}", program.to_string_lossy());
    }
    ExitCode::from(code)
}

/// The descriptor and the memfd's name the preload library looks for its
/// hand-over arena at (`crates/preload/src/arena.rs`, `FD`).
const ARENA_FD: libc::c_int = 1000;

/// Unless `SHMPIPE_RUN_RINGS` turns the library's fast paths off (anything
/// but unset, `1` or `2`; `crates/preload/src/switch.rs`), leaves an empty
/// memfd named `shmpipe-arena` at [`ARENA_FD`], not close-on-exec, for the
/// program's library to size, seal and share with every image it starts,
/// `exec`'d ones too. Made here, before the program runs, so that none of
/// the program's own descriptors is ever moved; skipped (the library then
/// makes an arena of each process tree's own) when the descriptor is
/// taken or beyond the descriptor limit.
fn leave_arena_descriptor() {
    let switch = std::env::var_os("SHMPIPE_RUN_RINGS");
    if !matches!(
        switch.as_deref().map(OsStr::as_bytes),
        None | Some(b"1" | b"2")
    ) {
        return;
    }
    // SAFETY: F_GETFD on any number reads no memory.
    if unsafe { libc::fcntl(ARENA_FD, libc::F_GETFD) } != -1 {
        return;
    }
    // SAFETY: a NUL-terminated name; the flags ask for a memfd that can be
    // sealed and that survives exec.
    let fd = unsafe { libc::memfd_create(c"shmpipe-arena".as_ptr(), libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return;
    }
    // SAFETY: duplicates the descriptor just made; fails beyond the limit.
    let at = unsafe { libc::fcntl(fd, libc::F_DUPFD, ARENA_FD) };
    // SAFETY: closes descriptors this function made.
    unsafe {
        libc::close(fd);
        if at >= 0 && at != ARENA_FD {
            libc::close(at);
        }
    }
}

/// `LD_PRELOAD` with `lib` appended (colon-separated), or as it is if
/// `lib` is already in it (a `shmpipe run` inside another). `None` if `lib`
/// holds a separator the loader would split it at.
fn with_library(current: Option<OsString>, lib: &OsStr) -> Option<OsString> {
    if lib.as_bytes().iter().any(|b| *b == b' ' || *b == b':') {
        return None;
    }
    let current = current.unwrap_or_default();
    let present = current
        .as_bytes()
        .split(|b| *b == b' ' || *b == b':')
        .any(|entry| entry == lib.as_bytes());
    if present {
        return Some(current);
    }
    let mut out = current.clone();
    if !current.as_bytes().iter().all(|b| *b == b' ' || *b == b':') {
        out.push(":");
    } else {
        out.clear();
    }
    out.push(lib);
    Some(out)
}

/// Puts back what Rust's start-up changed and replaces this process with
/// `argv[0]`, searched in `PATH`. Returns only on failure.
fn exec(argv: &[CString]) -> std::io::Error {
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let closed = STD_FDS_CLOSED.load(Ordering::Relaxed);
    let sigpipe = if SIGPIPE_WAS_IGNORED.load(Ordering::Relaxed) {
        libc::SIG_IGN
    } else {
        libc::SIG_DFL
    };
    // SAFETY: setting a disposition to SIG_IGN or SIG_DFL installs no code.
    unsafe { libc::signal(libc::SIGPIPE, sigpipe) };
    for fd in 0..3 {
        if closed & (1 << fd) != 0 {
            // SAFETY: fd was closed when we started; what Rust opened on it
            // (/dev/null) is ours, and nothing else holds it.
            unsafe { libc::close(fd) };
        }
    }
    // SAFETY: `ptrs` is a null-terminated array of NUL-terminated strings
    // that outlive the call; on success execvp does not return.
    unsafe { libc::execvp(ptrs[0], ptrs.as_ptr()) };
    std::io::Error::last_os_error()
}

#[cfg(test)]
mod tests {
    use super::with_library;
    use std::ffi::{OsStr, OsString};

    #[test]
    fn the_library_is_appended_once() {
        let lib = OsStr::new("/run/user/1/shmpipe/lib.so");
        assert_eq!(with_library(None, lib).unwrap(), lib);
        assert_eq!(with_library(Some("".into()), lib).unwrap(), lib);
        assert_eq!(
            with_library(Some(OsString::from("/a.so b.so")), lib).unwrap(),
            "/a.so b.so:/run/user/1/shmpipe/lib.so"
        );
        let twice = OsString::from("x.so:/run/user/1/shmpipe/lib.so");
        assert_eq!(with_library(Some(twice.clone()), lib).unwrap(), twice);
        assert!(with_library(None, OsStr::new("/tmp/a b/lib.so")).is_none());
    }
}
