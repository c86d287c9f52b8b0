//! The handle pool: closed handles are refused with EBADF, reused by the
//! next handle of their type, and the pool survives threads opening and
//! closing at once.
#![allow(unsafe_code)]

use std::collections::HashSet;
use std::ptr::null_mut;
use std::sync::Mutex;

use shmpipe_capi::*;

/// The pool is one per process and the test harness runs tests on threads
/// at once: a slot closed by one test could be taken by the other before
/// the first looks, so the tests take turns.
static POOL: Mutex<()> = Mutex::new(());

fn pipe() -> (*mut shmpipe_reader, *mut shmpipe_writer) {
    let (mut r, mut w) = (null_mut(), null_mut());
    // SAFETY: two writable out-pointers; a small ring keeps this light.
    assert_eq!(unsafe { shmpipe_pipe_with(4096, 0, &mut r, &mut w) }, 0);
    (r, w)
}

#[test]
fn closed_handles_fail_and_are_reused() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let (r, w) = pipe();
    // SAFETY: handles from this library, used by this thread only.
    unsafe {
        shmpipe_reader_close(r);
        shmpipe_reader_close(r); // twice: nothing happens
        let mut b = [0u8; 1];
        assert_eq!(
            shmpipe_read(r, b.as_mut_ptr().cast(), 1),
            -(libc::EBADF as isize)
        );
        let (r2, w2) = pipe();
        assert_eq!(r2, r, "the closed reader's slot is reused");
        assert_ne!(w2, w, "the writer was not closed");
        shmpipe_writer_close(w);
        shmpipe_writer_close(w2);
        assert_eq!(shmpipe_read(r2, b.as_mut_ptr().cast(), 1), 0); // EOF
        shmpipe_reader_close(r2);
    }
}

#[test]
fn threads_open_and_close_at_once() {
    let _turn = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..200 {
                    let ends: Vec<_> = (0..4).map(|_| pipe()).collect();
                    let live: HashSet<usize> = ends.iter().map(|&(r, _)| r as usize).collect();
                    assert_eq!(live.len(), ends.len(), "two live handles share a slot");
                    for (r, w) in ends {
                        // SAFETY: our own handles, closed once.
                        unsafe {
                            assert_eq!(shmpipe_write(w, b"x".as_ptr().cast(), 1), 1);
                            let mut b = [0u8; 1];
                            assert_eq!(shmpipe_read(r, b.as_mut_ptr().cast(), 1), 1);
                            shmpipe_reader_close(r);
                            shmpipe_writer_close(w);
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
