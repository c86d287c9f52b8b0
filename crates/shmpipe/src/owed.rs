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
//! So a failed wake is also noted here, for the thread whose publish
//! failed to send it, and every path on which a thread can sleep in
//! shmpipe (an end's wait, its arming for readiness after `WouldBlock`
//! or `arm`, a waitset's wait, a blocking accept) first sends this
//! thread's owed wakes again ([`pay`]), and while one stays owed sleeps
//! at most `BRIEF_SLEEP` (an arming counts as unsure: the waitset looks
//! again soon, an event loop finds the descriptor readable) before it
//! tries again. So no thread sleeps for longer than that while its peer
//! may sleep on a wake it owes.
//!
//! Per thread, with no lock: nothing here can deadlock a forked child,
//! and the sleeping thread is the one that owes. A note holds its waker
//! weakly, so a dropped end closes as before (its peer sees the hang-up
//! instead) and owes nothing more.

use std::cell::RefCell;

use crate::sys::OwedWake;

thread_local! {
    /// The wakes this thread failed to send and has not sent since.
    static OWED: RefCell<Vec<OwedWake>> = const { RefCell::new(Vec::new()) };
}

/// Notes a wake this thread could not send (once per waker).
pub(crate) fn owe(wake: OwedWake) {
    let _ = OWED.try_with(|owed| {
        let mut owed = owed.borrow_mut();
        if !owed.iter().any(|w| w.same(&wake)) {
            owed.push(wake);
        }
    });
}

/// Sends this thread's owed wakes again; true if none is owed any more.
/// Costs a thread-local look when none is owed.
pub(crate) fn pay() -> bool {
    OWED.try_with(|owed| {
        let mut owed = owed.borrow_mut();
        if !owed.is_empty() {
            owed.retain(|w| !w.wake());
        }
        owed.is_empty()
    })
    // A thread past its locals' teardown owes nothing it could still send.
    .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    //! A wake our publish owed the peer could not be sent (injected:
    //! `sys::WAKES_FAIL`), and the thread then sleeps on another end: in
    //! a blocking wait, an arming, a waitset. The peer (a waitset in
    //! another thread, armed before the publish) sleeps until that wake
    //! comes, so a thread that does not send it again before sleeping
    //! deadlocks with it; the reply's timeout only keeps a failure from
    //! hanging the suite.

    use std::time::Duration;

    use crate::sys::WAKES_FAIL;
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
        WAKES_FAIL.with(|n| n.set(fails));
        tx.send(b"ping").unwrap();
        // The server sleeps armed: the publish tried to wake it.
        assert_eq!(WAKES_FAIL.with(|n| n.get()), fails - 1);
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
    fn a_wake_that_keeps_failing_is_tried_again_soon() {
        // Fails at the publish and at the retries of the next two sleeps:
        // those sleeps must be brief.
        let (mut tx, mut rx, server) = client_and_server();
        send_unwoken(&mut tx, 3);
        let mut buf = [0u8; 16];
        assert_eq!(rx.recv(&mut buf).unwrap(), 4);
        assert_eq!(WAKES_FAIL.with(|n| n.get()), 0);
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
        assert_eq!(WAKES_FAIL.with(|n| n.get()), 0);
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
