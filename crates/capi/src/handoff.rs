//! Handing ends to a spawned program: `shmpipe_spawn` starts it with the
//! ends it names, and the program takes each with `shmpipe_*_from_env`.
//! (Across `fork` nothing is needed: the child's copies work.)

use std::ffi::{c_char, c_int};
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::args;
use crate::error::{guard_int, Errno};
use crate::handle::{self, Handle};
use crate::{pid_t, shmpipe_reader, shmpipe_receiver, shmpipe_sender, shmpipe_writer};

/// One end to hand to a spawned program under `name`: exactly one of the
/// four end pointers is set.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmpipe_pass {
    /// The name the program passes to `shmpipe_*_from_env`.
    pub name: *const c_char,
    /// A reader, or NULL.
    pub reader: *mut shmpipe_reader,
    /// A writer, or NULL.
    pub writer: *mut shmpipe_writer,
    /// A receiver, or NULL.
    pub receiver: *mut shmpipe_receiver,
    /// A sender, or NULL.
    pub sender: *mut shmpipe_sender,
}

/// Adds one end to `cmd`.
///
/// # Safety
///
/// The pointers in `p` follow the crate's conventions.
unsafe fn pass(cmd: &mut Command, p: &shmpipe_pass) -> Result<(), i32> {
    // SAFETY: the caller's promise.
    let name = unsafe { args::text(p.name)? };
    let set = [
        !p.reader.is_null(),
        !p.writer.is_null(),
        !p.receiver.is_null(),
        !p.sender.is_null(),
    ];
    if set.iter().filter(|&&s| s).count() != 1 {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's promise, for the one pointer that is set.
    unsafe {
        if set[0] {
            handle::using(p.reader)?.end()?.pass_to(cmd, name).errno()
        } else if set[1] {
            handle::using(p.writer)?.end()?.pass_to(cmd, name).errno()
        } else if set[2] {
            handle::using(p.receiver)?.end()?.pass_to(cmd, name).errno()
        } else {
            handle::using(p.sender)?.end()?.pass_to(cmd, name).errno()
        }
    }
}

/// Starts the program `file` (looked up in `PATH` as `execvp` does) with
/// the NULL-terminated `argv` (`argv[0]` is its name) and this process's
/// environment, handing it the `nends` ends in `ends`. Stores the child's
/// pid in `pid` (if not NULL); reap it with `waitpid`. The ends stay open
/// here too: close them unless this process still uses them. Returns 0 or
/// a negative errno.
///
/// # Safety
///
/// `file` and the `argv` strings are NUL-terminated, `argv` ends with
/// NULL, `ends` holds `nends` entries, `pid` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_spawn(
    file: *const c_char,
    argv: *const *const c_char,
    ends: *const shmpipe_pass,
    nends: usize,
    pid: *mut pid_t,
) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's promise.
        let file = unsafe { args::path(file)? };
        let mut cmd = Command::new(file);
        if !argv.is_null() {
            for i in 0.. {
                // SAFETY: NULL-terminated array by the caller's promise.
                let a = unsafe { *argv.add(i) };
                if a.is_null() {
                    break;
                }
                // SAFETY: a NUL-terminated string.
                let a = unsafe { args::path(a)? }.as_os_str();
                if i == 0 {
                    cmd.arg0(a);
                } else {
                    cmd.arg(a);
                }
            }
        }
        if nends > 0 {
            // SAFETY: `nends` entries by the caller's promise.
            let ends = unsafe { args::bytes(ends.cast(), nends * size_of::<shmpipe_pass>())? };
            for i in 0..nends {
                // SAFETY: in bounds, and shmpipe_pass is plain data.
                let p = unsafe { ends.as_ptr().cast::<shmpipe_pass>().add(i).read_unaligned() };
                // SAFETY: the caller's promise.
                unsafe { pass(&mut cmd, &p)? };
            }
        }
        let child = cmd.spawn().errno()?;
        if !pid.is_null() {
            // SAFETY: writable by the caller's promise.
            unsafe { args::put(pid, child.id() as pid_t) };
        }
        // Dropping a Child neither waits nor kills: the caller reaps it.
        drop(child);
        Ok(0)
    })
}

/// Takes the end a parent passed under `name`.
///
/// # Safety
///
/// `name` is a NUL-terminated string; `out` is writable.
unsafe fn from_env<H: Handle>(
    name: *const c_char,
    out: *mut *mut H,
    take: fn(&str) -> std::io::Result<H::End>,
) -> c_int {
    guard_int(|| {
        let out = args::out(out)?;
        // SAFETY: the caller's promise.
        let end = take(unsafe { args::text(name)? }).errno()?;
        // SAFETY: a checked out-pointer.
        unsafe { args::put(out, handle::open(end)) };
        Ok(0)
    })
}

/// Takes the reader a parent passed to this program under `name`
/// (`-ENOENT` if none, `-EPROTO` if it is of another kind).
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `reader` is writable.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_reader_from_env(
    name: *const c_char,
    reader: *mut *mut shmpipe_reader,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { from_env(name, reader, shmpipe::Reader::from_env) }
}

/// Takes the writer a parent passed under `name`.
///
/// # Safety
///
/// As `shmpipe_reader_from_env`.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_writer_from_env(
    name: *const c_char,
    writer: *mut *mut shmpipe_writer,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { from_env(name, writer, shmpipe::Writer::from_env) }
}

/// Takes the receiver a parent passed under `name`.
///
/// # Safety
///
/// As `shmpipe_reader_from_env`.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_receiver_from_env(
    name: *const c_char,
    receiver: *mut *mut shmpipe_receiver,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { from_env(name, receiver, shmpipe::Receiver::from_env) }
}

/// Takes the sender a parent passed under `name`.
///
/// # Safety
///
/// As `shmpipe_reader_from_env`.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_sender_from_env(
    name: *const c_char,
    sender: *mut *mut shmpipe_sender,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { from_env(name, sender, shmpipe::Sender::from_env) }
}
