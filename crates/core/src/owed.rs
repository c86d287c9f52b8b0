//! Wakes this thread owes its peers, sent again before it sleeps.
//!
//! A publish that finds the peer asleep wakes it with one byte (see
//! `wait`). Under memory pressure that write or send can fail (`ENOMEM`,
//! `ENOBUFS`), and the publish must not sleep to try again: it may be
//! serving other peers. The wake is then owed. Its end sends it again at
//! its next publish and before its next wait, but the thread may go to
//! sleep on something else first: a client whose request's wake failed
//! and that then waits for the reply on its other end would sleep while
//! the server sleeps waiting for that request, both for ever (review
//! finding F6).
//!
//! So a failed wake is also noted here, for the whole process, and every
//! path on which a thread can sleep in shmpipe (an end's wait, its arming
//! for readiness after `WouldBlock` or `arm`, a waitset's wait, a blocking
//! accept) first sends the owed wakes again ([`pay`]), and while one stays
//! owed sleeps at most `BRIEF_SLEEP` (an arming counts as unsure: the
//! waitset looks again soon, an event loop finds the descriptor readable)
//! before it tries again. So no thread sleeps for longer than that while
//! its peer may sleep on a wake it owes.
//!
//! For the process, not the thread: an async task whose publish failed
//! to wake may wait for the reply on another worker thread, and the
//! thread that owed may idle in the runtime's own poll, never in
//! shmpipe's (review of F6). Any thread about to sleep pays for all.
//! One flag says whether anything is owed, so a sleep with nothing owed
//! costs one load. The list sits behind a lock of our own: `owe` waits
//! for it (a wake must never be dropped: that was the deadlock again),
//! `pay` only tries it (another thread is paying). A child forked while
//! some other thread held it forgets the list and frees the lock (those
//! wakes are the parent's to pay), so it never finds the lock held for
//! ever. A note holds its waker weakly, so a dropped end closes as before
//! (its peer sees the hang-up instead) and owes nothing more.

use std::sync::atomic::AtomicBool;

use shmpipe_ring::owed::{OwedList, Wake};

use crate::sys::{self, OwedWake};

/// The wakes this process failed to send and has not sent since (the flag,
/// the lock and the list: see `shmpipe_ring::owed`).
static OWED: OwedList<OwedWake> = OwedList::new();
/// Whether the child handler is registered (see `forget_after_fork`).
static FORGET_ON_FORK: AtomicBool = AtomicBool::new(false);

impl Wake for OwedWake {
    fn same(&self, other: &OwedWake) -> bool {
        OwedWake::same(self, other)
    }
    fn wake(&self) -> bool {
        OwedWake::wake(self)
    }
}

/// Runs in the child after a `fork`, in its only thread, before anything
/// else: a thread of the parent may have held the lock, even been midway
/// through changing the list. The child forgets that list (leaked, not
/// dropped: it may be torn) and frees the lock.
extern "C" fn forget_after_fork() {
    // SAFETY: no other thread exists in the child yet, and this one runs
    // the handler before anything else, so no call is midway on it.
    unsafe { OWED.forget_after_fork() };
}

/// Has `forget_after_fork` run in every child forked from now on.
fn forget_on_fork() {
    sys::on_fork_child_once(&FORGET_ON_FORK, forget_after_fork);
}

/// Notes a wake we could not send (once per waker).
pub(crate) fn owe(wake: OwedWake) {
    forget_on_fork();
    OWED.owe(wake);
}

/// Sends the process's owed wakes again; true if none is owed any more.
/// Costs one load when none is owed.
pub(crate) fn pay() -> bool {
    OWED.pay()
}

#[cfg(test)]
mod tests {
    //! A wake our publish owed the peer could not be sent (injected:
    //! `sys::fault::fail_next_wakes`), and the thread then sleeps on
    //! another end: in a blocking wait, an arming, a waitset. The peer (a
    //! waitset in another thread, armed before the publish) sleeps until
    //! that wake comes, so a thread that does not send it again before
    //! sleeping deadlocks with it; the reply's timeout only keeps a
    //! failure from hanging the suite.

    use std::time::Duration;

    use crate::sys::fault;
    use crate::{message_pipe, Receiver, Sender, WaitSet};

    /// Generous: only a lost wake-up runs into it.
    const WATCHDOG: Duration = Duration::from_secs(30);

    /// A client's two ends and a server thread: the server waits in a
    /// waitset (armed at once, spin 0: it sleeps until woken) for one
    /// request, and echoes it.
    fn client_and_server() -> (Sender, Receiver, std::thread::JoinHandle<()>) {
        let (request_rx, request_tx) = message_pipe().unwrap();
        let (mut reply_rx, mut reply_tx) = message_pipe().unwrap();
        reply_rx.set_read_timeout(Some(WATCHDOG)).unwrap();
        let mut set = WaitSet::new().unwrap();
        set.set_spin(Duration::ZERO);
        set.add(0, request_rx).unwrap();
        let server = std::thread::spawn(move || {
            let mut ready = Vec::new();
            set.wait(&mut ready, Some(WATCHDOG)).unwrap();
            let mut buf = [0u8; 16];
            if let Some(rx) = set.receiver_mut(0) {
                if let Ok(n) = rx.recv(&mut buf) {
                    let _ = reply_tx.send(&buf[..n]);
                }
            }
        });
        (request_tx, reply_rx, server)
    }

    /// Sends a request whose wake fails `fails` times before it goes.
    fn send_unwoken(tx: &mut Sender, fails: u32) {
        fault::fail_next_wakes(fails);
        tx.send(b"ping").unwrap();
        // The server sleeps armed: the publish tried to wake it.
        assert_eq!(fault::wakes_to_fail(), fails - 1);
    }

    #[test]
    fn a_failed_wake_is_sent_before_waiting_on_another_end() {
        let (mut tx, mut rx, server) = client_and_server();
        send_unwoken(&mut tx, 1);
        let mut buf = [0u8; 16];
        // Without the retry: TimedOut after the watchdog.
        assert_eq!(rx.recv(&mut buf).unwrap(), 4);
        server.join().unwrap();
    }

    #[test]
    fn a_wake_another_thread_failed_to_send_is_sent_before_waiting() {
        // The publish fails on one thread (say a tokio worker), the wait
        // for the reply runs on another (the task moved).
        let (tx, mut rx, server) = client_and_server();
        // The sender is kept (not dropped: a drop sends what its end owes).
        let _tx = std::thread::spawn(move || {
            let mut tx = tx;
            send_unwoken(&mut tx, 1);
            tx
        })
        .join()
        .unwrap();
        let mut buf = [0u8; 16];
        // Without a process-wide list: TimedOut after the watchdog.
        assert_eq!(rx.recv(&mut buf).unwrap(), 4);
        server.join().unwrap();
    }

    /// A child forked while a thread held the list's lock (here the
    /// forking thread itself, as any other thread could) must neither
    /// block in `owe` nor find its wakes owed for ever.
    #[test]
    fn a_child_forked_while_the_list_is_locked_can_owe_and_pay() {
        let (_rx, tx) = message_pipe().unwrap();
        let wake = tx.end.side.bell.owed();
        super::forget_on_fork();
        let held = super::OWED.lock();
        // SAFETY: the child only notes and sends one wake (allocating,
        // which glibc keeps fork-safe) and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            super::owe(wake.clone());
            let code = if super::pay() { 0 } else { 1 };
            // SAFETY: ends the child without running the harness's code.
            unsafe { libc::_exit(code) };
        }
        drop(held);
        let start = std::time::Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: waitpid on our own child with a valid status pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            if start.elapsed() > WATCHDOG {
                // SAFETY: kills and reaps our own child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                panic!("the child blocked on the lock its parent's thread held");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }

    #[test]
    fn a_wake_that_keeps_failing_is_tried_again_soon() {
        // Fails at the publish and at the retries of the next two sleeps:
        // those sleeps must be brief.
        let (mut tx, mut rx, server) = client_and_server();
        send_unwoken(&mut tx, 3);
        let mut buf = [0u8; 16];
        assert_eq!(rx.recv(&mut buf).unwrap(), 4);
        // Sent: by this thread's retries, or by any other thread about to
        // sleep (the list is the process's).
        fault::fail_next_wakes(0);
        server.join().unwrap();
    }

    #[test]
    fn a_failed_wake_is_sent_before_arming_another_end() {
        let (mut tx, mut rx, server) = client_and_server();
        send_unwoken(&mut tx, 2);
        // Armed while the wake is still owed: the descriptor must turn
        // readable soon, for the caller to try again.
        while !rx.arm().unwrap() {
            let fd = rx.end.side.fd();
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let watchdog = rustix::time::Timespec {
                tv_sec: WATCHDOG.as_secs() as i64,
                tv_nsec: 0,
            };
            // Without the retry: 0 (timed out), and the server sleeps on.
            assert_eq!(rustix::event::poll(&mut fds, Some(&watchdog)).unwrap(), 1);
        }
        let mut buf = [0u8; 16];
        assert_eq!(rx.recv(&mut buf).unwrap(), 4);
        server.join().unwrap();
    }

    #[test]
    fn a_failed_wake_is_sent_before_a_waitset_sleeps() {
        let (mut tx, rx, server) = client_and_server();
        let mut set = WaitSet::new().unwrap();
        set.set_spin(Duration::ZERO);
        set.add(1, rx).unwrap();
        send_unwoken(&mut tx, 3);
        let mut ready = Vec::new();
        // Without the retry: empty after the watchdog.
        set.wait(&mut ready, Some(WATCHDOG)).unwrap();
        assert_eq!(ready, [1]);
        // Sent: by this thread's retries, or by any other thread about to
        // sleep (the list is the process's).
        fault::fail_next_wakes(0);
        let mut buf = [0u8; 16];
        assert_eq!(set.receiver_mut(1).unwrap().recv(&mut buf).unwrap(), 4);
        server.join().unwrap();
    }

    #[test]
    fn a_failed_wake_is_sent_before_a_blocking_accept() {
        // The server connects to the client's listener once it has the
        // request, and says whether it had it (after the watchdog it
        // connects anyway, so that the accept below never hangs).
        let path =
            std::env::temp_dir().join(format!("shmpipe-owed-accept-{}.sock", std::process::id()));
        let listener = crate::Listener::bind(&path).unwrap();
        let (request_rx, mut request_tx) = message_pipe().unwrap();
        let mut set = WaitSet::new().unwrap();
        set.set_spin(Duration::ZERO);
        set.add(0, request_rx).unwrap();
        let server = std::thread::spawn(move || {
            let mut ready = Vec::new();
            set.wait(&mut ready, Some(WATCHDOG)).unwrap();
            let conn = crate::connect(&path).unwrap();
            let (_, mut tx) = conn.into_messages();
            tx.send(&[u8::from(ready == [0])]).unwrap();
        });
        send_unwoken(&mut request_tx, 2);
        let (mut rx, _) = listener.accept().unwrap().into_messages();
        let mut had_request = [0u8; 1];
        rx.recv(&mut had_request).unwrap();
        // Without the retry: 0, after the watchdog.
        assert_eq!(had_request, [1]);
        server.join().unwrap();
    }
}
